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

from learning_runs import add_arguments, run_arms, summarize
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.utils.metrics import (
    ALL_MODULES,
    LEARNER_RESULTS,
    NUM_ENV_STEPS_TRAINED_LIFETIME,
)

from rllib_ners import NERSDQNConfig
from rllib_ners.algorithms.rainbow.presets import cartpole_dqn

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


def dqn_updates(result: dict) -> int:
    """Lifetime learner updates: trained env steps / batch size."""
    trained = (
        result.get(LEARNER_RESULTS, {})
        .get(ALL_MODULES, {})
        .get(NUM_ENV_STEPS_TRAINED_LIFETIME, 0)
    )
    return int(trained) // BATCH_SIZE


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(parser, arms=ARMS, default_arms=ARMS, max_steps=60000)
    parser.add_argument("--out", default="results/ners_vs_per.csv")
    args = parser.parse_args(argv)

    def report(rows, arms):
        summarize(
            rows,
            arms,
            title="CartPole-v1 DQN",
            target=args.target,
            max_steps=args.max_steps,
            ratios=[("ners", "per"), ("ners", "rllib-per")],
        )

    return run_arms(
        args,
        all_arms=ARMS,
        build_config=build_config,
        count_updates=dqn_updates,
        report=report,
    )


if __name__ == "__main__":
    raise SystemExit(main())
