"""Contract of `rllib_ners.seam.algorithm`: Algorithm and LearnerGroup internals.

One small DQN Algorithm (a local EnvRunner and a local Learner) is built once
for the whole module and used by every test.
"""

from __future__ import annotations

import inspect

import pytest
import ray
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.dqn import DQN, DQNConfig
from ray.rllib.core.learner.learner_group import LearnerGroup
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.replay_buffers import EpisodeReplayBuffer

from rllib_ners.seam.algorithm import (
    LocalReplayBufferHook,
    local_learner_of,
    observe_learner_update_time,
    sample_episodes,
    sample_episodes_and_metrics,
)

FRAGMENT = 8


def _fail(what_changed: str) -> str:
    return f"RLlib changed: {what_changed}. Adapt rllib_ners/seam/algorithm.py."


class _HookedDQN(LocalReplayBufferHook, DQN):
    """RLlib's DQN whose buffer comes from `create_local_replay_buffer`."""

    buffers_built = []

    def create_local_replay_buffer(self, config):
        buffer = super().create_local_replay_buffer(config)  # RLlib's buffer
        type(self).buffers_built.append(buffer)
        return buffer


@pytest.fixture(scope="module")
def algo():
    config = (
        DQNConfig(algo_class=_HookedDQN)
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0, rollout_fragment_length=FRAGMENT)
        .learners(num_learners=0)
        .debugging(seed=0)
    )
    ray_was_running = ray.is_initialized()
    algo = config.build_algo()
    yield algo
    algo.stop()
    if not ray_was_running:
        ray.shutdown()  # building the Algorithm started Ray


def test_setup_builds_the_replay_buffer_through_the_hook(algo):
    assert _HookedDQN.buffers_built, _fail(
        "Algorithm.setup no longer builds the replay buffer through "
        "_create_local_replay_buffer_if_necessary"
    )
    assert algo.local_replay_buffer is _HookedDQN.buffers_built[-1]
    assert isinstance(algo.local_replay_buffer, EpisodeReplayBuffer), _fail(
        "Algorithm._create_local_replay_buffer_if_necessary no longer builds "
        "the config's buffer"
    )
    # RLlib marks the buffers it builds by passing this kwarg; the NERS buffer
    # tells a stock algorithm's build from a hand-made buffer by it.
    hook = Algorithm._create_local_replay_buffer_if_necessary
    assert "metrics_num_episodes_for_smoothing" in inspect.getsource(hook), _fail(
        "Algorithm no longer passes metrics_num_episodes_for_smoothing to episode "
        "buffers (adapt rllib_ners/replay_buffers/ners_episode_buffer.py too)"
    )


def test_local_learner_of_is_the_learner_foreach_learner_reaches(algo):
    group = algo.learner_group
    assert group.is_local
    reached = next(iter(group.foreach_learner(lambda learner: learner))).get()
    assert local_learner_of(group) is reached, _fail(
        "LearnerGroup no longer keeps its local Learner as _learner"
    )


def test_observe_learner_update_time_feeds_the_update_histogram(algo, monkeypatch):
    from ray.util.metrics import Histogram

    assert "_metrics_update_time" in inspect.getsource(LearnerGroup.update), _fail(
        "LearnerGroup.update no longer observes _metrics_update_time"
    )
    histogram = algo.learner_group._metrics_update_time
    assert isinstance(histogram, Histogram)
    observed = []
    monkeypatch.setattr(histogram, "observe", observed.append)
    observe_learner_update_time(algo.learner_group, 0.001)
    assert observed == [0.001]


def test_sample_episodes_samples_one_fragment(algo):
    episodes = sample_episodes(algo.env_runner_group, sample_timeout_s=60.0)
    assert all(isinstance(e, SingleAgentEpisode) for e in episodes), _fail(
        "synchronous_parallel_sample(_uses_new_env_runners=True, "
        "_return_metrics=False) no longer returns the episodes"
    )
    assert sum(len(e) for e in episodes) == FRAGMENT
    episodes, metrics = sample_episodes_and_metrics(
        algo.env_runner_group, sample_timeout_s=60.0
    )
    assert sum(len(e) for e in episodes) == FRAGMENT, _fail(
        "synchronous_parallel_sample(..., _return_metrics=True) no longer returns "
        "(episodes, metrics)"
    )
    assert isinstance(metrics, list) and all(isinstance(m, dict) for m in metrics)
