"""Pieces of ACER's training step, in the manner of RLlib's
`execution/rollout_ops.py`: each does what RLlib's own DQN training step does at
that point, with the same timers and metric keys (sampling into the buffer,
syncing the EnvRunners' weights, taking the Learners' replay feedback out of
their results). The DQN/SAC replay loop (`replay_loop`) has its own."""

from __future__ import annotations

from typing import Any, List

import numpy as np
from ray.rllib.utils.metrics import (
    ALL_MODULES,
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    REPLAY_BUFFER_ADD_DATA_TIMER,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TD_ERROR_KEY,
    TIMERS,
)
from ray.rllib.utils.numpy import convert_to_numpy

from rllib_ners.seam.algorithm import sample_episodes_and_metrics


def sample_into_buffer(algo, buffer) -> List[Any]:
    """Samples one round from `algo`'s EnvRunners, logs their metrics and adds
    the episodes to `buffer`. Returns the episodes."""
    with algo.metrics.log_time((TIMERS, ENV_RUNNER_SAMPLING_TIMER)):
        episodes, env_runner_results = sample_episodes_and_metrics(
            algo.env_runner_group, sample_timeout_s=algo.config.sample_timeout_s
        )
    algo.metrics.aggregate(env_runner_results, key=ENV_RUNNER_RESULTS)
    with algo.metrics.log_time((TIMERS, REPLAY_BUFFER_ADD_DATA_TIMER)):
        buffer.add(episodes)
    return episodes


def sync_env_runner_weights(algo, learner_results) -> None:
    """Sends the updated modules (those in one Learner update's `learner_results`,
    a list with one result dict per Learner) to `algo`'s EnvRunners."""
    with algo.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER)):
        algo.env_runner_group.sync_weights(
            from_worker_or_learner_group=algo.learner_group,
            policies=set(learner_results[0].keys()) - {ALL_MODULES},
            inference_only=True,
        )


def pop_replay_feedback(learner_results) -> Any:
    """The packed replay feedback the Learners logged under RLlib's TD-error
    key (TD errors, or NERS's `[score, delta, q, sample_position]` rows:
    `rllib_ners.replay_buffers.feedback`), concatenated Learner by Learner,
    and removed from the results so that they are never logged. None if no
    Learner logged any."""
    rows = [
        item
        for result in learner_results
        for module_results in result.values()
        if isinstance(module_results, dict) and TD_ERROR_KEY in module_results
        for item in _logged_arrays(module_results.pop(TD_ERROR_KEY))
    ]
    return np.concatenate(rows) if rows else None


def _logged_arrays(stats) -> List[np.ndarray]:
    """The values logged into an RLlib 2.60 item-series stat, one array each.

    Read from `stats.items`, not `peek()`: peek() turns the logged tensors into
    nested Python lists (`tolist()`), element by element, about 10 ms per
    update for a batch of 256 NERS rows. The items are the same values.
    """
    items = getattr(stats, "items", None)
    if items is None:
        items = stats.peek()
    return [np.asarray(convert_to_numpy(item)) for item in items]
