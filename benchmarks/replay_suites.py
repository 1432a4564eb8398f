"""The replay methods' own suites of `benchmarks/study_costs.py` (its docstring):
`--suite iterations` (whole training iterations, env included) and `--suite
updates` (the replayed updates alone, every buffer holding the same data)."""

from __future__ import annotations

import math
import os
import time
from typing import Dict, List

from harness import header, loop_sections_into, ratio, rotation, take_turns

# ------------------------------------------------- --suite iterations
FAST_BUFFER = "rllib_ners.FastPrioritizedEpisodeReplayBuffer"
TASK_ARMS = {
    "cartpole": ("ners", "per", "uniform", "rllib-per", "rainbow-per"),
    "ms_pacman": ("ners", "per", "uniform", "ners-module"),
}


def cartpole_config(arm: str, seed: int):
    """RLlib's CartPole DQN example, only the replay differing: ners
    (NERS-DQN), per / uniform (our PER buffer, alpha 0.6 / 0), rllib-per
    (RLlib's own) and rainbow-per (`RainbowDQNConfig` with our PER buffer)."""
    from ray.rllib.algorithms.dqn import DQNConfig

    from rllib_ners import NERSDQNConfig, RainbowDQNConfig
    from rllib_ners.algorithms.rainbow.presets import cartpole_dqn

    config = {"ners": NERSDQNConfig, "rainbow-per": RainbowDQNConfig}.get(
        arm, DQNConfig
    )()
    buffer = {"capacity": 50000, "alpha": 0.6, "beta": 0.4}
    if arm == "rllib-per":
        buffer["type"] = "PrioritizedEpisodeReplayBuffer"  # takes no seed
    elif arm == "rainbow-per":
        buffer["type"] = FAST_BUFFER
    elif arm in ("per", "uniform"):
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


def iterations_config(task: str, arm: str, args):
    if task == "cartpole":
        return cartpole_config(arm, args.seed)
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
        .debugging(seed=args.seed)
    )
    if arm == "ners-module":
        config.ners(encoder="module")
    return config


def take_turns_to(algos: Dict[str, object], *, steps: int, learning_starts: int):
    """Trains every algorithm to `steps` env steps, one iteration each in turn
    (the order rotating); per arm the measured steps, wall seconds and CPU
    seconds, and the NERS encoding cache's hit rate over the run (NaN without
    one)."""
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.utils.metrics import (
        ENV_RUNNER_RESULTS,
        LEARNER_RESULTS,
        NUM_ENV_STEPS_SAMPLED_LIFETIME,
    )

    from rllib_ners.algorithms.ners.torch.torch_ners_sampler import (
        NERS_ENCODING_CACHE_HIT_RATE,
    )

    measured = {
        arm: {"steps": 0, "wall": 0.0, "cpu": 0.0, "hit_rate": math.nan}
        for arm in algos
    }
    done = dict.fromkeys(algos, 0)
    round_index = 0
    while min(done.values()) < steps:
        for arm in rotation(list(algos), round_index):
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
        round_index += 1
    return measured


def iterations_suite(args) -> None:
    import ray
    import torch

    arms = args.arms
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        configs = {arm: iterations_config(args.task, arm, args) for arm in arms}
        learning_starts = max(
            c.num_steps_sampled_before_learning_starts for c in configs.values()
        )
        algos = {arm: config.build_algo() for arm, config in configs.items()}
        torch.set_num_threads(1)
        started = time.perf_counter()
        measured = take_turns_to(
            algos, steps=args.steps, learning_starts=learning_starts
        )
        total = time.perf_counter() - started
        for algo in algos.values():
            algo.stop()
    finally:
        ray.shutdown()

    rate = {
        arm: (m["steps"] / m["wall"], m["steps"] / m["cpu"])
        for arm, m in measured.items()
    }
    print("\n" + header())
    print(
        f"{args.task}: {args.steps} env steps per arm, arms taking turns one "
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
            f"{cpu_rate:>12.1f} {ratio(wall_rate, rate['per'][0]):>14} "
            f"{ratio(cpu_rate, rate['per'][1]):>13} "
            f"{measured[arm]['hit_rate']:>11.2f}"
        )
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f}")


# ---------------------------------------------------- --suite updates
UPDATES_ENV = "Hopper-v5"
UPDATES_LEARNING_STARTS = 2000
UPDATE_ARMS = ("per", "lap", "pal", "uniform", "per-foreach")
# Arms that are another arm's algorithm with one switch flipped.
VARIANT_OF = {"per-foreach": "per"}


def updates_arm(algorithm: str, replay: str, updates: int):
    """The arm's algorithm, trained up to its learning start (random actions,
    no update yet); each later `train()` makes `updates` replayed updates."""
    replay = VARIANT_OF.get(replay, replay)
    if algorithm == "td3":
        from rllib_ners.algorithms.td3.presets import td3_config as preset
    else:
        from rllib_ners.algorithms.ners_sac.presets import mujoco_sac as preset
    from ray.rllib.utils.metrics import (
        ENV_RUNNER_RESULTS,
        NUM_ENV_STEPS_SAMPLED_LIFETIME,
    )

    config = preset(UPDATES_ENV, replay=replay, learning_starts=UPDATES_LEARNING_STARTS)
    config = (
        config.env_runners(num_env_runners=0)
        .reporting(
            min_sample_timesteps_per_iteration=updates, min_time_s_per_iteration=0
        )
        .debugging(seed=0)
    )
    algo = config.build_algo()
    sampled = 0
    while sampled < UPDATES_LEARNING_STARTS:  # random steps, stored
        result = algo.train()
        sampled = result[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME]
    return algo


def same_transitions(algos) -> bool:
    """Whether every arm's buffer stored the same observations, actions and
    rewards (before any replayed update)."""
    import numpy as np

    first = algos[0].local_replay_buffer.storage
    for algo in algos[1:]:
        storage = algo.local_replay_buffer.storage
        for name in ("obs", "actions", "rewards"):
            if not np.array_equal(getattr(storage, name), getattr(first, name)):
                return False
    return True


def timed_updates(algo, arm: str) -> Dict[str, float]:
    """One iteration; seconds per replayed update in each replay section of
    the training loop, and their sum."""
    from ray.rllib.utils.metrics import (
        LEARNER_UPDATE_TIMER,
        REPLAY_BUFFER_SAMPLE_TIMER,
        REPLAY_BUFFER_UPDATE_PRIOS_TIMER,
    )

    from rllib_ners.algorithms.common.learner.target_updates import PolyakTargets

    keys = {
        "sample": REPLAY_BUFFER_SAMPLE_TIMER,
        "update": LEARNER_UPDATE_TIMER,
        "priorities": REPLAY_BUFFER_UPDATE_PRIOS_TIMER,
    }
    sections: Dict[str, List[float]] = {}
    PolyakTargets.flat_on_cpu = arm != "per-foreach"
    try:
        with loop_sections_into(algo, sections):
            algo.train()
    finally:
        PolyakTargets.flat_on_cpu = True
    updates = max(sections.get(LEARNER_UPDATE_TIMER, [1])[0], 1)
    seconds = {
        part: sections.get(key, [0, 0.0])[1] / updates for part, key in keys.items()
    }
    seconds["total"] = sum(seconds.values())
    return seconds


def updates_suite(args) -> None:
    import ray

    names = args.arms
    load_before = os.getloadavg()[0]
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    algos = {}
    try:
        for name in names:
            print(f"building {name}", flush=True)
            algos[name] = updates_arm(args.algorithm, name, args.updates)
        same_data = same_transitions(list(algos.values()))
        for name in names:
            timed_updates(algos[name], name)  # warm-up
        median = take_turns(names, args.rounds, lambda n: timed_updates(algos[n], n))
    finally:
        for algo in algos.values():
            algo.stop()
        ray.shutdown()
    reference = median.get("per", median[names[0]])["total"]
    print("\n" + header())
    print(
        f"{args.algorithm} {UPDATES_ENV}: median of {args.rounds} rounds x "
        f"{args.updates} replayed updates of 256 per arm, every buffer holding the "
        f"same {UPDATES_LEARNING_STARTS} env steps at its learning start; "
        f"1 torch thread; load average before {load_before:.2f}, after "
        f"{os.getloadavg()[0]:.2f}"
    )
    print(f"the same transitions in every arm's buffer: {'yes' if same_data else 'NO'}")
    print(
        "| arm | µs per update | sample | Learner update | priorities | vs PER (time) |"
    )
    print("|---|---|---|---|---|---|")
    for name in names:
        m = median[name]
        print(
            f"| {name} | {1e6 * m['total']:,.0f} | {1e6 * m['sample']:,.0f} | "
            f"{1e6 * m['update']:,.0f} | {1e6 * m['priorities']:,.0f} | "
            f"{ratio(m['total'], reference)} |"
        )
