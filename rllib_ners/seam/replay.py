"""RLlib's episode replay buffers: the metric hooks our buffers log through.

RLlib's `EpisodeReplayBuffer` logs its add and sample metrics inside every
`add()` and `sample()` call, through `_update_add_metrics` and
`_update_sample_metrics`: they write RLlib's metric keys (lifetime sums, per
agent and module, the stored counts smoothed over
`metrics_num_episodes_for_smoothing`) into the buffer's `metrics` logger.
Our buffers count between reports and log once per `get_metrics()`, through
these same methods, so that their metrics are RLlib's. Pinned by
`tests/rllib_contract/test_seam_replay.py`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["log_add_metrics", "log_sample_metrics"]


def log_add_metrics(buffer, **counts: Any) -> None:
    """Logs what `add()` calls brought and evicted into `buffer.metrics`, as
    RLlib's buffers do after each `add()`: `counts` are the keyword arguments
    of RLlib's `EpisodeReplayBuffer._update_add_metrics` (`num_episodes_added`,
    `agent_to_num_steps_evicted`, ...). Also logs `buffer`'s stored episodes
    and steps (`get_num_episodes()`, `get_num_timesteps()`)."""
    buffer._update_add_metrics(**counts)


def log_sample_metrics(buffer, **counts: Any) -> None:
    """Logs what `sample()` calls drew into `buffer.metrics`, as RLlib's
    buffers do after each `sample()`: `counts` are the keyword arguments of
    RLlib's `EpisodeReplayBuffer._update_sample_metrics`
    (`num_env_steps_sampled`, `module_to_sampled_n_step`, ...)."""
    buffer._update_sample_metrics(**counts)
