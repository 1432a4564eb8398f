"""Predicates on gymnasium spaces, shared by catalogs, the NERS scorer and config
checks (no Ray)."""

from __future__ import annotations

from typing import Optional

import gymnasium as gym


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
