"""Checkpoint size, save/restore time and peak memory of a full NERS replay buffer.

Two buffers of 100,000 transitions each:
  * CartPole: float32 observations of shape (4,);
  * Atari: 84x84x1 uint8 frames, stored once (`frame_stack=4` rebuilds the
    4-frame stacks at sample time), in 100 episodes of 1,000 steps.

Each buffer is written exactly as `Algorithm.save_to_path()` writes the NERS
algorithms' own state (`get_state()`, then `ray.cloudpickle.dump` into
`algorithm_state.pkl`) and read back as `Algorithm.from_checkpoint()` does
(`pickle.load`, then `set_state()`). For CartPole a whole NERS-DQN algorithm
with that buffer is also saved with `algo.save_to_path()` and restored with
`Algorithm.from_checkpoint()`, to show what the rest of a checkpoint costs.

Rows marked `copy=True` use `get_state()` / `set_state()` as a caller holding
on to the state must (arrays copied); the others use `copy=False`, which is what
the NERS algorithms' `save_to_path()` / `restore_from_path()` do.

Peak memory is the process's high-water mark (VmHWM, reset through
/proc/self/clear_refs before each phase) above its resident size when the
phase starts, next to the size of the buffer's arrays: a phase that copied the
whole storage would show about one extra buffer.

How to run
----------
    python benchmarks/checkpoint_size.py            # both buffers, ~1 minute
    python benchmarks/checkpoint_size.py --no-algo  # buffers only
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import ray.cloudpickle as pickle
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rllib_ners import NERSEpisodeReplayBuffer

NUM_TRANSITIONS = 100_000


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(field)


def rss_mb() -> float:
    return _status_mb("VmRSS")


def reset_peak() -> None:
    """Sets VmHWM (peak resident size) to the current resident size (Linux)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_mb() -> float:
    return _status_mb("VmHWM")


def storage_mb(buffer) -> float:
    """Bytes held in the buffer's numpy arrays (storage, bookkeeping, trees)."""
    return buffer.storage_nbytes() / 2**20


def _episode(obs, actions, rewards, obs_space, action_space):
    return SingleAgentEpisode(
        observations=list(obs),
        actions=list(actions),
        rewards=list(rewards),
        terminated=True,
        len_lookback_buffer=0,
        observation_space=obs_space,
        action_space=action_space,
    )


def filled_buffer(kind: str, seed: int = 0) -> NERSEpisodeReplayBuffer:
    rng = np.random.default_rng(seed)
    if kind == "cartpole":
        obs_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
        action_space = gym.spaces.Discrete(2)
        length, kwargs = 200, {}

        def frames(n):
            return rng.normal(size=(n, 4)).astype(np.float32)

    else:
        obs_space = gym.spaces.Box(0, 255, (84, 84, 1), np.uint8)
        action_space = gym.spaces.Discrete(6)
        length, kwargs = 1000, {"frame_stack": 4}

        def frames(n):
            return rng.integers(0, 256, size=(n, 84, 84, 1), dtype=np.uint8)

    num_episodes = NUM_TRANSITIONS // length
    # One slot per transition plus one tail slot per stored episode.
    buffer = NERSEpisodeReplayBuffer(
        NUM_TRANSITIONS + num_episodes, alpha=0.6, seed=seed, **kwargs
    )
    for _ in range(num_episodes):
        buffer.add(
            _episode(
                frames(length + 1),
                rng.integers(0, action_space.n, length),
                rng.normal(size=length),
                obs_space,
                action_space,
            )
        )
    # Learned priorities and a feature cache, as after training.
    for _ in range(200):
        buffer.sample_batch(32, n_step=3)
        rows = np.stack([rng.random(32), rng.random(32), rng.normal(size=32)], axis=1)
        buffer.update_priorities(rows)
    assert len(buffer) == NUM_TRANSITIONS
    return buffer


def save_and_restore_buffer(kind: str, directory: Path, copy: bool) -> dict:
    buffer = filled_buffer(kind)
    data_mb = storage_mb(buffer)
    path = directory / f"{kind}_algorithm_state.pkl"

    start_mb = rss_mb()
    reset_peak()
    t0 = time.perf_counter()
    state = {"replay_buffer": buffer.get_state(copy=copy)}
    t_get_state = time.perf_counter() - t0
    with open(path, "wb") as f:
        pickle.dump(state, f)
    t_save = time.perf_counter() - t0
    save_peak = peak_mb() - start_mb
    del state
    size_mb = path.stat().st_size / 2**20

    fresh = NERSEpisodeReplayBuffer(buffer.capacity, alpha=0.6, **_kwargs(kind))
    del buffer
    start_mb = rss_mb()
    reset_peak()
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        state = pickle.load(f)
    fresh.set_state(state["replay_buffer"], copy=copy)
    del state
    t_restore = time.perf_counter() - t0
    restore_peak = peak_mb() - start_mb
    assert len(fresh) == NUM_TRANSITIONS
    assert fresh.storage.obs.flags.writeable  # adopted arrays take new episodes
    path.unlink()
    return {
        "data_mb": data_mb,
        "size_mb": size_mb,
        "get_state_s": t_get_state,
        "save_s": t_save,
        "save_peak_mb": save_peak,
        "restore_s": t_restore,
        "restore_peak_mb": restore_peak,
    }


def _kwargs(kind: str) -> dict:
    return {"frame_stack": 4} if kind == "atari" else {}


def save_and_restore_algorithm(directory: Path) -> dict:
    """A NERS-DQN CartPole algorithm with the 100k buffer, through RLlib."""
    import ray
    from ray.rllib.algorithms.algorithm import Algorithm

    from rllib_ners import NERSDQNConfig

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        config = (
            NERSDQNConfig()
            .environment("CartPole-v1")
            .env_runners(num_env_runners=0)
            .training(
                replay_buffer_config={"capacity": NUM_TRANSITIONS + 500, "alpha": 0.6}
            )
        )
        algo = config.build_algo()
        source = filled_buffer("cartpole")
        algo.local_replay_buffer.set_state(source.get_state())
        del source
        path = directory / "algo_ckpt"
        start_mb = rss_mb()
        reset_peak()
        t0 = time.perf_counter()
        algo.save_to_path(str(path))
        t_save = time.perf_counter() - t0
        save_peak = peak_mb() - start_mb
        size_mb = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        algo.stop()
        t0 = time.perf_counter()
        restored = Algorithm.from_checkpoint(str(path))
        t_restore = time.perf_counter() - t0
        assert len(restored.local_replay_buffer) == NUM_TRANSITIONS
        restored.stop()
        return {
            "size_mb": size_mb / 2**20,
            "save_s": t_save,
            "save_peak_mb": save_peak,
            "restore_s": t_restore,
        }
    finally:
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-algo", action="store_true")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="ckpt_bench_"))
    print(f"load average: {os.getloadavg()[0]:.2f}  (2 cores, shared machine)")
    try:
        header = (
            f"{'buffer (100k transitions)':<28}{'arrays MB':>10}{'file MB':>9}"
            f"{'get_state s':>12}{'save s':>8}{'save +MB':>9}{'restore s':>10}"
            f"{'restore +MB':>12}"
        )
        print(header)
        for kind, copy, label in (
            ("cartpole", False, "CartPole (4,) f32"),
            ("cartpole", True, "CartPole, copy=True"),
            ("atari", False, "Atari 84x84x1 u8, stack 4"),
            ("atari", True, "Atari, copy=True"),
        ):
            r = save_and_restore_buffer(kind, directory, copy)
            print(
                f"{label:<28}{r['data_mb']:>10.1f}{r['size_mb']:>9.1f}"
                f"{r['get_state_s']:>12.2f}{r['save_s']:>8.2f}"
                f"{r['save_peak_mb']:>9.0f}{r['restore_s']:>10.2f}"
                f"{r['restore_peak_mb']:>12.0f}"
            )
        if not args.no_algo:
            r = save_and_restore_algorithm(directory)
            print(
                f"NERS-DQN CartPole algorithm checkpoint (buffer + modules + "
                f"optimisers + sampler): {r['size_mb']:.1f} MB on disk, "
                f"save_to_path {r['save_s']:.2f} s (+{r['save_peak_mb']:.0f} MB "
                f"peak), from_checkpoint {r['restore_s']:.2f} s"
            )
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
