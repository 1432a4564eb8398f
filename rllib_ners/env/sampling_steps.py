"""The steps of `FastSingleAgentEnvRunner`'s sampling loop that need no EnvRunner.

Each piece computes what one of RLlib's default connectors or one of its
per-step episode calls computes, for the whole batch of sub-envs at once:

* `actions_from_module_output`: `GetActions`, drawing actions from the
  module's action distribution when the module returned only its inputs;
* `EnvActions`: `NormalizeAndClipActions`, the actions as the env takes them;
* `SubEnvSteps`, `record_sub_env_steps`, `write_unwritten_steps`: the
  `add_env_reset()` / `add_env_step()` calls, with the steps kept in lists and
  written into RLlib's `SingleAgentEpisode`s in bulk;
* `push_frames`: RLlib's `FrameStackingEnvToModule` (Atari's k-frame stacks),
  the stacks kept from step to step instead of rebuilt from the episodes.

Each is tested equal to RLlib's loop in `tests/integration/test_fast_env_runner.py`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import gymnasium as gym
import numpy as np
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchSquashedGaussian
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO
from ray.rllib.utils.spaces.space_utils import unsquash_action

from rllib_ners.seam.episodes import append_steps
from rllib_ners.utils.action_sampling import squashed_gaussian_sample_and_logp

__all__ = [
    "EnvActions",
    "SubEnvSteps",
    "actions_from_module_output",
    "push_frames",
    "record_sub_env_steps",
    "write_unwritten_steps",
]


def actions_from_module_output(
    module, out: Dict[str, Any], explore: bool
) -> Dict[str, Any]:
    """`GetActions`: `out` with actions (and their log-probabilities) drawn
    from the module's action distribution, when the module returned only the
    distribution's inputs; `out` as it is when it holds actions already."""
    if Columns.ACTIONS in out or Columns.ACTION_DIST_INPUTS not in out:
        return out
    if explore:
        dist_class = module.get_exploration_action_dist_cls()
    else:
        dist_class = module.get_inference_action_dist_cls()
    if explore and dist_class is TorchSquashedGaussian:
        # SAC: the same draw and log-probability without the objects.
        actions, logp = squashed_gaussian_sample_and_logp(
            out[Columns.ACTION_DIST_INPUTS]
        )
        out[Columns.ACTIONS] = actions
        out.setdefault(Columns.ACTION_LOGP, logp)
        return out
    dist = dist_class.from_logits(out[Columns.ACTION_DIST_INPUTS])
    if not explore:
        dist = dist.to_deterministic()
    actions = dist.sample()
    out[Columns.ACTIONS] = actions
    if Columns.ACTION_LOGP not in out:
        out[Columns.ACTION_LOGP] = dist.logp(actions)
    return out


class EnvActions:
    """`NormalizeAndClipActions` for one sub-env action space, on the whole
    batch of actions at once: the same element-wise maps over a Box (a
    Discrete space passes through).

    The space's bounds are inspected once, at construction.
    """

    def __init__(
        self, space: gym.Space, *, normalize_actions: bool, clip_actions: bool
    ):
        self.space = space
        self.normalize_actions = normalize_actions
        self.clip_actions = clip_actions
        # Whether RLlib's `unsquash_action` maps [-1, 1] onto the bounds (a
        # bounded float Box) rather than passing or shifting the actions.
        self.unsquashes_to_bounds = (
            isinstance(space, gym.spaces.Box)
            and normalize_actions
            and bool(
                np.all(space.bounded_below)
                and np.all(space.bounded_above)
                and space.dtype in (np.float32, np.float64)
            )
        )

    def __call__(self, actions: np.ndarray) -> np.ndarray:
        space = self.space
        if not isinstance(space, gym.spaces.Box):
            return actions  # both maps leave Discrete actions as they are
        if self.normalize_actions:
            if self.unsquashes_to_bounds:
                # unsquash_action's Box case, without its tree walk.
                low, high = space.low, space.high
                return np.clip(low + (actions + 1.0) * (high - low) / 2.0, low, high)
            return unsquash_action(actions.copy(), space)
        if self.clip_actions:
            return np.clip(actions, space.low, space.high)  # clip_action's Box case
        return actions


class SubEnvSteps:
    """The steps one sub-env took since its episode object was last written."""

    __slots__ = ("observations", "actions", "rewards", "infos", "extra")

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self.observations: List[Any] = []
        self.actions: List[Any] = []
        self.rewards: List[Any] = []
        self.infos: List[Dict] = []
        self.extra: Dict[str, List[Any]] = {}

    def __len__(self) -> int:
        return len(self.rewards)

    def append(self, observation, action, reward, infos, extra) -> None:
        self.observations.append(observation)
        self.actions.append(action)
        self.rewards.append(reward)
        self.infos.append(infos)
        for key, value in extra.items():
            column = self.extra.get(key)
            if column is None:
                self.extra[key] = [value]
            else:
                column.append(value)

    def write_into(
        self, episode: SingleAgentEpisode, terminated: bool, truncated: bool
    ) -> None:
        """Adds the steps to `episode` as that many `add_env_step()` calls would,
        then forgets them."""
        append_steps(
            episode,
            observations=self.observations,
            actions=self.actions,
            rewards=self.rewards,
            infos=self.infos,
            extra_model_outputs=self.extra,
            terminated=terminated,
            truncated=truncated,
        )
        self.clear()


def record_sub_env_steps(
    episodes: List[SingleAgentEpisode],
    steps: List[SubEnvSteps],
    *,
    observations: Sequence[Any],
    actions: Sequence[Any],
    rewards: Sequence[Any],
    infos: Sequence[Dict],
    extra_model_outputs: Dict[str, Sequence[Any]],
    weights_seq_no: int,
) -> int:
    """Takes one vector-env step's results apart by sub-env; returns how many
    env steps it counts.

    A sub-env whose episode is not yet reset was reset by the vector env in
    this step (ignoring its action): its observation starts the episode
    (`add_env_reset()`) and counts no step. Every other sub-env's step goes
    to its `SubEnvSteps`, with its share of the module's extra outputs and the
    weights' sequence number, as RLlib's loop stores them.
    """
    num_steps = 0
    for env_index, episode in enumerate(episodes):
        if not episode.is_reset:
            episode.add_env_reset(
                observation=observations[env_index], infos=infos[env_index]
            )
            continue
        num_steps += 1
        step_extra = {
            key: value[env_index] for key, value in extra_model_outputs.items()
        }
        step_extra[WEIGHTS_SEQ_NO] = weights_seq_no
        steps[env_index].append(
            observations[env_index],
            actions[env_index],
            rewards[env_index],
            infos[env_index],
            step_extra,
        )
    return num_steps


def write_unwritten_steps(
    episodes: List[SingleAgentEpisode],
    steps: List[SubEnvSteps],
    terminateds: Optional[Sequence[bool]],
    truncateds: Optional[Sequence[bool]],
) -> None:
    """Writes the steps still kept into their episodes, with the done flags of
    the last vector-env step: a finished episode's steps were written when it
    ended, so the ones left all come from sub-envs that stepped last."""
    for env_index, env_steps in enumerate(steps):
        if len(env_steps):
            env_steps.write_into(
                episodes[env_index], terminateds[env_index], truncateds[env_index]
            )


def push_frames(
    stacks: np.ndarray, frames: np.ndarray, restarted: np.ndarray
) -> np.ndarray:
    """The sub-envs' next frame stacks, as RLlib's `FrameStackingEnvToModule`
    builds them from the episodes (the last k observations concatenated along
    the last axis, oldest first, zeros before the episode's first one).

    `stacks`: `[num_envs, ..., k * C]`, the stacks of the previous step;
    `frames`: `[num_envs, ..., C]`, the observations the vector env just
    returned; `restarted`: per sub-env, whether its observation starts a new
    episode (its stack is then zeros and that observation). A new array: the
    previous stacks may still be in use as the RLModule's input."""
    channels = frames.shape[-1]
    stacked = np.concatenate([stacks[..., channels:], frames], axis=-1)
    if restarted.any():
        stacked[restarted, ..., :-channels] = 0
    return stacked
