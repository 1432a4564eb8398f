"""MsPacman (Atari 100k) with NERS, PER and uniform replay: returns, speed, memory.

Every arm is data-efficient Rainbow with the NERS reference's settings
(`rllib_ners.algorithms.rainbow.presets.atari_data_efficient_rainbow`, as in
`tuned_examples/ners_dqn/ms_pacman_ners_rainbow_100k.py`); only the replay
differs (`ners`: NERSDQN; `per`: our prioritized buffer, alpha 0.5; `uniform`:
alpha 0). Runs happen one after the other in one process, the arms interleaved
seed by seed so that machine load hits every arm alike.

Per run it records, after learning starts (steady state):
  * env steps/s (one update of batch 32 per env step, as in the reference);
  * ms per update: RLlib's `learner_group.update()` (forward, loss, NERS scoring,
    backward, Adam), and per training step the buffer's `sample()` and the env
    runner's sampling, measured by wrapping those calls;
  * NERS scoring ms per update: the sampler's feature build + scoring of every
    training batch (wrapped on the local Learner; REINFORCE steps excluded);
  * replay memory: the buffer's array bytes and the bytes per stored transition,
    against stock RLlib's 1.13 GB per 10k transitions (float32 stacked frames,
    obs and next obs; measured on this machine with its PrioritizedEpisode-
    ReplayBuffer and RLlib's Atari wrapper).
It writes a CSV of every finished game's unclipped score (arm, seed, env step,
return) and a PNG of the learning curves (mean over seeds of the 20-game moving
average, min-max band).

How to run
----------
    python benchmarks/atari_100k.py --steps 20000 --seeds 1            # ~hours
    python benchmarks/atari_100k.py --steps 3000 --arms ners --profile  # cProfile

Speeds are the machine's, under its load: read the side-by-side numbers.
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import logging
import os
import pstats
import resource
import time
from collections import defaultdict

import numpy as np
import ray
import torch
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME

from rllib_ners.algorithms.rainbow.presets import (
    ATARI_REPLAYS,
    atari_data_efficient_rainbow,
)
from rllib_ners.env.atari import GAME_RETURN_KEY
from rllib_ners.seam.algorithm import local_learner_of
from rllib_ners.utils.plotting import TrialCurve, aggregate

ARMS = tuple(ATARI_REPLAYS)
# Stock RLlib 2.60 DQN + PrioritizedEpisodeReplayBuffer + wrap_atari_for_new_api_stack
# (float32 84x84x4 stacks): 1.13 GB per 10k stored transitions (issue 4).
STOCK_BYTES_PER_TRANSITION = 1.13e9 / 10_000
REFERENCE_ENV_STEPS_PER_S = 37.0  # youngmin0oh/NERS on this machine, 36-38


class Timer:
    """Accumulates wall time and calls of wrapped methods."""

    def __init__(self):
        self.seconds = defaultdict(float)
        self.calls = defaultdict(int)
        self.active = False

    def wrap(self, owner, name: str, key: str, *, skip=lambda: False) -> None:
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            if not self.active or skip():
                return original(*args, **kwargs)
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[key] += time.perf_counter() - start
                self.calls[key] += 1

        setattr(owner, name, timed)

    def ms(self, key: str, per: int) -> float:
        return 1e3 * self.seconds[key] / per if per else float("nan")


def instrument(algo, timer: Timer) -> None:
    """Wraps the update, buffer sampling, env sampling and NERS scoring calls."""
    timer.wrap(algo.learner_group, "update", "update")
    # sample_batch() serves the columnar path and RLlib's sample() alike.
    timer.wrap(algo.local_replay_buffer, "sample_batch", "buffer_sample")
    timer.wrap(algo.env_runner, "sample", "env_sample")
    learner = local_learner_of(algo.learner_group)
    sampler = getattr(learner, "ners", None)
    if sampler is None:
        return
    scorer = sampler.scorer
    in_reinforce = [False]

    def outside_reinforce():
        return in_reinforce[0]

    original_reinforce = sampler.reinforce

    def reinforce(*args, **kwargs):
        in_reinforce[0] = True
        try:
            return original_reinforce(*args, **kwargs)
        finally:
            in_reinforce[0] = False

    sampler.reinforce = reinforce
    timer.wrap(scorer, "featurize_batch", "ners_scoring", skip=outside_reinforce)
    timer.wrap(scorer, "forward", "ners_scoring", skip=outside_reinforce)


def game_returns(buffer, seen: set) -> list:
    """Unclipped game scores stored in the buffer's infos, not yet reported.

    Read from the replay buffer (every game's last info carries its score), so
    the CSV gets each game exactly once with the env step it ended at.
    """
    found = []
    storage = buffer.storage
    slots = np.flatnonzero(storage.occupied & ~storage.is_transition)
    for slot in slots:
        info = storage.infos[slot]
        if isinstance(info, dict) and GAME_RETURN_KEY in info:
            key = (int(storage.stamp[slot]), float(info[GAME_RETURN_KEY]))
            if key not in seen:
                seen.add(key)
                found.append((int(storage.stamp[slot]), float(info[GAME_RETURN_KEY])))
    return found


def run_one(arm: str, seed: int, args) -> dict:
    config = (
        atari_data_efficient_rainbow(
            args.game,
            replay=arm,
            total_timesteps=args.steps,
            capacity=args.capacity,
            rollout_fragment_length=args.rollout_fragment_length,
        )
        .env_runners(num_env_runners=args.num_env_runners)
        .reporting(min_sample_timesteps_per_iteration=200)
        .debugging(seed=seed)
    )
    algo = config.build_algo()
    timer = Timer()
    if args.num_env_runners == 0:
        instrument(algo, timer)
    buffer = algo.local_replay_buffer
    learning_starts = config.num_steps_sampled_before_learning_starts
    games, seen = [], set()
    steps = 0
    start_time = start_cpu = start_steps = None
    profiler = cProfile.Profile() if args.profile else None
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        while steps < args.steps:
            result = algo.train()
            previous, steps = (
                steps,
                int(result[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME]),
            )
            # Games of this iteration, in storage order, spread over its steps
            # (exact to within one iteration, 200 steps).
            found = sorted(game_returns(buffer, seen))
            at = np.linspace(previous, steps, len(found) + 1)[1:]
            games.extend((int(step), score) for step, (_, score) in zip(at, found))
            if start_time is None and steps >= learning_starts + 1000:
                start_time, start_steps = time.perf_counter(), steps
                start_cpu = time.process_time()
                timer.active = True
                if profiler:
                    profiler.enable()
        elapsed = time.perf_counter() - start_time if start_time else float("nan")
        cpu = time.process_time() - start_cpu if start_cpu else float("nan")
        if args.num_env_runners:
            cpu = float("nan")  # the env runners' CPU time is not in this process
        if profiler:
            profiler.disable()
            print(f"\ncProfile of {arm}, steady state (top 30 by own time):")
            pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
    finally:
        num_steps_stored = buffer.get_num_timesteps()
        nbytes = buffer.storage_nbytes()
        algo.stop()
    measured = steps - (start_steps or steps)
    updates = timer.calls["update"]
    return {
        "arm": arm,
        "seed": seed,
        "env_steps": steps,
        "games": games,
        "env_steps_per_s": measured / elapsed if measured else float("nan"),
        # All in this process with num_env_runners=0 (Learner local): CPU time
        # hardly depends on the machine's other load, unlike wall time.
        "env_steps_per_cpu_s": measured / cpu if measured else float("nan"),
        "ms_per_update": timer.ms("update", updates),
        "ners_scoring_ms_per_update": timer.ms("ners_scoring", updates)
        if arm == "ners"
        else float("nan"),
        "buffer_sample_ms_per_update": timer.ms("buffer_sample", updates),
        "env_sample_ms_per_step": timer.ms("env_sample", measured),
        "other_ms_per_step": (
            1e3 * elapsed
            - sum(timer.seconds[k] for k in ("update", "buffer_sample", "env_sample"))
            * 1e3
        )
        / measured
        if measured
        else float("nan"),
        "updates_per_env_step": updates / measured if measured else float("nan"),
        "buffer_bytes": nbytes,
        "buffer_transitions": num_steps_stored,
        "max_rss_growth_mb": (
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
        )
        / 1024,
        "wall_s": elapsed,
    }


def print_run(row: dict, capacity: int) -> None:
    scores = [s for _, s in row["games"]]
    last = np.mean(scores[-20:]) if scores else float("nan")
    print(
        f"{row['arm']:<8} seed {row['seed']}: {len(scores)} games, mean of last 20 "
        f"{last:.0f} | env steps/s {row['env_steps_per_s']:.1f} "
        f"({row['env_steps_per_s'] / REFERENCE_ENV_STEPS_PER_S:.2f}x the "
        f"reference's {REFERENCE_ENV_STEPS_PER_S:g}) | per update: "
        f"{row['ms_per_update']:.1f} ms learner update, NERS scoring "
        f"{row['ners_scoring_ms_per_update']:.2f} ms, buffer sample "
        f"{row['buffer_sample_ms_per_update']:.2f} ms | per env step: env runner "
        f"{row['env_sample_ms_per_step']:.1f} ms, other {row['other_ms_per_step']:.1f}"
        f" ms | updates/step {row['updates_per_env_step']:.2f}",
        flush=True,
    )
    per_transition = row["buffer_bytes"] / capacity
    stock = STOCK_BYTES_PER_TRANSITION * capacity
    print(
        f"         replay memory: {row['buffer_bytes'] / 1e9:.3f} GB of arrays for "
        f"capacity {capacity} ({per_transition:.0f} B per transition; "
        f"{row['buffer_transitions']} stored) vs stock RLlib "
        f"{stock / 1e9:.2f} GB: {stock / row['buffer_bytes']:.1f}x smaller; "
        f"max RSS grew {row['max_rss_growth_mb']:.0f} MB",
        flush=True,
    )


def write_outputs(rows: list, out_prefix: str, window: int = 20) -> None:
    with open(out_prefix + ".csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["arm", "seed", "env_steps", "game_return"])
        for row in rows:
            for step, score in row["games"]:
                writer.writerow([row["arm"], row["seed"], step, score])
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, arm in enumerate(a for a in ARMS if any(r["arm"] == a for r in rows)):
        curves = []
        for row in (r for r in rows if r["arm"] == arm and len(r["games"]) > 1):
            steps = np.array([s for s, _ in row["games"]], dtype=float)
            scores = np.array([g for _, g in row["games"]], dtype=float)
            # Trailing moving average over up to `window` games.
            sums = np.cumsum(np.concatenate([[0.0], scores]))
            ends = np.arange(1, scores.size + 1)
            starts = np.maximum(0, ends - window)
            smooth = (sums[ends] - sums[starts]) / (ends - starts)
            curves.append(TrialCurve(path=None, label=arm, steps=steps, returns=smooth))
        if not curves:
            continue
        grid, mean, low, high, _ = aggregate(curves, "minmax")
        n = len(curves)
        ax.plot(grid, mean, color=colors[i], label=f"{arm} ({n} seed{'s' * (n > 1)})")
        if n > 1:
            ax.fill_between(grid, low, high, color=colors[i], alpha=0.2, linewidth=0)
    ax.set_xlabel("env (agent) steps")
    ax.set_ylabel(f"game score, {window}-game moving average (unclipped)")
    ax.set_title("MsPacman, data-efficient Rainbow: NERS vs PER vs uniform replay")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(out_prefix + ".png", dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20_000, help="env steps per run")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--game", default="MsPacman")
    parser.add_argument("--capacity", type=int, default=100_000)
    parser.add_argument("--rollout-fragment-length", type=int, default=20)
    parser.add_argument("--num-env-runners", type=int, default=0)
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=2,
        help="torch threads (acting and learning alternate in this process)",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile each run")
    parser.add_argument("--out", default="results/atari_100k")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.torch_threads)
    logging.getLogger("ray").setLevel(logging.ERROR)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    print(
        f"{args.game}: {args.steps} env steps per run, arms {args.arms}, "
        f"{args.seeds} seed(s), torch threads {args.torch_threads}, "
        f"rollout_fragment_length {args.rollout_fragment_length}, "
        f"num_env_runners {args.num_env_runners}, load average "
        f"{os.getloadavg()[0]:.2f}",
        flush=True,
    )
    rows = []
    try:
        for seed in range(args.seeds):
            for arm in args.arms:
                row = run_one(arm, seed, args)
                rows.append(row)
                print_run(row, args.capacity)
                write_outputs(rows, args.out)
    finally:
        ray.shutdown()
    speeds = {
        arm: np.median([r["env_steps_per_s"] for r in rows if r["arm"] == arm])
        for arm in args.arms
    }
    cpu_speeds = {
        arm: np.median([r["env_steps_per_cpu_s"] for r in rows if r["arm"] == arm])
        for arm in args.arms
    }
    summary = ", ".join(f"{arm} {speed:.1f}" for arm, speed in speeds.items())
    print(f"\nmedian env steps/s: {summary}")
    summary = ", ".join(f"{arm} {speed:.1f}" for arm, speed in cpu_speeds.items())
    print(f"median env steps per CPU second of this process: {summary}")
    if "ners" in speeds and "per" in speeds:
        print(
            f"throughput ratio ners/per: wall {speeds['ners'] / speeds['per']:.2f}x, "
            f"CPU {cpu_speeds['ners'] / cpu_speeds['per']:.2f}x"
        )
    for arm, speed in speeds.items():
        hours = 100_000 / speed / 3600
        print(f"  {arm}: a 100k-step run would take about {hours:.1f} h here")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    print(f"CSV and PNG written to {args.out}.csv / {args.out}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
