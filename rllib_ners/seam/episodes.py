"""RLlib's `SingleAgentEpisode`: its slots, written in bulk.

RLlib grows an episode one `add_env_step()` call at a time and builds one
through a constructor that validates every argument; both cost tens of
microseconds per step or episode, most of a fast sampling loop's or a drop-in
`sample()`'s time. The functions here leave an episode exactly as those calls
would (contract tests in `tests/rllib_contract/test_seam_episodes.py` build
both and compare them), writing the episode's private slots directly.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Sequence

from ray.rllib.env.single_agent_episode import (
    _REWARDS_BOX_SPACE as REWARDS_SPACE,  # the rewards' space of every episode
)
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.env.utils.infinite_lookback_buffer import InfiniteLookbackBuffer
from ray.rllib.utils.spaces.space_utils import get_base_struct_from_space

__all__ = [
    "ONE_STEP_EPISODE_SLOTS",
    "REWARDS_SPACE",
    "OneStepEpisodeBuilder",
    "append_steps",
]


def append_steps(
    episode: SingleAgentEpisode,
    *,
    observations: Sequence[Any],
    actions: Sequence[Any],
    rewards: Sequence[Any],
    infos: Sequence[Dict],
    extra_model_outputs: Dict[str, Sequence[Any]],
    terminated: bool,
    truncated: bool,
) -> None:
    """Adds steps to a reset `episode` as `len(rewards)` calls of
    `episode.add_env_step()` would: the observations, actions, rewards, infos
    and extra model outputs of each step (the observation and infos being
    those after the step), the episode's `t`, its done flags and its clock."""
    num_steps = len(rewards)
    if num_steps == 0:
        return
    episode.observations.data.extend(observations)
    episode.infos.data.extend(infos)
    episode.actions.data.extend(actions)
    episode.rewards.data.extend(rewards)
    for key, values in extra_model_outputs.items():
        buffer = episode.extra_model_outputs.get(key)
        if buffer is None:
            episode.extra_model_outputs[key] = InfiniteLookbackBuffer(list(values))
        else:
            buffer.data.extend(values)
    episode.t += num_steps
    episode.is_terminated = bool(terminated)
    episode.is_truncated = bool(truncated)
    episode._last_added_observation = observations[-1]
    episode._last_added_infos = infos[-1]
    episode._last_step_time = time.perf_counter()
    if episode._start_time is None:
        episode._start_time = episode._last_step_time


# The slots `OneStepEpisodeBuilder` sets: all of `SingleAgentEpisode.__slots__`
# (a contract test checks RLlib's list).
ONE_STEP_EPISODE_SLOTS = frozenset(
    (
        "actions",
        "agent_id",
        "extra_model_outputs",
        "id_",
        "infos",
        "is_terminated",
        "is_truncated",
        "module_id",
        "multi_agent_episode_id",
        "observations",
        "rewards",
        "t",
        "t_started",
        "_action_space",
        "_last_added_observation",
        "_last_added_infos",
        "_last_step_time",
        "_observation_space",
        "_start_time",
        "_custom_data",
    )
)


class OneStepEpisodeBuilder:
    """Builds 1-step `SingleAgentEpisode`s `(o, a, r, o')` cheaply.

    `SingleAgentEpisode(...)` spends ~20 us per call on argument handling,
    space lookups and validation. `build()` sets the same slots to the same
    values (lookback buffers included), each space's struct looked up once per
    builder.
    """

    def __init__(self, observation_space, action_space):
        def with_struct(space):
            return space, get_base_struct_from_space(space)

        self.observations = with_struct(observation_space)
        self.actions = with_struct(action_space)
        self.rewards = with_struct(REWARDS_SPACE)
        self.no_space = with_struct(None)

    def build(
        self,
        *,
        ids: List[str],
        observations: list,
        next_observations: list,
        infos: list,
        actions: list,
        rewards: list,
        terminateds: list,
        truncateds: list,
        t_starteds: list,
        extra_model_outputs: Dict[str, list],
        agent_ids: list,
        module_ids: list,
        multi_agent_episode_ids: list,
    ) -> List[SingleAgentEpisode]:
        """One episode per item: `(o, o')`, infos `[i, i']`, one action and
        reward, the done flags, `t_started`, each extra model output's value
        and the item's identity (`id_`, `agent_id`, `module_id`,
        `multi_agent_episode_id`)."""
        new_episode = SingleAgentEpisode.__new__
        new_buffer = InfiniteLookbackBuffer.__new__
        obs_space, obs_struct = self.observations
        action_space, action_struct = self.actions
        reward_space, reward_struct = self.rewards
        no_space, no_struct = self.no_space

        def buffer(data, space=no_space, struct=no_struct):
            # What InfiniteLookbackBuffer(data=data, lookback=0, space=...) sets.
            b = new_buffer(InfiniteLookbackBuffer)
            b.data, b.lookback, b.finalized = data, 0, False
            b._space, b._space_struct = space, struct
            return b

        extras = list(extra_model_outputs.items())
        episodes = []
        for i, t_started in enumerate(t_starteds):
            e = new_episode(SingleAgentEpisode)
            e.id_ = ids[i]
            e.agent_id = agent_ids[i]
            e.module_id = module_ids[i]
            e.multi_agent_episode_id = multi_agent_episode_ids[i]
            e.observations = buffer(
                [observations[i], next_observations[i]], obs_space, obs_struct
            )
            e._observation_space = obs_space
            e.infos = buffer(infos[i])
            e.actions = buffer([actions[i]], action_space, action_struct)
            e._action_space = action_space
            e.rewards = buffer([rewards[i]], reward_space, reward_struct)
            e.is_terminated = terminateds[i]
            e.is_truncated = truncateds[i]
            e.extra_model_outputs = {key: buffer([values[i]]) for key, values in extras}
            e.t_started = t_started
            e.t = t_started + 1
            e._custom_data = {}
            e._start_time = e._last_step_time = None
            e._last_added_observation = e._last_added_infos = None
            episodes.append(e)
        return episodes
