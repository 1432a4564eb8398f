"""Soak test of NERSEpisodeReplayBuffer: many add/sample/update/evict cycles.

Each cycle adds an episode chunk from one of several interleaved "EnvRunners"
(chunks of 1-40 steps, episodes of random length, so chunks continue stored
episodes and the buffer evicts constantly), samples a batch, returns
`[score, delta, q]` rows with occasional NaN/inf injected, and every
`--sampler-every` cycles runs the sampler-update path (I_train draw, reset of
I_all). Every `--check-every` cycles it checks the buffer's invariants (tree sums
equal the leaves, only stored transitions have priority, every pointer reaches
stored data of the same episode) and that non-finite values never reached the
trees. It prints resident memory at the start and the end: it must stay flat.

How to run
----------
    python tests/soak_buffer.py                     # 1,000,000 cycles
    python tests/soak_buffer.py --cycles 20000      # the CI-sized run
                                                    # (tests/unit/test_soak.py)
"""

from __future__ import annotations

import argparse
import resource
import time

import gymnasium as gym
import numpy as np
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rllib_ners import NERSEpisodeReplayBuffer

OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACTION_SPACE = gym.spaces.Discrete(2)


def resident_mb() -> float:
    """Current resident set size in MiB (Linux /proc), peak as a fallback."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * resource.getpagesize() / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _Runner:
    """Produces consecutive chunks of random-length episodes, like an EnvRunner."""

    def __init__(self, name: str, rng: np.random.Generator):
        self.name, self.rng = name, rng
        self.episode = 0
        self._new_episode()

    def _new_episode(self):
        self.episode += 1
        self.t = 0
        self.length = int(self.rng.integers(1, 200))

    def chunk(self) -> SingleAgentEpisode:
        steps = min(int(self.rng.integers(1, 41)), self.length - self.t)
        done = self.t + steps == self.length
        t0 = self.t
        episode = SingleAgentEpisode(
            id_=f"{self.name}-{self.episode}",
            observations=list(self.rng.normal(size=(steps + 1, 4)).astype(np.float32)),
            actions=list(self.rng.integers(0, 2, steps)),
            rewards=list(self.rng.normal(size=steps)),
            terminated=done,
            t_started=t0,
            len_lookback_buffer=0,
            observation_space=OBS_SPACE,
            action_space=ACTION_SPACE,
        )
        self.t += steps
        if done:
            self._new_episode()
        return episode


def soak(cycles: int, capacity: int, check_every: int, sampler_every: int, seed: int):
    rng = np.random.default_rng(seed)
    buffer = NERSEpisodeReplayBuffer(capacity, alpha=0.6, beta=0.4, seed=seed)
    runners = [_Runner(f"runner{i}", rng) for i in range(4)]
    injected_scores = 0
    start_mb = resident_mb()
    start = time.perf_counter()
    print(f"start: resident {start_mb:.1f} MiB, capacity {capacity}, {cycles} cycles")
    for cycle in range(1, cycles + 1):
        buffer.add([runners[cycle % len(runners)].chunk()])
        if len(buffer) < 32:
            continue
        buffer.sample_batch(32, n_step=3, gamma=0.99)
        rows = np.stack(
            [rng.random(32), rng.random(32), rng.normal(size=32), np.arange(32.0)],
            axis=1,
        )
        if cycle % 7 == 0:
            column = int(rng.integers(0, 3))
            rows[rng.integers(0, 32), column] = rng.choice([np.nan, np.inf, -np.inf])
            # Only the score column is a priority; delta/q go to the cache.
            injected_scores += column == 0
        buffer.update_priorities(rows)
        if cycle % sampler_every == 0:
            buffer.sample_sampler_training_batch(32, n_step=3)
            buffer.reset_sampled_set()
            buffer.pop_finished_episode_returns()
        if cycle % check_every == 0 or cycle == cycles:
            buffer.check_invariants()
            leaves = buffer.get_priorities(np.arange(capacity))
            if not np.all(np.isfinite(leaves)):
                raise RuntimeError("a non-finite priority reached the sum tree")
            if not (
                np.all(np.isfinite(buffer.slot_memory.delta))
                and np.all(np.isfinite(buffer.slot_memory.q))
            ):
                raise RuntimeError("a non-finite value reached the feature cache")
            if buffer.sampler.num_nonfinite_priorities != injected_scores:
                raise RuntimeError(
                    "the buffer did not count every bad score it skipped"
                )
            rate = cycle / (time.perf_counter() - start)
            print(
                f"cycle {cycle:>8}: invariants ok, {len(buffer)} transitions, "
                f"{buffer.get_num_episodes()} episode fragments, "
                f"resident {resident_mb():.1f} MiB, {rate:.0f} cycles/s",
                flush=True,
            )
    end_mb = resident_mb()
    print(
        f"end: resident {end_mb:.1f} MiB (start {start_mb:.1f} MiB, "
        f"growth {end_mb - start_mb:+.1f} MiB); non-finite scores injected "
        f"{injected_scores}, skipped and counted by the buffer "
        f"{buffer.sampler.num_nonfinite_priorities}"
    )
    return start_mb, end_mb


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=1_000_000)
    parser.add_argument("--capacity", type=int, default=20_000)
    parser.add_argument("--check-every", type=int, default=50_000)
    parser.add_argument("--sampler-every", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    soak(args.cycles, args.capacity, args.check_every, args.sampler_every, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
