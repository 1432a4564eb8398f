"""Remote EnvRunners ship their fragments packed (`fragment_shipping`): our
training loop trains as it does with RLlib's episodes, to the same buffer
(every array, the priorities, the NERS memory) and the same weights; configs
the packed form cannot serve ship episodes and say why. The packing itself:
`tests/unit/test_packed_fragments.py`; overlapped sampling and killed
EnvRunners with packed fragments: `test_overlapped_sampling.py`,
`test_faults.py`.
"""

import re
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
from ray.rllib.env import INPUT_ENV_SINGLE_SPACES
from resume_cases import assert_same_state

from rllib_ners.algorithms.common import fragment_shipping, replay_loop
from rllib_ners.replay_buffers import (
    FastPrioritizedEpisodeReplayBuffer,
    NERSEpisodeReplayBuffer,
)
from rllib_ners.replay_buffers.packed_fragments import PackedFragments

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_session")]
RAY_NUM_CPUS = 3  # for the conftest's `ray_session`

BLOCKED = "blocked by the test"


_EPISODE_ID = re.compile(r"^[0-9a-f]{32}$")


def _with_canonical_episode_ids(state, names=None):
    """`state` with RLlib's random episode ids (uuid4 hex) renamed in the order
    they are first met (the same in two runs that store alike)."""
    names = {} if names is None else names

    def rename(value):
        if isinstance(value, str) and _EPISODE_ID.match(value):
            return names.setdefault(value, f"episode-{len(names)}")
        return _with_canonical_episode_ids(value, names)

    if isinstance(state, dict):
        return {rename(key): rename(value) for key, value in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(rename(value) for value in state)
    if isinstance(state, np.ndarray) and state.dtype == object:
        renamed = np.empty_like(state)
        renamed[...] = [rename(value) for value in state.ravel()]
        return renamed
    return state


def _train(config, iterations=2):
    algo = config.build_algo()
    try:
        for _ in range(iterations):
            algo.train()
        module = algo.learner_group.get_state()["learner"]["rl_module"]
        return {
            "packing_blocker": algo.fragment_packing_blocker,
            "buffer": _with_canonical_episode_ids(
                algo.local_replay_buffer.get_state()
            ),
            "weights": module,
        }
    finally:
        algo.stop()


@pytest.mark.parametrize("algorithm", ["ners_dqn", "ners_sac"])
def test_packed_fragments_train_as_the_episodes_do(
    algorithm, small_dqn, small_sac, monkeypatch
):
    """Two remote EnvRunners, two iterations (CartPole NERS-DQN: a discrete
    action, NERS's buffer; Pendulum NERS-SAC: float actions and the module's
    extra outputs), once shipping packed fragments and once episodes."""
    build = small_dqn if algorithm == "ners_dqn" else small_sac
    # Iterations end after their env steps only (SAC's also after a second).
    config = build(num_env_runners=2).reporting(min_time_s_per_iteration=0)
    packed = _train(config)
    assert packed["packing_blocker"] is None
    monkeypatch.setattr(replay_loop, "fragment_packing_blocker", lambda algo: BLOCKED)
    episodes = _train(config)
    assert episodes["packing_blocker"] == BLOCKED
    assert packed["buffer"]["_num_timesteps_added"] >= 800
    assert_same_state(packed["buffer"], episodes["buffer"], "buffer")
    assert_same_state(packed["weights"], episodes["weights"], "weights")


def test_remote_env_runners_send_packed_fragments(small_dqn):
    algo = small_dqn(num_env_runners=2).build_algo()
    try:
        received = algo._sample_episodes()
        assert [type(item) for item in received] == [PackedFragments] * 2
        assert [len(item) for item in received] == [4, 4]
        observation_space, action_space = algo.spaces[INPUT_ENV_SINGLE_SPACES]
        for item in received:
            assert item.observation_space == observation_space
            assert item.action_space == action_space
    finally:
        algo.stop()


def _algo(buffer, *, multi_agent=False, spaces=True):
    single = (gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2))
    return SimpleNamespace(
        config=SimpleNamespace(is_multi_agent=multi_agent),
        local_replay_buffer=buffer,
        spaces={INPUT_ENV_SINGLE_SPACES: single} if spaces else {},
    )


class _OwnAdd(FastPrioritizedEpisodeReplayBuffer):
    def add(self, episodes, weight=None):
        super().add(episodes, weight)


@pytest.mark.parametrize(
    "algo, reason",
    [
        (_algo(NERSEpisodeReplayBuffer(10)), None),
        (
            _algo(FastPrioritizedEpisodeReplayBuffer(10), multi_agent=True),
            "multi-agent",
        ),
        (_algo(_OwnAdd(10)), "_OwnAdd overrides add()"),
        (_algo(FastPrioritizedEpisodeReplayBuffer(10), spaces=False), "no env spaces"),
    ],
)
def test_what_ships_episodes_instead_and_why(algo, reason):
    blocker = fragment_shipping.fragment_packing_blocker(algo)
    if reason is None:
        assert blocker is None
    else:
        assert reason in blocker
