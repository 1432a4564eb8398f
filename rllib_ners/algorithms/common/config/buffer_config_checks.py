"""Checks of `replay_buffer_config`, run in `validate()`.

A bad replay buffer setting otherwise fails once the Algorithm builds its buffer
(inside `build_algo()`), or as a bare assert deep inside RLlib's buffers. Our
configs check `type`, the settings of our buffers and unknown keys here, with a
config error naming the setting and the fix (`capacity`, `alpha` and `beta` of
any buffer have their ranges in `setting_ranges`, checked before).
"""

from __future__ import annotations

from typing import Any, Dict

from rllib_ners.algorithms.common.config.buffer_types import (
    FAST_BUFFER_TYPE,
    MULTI_AGENT_FAST_BUFFER_TYPE,
    buffer_type_to_string,
    is_fast_buffer,
    is_ners_buffer,
    resolve_buffer_class,
)
from rllib_ners.seam.config import raise_config_error


def our_replay_buffer_config(
    config, *, who: str, example: str, replays: str, use: str
) -> Dict[str, Any]:
    """`config.replay_buffer_config` with `type` as a dotted string, after checking
    that it names one of this package's buffers; raises a config error
    (`raise_config_error`) otherwise.

    For algorithms that only replay from our buffers (ACER, NERS-SAC): `who`
    names the algorithm, `example` is a working `replay_buffer_config`,
    `replays` says how it replays ("replays from") and `use` lists the buffer
    types to use instead.
    """
    buffer_config = config.replay_buffer_config
    if not isinstance(buffer_config, dict) or "type" not in buffer_config:
        raise_config_error(
            config,
            f"{who} needs replay_buffer_config with a 'type', got "
            f"{buffer_config!r}; e.g. {example}.",
        )
    try:
        buffer_class = resolve_buffer_class(buffer_config["type"])
    except ValueError as error:
        raise_config_error(config, str(error))
    if not is_fast_buffer(buffer_class):
        raise_config_error(
            config,
            f"{who} {replays} this package's buffers; got "
            f"replay_buffer_config['type']={buffer_config['type']!r}. Use {use}.",
        )
    return dict(buffer_config, type=buffer_type_to_string(buffer_config["type"]))


# Capacity of the probe buffer `check_replay_buffer_config` builds: its other
# settings are checked as given, without allocating the whole replay memory.
_PROBE_CAPACITY = 1024


def check_replay_buffer_config(config) -> None:
    """Checks `config.replay_buffer_config` for one of our buffers in `validate()`.

    Builds a small probe of the buffer class with the given settings, so that a
    bad setting or an unknown key fails here, naming the setting, before any
    EnvRunner or Learner starts (not later, from inside `build_algo()`).
    RLlib's own buffer types are left to RLlib (and to `setting_ranges`).
    """
    buffer_config = dict(config.replay_buffer_config or {})
    if "type" not in buffer_config:
        return
    try:
        buffer_class = resolve_buffer_class(buffer_config.pop("type"))
    except ValueError as error:
        raise_config_error(config, str(error))
    if not is_fast_buffer(buffer_class):
        return  # RLlib's own: `setting_ranges` checks capacity, alpha, beta
    _check_agents_fit_buffer(config, buffer_class)
    capacity = buffer_config.get("capacity")
    if isinstance(capacity, int) and not isinstance(capacity, bool) and capacity > 2:
        buffer_config["capacity"] = min(capacity, _PROBE_CAPACITY)
    if is_ners_buffer(buffer_class):
        buffer_config["scored_by_ners_learner"] = True  # checked at build time
    try:
        buffer_class(**buffer_config)
    except (ValueError, TypeError) as error:
        raise_config_error(
            config,
            f"Bad replay_buffer_config for {buffer_class.__name__}: {error} Fix it "
            f"with config.training(replay_buffer_config={{...}}).",
        )


def _check_agents_fit_buffer(config, buffer_class: type) -> None:
    """A multi-agent config needs the multi-agent buffer, a single-agent config
    the single-agent one; NERS replay is single-agent only."""
    from ray.rllib.utils.replay_buffers.multi_agent_episode_buffer import (
        MultiAgentEpisodeReplayBuffer,
    )

    multi_agent_buffer = issubclass(buffer_class, MultiAgentEpisodeReplayBuffer)
    if config.is_multi_agent and is_ners_buffer(buffer_class):
        raise_config_error(
            config,
            f"{buffer_class.__name__} (NERS replay) supports single-agent setups "
            f"only; remove the multi_agent() policies, or for prioritized replay "
            f"per module set replay_buffer_config['type'] to "
            f"'{MULTI_AGENT_FAST_BUFFER_TYPE}'.",
        )
    if config.is_multi_agent and not multi_agent_buffer:
        raise_config_error(
            config,
            f"This multi-agent config needs a multi-agent replay buffer, got "
            f"{buffer_class.__name__}; set replay_buffer_config['type'] to "
            f"'{MULTI_AGENT_FAST_BUFFER_TYPE}'.",
        )
    if not config.is_multi_agent and multi_agent_buffer:
        raise_config_error(
            config,
            f"{buffer_class.__name__} replays multi-agent episodes, but this config "
            f"is single-agent; set replay_buffer_config['type'] to "
            f"'{FAST_BUFFER_TYPE}' (or add config.multi_agent(...) policies).",
        )
