"""Benchmark: `FastPrioritizedEpisodeReplayBuffer` against RLlib's PER buffer.

Measures, side by side in one process, `rllib_ners.FastPrioritizedEpisodeReplayBuffer`
("ours") and RLlib's `PrioritizedEpisodeReplayBuffer` ("RLlib") on CartPole-sized
transitions (obs float32[4], Discrete(2) actions, float rewards), with
alpha=0.6, beta=0.4, gamma=0.99, n_step=3 and batches of 32:

1. fill: time to add 100,000 steps in episodes of 80-120 steps, 10 episodes per
   `add()` call, into an empty buffer of capacity 100,000;
2. add into a full buffer: time per `add()` of one 100-step episode once the
   buffer is full (median);
3. drop-in path: `sample(num_items=32, n_step=3, gamma=0.99, beta=0.4)` followed
   by `update_priorities(...)`, time per pair (median);
4. columnar path (ours only): `sample_batch(32, ...)` + `update_priorities(...)`,
   compared with RLlib's drop-in sample + update;
5. ours at capacity 1,000,000 (RLlib is not measured there: filling it takes
   far too long): fill, add into full, drop-in and columnar sample + update.

Each ratio is "ours speed / RLlib's speed" (RLlib's time / our time) and is
printed next to its target with PASS/MISS. The targets are informational: the
script always exits with 0.

Run from the repository root:

    python benchmarks/replay_buffer.py            # full run, a few minutes
    python benchmarks/replay_buffer.py --skip-1m  # without the 1M section
    python benchmarks/replay_buffer.py --quick    # CI smoke: few reps, no 1M

Machine caveats: the reference machine is a shared 2-core VM, so absolute
times vary from run to run (and with whatever else runs there). Both buffers are
measured in the same process on the same data, so the ratios are the figures to
compare, not the absolute times. All episodes are built (and `to_numpy()`'d, as
EnvRunners send them) before any timing; times come from `time.perf_counter`.
"""

from __future__ import annotations

import argparse
import gc
import logging
import time
import warnings
from dataclasses import dataclass
from typing import Callable, List, Optional

import gymnasium as gym
import numpy as np

warnings.filterwarnings("ignore")

from ray.rllib.env.single_agent_episode import SingleAgentEpisode  # noqa: E402
from ray.rllib.utils.replay_buffers import (  # noqa: E402
    PrioritizedEpisodeReplayBuffer,
)

from rllib_ners import FastPrioritizedEpisodeReplayBuffer  # noqa: E402

ALPHA, BETA, GAMMA, N_STEP, BATCH = 0.6, 0.4, 0.99, 3, 32
CAPACITY, BIG_CAPACITY = 100_000, 1_000_000
EPISODES_PER_ADD = 10
FULL_ADD_EPISODE_LEN = 100
OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACTION_SPACE = gym.spaces.Discrete(2)

TARGET_ADD_FULL, TARGET_DROP_IN, TARGET_COLUMNAR = 50.0, 2.0, 15.0


@dataclass
class Reps:
    """How many timed repetitions each measurement takes."""

    ours_adds: int
    rllib_adds: int
    ours_samples: int
    rllib_samples: int
    warmup: int


FULL_REPS = Reps(
    ours_adds=200, rllib_adds=50, ours_samples=1000, rllib_samples=300, warmup=20
)
QUICK_REPS = Reps(
    ours_adds=30, rllib_adds=5, ours_samples=100, rllib_samples=30, warmup=3
)


def silence_logs() -> None:
    for name in ("ray", "ray.rllib", "rllib_ners"):
        logging.getLogger(name).setLevel(logging.ERROR)


# ----------------------------------------------------------------- episodes
@dataclass
class EpisodeData:
    obs: np.ndarray  # float32 [T + 1, 4]
    actions: np.ndarray  # int64 [T]
    rewards: np.ndarray  # float32 [T]


def make_episode_data(
    rng: np.random.Generator, num_steps: int, lengths=(80, 120)
) -> List[EpisodeData]:
    """Random CartPole-like episodes totalling exactly `num_steps` steps."""
    data, total = [], 0
    while total < num_steps:
        T = min(int(rng.integers(lengths[0], lengths[1] + 1)), num_steps - total)
        data.append(fixed_length_data(rng, T))
        total += T
    return data


def fixed_length_data(rng: np.random.Generator, T: int) -> EpisodeData:
    return EpisodeData(
        obs=rng.standard_normal((T + 1, 4)).astype(np.float32),
        actions=rng.integers(0, 2, size=T),
        rewards=rng.random(T).astype(np.float32),
    )


def build_episodes(data: List[EpisodeData]) -> List[SingleAgentEpisode]:
    """Fresh, numpy'd episode objects (each buffer gets its own)."""
    episodes = []
    for d in data:
        episode = SingleAgentEpisode(
            observations=list(d.obs),
            actions=d.actions.tolist(),
            rewards=d.rewards.tolist(),
            terminated=True,
            len_lookback_buffer=0,
            observation_space=OBS_SPACE,
            action_space=ACTION_SPACE,
        )
        episode.to_numpy()
        episodes.append(episode)
    return episodes


# ------------------------------------------------------------------ buffers
def make_ours(capacity: int, seed: int) -> FastPrioritizedEpisodeReplayBuffer:
    return FastPrioritizedEpisodeReplayBuffer(
        capacity=capacity, alpha=ALPHA, beta=BETA, seed=seed
    )


def make_rllib(capacity: int) -> PrioritizedEpisodeReplayBuffer:
    return PrioritizedEpisodeReplayBuffer(capacity=capacity, alpha=ALPHA)


# ------------------------------------------------------------------- timing
def time_fill(buffer, episodes: List[SingleAgentEpisode]) -> float:
    """Seconds to add all `episodes`, `EPISODES_PER_ADD` per `add()` call."""
    gc.collect()
    start = time.perf_counter()
    for i in range(0, len(episodes), EPISODES_PER_ADD):
        buffer.add(episodes[i : i + EPISODES_PER_ADD])
    return time.perf_counter() - start


def time_adds(buffer, episodes: List[SingleAgentEpisode]) -> np.ndarray:
    """Seconds per single-episode `add()`, one per episode."""
    gc.collect()
    times = np.empty(len(episodes))
    for i, episode in enumerate(episodes):
        start = time.perf_counter()
        buffer.add(episode)
        times[i] = time.perf_counter() - start
    return times


def time_sample_update(
    sample: Callable[[], object], buffer, reps: int, warmup: int, seed: int
) -> np.ndarray:
    """Seconds per `sample()` + `update_priorities(rand(32))` pair."""
    rng = np.random.default_rng(seed)
    priorities = rng.random((reps + warmup, BATCH))
    gc.collect()
    times = np.empty(reps)
    for i in range(reps + warmup):
        start = time.perf_counter()
        sample()
        buffer.update_priorities(priorities[i])
        if i >= warmup:
            times[i - warmup] = time.perf_counter() - start
    return times


def drop_in_sampler(buffer) -> Callable[[], object]:
    return lambda: buffer.sample(num_items=BATCH, n_step=N_STEP, gamma=GAMMA, beta=BETA)


def columnar_sampler(buffer) -> Callable[[], object]:
    return lambda: buffer.sample_batch(BATCH, n_step=N_STEP, gamma=GAMMA, beta=BETA)


# ------------------------------------------------------------------ results
@dataclass
class Row:
    label: str
    ours: float  # seconds
    rllib: Optional[float] = None  # seconds
    target: Optional[float] = None  # minimum speed-up

    @property
    def ratio(self) -> Optional[float]:
        return None if self.rllib is None else self.rllib / self.ours


def fmt_time(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.0f} us"


def print_table(title: str, rows: List[Row]) -> None:
    header = (
        f"{'operation':<44}{'ours':>11}{'RLlib':>11}{'speed-up':>10}"
        f"{'target':>9}  status"
    )
    print(f"\n{title}")
    print(header)
    print("-" * len(header))
    for row in rows:
        ratio = "-" if row.ratio is None else f"{row.ratio:.1f}x"
        target = "-" if row.target is None else f">={row.target:g}x"
        status = ""
        if row.target is not None and row.ratio is not None:
            status = "PASS" if row.ratio >= row.target else "MISS"
        print(
            f"{row.label:<44}{fmt_time(row.ours):>11}{fmt_time(row.rllib):>11}"
            f"{ratio:>10}{target:>9}  {status}"
        )


# ---------------------------------------------------------------- sections
def bench_capacity_100k(reps: Reps, seed: int) -> List[Row]:
    rng = np.random.default_rng(seed)
    fill_data = make_episode_data(rng, CAPACITY)
    extra_data = [
        fixed_length_data(rng, FULL_ADD_EPISODE_LEN)
        for _ in range(max(reps.ours_adds, reps.rllib_adds))
    ]
    ours, rllib = make_ours(CAPACITY, seed), make_rllib(CAPACITY)
    ours_fill, rllib_fill = build_episodes(fill_data), build_episodes(fill_data)
    ours_extra = build_episodes(extra_data[: reps.ours_adds])
    rllib_extra = build_episodes(extra_data[: reps.rllib_adds])

    fill = Row(
        f"fill {CAPACITY:,} steps ({EPISODES_PER_ADD} episodes/add)",
        time_fill(ours, ours_fill),
        time_fill(rllib, rllib_fill),
    )
    add_full = Row(
        f"add 1 x {FULL_ADD_EPISODE_LEN}-step episode, full (median)",
        float(np.median(time_adds(ours, ours_extra))),
        float(np.median(time_adds(rllib, rllib_extra))),
        TARGET_ADD_FULL,
    )
    rllib_drop_in = float(
        np.median(
            time_sample_update(
                drop_in_sampler(rllib), rllib, reps.rllib_samples, reps.warmup, seed
            )
        )
    )
    drop_in = Row(
        "drop-in sample()+update_priorities (median)",
        float(
            np.median(
                time_sample_update(
                    drop_in_sampler(ours), ours, reps.ours_samples, reps.warmup, seed
                )
            )
        ),
        rllib_drop_in,
        TARGET_DROP_IN,
    )
    columnar = Row(
        "columnar sample_batch()+update (vs drop-in)",
        float(
            np.median(
                time_sample_update(
                    columnar_sampler(ours), ours, reps.ours_samples, reps.warmup, seed
                )
            )
        ),
        rllib_drop_in,
        TARGET_COLUMNAR,
    )
    return [fill, add_full, drop_in, columnar]


def bench_capacity_1m(reps: Reps, seed: int) -> List[Row]:
    rng = np.random.default_rng(seed + 1)
    fill_data = make_episode_data(rng, BIG_CAPACITY)
    extra = build_episodes(
        [fixed_length_data(rng, FULL_ADD_EPISODE_LEN) for _ in range(reps.ours_adds)]
    )
    fill_episodes = build_episodes(fill_data)
    del fill_data
    ours = make_ours(BIG_CAPACITY, seed)
    rows = [
        Row(
            f"fill {BIG_CAPACITY:,} steps ({EPISODES_PER_ADD} episodes/add)",
            time_fill(ours, fill_episodes),
        ),
        Row(
            f"add 1 x {FULL_ADD_EPISODE_LEN}-step episode, full (median)",
            float(np.median(time_adds(ours, extra))),
        ),
    ]
    del fill_episodes
    for label, sampler in (
        ("drop-in sample()+update_priorities (median)", drop_in_sampler(ours)),
        ("columnar sample_batch()+update (median)", columnar_sampler(ours)),
    ):
        times = time_sample_update(sampler, ours, reps.ours_samples, reps.warmup, seed)
        rows.append(Row(label, float(np.median(times))))
    return rows


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="few reps and no 1M section (CI smoke)"
    )
    parser.add_argument(
        "--skip-1m", action="store_true", help="skip the capacity 1,000,000 section"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    silence_logs()
    reps = QUICK_REPS if args.quick else FULL_REPS
    start = time.perf_counter()

    print(
        f"Replay buffer benchmark: obs float32[4], Discrete(2), alpha={ALPHA}, "
        f"beta={BETA}, gamma={GAMMA}, n_step={N_STEP}, batch={BATCH}, "
        f"seed={args.seed}{' (quick)' if args.quick else ''}"
    )
    print(
        f"speed-up = RLlib time / our time. Reps: add {reps.ours_adds} ours / "
        f"{reps.rllib_adds} RLlib; sample+update {reps.ours_samples} ours / "
        f"{reps.rllib_samples} RLlib (after {reps.warmup} warm-up)."
    )
    print_table(f"Capacity {CAPACITY:,}", bench_capacity_100k(reps, args.seed))

    if args.quick or args.skip_1m:
        print(f"\nCapacity {BIG_CAPACITY:,}: skipped (--quick / --skip-1m).")
    else:
        print_table(
            f"Capacity {BIG_CAPACITY:,}, ours only (RLlib not measured: filling it "
            f"takes too long)",
            bench_capacity_1m(reps, args.seed),
        )
    print(f"\nTotal benchmark time: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
