"""SAC throughput on MuJoCo Hopper-v5: NERS vs our PER vs our uniform vs RLlib's SAC.

Every arm has SAC's usual settings (`rllib_ners.algorithms.ners_sac.presets`:
256-256 ReLU MLPs, batch 256, one update per env step, one local EnvRunner and
a local Learner); only the replay path differs:

  ners      NERSSAC, NERSEpisodeReplayBuffer (alpha 0.6, beta 0.4)
  per       NERSSAC, FastPrioritizedEpisodeReplayBuffer (alpha 0.6, beta 0.4)
  uniform   NERSSAC, FastPrioritizedEpisodeReplayBuffer (alpha 0)
  rllib     stock RLlib SACConfig, its PrioritizedEpisodeReplayBuffer (alpha 0.6,
            beta 0.4), episodes through its learner connectors

All arms live in this process. After a warm-up (learning has started and a
first timed iteration compiled/allocated everything), the arms take turns,
round after round, each timing `--iters` training iterations, so that the
machine's load hits every arm alike. Prints env steps/s and Learner updates/s
per arm (median over rounds) and the ratios against NERS, with the load
average.

How to run
----------
    python benchmarks/sac.py                       # Hopper-v5, 3 rounds
    python benchmarks/sac.py --rounds 2 --iters 1 --steps-per-iter 100
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

ARMS = ("ners", "per", "uniform", "rllib")


def build_config(arm: str, env: str, steps_per_iter: int, seed: int):
    from ray.rllib.algorithms.sac import SACConfig

    from rllib_ners.algorithms.ners_sac.presets import sac_config

    learning_starts = 1000
    if arm == "rllib":
        config = sac_config(
            env, replay="per", learning_starts=learning_starts, config=SACConfig()
        ).training(
            replay_buffer_config={
                "type": "PrioritizedEpisodeReplayBuffer",
                "capacity": 1_000_000,
                "alpha": 0.6,
                "beta": 0.4,
            }
        )
    else:
        config = sac_config(env, replay=arm, learning_starts=learning_starts)
    return (
        config.env_runners(num_env_runners=0)
        .reporting(
            min_sample_timesteps_per_iteration=steps_per_iter,
            min_time_s_per_iteration=0,
        )
        .debugging(seed=seed)
    )


def _counts(result: dict):
    from ray.rllib.utils.metrics import (
        ALL_MODULES,
        LEARNER_RESULTS,
        NUM_ENV_STEPS_SAMPLED_LIFETIME,
        NUM_ENV_STEPS_TRAINED_LIFETIME,
    )

    env_steps = result[NUM_ENV_STEPS_SAMPLED_LIFETIME]
    trained = result.get(LEARNER_RESULTS, {}).get(ALL_MODULES, {})
    return float(env_steps), float(trained.get(NUM_ENV_STEPS_TRAINED_LIFETIME, 0))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=1, help="timed iters per turn")
    parser.add_argument("--steps-per-iter", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args(argv)

    import ray
    import torch

    from rllib_ners.algorithms.ners_sac.presets import SAC_BATCH_SIZE
    from rllib_ners.cli.quiet import silence_known_noise

    silence_known_noise()
    torch.set_num_threads(args.threads)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    algos, last = {}, {}
    try:
        for arm in args.arms:
            algo = build_config(arm, args.env, args.steps_per_iter, 0).build_algo()
            # Warm-up: past learning_starts, then one iteration with updates.
            while _counts(algo.train())[1] == 0:
                pass
            last[arm] = algo.train()
            algos[arm] = algo
        rates = {arm: {"env": [], "updates": []} for arm in args.arms}
        for round_index in range(args.rounds):
            for arm, algo in algos.items():
                env0, trained0 = _counts(last[arm])
                start = time.perf_counter()
                for _ in range(args.iters):
                    result = algo.train()
                elapsed = time.perf_counter() - start
                last[arm] = result
                env1, trained1 = _counts(result)
                rates[arm]["env"].append((env1 - env0) / elapsed)
                rates[arm]["updates"].append(
                    (trained1 - trained0) / SAC_BATCH_SIZE / elapsed
                )
            print(f"round {round_index + 1}/{args.rounds} done", flush=True)
    finally:
        for algo in algos.values():
            algo.stop()
        ray.shutdown()

    load = os.getloadavg()
    print(
        f"\nSAC throughput on {args.env}: 256-256 MLPs, batch 256, one update per "
        f"env step, {args.threads} torch thread(s); median of {args.rounds} "
        f"rounds x {args.iters} iteration(s) of {args.steps_per_iter} env steps; "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    median = {
        arm: {k: float(np.median(v)) for k, v in r.items()} for arm, r in rates.items()
    }
    columns = ["arm", "env steps/s", "updates/s"]
    if "ners" in median:
        columns += ["NERS / arm, env steps/s", "NERS / arm, updates/s"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for arm, r in median.items():
        cells = [arm, f"{r['env']:.2f}", f"{r['updates']:.2f}"]
        if "ners" in median:
            cells.append(f"{median['ners']['env'] / r['env']:.3f}x")
            cells.append(f"{median['ners']['updates'] / r['updates']:.3f}x")
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
