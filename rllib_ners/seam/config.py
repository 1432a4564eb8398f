"""RLlib's `AlgorithmConfig`: settings it keeps under private names.

Functions here read or raise through the config's private attributes and
methods; `ModelConfigIncludesHook` adds to a private property RLlib's own
configs extend. Each is pinned by `tests/rllib_contract/test_seam_config.py`.
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, List, Optional

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.utils.annotations import override

from rllib_ners.utils.mixin_order import PrecedesInBases

__all__ = [
    "config_attribute_for_key",
    "ModelConfigIncludesHook",
    "custom_env_to_module_connector",
    "custom_learner_connector",
    "custom_module_to_env_connector",
    "custom_optimizer_stepping",
    "raise_config_error",
    "thawed",
    "user_learner_class",
    "user_rl_module_spec",
]


def custom_env_to_module_connector(config) -> Any:
    """The user's `config.env_runners(env_to_module_connector=...)`, or None.

    RLlib keeps the setting as `_env_to_module_connector` (the public name is
    a method building the whole pipeline)."""
    return config._env_to_module_connector


def custom_module_to_env_connector(config) -> Any:
    """The user's `config.env_runners(module_to_env_connector=...)`, or None."""
    return config._module_to_env_connector


def custom_learner_connector(config) -> Any:
    """The user's `config.training(learner_connector=...)`, or None.

    RLlib keeps it as `_learner_connector` (the public route builds the whole
    pipeline, default pieces included, for a given env)."""
    return config._learner_connector


def custom_optimizer_stepping(config) -> List[str]:
    """The `config.experimental(...)` settings the user set that change how a
    torch Learner steps its optimizers: `_torch_grad_scaler_class` (mixed
    precision) and `_torch_lr_scheduler_classes` (RLlib keeps both under
    these names; None when unset)."""
    return [
        name
        for name in ("_torch_grad_scaler_class", "_torch_lr_scheduler_classes")
        if getattr(config, name) is not None
    ]


def user_learner_class(config) -> Optional[type]:
    """The Learner class the user set (`config.learners(learner_class=...)` or
    `config.training(learner_class=...)`), or None.

    `config.learner_class` falls back to the algorithm's default class; checks
    of a user's class against a setting need the user's alone, which RLlib
    keeps as `_learner_class`."""
    return config._learner_class


def user_rl_module_spec(config) -> Any:
    """The RLModule spec the user set with `config.rl_module(rl_module_spec=
    ...)`, or None (`config.rl_module_spec` merges it into the default spec;
    RLlib keeps the user's as `_rl_module_spec`)."""
    return config._rl_module_spec


def raise_config_error(config, message: str) -> None:
    """Raises a ValueError with `message` as RLlib's own `validate()` checks do
    (the message gains RLlib's hint on `experimental(_validate_config=False)`);
    with validation switched off that way, logs `message` as a warning and
    returns.

    RLlib's `AlgorithmConfig._value_error` does both; our configs' checks go
    through it so that they honour the same switch."""
    config._value_error(message)


class ModelConfigIncludesHook(PrecedesInBases, precedes=AlgorithmConfig):
    """For `AlgorithmConfig` subclasses, ahead of the RLlib config class:
    `config.model_config` gains `extra_model_config_includes()` (which the
    subclass defines) after the parent's automatic includes and before the
    user's `model_config` (the user's keys win).

    RLlib builds `model_config` as its private `_model_config_auto_includes`
    property (DQN's: `double_q`, `dueling`, `num_atoms`, ...) merged with the
    user's dict; its own configs extend that property."""

    def extra_model_config_includes(self) -> Dict[str, Any]:
        """The settings of this config the RLModule's `model_config` carries
        beyond the parent config's."""
        return {}

    @property
    @override(AlgorithmConfig)
    def _model_config_auto_includes(self) -> Dict[str, Any]:
        return super()._model_config_auto_includes | self.extra_model_config_includes()


def config_attribute_for_key(config, key: str) -> str:
    """The `AlgorithmConfig` attribute that `config.update_from_dict({key: v})`
    sets: `"num_workers"` -> `"num_env_runners"`, `"lambda"` -> `"lambda_"`,
    most keys unchanged.

    RLlib renames these keys in `AlgorithmConfig._translate_special_keys`, the
    first step of `update_from_dict`, and has no public lookup; the CLI needs
    the attribute to reject a key `update_from_dict` would silently set.
    Deprecated keys pass through without RLlib's deprecation error, as in
    `update_from_dict`."""
    return config._translate_special_keys(key, warn_deprecated=False)


@contextlib.contextmanager
def thawed(config) -> Iterator[None]:
    """The config takes writes inside the block, frozen or not, and is as
    frozen as it was after it, however the block ends.

    RLlib freezes a config by its `_is_frozen` flag, which
    `AlgorithmConfig.__setattr__` lets be set while frozen (and an evaluation
    config has its own flag, left alone here)."""
    was_frozen = config._is_frozen
    config._is_frozen = False
    try:
        yield
    finally:
        config._is_frozen = was_frozen
