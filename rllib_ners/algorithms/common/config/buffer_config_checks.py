"""Checks of `replay_buffer_config`, run in `validate()`.

A bad replay buffer setting otherwise fails once the Algorithm builds its buffer
(inside `build_algo()`), or as a bare assert deep inside RLlib's buffers. Our
configs check `type`, the settings of our buffers and unknown keys here, with a
config error naming the setting and the fix (`capacity`, `alpha` and `beta` of
any buffer have their ranges in `setting_ranges`, checked before).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from rllib_ners.algorithms.common.config.buffer_types import (
    FAST_BUFFER_TYPE,
    MULTI_AGENT_FAST_BUFFER_TYPE,
    buffer_type_to_string,
    is_fast_buffer,
    is_ners_buffer,
    resolve_buffer_class,
)
from rllib_ners.algorithms.common.config.sampler_presets import (
    LABER_WEIGHTS,
    PRIORITY,
    RELO_TRANSFORMS,
    SAMPLER_KEYS,
    SAMPLERS,
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
    problem = replay_sampler_problem(buffer_config, buffer_class)
    if problem is not None:
        raise_config_error(config, problem)
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


# The choices of the sampler's settings that take a name.
_CHOICES = {
    "sampler": SAMPLERS,
    "relo_transform": RELO_TRANSFORMS,
    "laber_weights": LABER_WEIGHTS,
}
_EXAMPLES = {"sampler": "relo", "relo_transform": "clip", "laber_weights": "mean"}
_ENABLE = "rllib_ners.enable_replay(config, 'relo')"


def replay_sampler_problem(
    buffer_config: Dict[str, Any], buffer_class: type
) -> Optional[str]:
    """What is wrong with the replay sampler's settings in `buffer_config`
    (`sampler`, `relo_*`, `laber_*`; see `sampler_presets`), as an error
    message naming the setting and the fix, or None when nothing is.

    Checked before the buffer is probed so that a wrong choice reads as one
    (the buffer would only name an unknown keyword), and so that RLlib's
    buffers and the NERS buffer, which have no replay sampler to choose, are
    told so instead of failing inside RLlib or sampling by NERS regardless.
    `enable_replay` runs the same check on a stock config.
    """
    keys = [key for key in ("sampler", *_sampler_keys()) if key in buffer_config]
    if not keys:
        return None
    setting = f"replay_buffer_config[{keys[0]!r}]"
    if is_ners_buffer(buffer_class):
        return (
            f"{setting} is not a setting of {buffer_class.__name__}: its sampler is "
            f"NERS (the priorities are the NERS scores). Remove {keys[0]!r} from "
            f"replay_buffer_config, or replay with ReLo or LaBER from "
            f"'{FAST_BUFFER_TYPE}' (on a stock config: {_ENABLE})."
        )
    if not is_fast_buffer(buffer_class):
        return (
            f"{setting} (the replay sampler: ReLo, LaBER) needs this package's "
            f"buffer, got {buffer_class.__name__}. Set replay_buffer_config['type'] "
            f"to '{FAST_BUFFER_TYPE}' (on a stock config: {_ENABLE})."
        )
    for key, choices in _CHOICES.items():
        value = buffer_config.get(key, choices[0])
        if not isinstance(value, str) or value not in choices:
            return (
                f"replay_buffer_config[{key!r}]={value!r} is not one of "
                f"{', '.join(map(repr, choices))}; e.g. config.training("
                f"replay_buffer_config={{{key!r}: {_EXAMPLES[key]!r}}})."
            )
    sampler = buffer_config.get("sampler", PRIORITY)
    if sampler != PRIORITY and issubclass(buffer_class, _multi_agent_buffer_class()):
        return (
            f"replay_buffer_config['sampler']={sampler!r} replays single-agent "
            f"setups only (its Learners compute its feedback for one module); "
            f"remove 'sampler' for prioritized replay per module."
        )
    for owner, owned in SAMPLER_KEYS.items():
        stray = [key for key in owned if key in buffer_config and owner != sampler]
        if stray:
            return (
                f"replay_buffer_config[{stray[0]!r}] is a setting of sampler="
                f"{owner!r}, but replay_buffer_config['sampler'] is {sampler!r}; "
                f"remove {stray[0]!r}, or set replay_buffer_config['sampler'] to "
                f"{owner!r}."
            )
    return None


def _sampler_keys():
    return [key for keys in SAMPLER_KEYS.values() for key in keys]


def _multi_agent_buffer_class() -> type:
    from ray.rllib.utils.replay_buffers.multi_agent_episode_buffer import (
        MultiAgentEpisodeReplayBuffer,
    )

    return MultiAgentEpisodeReplayBuffer


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
