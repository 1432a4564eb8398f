"""RLlib's `SingleAgentEnvRunner`: the state its sampling loop reads and writes.

RLlib keeps a sampling loop's state between `sample()` calls on the EnvRunner
under private names: the ongoing episodes, the env-to-module pipeline's output
for the current observations, whether the envs need a reset, the episodes kept
for `get_metrics()`, the time `sample()` last returned. A loop that replaces
RLlib's `_sample()` (`rllib_ners.env.fast_env_runner`) reads and writes that
same state, so that either loop can continue the other's, and makes the calls
RLlib's loop makes (the env reset, the `on_episode_end` callback, the
Prometheus step counter), through the functions here. Each is pinned by
`tests/rllib_contract/test_seam_env_runner.py`, which checks it against what
RLlib's own `sample()` reads and writes.
"""

from __future__ import annotations

from typing import List, Optional

import torch
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.core.columns import Columns
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

__all__ = [
    "call_on_episode_end",
    "count_env_steps_sampled",
    "keep_done_episodes_for_metrics",
    "keep_ongoing_chunk_for_metrics",
    "needs_env_reset",
    "ongoing_episodes",
    "pulls_state_from_server",
    "request_env_reset",
    "reset_envs_and_episodes",
    "runner_cached_obs",
    "runner_callbacks",
    "runner_device",
    "runner_weights_seq_no",
    "set_ongoing_episodes",
    "set_runner_cached_obs",
    "set_runner_device",
    "set_runner_weights_seq_no",
    "set_time_after_sampling",
    "time_after_sampling",
]


def runner_callbacks(runner) -> List[RLlibCallback]:
    """The callback objects the EnvRunner built from `config.callbacks(...)`
    (kept as `_callbacks`): the ones RLlib's loop calls per episode event."""
    return runner._callbacks


def runner_device(runner) -> torch.device:
    """The device the EnvRunner's RLModule runs on, where RLlib's
    `NumpyToTensor` connector puts the module's inputs (kept as `_device`)."""
    return runner._device


def set_runner_device(runner, device: torch.device) -> None:
    """Moves the EnvRunner's RLModule to `device` and records it as the
    module's device (`runner_device`). RLlib's connector pipelines keep the
    device they were built with: only a loop that puts the module's inputs on
    `runner_device` itself (this package's fast sampling) may act there."""
    runner.module.to(device)
    runner._device = torch.device(device)


def runner_cached_obs(runner) -> torch.Tensor:
    """The RLModule's input for the envs' current observations: what the
    env-to-module pipeline computed after the last reset or step (a finished
    episode's last observation included) and RLlib's loop feeds to the next
    forward pass (kept as `_cached_to_module`, a batch dict)."""
    return runner._cached_to_module[Columns.OBS]


def set_runner_cached_obs(runner, obs: torch.Tensor) -> None:
    """Leaves `obs` as the RLModule's input for the envs' current
    observations, for the next `sample()` call (either loop's) to start from.
    """
    runner._cached_to_module = {Columns.OBS: obs}


def needs_env_reset(runner) -> bool:
    """Whether the next `sample()` call resets the envs first (kept as
    `_needs_initial_reset`: set at construction, after an env is recreated and
    after an episode-count `sample()` call)."""
    return runner._needs_initial_reset


def request_env_reset(runner) -> None:
    """Makes the next `sample()` call reset the envs first, as RLlib's loop
    does after sampling a number of episodes."""
    runner._needs_initial_reset = True


def reset_envs_and_episodes(runner, explore: bool) -> None:
    """Resets the envs and starts a new episode in each sub-env as RLlib's
    loop does (`_reset_envs_and_episodes`): new ongoing episodes holding the
    reset observations, the module input cached for them, the chunks kept for
    metrics dropped and `needs_env_reset` cleared."""
    runner._reset_envs_and_episodes(explore)


def ongoing_episodes(runner) -> List[SingleAgentEpisode]:
    """The episodes the sub-envs are in, one per sub-env (kept as
    `_ongoing_episodes`); RLlib's loop adds each step to them in place."""
    return runner._ongoing_episodes


def set_ongoing_episodes(runner, episodes: List[SingleAgentEpisode]) -> None:
    """Makes `episodes` (one per sub-env) the ones the next `sample()` call
    continues: the continuations of the chunks a timestep call hands back."""
    runner._ongoing_episodes = episodes


def keep_done_episodes_for_metrics(runner, episodes: List[SingleAgentEpisode]) -> None:
    """Keeps finished episodes for the next `get_metrics()` call, which logs
    their returns and lengths (kept in `_done_episodes_for_metrics`)."""
    runner._done_episodes_for_metrics.extend(episodes)


def keep_ongoing_chunk_for_metrics(runner, chunk: SingleAgentEpisode) -> None:
    """Keeps a handed-back chunk of an ongoing episode: `get_metrics()` adds
    its return and length to the episode's once it ends, and the episode's
    `on_episode_end` callback receives it as one of `prev_episode_chunks`
    (kept in `_ongoing_episodes_for_metrics`, by episode id)."""
    runner._ongoing_episodes_for_metrics[chunk.id_].append(chunk)


def call_on_episode_end(
    runner, env_index: int, episodes: List[SingleAgentEpisode]
) -> None:
    """Makes the `on_episode_end` callbacks for sub-env `env_index`'s episode
    with the arguments RLlib's loop passes (`_make_on_episode_callback`)."""
    runner._make_on_episode_callback("on_episode_end", env_index, episodes)


def runner_weights_seq_no(runner) -> int:
    """The sequence number of the weights the RLModule holds (kept as
    `_weights_seq_no`, set by `set_state()`); RLlib's loop stores it with
    every step and logs it per `sample()` call."""
    return runner._weights_seq_no


def set_runner_weights_seq_no(runner, seq_no: int) -> None:
    """Tells a local EnvRunner it acts with the weights of sequence number
    `seq_no`, as RLlib's weight sync does when it brings them (for an
    EnvRunner whose module already holds those weights, so that no copy is
    made); see `runner_weights_seq_no`."""
    runner._weights_seq_no = seq_no


def pulls_state_from_server(runner) -> bool:
    """Whether `sample()` first pulls newer weights from an
    `EnvRunnerStateServer` (`config.use_env_runner_state_server`; the handle
    the Algorithm sets is kept as `_env_runner_state_server`)."""
    return runner._env_runner_state_server is not None


def time_after_sampling(runner) -> Optional[float]:
    """When the last `sample()` call returned (`time.perf_counter()`), or None
    before the first (kept as `_time_after_sampling`); the next call logs the
    time in between."""
    return runner._time_after_sampling


def set_time_after_sampling(runner, seconds: float) -> None:
    """Records when a `sample()` call returned (`time.perf_counter()`)."""
    runner._time_after_sampling = seconds


def count_env_steps_sampled(runner, num_steps: int) -> None:
    """Adds `num_steps` (> 0) to Ray's Prometheus counter of the env steps this
    EnvRunner sampled, as RLlib's loop does per `sample()` call
    (`_log_env_steps` on `_metrics_num_env_steps_sampled`)."""
    runner._log_env_steps(
        metric=runner._metrics_num_env_steps_sampled, num_steps=num_steps
    )
