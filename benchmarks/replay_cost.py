"""What each replay costs, side by side: NERS vs PER vs uniform, taking turns.

Every arm's algorithm is built in this one process (`num_env_runners=0`, a
local Learner, one torch thread) and the arms take turns, one training
iteration each, round-robin (the order rotating every round), so whatever else
loads the machine hits every arm alike. Arms run one after the other (as in
`ners_vs_per.py`) can differ by 2x on a shared machine from load alone; here
they cannot drift apart that way.

Per arm it reports, over the iterations that started after learning began:
env steps per second of its own iterations (wall clock) and per CPU second of
the process during them, both as ratios against PER, and for NERS with its own
image encoder the share of scored observations whose encoding came from the
Learner's encoding cache. That share falls as the buffer fills (more distinct
observations between two sampler updates), so `--learning-starts 50000` measures
with a half-full 100k buffer, as in the second half of a 100k run.

Tasks (only the replay differs between arms):
  cartpole   RLlib's CartPole DQN example settings (`ners_vs_per.build_config`);
             arms ners, per, uniform, rllib-per (RLlib's own prioritised buffer)
             and rainbow-per: `RainbowDQNConfig` with our PER buffer, which
             replays through the same columnar path as NERS-DQN (stock DQN's
             `per` goes through RLlib's connectors), so ners / rainbow-per is
             the cost of the sampler alone
  ms_pacman  data-efficient Rainbow on MsPacman (`atari_100k.py`'s settings:
             one update of 32 per env step); arms ners, per, uniform and
             ners-module: NERS with `encoder="module"` (the sampler reads the
             agent's CNN features from its training forward pass instead of
             running a CNN of its own)

    python benchmarks/replay_cost.py --task cartpole --steps 10000
    python benchmarks/replay_cost.py --task ms_pacman --steps 4000 --arms ners per
    python benchmarks/replay_cost.py --task ms_pacman --steps 4000 \
        --arms ners ners-module per
    python benchmarks/replay_cost.py --task ms_pacman --steps 52400 \
        --learning-starts 50000 --arms ners per
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from typing import Dict, List

import ray
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    LEARNER_RESULTS,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
)

from rllib_ners.algorithms.ners.torch.ners_torch_learner import (
    NERS_ENCODING_CACHE_HIT_RATE,
)

TASK_ARMS = {
    "cartpole": ("ners", "per", "uniform", "rllib-per", "rainbow-per"),
    "ms_pacman": ("ners", "per", "uniform", "ners-module"),
}


def build_config(task: str, arm: str, seed: int, args):
    if task == "cartpole" and arm == "rainbow-per":
        from ners_vs_per import FAST_BUFFER

        from rllib_ners import RainbowDQNConfig
        from rllib_ners.algorithms.rainbow.presets import cartpole_dqn

        buffer = {"type": FAST_BUFFER, "capacity": 50000, "alpha": 0.6, "beta": 0.4}
        return (
            cartpole_dqn(RainbowDQNConfig())
            .env_runners(num_env_runners=0)
            .training(replay_buffer_config=buffer)
            .debugging(seed=seed)
        )
    if task == "cartpole":
        from ners_vs_per import build_config as cartpole_config

        return cartpole_config(arm, seed)
    from rllib_ners.algorithms.rainbow.presets import atari_data_efficient_rainbow

    config = (
        atari_data_efficient_rainbow(
            "MsPacman",
            replay="ners" if arm == "ners-module" else arm,
            total_timesteps=args.steps,
            capacity=args.capacity,
            learning_starts=args.learning_starts,
            rollout_fragment_length=20,
        )
        .env_runners(num_env_runners=0)
        .reporting(min_sample_timesteps_per_iteration=200)
        .debugging(seed=seed)
    )
    if arm == "ners-module":
        config.ners(encoder="module")
    return config


def take_turns(algos: Dict[str, object], *, steps: int, learning_starts: int):
    """Trains every algorithm to `steps` env steps, one iteration each in turn;
    returns per arm the measured steps, wall seconds and CPU seconds, and the
    NERS encoding cache's hit rate over the run (NaN without one)."""
    measured = {
        arm: {"steps": 0, "wall": 0.0, "cpu": 0.0, "hit_rate": math.nan}
        for arm in algos
    }
    done = dict.fromkeys(algos, 0)
    order: List[str] = list(algos)
    while min(done.values()) < steps:
        for arm in order:
            if done[arm] >= steps:
                continue
            wall, cpu = time.perf_counter(), time.process_time()
            result = algos[arm].train()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            now = int(result[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME])
            if done[arm] >= learning_starts:  # the iteration began after it
                measured[arm]["steps"] += now - done[arm]
                measured[arm]["wall"] += wall
                measured[arm]["cpu"] += cpu
            done[arm] = now
            learner = result.get(LEARNER_RESULTS, {}).get(DEFAULT_MODULE_ID, {})
            if NERS_ENCODING_CACHE_HIT_RATE in learner:
                measured[arm]["hit_rate"] = learner[NERS_ENCODING_CACHE_HIT_RATE]
        order = order[1:] + order[:1]
    return measured


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(TASK_ARMS), default="cartpole")
    parser.add_argument("--arms", nargs="+", default=None, help="default: all")
    parser.add_argument("--steps", type=int, default=10_000, help="env steps per arm")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--capacity", type=int, default=100_000, help="ms_pacman")
    parser.add_argument(
        "--learning-starts",
        type=int,
        default=1600,
        help="ms_pacman: env steps stored before learning (and measuring) starts; "
        "e.g. 50000 measures with a half-full 100k buffer, as later in a 100k run",
    )
    args = parser.parse_args(argv)
    arms = args.arms or list(TASK_ARMS[args.task])
    unknown = sorted(set(arms) - set(TASK_ARMS[args.task]))
    if unknown:
        parser.error(
            f"--arms: {unknown} not arms of {args.task}: {TASK_ARMS[args.task]}"
        )
    if "per" not in arms:
        parser.error("--arms must include 'per' (the ratios are against it)")

    torch.set_num_threads(1)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        configs = {arm: build_config(args.task, arm, args.seed, args) for arm in arms}
        learning_starts = max(
            c.num_steps_sampled_before_learning_starts for c in configs.values()
        )
        algos = {arm: config.build_algo() for arm, config in configs.items()}
        torch.set_num_threads(1)
        started = time.perf_counter()
        measured = take_turns(algos, steps=args.steps, learning_starts=learning_starts)
        total = time.perf_counter() - started
        for algo in algos.values():
            algo.stop()
    finally:
        ray.shutdown()

    rate = {
        arm: (m["steps"] / m["wall"], m["steps"] / m["cpu"])
        for arm, m in measured.items()
    }
    print(
        f"\n{args.task}: {args.steps} env steps per arm, arms taking turns one "
        f"iteration each; measured after learning starts ({learning_starts} steps); "
        f"{total:.0f} s in all"
    )
    print(
        f"{'arm':<12} {'steps':>7} {'env steps/s':>12} {'steps/CPU s':>12} "
        f"{'vs PER (wall)':>14} {'vs PER (CPU)':>13} {'cache hits':>11}"
    )
    for arm in arms:
        wall_rate, cpu_rate = rate[arm]
        print(
            f"{arm:<12} {measured[arm]['steps']:>7} {wall_rate:>12.1f} "
            f"{cpu_rate:>12.1f} {wall_rate / rate['per'][0]:>13.2f}x "
            f"{cpu_rate / rate['per'][1]:>12.2f}x "
            f"{measured[arm]['hit_rate']:>11.2f}"
        )
    loads = statistics.mean(os.getloadavg())
    print(f"mean load average (1/5/15 min) at the end: {loads:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
