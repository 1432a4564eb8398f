"""NERS-DQN vs PER-DQN vs uniform DQN vs stock RLlib PER-DQN on CartPole-v1.

All arms share the DQN settings of `tuned_examples/ners_dqn/cartpole_ners_dqn.py`
(RLlib's own CartPole DQN example); only the replay differs:

  ners       NERSDQNConfig (NERSEpisodeReplayBuffer + NERS learner), alpha 0.6
  per        DQNConfig + FastPrioritizedEpisodeReplayBuffer, alpha 0.6
  uniform    DQNConfig + FastPrioritizedEpisodeReplayBuffer, alpha 0 (uniform)
  rllib-per  DQNConfig + RLlib's PrioritizedEpisodeReplayBuffer, alpha 0.6

Runs happen in one process, one after the other, the arms interleaved seed by
seed so that machine load hits every arm alike. For every run it records env
steps/s and learner updates/s (both over the whole run, after the first
iteration, which is mostly warm-up), and the env steps at which the smoothed
training return (`env_runners/episode_return_mean`, RLlib's 100-episode window)
first reached the target. It prints a table, the throughput ratios NERS/PER and
NERS/RLlib-PER, and writes a CSV.

How to run
----------
    python benchmarks/ners_vs_per.py                       # 5 seeds, 60k steps
    python benchmarks/ners_vs_per.py --seeds 2 --max-steps 20000 --arms ners per

On this project's 2-core CPU a full run takes about 1.5 hours; the ratios are
what to read, absolute numbers depend on the machine's load.
"""

from __future__ import annotations

import argparse
import csv
import logging
import os
import statistics
import time

import ray
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.utils.metrics import (
    ALL_MODULES,
    ENV_RUNNER_RESULTS,
    EPISODE_RETURN_MEAN,
    LEARNER_RESULTS,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_TRAINED_LIFETIME,
)

from rllib_ners import NERSDQNConfig
from rllib_ners.presets import cartpole_dqn

ARMS = ("ners", "per", "uniform", "rllib-per")
BATCH_SIZE = 32
FAST_BUFFER = "rllib_ners.FastPrioritizedEpisodeReplayBuffer"


def build_config(arm: str, seed: int):
    buffer = {"capacity": 50000, "alpha": 0.6, "beta": 0.4}
    if arm == "ners":
        config = NERSDQNConfig()
    else:
        config = DQNConfig()
        if arm == "rllib-per":
            buffer["type"] = "PrioritizedEpisodeReplayBuffer"  # takes no seed
        else:
            # NERSDQN seeds its buffer from config.seed; stock DQN needs it here.
            buffer.update(type=FAST_BUFFER, seed=seed)
        if arm == "uniform":
            buffer["alpha"] = 0.0
    return (
        cartpole_dqn(config)
        .env_runners(num_env_runners=0)
        .training(replay_buffer_config=buffer)
        .debugging(seed=seed)
    )


def run_one(arm: str, seed: int, max_steps: int, target: float) -> dict:
    algo = build_config(arm, seed).build_algo()
    steps_to_target = None
    start_time = start_steps = start_trained = None
    steps = trained = 0
    try:
        while steps < max_steps:
            result = algo.train()
            steps = int(result[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME])
            trained = int(
                result.get(LEARNER_RESULTS, {})
                .get(ALL_MODULES, {})
                .get(NUM_ENV_STEPS_TRAINED_LIFETIME, 0)
            )
            if start_time is None:
                start_time, start_steps, start_trained = (
                    time.perf_counter(),
                    steps,
                    trained,
                )
            ret = result[ENV_RUNNER_RESULTS].get(EPISODE_RETURN_MEAN, float("nan"))
            if steps_to_target is None and ret >= target:
                steps_to_target = steps
                break
        elapsed = time.perf_counter() - start_time
    finally:
        algo.stop()
    return {
        "arm": arm,
        "seed": seed,
        "steps_to_target": steps_to_target,
        "env_steps": steps,
        "env_steps_per_s": (steps - start_steps) / elapsed
        if elapsed > 0
        else float("nan"),
        "updates_per_s": (trained - start_trained) / BATCH_SIZE / elapsed
        if elapsed > 0
        else float("nan"),
        "wall_s": elapsed,
    }


def summarize(rows: list, arms, target: float, max_steps: int) -> None:
    print(f"\nCartPole-v1, target return {target:g}, budget {max_steps} env steps")
    header = (
        f"{'arm':<10} {'env steps/s':>12} {'updates/s':>10} {'reached':>8} "
        f"{'steps to target: median':>24} {'[min, max]':>18}"
    )
    print(header)
    print("-" * len(header))
    medians = {}
    for arm in arms:
        mine = [r for r in rows if r["arm"] == arm]
        if not mine:
            continue
        sps = statistics.median(r["env_steps_per_s"] for r in mine)
        ups = statistics.median(r["updates_per_s"] for r in mine)
        medians[arm] = (sps, ups)
        reached = [
            r["steps_to_target"] for r in mine if r["steps_to_target"] is not None
        ]
        # Runs that never reach the target count as the budget (a lower bound).
        censored = sorted(
            r["steps_to_target"] if r["steps_to_target"] is not None else max_steps
            for r in mine
        )
        median = statistics.median(censored)
        spread = f"[{censored[0]}, {censored[-1]}]"
        print(
            f"{arm:<10} {sps:>12.1f} {ups:>10.1f} {len(reached):>4}/{len(mine):<3} "
            f"{median:>24.0f} {spread:>18}"
        )
    for other in ("per", "rllib-per"):
        if "ners" in medians and other in medians:
            print(
                f"throughput ratio ners/{other}: env steps/s "
                f"{medians['ners'][0] / medians[other][0]:.2f}x, updates/s "
                f"{medians['ners'][1] / medians[other][1]:.2f}x"
            )
    print("(steps to target: runs that missed it count as the budget)")


def _parse_row(row: dict) -> dict:
    parsed = dict(row)
    for key in ("seed", "env_steps"):
        parsed[key] = int(row[key])
    for key in ("env_steps_per_s", "updates_per_s", "wall_s"):
        parsed[key] = float(row[key])
    parsed["steps_to_target"] = (
        int(row["steps_to_target"]) if row["steps_to_target"] else None
    )
    return parsed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--max-steps", type=int, default=60000)
    parser.add_argument("--target", type=float, default=450.0)
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--out", default="results/ners_vs_per.csv")
    parser.add_argument(
        "--from-csv",
        help="print the summary of an earlier (possibly interrupted) run's CSV",
    )
    args = parser.parse_args(argv)

    if args.from_csv:
        with open(args.from_csv) as f:
            rows = [_parse_row(r) for r in csv.DictReader(f)]
        arms = [a for a in ARMS if any(r["arm"] == a for r in rows)]
        summarize(rows, arms, args.target, args.max_steps)
        return 0

    logging.getLogger("ray").setLevel(logging.ERROR)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    rows = []
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    try:
        for seed in range(args.seeds):
            for arm in args.arms:
                row = run_one(arm, seed, args.max_steps, args.target)
                rows.append(row)
                print(
                    f"seed {seed} {arm:<10} steps_to_target={row['steps_to_target']} "
                    f"env_steps/s={row['env_steps_per_s']:.1f} "
                    f"updates/s={row['updates_per_s']:.1f} wall={row['wall_s']:.0f}s",
                    flush=True,
                )
                with open(args.out, "w", newline="") as f:
                    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
                    writer.writeheader()
                    writer.writerows(rows)
    finally:
        ray.shutdown()
    summarize(rows, args.arms, args.target, args.max_steps)
    print(f"rows written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
