"""Checks of the replay buffers' settings, shared by the buffer classes (no Ray).

Every error is a ValueError naming the setting and where to fix it
(`SETTING_FIX`).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import numpy as np

from rllib_ners.replay_buffers.buffer_names import SETTING_FIX
from rllib_ners.utils.checks import check_positive_int

# The fewest observation slots a buffer works with: one step and its next
# observation.
MIN_CAPACITY = 2


def check_setting(name: str, value: Any) -> int:
    """`value` as an int >= 1; raises naming `name` otherwise."""
    return check_positive_int(name, value, fix=SETTING_FIX)


def check_capacity(capacity: Any) -> int:
    capacity = check_setting("capacity", capacity)
    if capacity < MIN_CAPACITY:
        raise ValueError(
            f"`capacity` must be at least {MIN_CAPACITY} (one step and its next "
            f"observation), got capacity={capacity}."
        )
    return capacity


def check_weight(weight: Optional[float]) -> None:
    """`add()`'s starting priority: None (the max priority) or a number > 0."""
    if weight is not None and not (np.isfinite(weight) and weight > 0):
        raise ValueError(f"`weight` must be a finite number > 0, got {weight!r}.")


def check_no_unknown_settings(
    unknown: Dict[str, Any], buffer_name: str, known: Sequence[str]
) -> None:
    """Raises naming the settings in `unknown` (a constructor's `**kwargs`)."""
    if unknown:
        raise ValueError(
            f"Unknown replay buffer settings {sorted(unknown)} for {buffer_name}. "
            f"Remove them from `replay_buffer_config`; known settings are "
            f"{', '.join(known)}."
        )


# `replay_mode`s: the one served, and RLlib's other names for lockstep replay.
INDEPENDENT = "independent"
_LOCKSTEP_MODES = ("lockstep", "synchronized")


def check_replay_mode(replay_mode: Any) -> None:
    """Raises unless `replay_mode` is "independent"."""
    if replay_mode == INDEPENDENT:
        return
    if replay_mode in _LOCKSTEP_MODES:
        raise ValueError(
            f"replay_mode={replay_mode!r} cannot be served by "
            f"FastMultiAgentPrioritizedEpisodeReplayBuffer: lockstep replay draws "
            f"whole env steps, which its per-module priority trees cannot weigh "
            f"(RLlib's prioritized buffer draws those uniformly, with no weights). "
            f"Use replay_mode='independent' (RLlib's default, what DQN and SAC "
            f"sample with), or RLlib's MultiAgentEpisodeReplayBuffer."
        )
    raise ValueError(
        f"Unknown replay_mode={replay_mode!r}; use 'independent'. {SETTING_FIX}"
    )
