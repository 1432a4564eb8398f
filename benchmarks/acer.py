"""ACER on CartPole-v1: uniform vs NERS (vs PER) replay, side by side.

Every arm is `rllib_ners.algorithms.acer.presets.cartpole_acer` (the settings of
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

from learning_runs import add_arguments, run_arms, summarize

from rllib_ners.algorithms.acer.acer import (
    ACER_RESULTS,
    NUM_OFF_POLICY_UPDATES,
    NUM_ON_POLICY_UPDATES,
)
from rllib_ners.algorithms.acer.presets import cartpole_acer

ARMS = ("uniform", "ners", "per")


def acer_updates(result: dict) -> int:
    counters = result.get(ACER_RESULTS, {})
    return int(counters.get(NUM_ON_POLICY_UPDATES, 0)) + int(
        counters.get(NUM_OFF_POLICY_UPDATES, 0)
    )


def build_config(arm: str, seed: int):
    return cartpole_acer(replay=arm).env_runners(num_env_runners=0).debugging(seed=seed)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(
        parser, arms=ARMS, default_arms=("uniform", "ners"), max_steps=200_000
    )
    parser.add_argument("--out", default="results/acer.csv")
    args = parser.parse_args(argv)

    def report(rows, arms):
        summarize(
            rows,
            arms,
            title="CartPole-v1 ACER",
            target=args.target,
            max_steps=args.max_steps,
            ratios=[("ners", "uniform"), ("per", "uniform")],
        )

    return run_arms(
        args,
        all_arms=ARMS,
        build_config=build_config,
        count_updates=acer_updates,
        report=report,
    )


if __name__ == "__main__":
    raise SystemExit(main())
