"""Training-step pieces shared by our replay algorithms (the columnar DQN/SAC
step of `columnar_replay` and ACER), in the manner of RLlib's
`execution/rollout_ops.py`: each does what RLlib's own DQN training step does at
that point, with the same timers and metric keys."""

from __future__ import annotations

from typing import Any, List

from ray.rllib.utils.metrics import (
    ALL_MODULES,
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    REPLAY_BUFFER_ADD_DATA_TIMER,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
)

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
