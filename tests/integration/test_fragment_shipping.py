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

from rllib_ners.algorithms.common.training import fragment_shipping, replay_loop
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
            "buffer": _with_canonical_episode_ids(algo.local_replay_buffer.get_state()),
            "weights": module,
            # One more round's fragments, as the training loop receives them.
            "received": algo._sample_episodes(),
            "spaces": algo.spaces[INPUT_ENV_SINGLE_SPACES],
        }
    finally:
        algo.stop()


def test_packed_fragments_train_as_the_episodes_do(small_sac, monkeypatch):
    """NERS-SAC on Pendulum (float actions, the module's extra outputs, the
    NERS buffer) with two remote EnvRunners, two iterations, once shipping
    packed fragments and once episodes."""
    # Iterations end after their env steps only (SAC's also after a second).
    config = small_sac(num_env_runners=2).reporting(min_time_s_per_iteration=0)
    packed = _train(config)
    assert packed["packing_blocker"] is None
    assert [type(item) for item in packed["received"]] == [PackedFragments] * 2
    assert [len(item) for item in packed["received"]] == [4, 4]
    for item in packed["received"]:
        assert (item.observation_space, item.action_space) == packed["spaces"]

    monkeypatch.setattr(replay_loop, "fragment_packing_blocker", lambda algo: BLOCKED)
    episodes = _train(config)
    assert episodes["packing_blocker"] == BLOCKED
    assert {type(item).__name__ for item in episodes["received"]} == {
        "SingleAgentEpisode"
    }
    assert packed["buffer"]["_num_timesteps_added"] >= 800
    assert_same_state(packed["buffer"], episodes["buffer"], "buffer")
    assert_same_state(packed["weights"], episodes["weights"], "weights")


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
