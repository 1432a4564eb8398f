"""Config checks that need the env (that it exists, what its spaces allow) or
the model config, run in `validate()` without Ray.

RLlib's `validate()` never looks at the env, so a continuous action space only
fails once EnvRunners and Learners are up, as a traceback from inside an actor.
Our configs build the env here once (or use `config.observation_space` /
`config.action_space` when set) and raise a `ValueError` naming the problem
before anything starts.
"""

from __future__ import annotations

import dataclasses
import importlib
import numbers
from typing import Any, Callable, Optional, Tuple

import gymnasium as gym
import numpy as np

from rllib_ners.seam.config import (
    custom_env_to_module_connector,
    raise_config_error,
    user_rl_module_spec,
)
from rllib_ners.utils.spaces import (
    bounded_box_actions_error,
    discrete_actions_error,
    gymnasium_id_error,
)


def env_spaces(config) -> Optional[Tuple[gym.Space, gym.Space]]:
    """`(observation_space, action_space)` of a single-agent config's env.

    Built here the way RLlib's EnvRunner builds it (a Tune-registered creator
    with `env_config`, a gymnasium id, or an env class/callable), then closed.
    None when there is no env yet or it cannot be built in this process:
    RLlib then reports the env problem itself when it builds the env.
    """
    if config.observation_space is not None and config.action_space is not None:
        return config.observation_space, config.action_space
    env_spec = config.env
    if env_spec is None or config.is_multi_agent:
        return None
    from ray.rllib.env.env_context import EnvContext

    from rllib_ners.seam.ray_runtime import registered_env_creator

    env_config = EnvContext(dict(config.env_config or {}), worker_index=0)
    try:
        if isinstance(env_spec, str):
            creator = registered_env_creator(env_spec)
            if creator is not None:
                env = creator(env_config)
            else:
                env = gym.make(env_spec, **dict(env_config))
        else:
            env = env_spec(env_config)
    except Exception:  # noqa: BLE001 - RLlib reports its own env errors later
        # ... but a misspelled id fails here, not in every EnvRunner.
        unknown = unknown_env_id_error(env_spec)
        if unknown is not None:
            raise_config_error(config, f"config.environment(): {unknown}")
        return None
    try:
        if not isinstance(env, gym.Env):
            return None
        return env.observation_space, env.action_space
    finally:
        env.close()


def unknown_env_id_error(env: Any) -> Optional[str]:
    """Why the string `env` names no env at all (neither registered with
    `ray.tune.register_env` nor a gymnasium id, once its `module:` prefix is
    imported), or None: an env that exists but fails to build is RLlib's to
    report."""
    if not isinstance(env, str):
        return None
    from rllib_ners.seam.ray_runtime import registered_env_creator

    if registered_env_creator(env) is not None:
        return None
    env_id = env
    if ":" in env:
        module, _, env_id = env.partition(":")
        try:
            importlib.import_module(module)
        except ImportError as error:
            return f"environment {env!r}: cannot import module {module!r} ({error})"
    reason = gymnasium_id_error(env_id)
    if reason is None:
        return None
    return (
        f"unknown environment id {env!r} ({reason}; neither a gymnasium id nor "
        f"registered with ray.tune.register_env)"
    )


def check_discrete_actions(config, who: str) -> None:
    """Raises a config error (`raise_config_error`) unless the actions are
    Discrete."""
    spaces = env_spaces(config)
    message = None if spaces is None else discrete_actions_error(spaces[1], who)
    if message is not None:
        raise_config_error(config, f"{message} (env {config.env!r})")


def check_bounded_box_actions(config, who: str) -> None:
    """Raises a config error (`raise_config_error`) unless the actions are a
    Box with finite bounds, which the policy reaches: it acts in [-1, 1]
    (tanh), mapped onto other bounds only with `normalize_actions=True`."""
    spaces = env_spaces(config)
    message = None if spaces is None else bounded_box_actions_error(spaces[1], who)
    if message is not None:
        raise_config_error(config, f"{message} (env {config.env!r})")
    if spaces is None or config.normalize_actions:
        return
    low, high = spaces[1].low, spaces[1].high
    if not (np.all(low == -1.0) and np.all(high == 1.0)):
        raise_config_error(
            config,
            f"{who}'s policy acts in [-1, 1] (tanh); normalize_actions=True maps "
            f"that onto env {config.env!r}'s action bounds {spaces[1]}, which "
            f"with normalize_actions=False it could not reach. Remove "
            f"config.environment(normalize_actions=False), or give the env "
            f"[-1, 1] action bounds.",
        )


def check_frame_stack_fits_observations(config) -> None:
    """`replay_buffer_config['frame_stack'] > 1` stacks image frames only."""
    frame_stack = (config.replay_buffer_config or {}).get("frame_stack", 1)
    if frame_stack in (None, 1):
        return
    spaces = env_spaces(config)
    if spaces is None:
        return
    shape = getattr(spaces[0], "shape", None)
    if shape is None or len(shape) not in (2, 3):
        raise_config_error(
            config,
            f"replay_buffer_config['frame_stack']={frame_stack} stacks image frames, "
            f"but env {config.env!r} has observations {spaces[0]}. Remove "
            f"`frame_stack` from replay_buffer_config (or set it to 1).",
        )


def check_cnn_encoder_fits_observations(config) -> None:
    """model_config `cnn_encoder` must be known and fit the env's images, and
    our CNNs take none of RLlib's CNN settings (`conv_activation`, ...).

    The catalogs raise the same errors, but only once Learners build the
    RLModule; here they come from `validate()`. Skipped without an explicit
    `cnn_encoder` or RLlib CNN settings (then one that fits is picked) and
    with a custom env-to-module connector, which may reshape the observations.
    """
    from rllib_ners.networks.conv_stack import (
        cnn_output_dim,
        resolve_cnn_encoder,
        rllib_cnn_settings,
    )

    if config.model_config.get("cnn_encoder") is None and not rllib_cnn_settings(
        config.model_config
    ):
        return  # the catalogs then pick a CNN that fits
    if custom_env_to_module_connector(config) is not None:
        return
    spaces = env_spaces(config)
    if spaces is None:
        return

    try:
        kind = resolve_cnn_encoder(spaces[0], config.model_config)
        if kind is not None:
            cnn_output_dim(spaces[0].shape, kind)
    except ValueError as error:
        raise_config_error(config, f"{error} (env {config.env!r}; set in model_config)")


def check_no_cnn_encoder(config, who: str) -> None:
    """model_config `cnn_encoder` picks the CNN of the DQN-family's and ACER's
    modules; the networks of `who` (SAC, TD3) never read it."""
    kind = (config.model_config or {}).get("cnn_encoder")
    if kind is not None:
        raise_config_error(
            config,
            f"model_config['cnn_encoder']={kind!r} picks the CNN of RainbowDQN's, "
            f"NERS-DQN's and ACER's modules; {who}'s networks never read it. "
            f"Remove it from model_config.",
        )


def check_catalog_model_config(
    config, check: Callable[[dict], None], module_base: type
) -> None:
    """Runs a catalog's model_config `check` (it raises ValueError) in
    `validate()`, on the dict the catalog will read (RLlib's
    DefaultModelConfig under `config.model_config`), so a bad key fails here
    rather than in the Learner's build, inside Ray. Skipped where the user's
    RLModuleSpec names a module class not derived from `module_base`: that
    module's own catalog builds it."""
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    module_class = getattr(user_rl_module_spec(config), "module_class", None)
    if isinstance(module_class, type) and not issubclass(module_class, module_base):
        return
    try:
        check({**dataclasses.asdict(DefaultModelConfig()), **config.model_config})
    except ValueError as error:
        raise_config_error(config, str(error))


# The model_config keys that list layer widths (RLlib's MLP encoder and heads).
LAYER_WIDTH_KEYS = ("fcnet_hiddens", "head_fcnet_hiddens")


def check_layer_widths(config) -> None:
    """Raises a config error (`raise_config_error`) for a model_config layer
    list that is not a sequence of positive integers (torch would build a
    layer of width 0, or fail inside the Learner's build)."""
    model_config = config.model_config
    if not isinstance(model_config, dict):
        return
    for key in LAYER_WIDTH_KEYS:
        widths = model_config.get(key)
        if widths is None:
            continue
        if isinstance(widths, (list, tuple)) and all(
            isinstance(width, numbers.Integral)
            and not isinstance(width, bool)
            and width >= 1
            for width in widths
        ):
            continue
        raise_config_error(
            config,
            f"model_config[{key!r}]={widths!r} is not a list of layer widths: use "
            f"positive integers, e.g. config.rl_module(model_config={{{key!r}: "
            f"[256, 256]}})",
        )
