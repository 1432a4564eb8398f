"""Checks of `replay_buffer_config`, run in `validate()`.

A bad replay buffer setting otherwise fails once the Algorithm builds its buffer
(inside `build_algo()`), or as a bare assert deep inside RLlib's buffers. Our
configs check `type`, `capacity`, `alpha`, `beta`, the n-step range and unknown
keys here, with a config error naming the setting and the fix.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Dict

from ray.util.debug import log_once

from rllib_ners.algorithms.common.config.buffer_types import (
    FAST_BUFFER_TYPE,
    MULTI_AGENT_FAST_BUFFER_TYPE,
    buffer_type_to_string,
    is_fast_buffer,
    is_ners_buffer,
    resolve_buffer_class,
)
from rllib_ners.seam.config import raise_config_error
from rllib_ners.utils.checks import is_positive_int

logger = logging.getLogger(__name__)


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
    bad alpha, beta, capacity, n-step range or an unknown key fails here, naming
    the setting, before any EnvRunner or Learner starts (not later, from inside
    `build_algo()`). RLlib's own buffer types are left to RLlib.
    """
    buffer_config = dict(config.replay_buffer_config or {})
    if "type" not in buffer_config:
        return
    try:
        buffer_class = resolve_buffer_class(buffer_config.pop("type"))
    except ValueError as error:
        raise_config_error(config, str(error))
    warn_if_batch_exceeds_capacity(config, buffer_config.get("capacity"))
    if not is_fast_buffer(buffer_class):
        # RLlib's buffers check these with bare asserts, deep inside Ray.
        check_common_replay_settings(config, buffer_config, buffer_class.__name__)
        return
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


def check_common_replay_settings(config, buffer_config: dict, buffer_name: str):
    """`capacity` (an int >= 1), `alpha` (>= 0) and `beta` (in [0, 1]) of any
    prioritized or uniform buffer, checked in `validate()`."""

    def fail(setting: str, value, rule: str) -> None:
        raise_config_error(
            config,
            f"replay_buffer_config['{setting}']={value!r} for {buffer_name}: "
            f"{rule}. Fix it with config.training(replay_buffer_config={{...}}).",
        )

    capacity = buffer_config.get("capacity")
    if capacity is not None and not is_positive_int(capacity):
        fail("capacity", capacity, "it must be an integer >= 1")
    alpha = buffer_config.get("alpha")
    if alpha is not None and not (_is_number(alpha) and alpha >= 0):
        fail("alpha", alpha, "the priority exponent must be a finite number >= 0")
    beta = buffer_config.get("beta")
    if beta is not None and not (_is_number(beta) and 0 <= beta <= 1):
        fail("beta", beta, "the importance-sampling exponent must lie in [0, 1]")


def _is_number(value) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


def warn_if_batch_exceeds_capacity(config, capacity) -> None:
    """Warns once when a train batch holds more transitions than the buffer:
    every batch then repeats transitions (a setting rarely meant)."""
    batch = config.train_batch_size_per_learner
    if (
        is_positive_int(capacity)
        and is_positive_int(batch)
        and batch > capacity
        and log_once(f"rllib_ners_batch_exceeds_capacity_{batch}_{capacity}")
    ):
        logger.warning(
            "train_batch_size_per_learner=%d exceeds the replay buffer's "
            "capacity=%d: every batch repeats stored transitions. Raise "
            "replay_buffer_config['capacity'] or lower the batch size.",
            batch,
            capacity,
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
