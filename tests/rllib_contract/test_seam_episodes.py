"""Contract of `rllib_ners.seam.episodes`: episodes written slot by slot equal
the ones RLlib's own calls build."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rllib_ners.seam.episodes import (
    ONE_STEP_EPISODE_SLOTS,
    REWARDS_SPACE,
    OneStepEpisodeBuilder,
    append_steps,
)

OBS_SPACE = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACTION_SPACE = gym.spaces.Discrete(4)


def _fail(what_changed: str) -> str:
    return f"RLlib changed: {what_changed}. Adapt rllib_ners/seam/episodes.py."


def _reset_episode() -> SingleAgentEpisode:
    episode = SingleAgentEpisode(observation_space=OBS_SPACE, action_space=ACTION_SPACE)
    episode.add_env_reset(observation=np.zeros(3, np.float32), infos={"reset": 1})
    return episode


def _assert_same_episode(ours: SingleAgentEpisode, rllib: SingleAgentEpisode):
    for name in ("observations", "infos", "actions", "rewards"):
        assert getattr(ours, name) == getattr(rllib, name), _fail(
            f"the InfiniteLookbackBuffer of `{name}`"
        )
    assert ours.extra_model_outputs.keys() == rllib.extra_model_outputs.keys()
    for key, buffer in ours.extra_model_outputs.items():
        assert buffer == rllib.extra_model_outputs[key], key
    for name in ("t", "t_started", "is_terminated", "is_truncated"):
        assert getattr(ours, name) == getattr(rllib, name), name


def test_the_rewards_space_is_the_one_every_episode_uses():
    episode = _reset_episode()
    assert episode.rewards.space == REWARDS_SPACE, _fail(
        "single_agent_episode._REWARDS_BOX_SPACE is no longer the rewards' space"
    )


def test_append_steps_equals_one_add_env_step_per_step():
    rng = np.random.default_rng(0)
    steps = [
        {
            "observation": rng.random(3).astype(np.float32),
            "action": int(rng.integers(4)),
            "reward": float(rng.random()),
            "infos": {"k": k},
            "extra_model_outputs": {"action_logp": np.float32(-k)},
        }
        for k in range(5)
    ]
    rllib = _reset_episode()
    for k, step in enumerate(steps):
        rllib.add_env_step(terminated=k == len(steps) - 1, **step)

    ours = _reset_episode()
    append_steps(
        ours,
        observations=[],
        actions=[],
        rewards=[],
        infos=[],
        extra_model_outputs={},
        terminated=False,
        truncated=False,
    )
    assert ours.t == 0  # no steps: the episode is left alone
    append_steps(
        ours,
        observations=[s["observation"] for s in steps],
        actions=[s["action"] for s in steps],
        rewards=[s["reward"] for s in steps],
        infos=[s["infos"] for s in steps],
        extra_model_outputs={
            "action_logp": [s["extra_model_outputs"]["action_logp"] for s in steps]
        },
        terminated=True,
        truncated=False,
    )
    _assert_same_episode(ours, rllib)
    ours.validate()
    # The episode goes on as RLlib's would: the state `add_env_step` reads.
    np.testing.assert_array_equal(ours.get_observations(-1), rllib.get_observations(-1))
    assert ours.get_infos(-1) == rllib.get_infos(-1)
    assert ours.get_duration_s() >= 0.0


def test_an_episode_with_appended_steps_is_cut_as_rllib_cuts_it():
    rllib, ours = _reset_episode(), _reset_episode()
    observations = [np.full(3, k, np.float32) for k in range(1, 4)]
    for k, observation in enumerate(observations):
        rllib.add_env_step(observation=observation, action=k, reward=1.0, infos={})
    append_steps(
        ours,
        observations=observations,
        actions=[0, 1, 2],
        rewards=[1.0] * 3,
        infos=[{}] * 3,
        extra_model_outputs={},
        terminated=False,
        truncated=False,
    )
    ours_next, rllib_next = (
        ours.cut(len_lookback_buffer=2),
        rllib.cut(len_lookback_buffer=2),
    )
    _assert_same_episode(ours_next, rllib_next)
    assert ours_next.id_ == ours.id_


def test_one_step_episodes_equal_what_the_episode_constructor_builds():
    assert set(SingleAgentEpisode.__slots__) == ONE_STEP_EPISODE_SLOTS, _fail(
        "SingleAgentEpisode's __slots__"
    )
    arguments = {
        "observations": [np.zeros(3, np.float32), np.ones(3, np.float32)],
        "infos": [{"a": 1}, {}],
        "terminated": True,
        "truncated": False,
        "t_started": 7,
        "id_": "x",
        "agent_id": "a0",
        "module_id": "m0",
        "multi_agent_episode_id": "ma",
    }
    extra = {"weights": [np.float32(0.5)], "n_step": [np.int64(3)]}
    (ours,) = OneStepEpisodeBuilder(OBS_SPACE, ACTION_SPACE).build(
        ids=["x"],
        observations=arguments["observations"][:1],
        next_observations=arguments["observations"][1:],
        infos=[arguments["infos"]],
        actions=[np.int64(2)],
        rewards=[1.5],
        terminateds=[True],
        truncateds=[False],
        t_starteds=[7],
        extra_model_outputs=extra,
        agent_ids=["a0"],
        module_ids=["m0"],
        multi_agent_episode_ids=["ma"],
    )
    rllib = SingleAgentEpisode(
        observation_space=OBS_SPACE,
        action_space=ACTION_SPACE,
        actions=[np.int64(2)],
        rewards=[1.5],
        extra_model_outputs=extra,
        len_lookback_buffer=0,
        **arguments,
    )
    for name in ("id_", "agent_id", "module_id", "multi_agent_episode_id"):
        assert getattr(ours, name) == getattr(rllib, name), name
    assert ours.observation_space == rllib.observation_space
    assert ours.action_space == rllib.action_space
    _assert_same_episode(ours, rllib)
    ours.validate()
    assert len(ours) == 1
    np.testing.assert_array_equal(
        ours.to_numpy().get_observations(), rllib.to_numpy().get_observations()
    )
