"""What one replayed update costs per replay method, with the env taken out.

`peers.py` times whole training steps, env included; there the arms' policies
differ after the first updates (episode lengths, resets), which moves their
rates by several percent whatever the replay costs. Here every arm's buffer
holds the same transitions, and only the replayed updates are timed: the
training loop's own `_replay_updates()` (sample a batch, the Learner's update,
the priorities back into the buffer), split into those three parts.

Each arm is the preset's algorithm on Hopper-v5 (`td3_config` or
`mujoco_sac`, our buffers, one update of 256), built in this one process
(`num_env_runners=0`, a local Learner, one torch thread) and trained through
its learning start (TD3: uniformly random actions; SAC: its initial policy),
from the same seed: the same env steps reach every buffer (checked, and
printed). Then the arms take turns, round by round
(the order rotating), each making `--updates` replayed updates per round; the
table gives the median over `--rounds` of the µs per update, per part, and
the ratio to PER's.

Arms: td3 per / lap (LAP: priority max(|delta|, 1)^alpha, Huber loss, no
importance weights) / pal (PAL: LAP's loss on uniform replay) / uniform; sac
per / lap / pal / uniform; for both, per-foreach: PER with the target
networks' Polyak update as per-tensor multi-tensor ops, as before the flat
targets (`PolyakTargets.flat_on_cpu = False` during its turns).

    python benchmarks/replay_update_cost.py
    python benchmarks/replay_update_cost.py --algorithm sac --rounds 7
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import time
from typing import Dict, List

ENV = "Hopper-v5"
LEARNING_STARTS = 2000
ARMS = {
    "td3": ("per", "lap", "pal", "uniform", "per-foreach"),
    "sac": ("per", "lap", "pal", "uniform", "per-foreach"),
}
# Arms that are another arm's algorithm with one switch flipped.
VARIANT_OF = {"per-foreach": "per"}
PARTS = ("sample", "update", "priorities")


def build(algorithm: str, replay: str):
    """The arm's algorithm, trained up to its learning start (random actions,
    no update yet)."""
    replay = VARIANT_OF.get(replay, replay)
    if algorithm == "td3":
        from rllib_ners.algorithms.td3.presets import td3_config

        config = td3_config(ENV, replay=replay, learning_starts=LEARNING_STARTS)
    else:
        from rllib_ners.algorithms.ners_sac.presets import mujoco_sac

        config = mujoco_sac(ENV, replay=replay, learning_starts=LEARNING_STARTS)
    config = (
        config.env_runners(num_env_runners=0)
        .reporting(
            min_sample_timesteps_per_iteration=LEARNING_STARTS,
            min_time_s_per_iteration=0,
        )
        .debugging(seed=0)
    )
    algo = config.build_algo()
    algo.train()  # LEARNING_STARTS random steps, stored; learning starts next
    return algo


def timed_updates(algo, num_updates: int, arm: str = "") -> Dict[str, float]:
    """Seconds per replayed update, per part (the loop's own section timers)."""
    from rllib_ners.algorithms.common.replay_loop import (
        LEARNER_UPDATE_TIMER,
        REPLAY_BUFFER_SAMPLE_TIMER,
        REPLAY_BUFFER_UPDATE_PRIOS_TIMER,
        _SectionTimes,
    )
    from rllib_ners.algorithms.common.target_updates import PolyakTargets

    times = _SectionTimes()
    PolyakTargets.flat_on_cpu = arm != "per-foreach"
    try:
        start = time.perf_counter()
        algo._replay_updates(num_updates, LEARNING_STARTS, times)
        total = time.perf_counter() - start
    finally:
        PolyakTargets.flat_on_cpu = True
    seconds = times.seconds
    return {
        "sample": seconds[REPLAY_BUFFER_SAMPLE_TIMER] / num_updates,
        "update": seconds[LEARNER_UPDATE_TIMER] / num_updates,
        "priorities": seconds[REPLAY_BUFFER_UPDATE_PRIOS_TIMER] / num_updates,
        "total": total / num_updates,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--algorithm", choices=sorted(ARMS), default="td3")
    parser.add_argument("--arms", nargs="+", help="a subset of the algorithm's arms")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--updates", type=int, default=200, help="per arm and round")
    args = parser.parse_args(argv)
    names = args.arms or list(ARMS[args.algorithm])
    unknown = set(names) - set(ARMS[args.algorithm])
    if unknown:
        parser.error(f"unknown arms for --algorithm {args.algorithm}: {unknown}")

    import ray
    import torch

    from rllib_ners.cli.quiet import silence_known_noise

    silence_known_noise()
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    algos = {}
    try:
        for name in names:
            print(f"building {name}", flush=True)
            algos[name] = build(args.algorithm, name)
            timed_updates(algos[name], 20, name)  # warm-up
        same_data = same_transitions(list(algos.values()))
        samples: Dict[str, List[Dict[str, float]]] = {name: [] for name in names}
        for round_index in range(args.rounds):
            shift = round_index % len(names)
            for name in names[shift:] + names[:shift]:
                samples[name].append(timed_updates(algos[name], args.updates, name))
            print(f"round {round_index + 1}/{args.rounds} done", flush=True)
    finally:
        for algo in algos.values():
            algo.stop()
        ray.shutdown()
    report(args, names, samples, load_before, same_data)
    return 0


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


def report(args, names, samples, load_before, same_data: bool) -> None:
    from peers import cpu_model

    median = {
        name: {
            part: statistics.median(s[part] for s in samples[name])
            for part in PARTS + ("total",)
        }
        for name in names
    }
    reference = median.get("per", median[names[0]])["total"]
    print(
        f"\n{args.algorithm} {ENV}: median of {args.rounds} rounds x {args.updates} "
        f"replayed updates of 256 per arm, every buffer holding the same "
        f"{LEARNING_STARTS} env steps; {cpu_model()}, {os.cpu_count()} cores, 1 "
        f"torch thread; {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} "
        f"UTC; load average before {load_before[0]:.2f}, after "
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
            f"{m['total'] / reference:.2f}x |"
        )


if __name__ == "__main__":
    raise SystemExit(main())
