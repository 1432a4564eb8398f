"""RLlib's `Algorithm` and `LearnerGroup`: the internals a training step uses.

Our training loop (`rllib_ners.algorithms.common.training.replay_loop`) makes the
Algorithm's rounds of sampling and updates with less bookkeeping than RLlib's
`training_step()`: it samples the EnvRunners as RLlib's DQN does, updates a
local Learner directly, tells a local EnvRunner which weights it acts with and
observes Ray's update-time histogram once per iteration. Our Algorithms also
build their replay buffer through the hook RLlib's `setup()` calls. Each piece
is pinned by `tests/rllib_contract/test_seam_algorithm.py`.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.execution.rollout_ops import synchronous_parallel_sample
from ray.rllib.utils.annotations import override

from rllib_ners.utils.mixin_order import PrecedesInBases

__all__ = [
    "LocalReplayBufferHook",
    "local_learner_of",
    "observe_learner_update_time",
    "sample_episodes",
    "sample_episodes_and_metrics",
]


def local_learner_of(learner_group) -> Optional[Any]:
    """The `Learner` of a local `learner_group` (None when the Learners are
    remote actors).

    `LearnerGroup.foreach_learner()` reaches it too, wrapping each call's
    result; an update per env step calls it directly. RLlib keeps it as
    `_learner`."""
    return learner_group._learner


def observe_learner_update_time(learner_group, seconds: float) -> None:
    """Records one Learner update time in Ray's Prometheus histogram of
    `learner_group` (`LearnerGroup.update()` observes it once per call; RLlib
    keeps it as `_metrics_update_time`)."""
    learner_group._metrics_update_time.observe(seconds)


def sample_episodes(env_runner_group, *, sample_timeout_s: Optional[float]) -> List:
    """One rollout fragment from every EnvRunner of `env_runner_group`, as one
    list of episodes: what RLlib's DQN training step samples (through
    `synchronous_parallel_sample`, whose new-stack switches are private)."""
    return synchronous_parallel_sample(
        worker_set=env_runner_group,
        concat=True,
        sample_timeout_s=sample_timeout_s,
        _uses_new_env_runners=True,
        _return_metrics=False,
    )


def sample_episodes_and_metrics(
    env_runner_group, *, sample_timeout_s: Optional[float]
) -> Tuple[List, List]:
    """`sample_episodes()` plus the EnvRunners' metrics of the round, one dict
    per EnvRunner (to aggregate under `ENV_RUNNER_RESULTS`)."""
    return synchronous_parallel_sample(
        worker_set=env_runner_group,
        concat=True,
        sample_timeout_s=sample_timeout_s,
        _uses_new_env_runners=True,
        _return_metrics=True,
    )


class LocalReplayBufferHook(PrecedesInBases, precedes=Algorithm):
    """For `Algorithm` subclasses, ahead of the RLlib algorithm class:
    `Algorithm.setup()` takes the local replay buffer from
    `create_local_replay_buffer(config)` (which the subclass defines: the
    buffer, or None for none).

    RLlib builds it in its private `_create_local_replay_buffer_if_necessary`,
    whose buffer settings ours cannot pass (a class as `type`, a seed)."""

    def create_local_replay_buffer(self, config) -> Optional[Any]:
        """The local replay buffer for `config`, or None (here: RLlib's)."""
        return super()._create_local_replay_buffer_if_necessary(config)

    @override(Algorithm)
    def _create_local_replay_buffer_if_necessary(self, config) -> Optional[Any]:
        return self.create_local_replay_buffer(config)
