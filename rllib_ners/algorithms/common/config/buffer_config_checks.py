"""Checks of `replay_buffer_config`, run in `validate()`, and the buffer config
our algorithms build their buffer from (`algorithm_buffer_config`).

A bad replay buffer setting otherwise fails once the Algorithm builds its buffer
(inside `build_algo()`), or as a bare assert deep inside RLlib's buffers. Our
configs check `type`, the settings of our buffers and unknown keys here, with a
config error naming the setting and the fix (`capacity`, `alpha` and `beta` of
any buffer have their ranges in `setting_ranges`, checked before). The check
builds a small probe of the buffer from what the algorithm would pass it, so it
fails wherever the algorithm's build would. Keys the algorithm overrides
(`batch_size_B`, `batch_length_T`, `metrics_num_episodes_for_smoothing`) are
refused, naming the setting that decides instead.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from rllib_ners.algorithms.common.config.buffer_types import (
    FAST_BUFFER_TYPE,
    MULTI_AGENT_FAST_BUFFER_TYPE,
    buffer_type_to_string,
    is_fast_buffer,
    is_ners_buffer,
    resolve_buffer_class,
)
from rllib_ners.replay_buffers.feedback import (
    LEARNER_FEEDBACK_LAYOUTS_ATTR,
    NERS_SCORES,
    TD_ERRORS,
)
from rllib_ners.replay_buffers.sampler_choice import (
    ALL_METHOD_SETTINGS,
    LEARNER_FED_SAMPLERS,
    SAMPLER_CLASSES,
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


def algorithm_buffer_config(config) -> Dict[str, Any]:
    """`config.replay_buffer_config` as our algorithms build their buffer from
    it (`ReplayStateMixin`): `type` as a dotted string, and what the algorithm
    adds.

    - `metrics_num_episodes_for_smoothing`, as RLlib passes it to its episode
      buffers;
    - `seed`: `config.debugging(seed=)` for our buffers, unless the buffer
      config names its own (RLlib leaves its buffers unseeded);
    - whether the config's Learner sends the feedback the buffer's sampler
      needs (`scored_by_ners_learner` for the NERS buffer,
      `learner_sends_feedback` for ReLo and LaBER): those samplers refuse to
      be built for a Learner that cannot (RLlib's send TD errors only).
    """
    buffer_config = dict(config.replay_buffer_config)
    buffer_config["type"] = buffer_type_to_string(buffer_config["type"])
    if "EpisodeReplayBuffer" in buffer_config["type"]:
        buffer_config["metrics_num_episodes_for_smoothing"] = (
            config.metrics_num_episodes_for_smoothing
        )
    buffer_class = resolve_buffer_class(buffer_config["type"])
    if config.seed is not None and is_fast_buffer(buffer_class):
        buffer_config.setdefault("seed", config.seed)
    layouts = getattr(config.learner_class, LEARNER_FEEDBACK_LAYOUTS_ATTR, (TD_ERRORS,))
    if is_ners_buffer(buffer_class):
        buffer_config["scored_by_ners_learner"] = NERS_SCORES in layouts
    method = buffer_config.get("sampler")
    if is_fast_buffer(buffer_class) and method in LEARNER_FED_SAMPLERS:
        needed = SAMPLER_CLASSES[method].feedback_layout
        buffer_config["learner_sends_feedback"] = needed in layouts
    return buffer_config


def check_replay_buffer_config(config) -> None:
    """Checks `config.replay_buffer_config` for one of our buffers in `validate()`.

    Builds a small probe of the buffer class from what the algorithm would
    build it from (`algorithm_buffer_config`, `buffer_settings_problem`), so
    that a bad setting, an unknown key or a sampler the config's Learner cannot
    feed fails here, naming the setting, before any EnvRunner or Learner
    starts (not later, from inside `build_algo()`). RLlib's own buffer types
    are left to RLlib (and to `setting_ranges`), but for the settings only our
    buffers have, which RLlib's would take and ignore
    (`our_buffer_settings_problem`).
    """
    buffer_config = dict(config.replay_buffer_config or {})
    if "type" not in buffer_config:
        return
    try:
        buffer_class = resolve_buffer_class(buffer_config.pop("type"))
    except ValueError as error:
        raise_config_error(config, str(error))
    problem = our_buffer_settings_problem(buffer_config, buffer_class)
    if problem is not None:
        raise_config_error(config, problem)
    if not is_fast_buffer(buffer_class):
        return  # RLlib's own: `setting_ranges` checks capacity, alpha, beta
    _check_keys_the_algorithm_sets(config, buffer_config)
    _check_agents_fit_buffer(config, buffer_class)
    problem = buffer_settings_problem(buffer_class, algorithm_buffer_config(config))
    if problem is not None:
        raise_config_error(
            config,
            f"{problem} Fix it with config.training(replay_buffer_config={{...}}).",
        )


# Keys of `replay_buffer_config` that an algorithm's buffer never reads as
# given, and the setting that decides instead.
_SET_BY_THE_ALGORITHM = {
    "batch_size_B": "config.training(train_batch_size_per_learner=...), the "
    "number of items each update samples",
    "batch_length_T": "config.training(train_batch_size_per_learner=...) (and "
    "ACER's sequence_length); the training step samples single steps or "
    "sequences itself",
}


def _check_keys_the_algorithm_sets(config, buffer_config: Dict[str, Any]) -> None:
    """Raises a config error for a `replay_buffer_config` key that the
    algorithm overrides: the training step passes the batch size to every
    `sample()` call, and the Algorithm passes its own
    `metrics_num_episodes_for_smoothing`."""
    for key, decided_by in _SET_BY_THE_ALGORITHM.items():
        if key in buffer_config:
            raise_config_error(
                config,
                f"replay_buffer_config['{key}']={buffer_config[key]!r} is not read "
                f"by the algorithm's buffer: the batch is set by {decided_by}. "
                f"Remove '{key}' from replay_buffer_config.",
            )
    smoothing = buffer_config.get("metrics_num_episodes_for_smoothing")
    if smoothing is not None and smoothing != config.metrics_num_episodes_for_smoothing:
        raise_config_error(
            config,
            f"replay_buffer_config['metrics_num_episodes_for_smoothing']="
            f"{smoothing!r} would be replaced by the Algorithm's own "
            f"({config.metrics_num_episodes_for_smoothing!r}). Set "
            f"config.reporting(metrics_num_episodes_for_smoothing={smoothing!r}) "
            f"and remove the key from replay_buffer_config.",
        )


# Capacity of the probe buffer `buffer_settings_problem` builds: its other
# settings are checked as given, without allocating the whole replay memory.
_PROBE_CAPACITY = 1024


def buffer_settings_problem(
    buffer_class: type, buffer_config: Dict[str, Any]
) -> Optional[str]:
    """What one of our buffers says is wrong with `buffer_config`, or None: the
    buffer's own checks, on a small probe of it (`type`, which names the
    class the caller resolved, is not a setting of it).

    The buffer is where every setting is checked, the replay sampler's
    (`sampler_choice`) included, so a config's `validate()` and
    `enable_replay` say the same as a buffer built by hand.
    """
    settings = {key: value for key, value in buffer_config.items() if key != "type"}
    capacity = settings.get("capacity")
    if isinstance(capacity, int) and not isinstance(capacity, bool) and capacity > 2:
        settings["capacity"] = min(capacity, _PROBE_CAPACITY)
    try:
        buffer_class(**settings)
    except (ValueError, TypeError) as error:
        return f"Bad replay_buffer_config for {buffer_class.__name__}: {error}"
    return None


# Settings of our buffers that RLlib's take through `**kwargs` and ignore.
OUR_BUFFERS_ONLY = (
    "beta_final",
    "beta_annealing_timesteps",
    "min_priority",
    "frame_stack",
    "learner_sends_feedback",
)


def our_buffer_settings_problem(
    buffer_config: Dict[str, Any], buffer_class: type
) -> Optional[str]:
    """A setting only our buffers have, given to one of RLlib's, as an error
    message naming the setting and the fix; else None: a replay sampler's
    (`sampler`, `relo_*`, `laber_*`; see `sampler_presets`), which RLlib's
    buffer would name as an unknown keyword from inside `build_algo()`, or
    one of `OUR_BUFFERS_ONLY`, which it would silently ignore. Our buffers
    check their settings themselves (`buffer_settings_problem`).
    """
    if is_fast_buffer(buffer_class):
        return None
    sampler_keys = [k for k in ("sampler", *ALL_METHOD_SETTINGS) if k in buffer_config]
    if sampler_keys:
        return (
            f"replay_buffer_config[{sampler_keys[0]!r}] (the replay sampler: ReLo, "
            f"LaBER) needs this package's buffer, got {buffer_class.__name__}. Set "
            f"replay_buffer_config['type'] to '{FAST_BUFFER_TYPE}' (on a stock "
            f"config: rllib_ners.enable_replay(config, 'relo'))."
        )
    # None is what RLlib's buffer does anyway (no annealing, no floor, ...).
    ours = [key for key in OUR_BUFFERS_ONLY if buffer_config.get(key) is not None]
    if ours:
        return (
            f"replay_buffer_config[{ours[0]!r}] is a setting of this package's "
            f"buffers; {buffer_class.__name__} would ignore it. Set "
            f"replay_buffer_config['type'] to '{FAST_BUFFER_TYPE}', or remove "
            f"{ours[0]!r}."
        )
    return None


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


def check_critic_loss_fits_replay_method(config, methods: Tuple[str, ...]) -> None:
    """Raises a config error where the replay method (`sampler`: one of
    `methods`, those the algorithm's Learner scores per item) meets PAL's
    critic loss, which is a batch loss (divided by a batch normaliser) with no
    per-item value to prioritise or sub-sample by. The Learner would refuse it
    in `build()`, from inside `build_algo()`."""
    from rllib_ners.algorithms.common.learner.replay_methods import replay_method_of

    method = replay_method_of(config)
    if method in methods and config.critic_loss == "pal":
        raise_config_error(
            config,
            f"replay_buffer_config['sampler']={method!r} needs a per-item critic "
            f"loss, but critic_loss='pal' (PAL's loss for uniform replay, divided "
            f"by a batch normaliser); use config.training(critic_loss='mse') or "
            f"'huber'.",
        )
