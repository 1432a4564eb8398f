"""Predicates on gymnasium spaces and env ids, shared by catalogs, the NERS
scorer and config checks (no Ray)."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Optional

import gymnasium as gym
import numpy as np


def is_image_space(space: gym.Space) -> bool:
    """`[H, W, C]` Box observations: what our CNN encoders take."""
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 3


def discrete_actions_error(action_space: gym.Space, who: str) -> Optional[str]:
    """The error message for a non-Discrete action space given to `who` (an
    algorithm whose Q head sums or maximises over a finite action set), or None
    when the space is Discrete."""
    if isinstance(action_space, gym.spaces.Discrete):
        return None
    return (
        f"{who} supports Discrete action spaces only (its Q head covers a finite "
        f"action set), got {action_space}. Use an env with discrete actions, or "
        f"SAC for continuous control."
    )


def bounded_box_actions_error(action_space: gym.Space, who: str) -> Optional[str]:
    """The error message for an action space that is not a Box with finite
    bounds, given to `who` (SAC: its Gaussian is squashed into `[low, high]`), or
    None when the space fits."""
    if not isinstance(action_space, gym.spaces.Box):
        return (
            f"{who} supports continuous (Box) action spaces only, got "
            f"{action_space}. For discrete actions use NERSDQNConfig or ACERConfig."
        )
    if not (
        np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))
    ):
        return (
            f"{who} squashes its Gaussian policy into the action bounds [low, high], "
            f"so they must be finite, got {action_space}. Give the env finite action "
            f"bounds (e.g. a gymnasium.ActionWrapper with action_space Box(-1, 1) "
            f"that scales actions to the env's range)."
        )
    return None


def gymnasium_id_error(env_id: str) -> Optional[str]:
    """gymnasium's reason, on one line, why `env_id` is no registered id
    (ale-py's `ALE/` ids registered first, where ale-py is installed), or None."""
    if env_id.startswith("ALE/") and importlib.util.find_spec("ale_py"):
        importlib.import_module("ale_py")  # registers the ALE/ ids
    try:
        gym.spec(env_id)
    except gym.error.Error as error:
        return " ".join(str(error).split())
    return None
