"""What each NERS sampler variant does to replay in a real run: NERS-DQN on
CartPole-v1 for a fixed env-step budget, then the sampler diagnostics.

The real-run companion of `tests/sampler_oracle.py` (the same variants): a
diagnostics run, not a timing benchmark.

Every variant of `SAMPLER_VARIANTS` (`rllib_ners.algorithms.ners.presets`: the
paper's semantics, the objective x parameterisation grid, the default) plus the
same run with the sampler frozen (`lr=1e-12`, the old sampler's settings: the
scores never move, so every number there is what "not shaping replay" looks
like). The DQN settings are the CartPole tuned example's; only the NERS
settings differ. For each run it prints the smoothed training return and the
`result["ners"]` diagnostics of the last iteration (docs/ners.md, "Metrics"):

  entropy   priority_entropy_normalized (1 = uniform)
  ess       effective_sample_fraction (1 = uniform)
  max/min   scored_priority_max_over_min
  cv        scored_priority_cv
  unscored  unscored_mass
  spearman  priority_td_spearman (rank correlation with |delta|)
  probe     probe_score_std

    python tests/sampler_variants.py                    # 20k steps, seed 0
    python tests/sampler_variants.py --seeds 0 1 --variants default frozen

Runs one after the other in one process (`num_env_runners=0`, one torch thread);
about 3-5 minutes per 20k-step run on this project's 2-core CPU.
"""

from __future__ import annotations

import argparse
import time
from typing import Dict

import ray
import torch
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    EPISODE_RETURN_MEAN,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
)

from rllib_ners import NERSDQNConfig
from rllib_ners.algorithms.ners.ners_learner import (
    NERS_NUM_SAMPLER_UPDATES_KEY,
    NERS_RESULTS,
)
from rllib_ners.algorithms.ners.presets import SAMPLER_VARIANTS, ners_reference
from rllib_ners.algorithms.rainbow.presets import cartpole_dqn
from rllib_ners.ners import diagnostics as d
from rllib_ners.utils.log_noise import silence_known_noise

REFERENCE = "reference (log_score, sigmoid, first)"
# The sampler as it was before the variants existed, with its learning rate at
# ~0: the findings' "frozen sampler" row.
FROZEN = {
    "objective": "log_score",
    "parameterization": "sigmoid",
    "baseline": "previous_window",
    "linear_skip": False,
    "feature_normalization": "none",
    "lr": 1e-12,
}
DIAGNOSTICS = (
    ("entropy", d.PRIORITY_ENTROPY_NORMALIZED),
    ("ess", d.EFFECTIVE_SAMPLE_FRACTION),
    ("max/min", d.SCORED_PRIORITY_MAX_OVER_MIN),
    ("cv", d.SCORED_PRIORITY_CV),
    ("unscored", d.UNSCORED_MASS),
    ("spearman", d.PRIORITY_TD_SPEARMAN),
    ("probe", d.PROBE_SCORE_STD),
)


def variants() -> Dict[str, dict]:
    """The frozen sampler, then the oracle's variants (`SAMPLER_VARIANTS`: the
    tests run the oracle, this file the same variants in a real run)."""
    table = {"frozen (old sampler, lr 1e-12)": FROZEN}
    table.update(SAMPLER_VARIANTS)
    return table


def build_config(name: str, settings: dict, seed: int):
    config = (
        cartpole_dqn(NERSDQNConfig())
        .training(replay_buffer_config={"capacity": 50000, "alpha": 0.6, "beta": 0.4})
        .env_runners(num_env_runners=0)
        .debugging(seed=seed, log_level="ERROR")
    )
    if name == REFERENCE:  # the whole preset: eval-return reward, alpha 0.5, ...
        return ners_reference(config)
    return config.ners(**settings)


def run(name: str, settings: dict, *, seed: int, steps: int) -> Dict[str, float]:
    algo = build_config(name, settings, seed).build_algo()
    started = time.perf_counter()
    try:
        env_steps = 0
        while env_steps < steps:
            result = algo.train()
            env_steps = int(result[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME])
    finally:
        algo.stop()
    ners = result.get(NERS_RESULTS, {})
    row = {
        "variant": name,
        "seed": seed,
        "env_steps": env_steps,
        "return": result[ENV_RUNNER_RESULTS].get(EPISODE_RETURN_MEAN, float("nan")),
        "updates": ners.get(NERS_NUM_SAMPLER_UPDATES_KEY, float("nan")),
        "wall_s": time.perf_counter() - started,
    }
    for _, key in DIAGNOSTICS:
        row[key] = ners.get(key, float("nan"))
    return row


def print_row(row: Dict[str, float]) -> None:
    values = " ".join(f"{row[key]:>9.4g}" for _, key in DIAGNOSTICS)
    print(
        f"{row['variant']:40s} {row['seed']:>4d} {row['return']:>7.1f} "
        f"{row['updates']:>7} {values} {row['wall_s']:>6.0f}",
        flush=True,
    )


def main(argv=None) -> int:
    table = variants()
    short = {
        "frozen": next(iter(table)),
        "reference": REFERENCE,
        "default": "log_prob, per_residual, ema (default)",
    }
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument(
        "--variants",
        nargs="+",
        default=None,
        help=f"variant names or the short names {sorted(short)}; default: all",
    )
    args = parser.parse_args(argv)
    names = [short.get(v, v) for v in args.variants] if args.variants else list(table)
    unknown = [n for n in names if n not in table]
    if unknown:
        parser.error(f"--variants: unknown {unknown}; choose from {list(table)}")
    torch.set_num_threads(1)
    silence_known_noise()
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    header = " ".join(f"{label:>9s}" for label, _ in DIAGNOSTICS)
    print(f"NERS-DQN CartPole-v1, diagnostics after {args.steps} env steps")
    print(
        f"{'variant':40s} {'seed':>4s} {'return':>7s} {'updates':>7s} {header} "
        f"{'wall s':>6s}"
    )
    for seed in args.seeds:
        for name in names:
            print_row(run(name, table[name], seed=seed, steps=args.steps))
    ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
