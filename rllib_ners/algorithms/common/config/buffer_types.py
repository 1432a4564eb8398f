"""Replay buffer types: this package's buffers by name, and resolving a `type`.

RLlib 2.60 builds a replay buffer from `replay_buffer_config["type"]`, which it
needs as a dotted string (`buffer_type_to_string`): it tests
`"EpisodeReplayBuffer" in type`, which fails for a class object, and Tune turns
dotted strings into classes on every trial. `resolve_buffer_class` imports the
class a `type` names; `is_fast_buffer` / `is_ners_buffer` say whether it is one
of this package's buffers, or its NERS buffer; `replay_buffer_config_update`
readies a `training(replay_buffer_config=...)` update for RLlib's merge, and
`merged_replay_buffer_config` applies that merge where RLlib's `training()`
does not run (TD3, ACER), so every config of the package follows one rule.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any, Dict, Optional

logger = logging.getLogger(__name__)

NERS_BUFFER_TYPE = "rllib_ners.NERSEpisodeReplayBuffer"
FAST_BUFFER_TYPE = "rllib_ners.FastPrioritizedEpisodeReplayBuffer"
MULTI_AGENT_FAST_BUFFER_TYPE = "rllib_ners.FastMultiAgentPrioritizedEpisodeReplayBuffer"


def buffer_type_to_string(buffer_type: Any) -> str:
    """A replay buffer `type` as the dotted string RLlib 2.60 needs.

    RLlib tests `"EpisodeReplayBuffer" in type`, which raises a TypeError for a
    class object (and Tune turns strings back into classes on round trips).
    """
    if isinstance(buffer_type, str):
        return buffer_type
    if isinstance(buffer_type, type):
        return f"{buffer_type.__module__}.{buffer_type.__qualname__}"
    raise ValueError(
        f"replay_buffer_config['type'] must be a class or a dotted import path, got "
        f"{buffer_type!r}."
    )


def resolve_buffer_class(buffer_type: Any) -> type:
    """Imports a buffer type given as a class, a dotted path or an RLlib short name."""
    if isinstance(buffer_type, type):
        return buffer_type
    name = buffer_type_to_string(buffer_type)
    module_name, _, class_name = name.rpartition(".")
    try:
        if not module_name:
            module = importlib.import_module("ray.rllib.utils.replay_buffers")
        else:
            module = importlib.import_module(module_name)
        return getattr(module, class_name)
    except (ImportError, AttributeError) as error:
        raise ValueError(
            f"Unknown replay buffer type {name!r} in replay_buffer_config['type']: "
            f"{error}. Use e.g. '{NERS_BUFFER_TYPE}' or '{FAST_BUFFER_TYPE}'."
        ) from None


def is_fast_buffer(obj_or_class: Any) -> bool:
    """One of this package's buffers (single- or multi-agent)."""
    from rllib_ners.replay_buffers.fast_multi_agent_episode_buffer import (
        FastMultiAgentPrioritizedEpisodeReplayBuffer,
    )
    from rllib_ners.replay_buffers.fast_prioritized_episode_buffer import (
        FastPrioritizedEpisodeReplayBuffer,
    )

    cls = obj_or_class if isinstance(obj_or_class, type) else type(obj_or_class)
    return issubclass(
        cls,
        (
            FastPrioritizedEpisodeReplayBuffer,
            FastMultiAgentPrioritizedEpisodeReplayBuffer,
        ),
    )


def is_ners_buffer(cls: type) -> bool:
    """A NERS buffer class (`NERSEpisodeReplayBuffer` or a subclass)."""
    from rllib_ners.replay_buffers.ners_episode_buffer import NERSEpisodeReplayBuffer

    return isinstance(cls, type) and issubclass(cls, NERSEpisodeReplayBuffer)


def names_the_same_buffer(type_a: Any, type_b: Any) -> bool:
    """Whether two `replay_buffer_config["type"]` values, each a class, a
    dotted path or an RLlib short name, name the same class (False where one
    names none: `validate()` reports it)."""
    try:
        return resolve_buffer_class(type_a) is resolve_buffer_class(type_b)
    except ValueError:
        return False


def replay_buffer_config_update(
    current: Dict[str, Any], update: Dict[str, Any]
) -> Dict[str, Any]:
    """`update` readied for RLlib's `training(replay_buffer_config=update)`.

    RLlib's DQN and SAC configs merge `update` into the current buffer
    settings, unless `update["type"]` differs from the current type: then
    `update` replaces them all. RLlib compares the spellings, so the class
    `FastPrioritizedEpisodeReplayBuffer` in place of the default
    "rllib_ners.FastPrioritizedEpisodeReplayBuffer" dropped the config's
    capacity, alpha and beta for the buffer's own defaults. Here a type that
    names the current class takes the current spelling, so the update merges.
    A new class still replaces the settings, as RLlib documents; the ones it
    drops are logged, since the buffer falls back to its own defaults.
    """
    current = current or {}
    if "type" not in update or "type" not in current:
        return update
    new_type, old_type = update["type"], current["type"]
    if new_type is old_type or (isinstance(new_type, str) and new_type == old_type):
        return update
    if names_the_same_buffer(new_type, old_type):
        return {**update, "type": old_type}
    dropped = {
        key: value
        for key, value in current.items()
        if key != "type" and key not in update
    }
    if dropped:
        logger.warning(
            "replay_buffer_config: type %s replaces the whole replay_buffer_config "
            "(RLlib's rule when the type changes), so %s no longer apply and the "
            "buffer takes its own defaults for them. Give them beside the new type "
            "to keep them.",
            buffer_type_to_string(new_type),
            ", ".join(f"{key}={value!r}" for key, value in dropped.items()),
        )
    return update


def merged_replay_buffer_config(
    current: Optional[Dict[str, Any]], update: Optional[Dict[str, Any]]
) -> Optional[Dict[str, Any]]:
    """The buffer settings after `training(replay_buffer_config=update)`, by
    the rule of RLlib's DQN and SAC configs, for configs whose `training()`
    RLlib's does not serve (TD3, ACER): a new buffer class replaces the whole
    settings (`replay_buffer_config_update` logs what it drops); an update
    without a type, or naming the current class however spelled, merges."""
    if update is None:
        return None  # stored as RLlib stores it; validate() names the fix
    current = dict(current or {})
    update = replay_buffer_config_update(current, dict(update))
    if "type" in update and update["type"] != current.get("type"):
        return update
    return {**current, **update}
