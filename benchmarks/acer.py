"""ACER on CartPole-v1: uniform vs NERS (vs PER) replay, side by side.

Every arm is `rllib_ners.presets.cartpole_acer` (the settings of
`tuned_examples/acer/cartpole_acer.py`); only the replay differs:

  uniform   FastPrioritizedEpisodeReplayBuffer, alpha 0
  ners      NERSEpisodeReplayBuffer, alpha 0.6, beta 0.4 (learned sampler)
  per       FastPrioritizedEpisodeReplayBuffer, alpha 0.6 on |Q_ret - Q|

Runs happen in one process, one after the other, the arms interleaved seed by
seed so that machine load hits every arm alike. Per run: env steps until the
100-episode mean training return first reaches the target, env steps/s and
learner updates/s (on- plus off-policy). Prints a table and the throughput
ratio NERS/uniform, and writes a CSV.

How to run
----------
    python benchmarks/acer.py                          # 5 seeds, uniform + ners
    python benchmarks/acer.py --seeds 2 --arms uniform ners per --max-steps 50000
    python benchmarks/acer.py --from-csv results/acer.csv   # summary only
"""

from __future__ import annotations

import argparse
import logging

import ray
from learning_runs import read_csv, run_to_target, summarize, write_csv

from rllib_ners.algorithms.acer.acer import (
    ACER_RESULTS,
    NUM_OFF_POLICY_UPDATES,
    NUM_ON_POLICY_UPDATES,
)
from rllib_ners.presets import ACER_REPLAYS, cartpole_acer

ARMS = ("uniform", "ners", "per")


def acer_updates(result: dict) -> int:
    counters = result.get(ACER_RESULTS, {})
    return int(counters.get(NUM_ON_POLICY_UPDATES, 0)) + int(
        counters.get(NUM_OFF_POLICY_UPDATES, 0)
    )


def build_config(arm: str, seed: int):
    return cartpole_acer(replay=arm).env_runners(num_env_runners=0).debugging(seed=seed)


def report(rows, arms, args) -> None:
    summarize(
        rows,
        arms,
        title="CartPole-v1 ACER",
        target=args.target,
        max_steps=args.max_steps,
        ratios=[("ners", "uniform"), ("per", "uniform")],
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--max-steps", type=int, default=200_000)
    parser.add_argument("--target", type=float, default=450.0)
    parser.add_argument(
        "--arms", nargs="+", choices=sorted(ACER_REPLAYS), default=["uniform", "ners"]
    )
    parser.add_argument("--out", default="results/acer.csv")
    parser.add_argument("--from-csv", help="print the summary of an earlier run's CSV")
    args = parser.parse_args(argv)

    if args.from_csv:
        rows = read_csv(args.from_csv)
        report(rows, [a for a in ARMS if any(r["arm"] == a for r in rows)], args)
        return 0

    logging.getLogger("ray").setLevel(logging.ERROR)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    rows = []
    try:
        for seed in range(args.seeds):
            for arm in args.arms:
                row = {"arm": arm, "seed": seed}
                row.update(
                    run_to_target(
                        build_config(arm, seed),
                        max_steps=args.max_steps,
                        target=args.target,
                        count_updates=acer_updates,
                    )
                )
                rows.append(row)
                print(
                    f"seed {seed} {arm:<8} steps_to_target={row['steps_to_target']} "
                    f"env_steps/s={row['env_steps_per_s']:.1f} "
                    f"updates/s={row['updates_per_s']:.1f} wall={row['wall_s']:.0f}s",
                    flush=True,
                )
                write_csv(rows, args.out)
    finally:
        ray.shutdown()
    report(rows, args.arms, args)
    print(f"rows written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
