"""The checks of `SETTING_RANGES` (`setting_ranges`) and the other checks our
configs run first in `validate()` (`SettingRangesMixin`), with the error
texts that name the setting and a valid value."""

from __future__ import annotations

import math
import numbers
from typing import Any, Optional

import numpy as np
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.utils.annotations import override

from rllib_ners.algorithms.common.config.config_checks import check_layer_widths
from rllib_ners.algorithms.common.config.setting_ranges import (
    REPLAY_BUFFER_CONFIG,
    SETTING_RANGES,
    Bound,
    SettingRange,
)
from rllib_ners.algorithms.common.config.switched_settings import (
    warn_of_switched_off_settings,
)
from rllib_ners.algorithms.common.config.unread_settings import (
    check_no_epoch_settings,
    check_no_old_stack_optimizer,
    check_train_batch_size_is_read,
)
from rllib_ners.seam.config import raise_config_error
from rllib_ners.utils.mixin_order import PrecedesInBases


class SettingRangesMixin(PrecedesInBases, precedes=AlgorithmConfig):
    """Checks `SETTING_RANGES` at the start of `validate()`, before the parent
    config's checks (first among the config's bases, so before the other
    mixins' checks too), and warns of settings their switch leaves off
    (`switched_settings`)."""

    @override(AlgorithmConfig)
    def validate(self) -> None:
        check_setting_ranges(self)
        check_layer_widths(self)  # config_checks
        check_train_batch_size_is_read(self)
        check_no_epoch_settings(self)
        check_no_old_stack_optimizer(self)
        warn_of_switched_off_settings(self)
        super().validate()


def check_setting_ranges(config) -> None:
    """Raises a config error (`raise_config_error`) for the first setting of
    `config` out of its range in `SETTING_RANGES`."""
    config_classes = {cls.__name__ for cls in type(config).__mro__}
    for rule in SETTING_RANGES:
        if rule.configs and config_classes.isdisjoint(rule.configs):
            continue
        value = setting_value(config, rule.name)
        if value is UNSET or _fits(rule, value, config):
            continue
        raise_config_error(config, _range_error(rule, value, config))


# What `setting_value` returns for a setting the config does not have.
UNSET = object()


def setting_value(config, name: str) -> Any:
    """The value of setting `name` ("gamma", "replay_buffer_config['alpha']"),
    or `UNSET` when the config does not have it."""
    if name.startswith(f"{REPLAY_BUFFER_CONFIG}['"):
        buffer_config = getattr(config, REPLAY_BUFFER_CONFIG, None) or {}
        return buffer_config.get(name[len(REPLAY_BUFFER_CONFIG) + 2 : -2], UNSET)
    return getattr(config, name, UNSET)


def _fits(rule: SettingRange, value: Any, config) -> bool:
    if rule.boolean:
        return isinstance(value, (bool, np.bool_))
    if any(_is_same(value, allowed) for allowed in rule.allowed):
        return True
    if rule.schedule and isinstance(value, (list, tuple)):
        return len(value) > 0 and all(
            isinstance(point, (list, tuple))
            and len(point) == 2
            and _is_number(point[0])
            and point[0] >= 0
            and _in_range(rule, point[1], config)
            for point in value
        )
    if rule.n_step_range and isinstance(value, (list, tuple)):
        return (
            len(value) == 2
            and all(_in_range(rule, end, config) for end in value)
            and value[0] <= value[1]
        )
    return _in_range(rule, value, config)


def _is_same(value: Any, allowed: Any) -> bool:
    """`value` is the allowed None or string (not a number equal to it)."""
    return value is allowed or (isinstance(value, str) and value == allowed)


def _in_range(rule: SettingRange, value: Any, config) -> bool:
    if not _is_number(value):
        return False
    if rule.integer and not (
        isinstance(value, numbers.Integral)
        or (rule.integral_floats and float(value).is_integer())
    ):
        return False
    low, high = _bound(rule.low, config), _bound(rule.high, config)
    if low is not None and (value <= low if rule.low_open else value < low):
        return False
    return high is None or (value < high if rule.high_open else value <= high)


def _is_number(value: Any) -> bool:
    return (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


def _bound(bound: Bound, config) -> Optional[float]:
    """A bound's number; None when unbounded or the bounding setting is unset
    (or no number: its own rule reports it)."""
    if not isinstance(bound, str):
        return bound
    value = setting_value(config, bound)
    return value if _is_number(value) else None


def _range_error(rule: SettingRange, value: Any, config) -> str:
    """The error for `value` of `rule.name` out of range: the rule, what the
    setting does, and a valid value in the call that sets it."""
    return (
        f"{rule.name}={value!r} is not {rule.what}: use {_range_text(rule, config)} "
        f"({rule.why}), e.g. {_fix(rule, valid_example(rule, config))}."
    )


def _range_text(rule: SettingRange, config=None) -> str:
    """The rule's range in words, e.g. "a number in (0, 1]", "None or an
    integer >= 0"; a bounding setting with its value where `config` has one."""
    if rule.boolean:
        return "True or False"
    kind = "an integer" if rule.integer else "a number"
    low, high = (_bound_text(bound, config) for bound in (rule.low, rule.high))
    if low is not None and high is not None:
        opening = "(" if rule.low_open else "["
        closing = ")" if rule.high_open else "]"
        text = f"{kind} in {opening}{low}, {high}{closing}"
    elif low is not None:
        text = f"{kind} {'>' if rule.low_open else '>='} {low}"
    elif high is not None:
        text = f"{kind} {'<' if rule.high_open else '<='} {high}"
    else:
        text = kind if rule.integer else "a finite number"
    if rule.schedule:
        text += " or a schedule of [timestep, value] pairs with such values"
    if rule.n_step_range:
        text += " or an inclusive range (lo, hi) of such values"
    if rule.allowed:
        text = " or ".join([*(repr(allowed) for allowed in rule.allowed), text])
    return text


def _bound_text(bound: Bound, config) -> Optional[str]:
    if not isinstance(bound, str):
        return None if bound is None else f"{bound:g}"
    value = None if config is None else _bound(bound, config)
    return bound if value is None else f"{bound}={value!r}"


def valid_example(rule: SettingRange, config) -> Any:
    """`rule.example`, or the bounding setting's value where the example lies
    outside a bound set by another setting."""
    example = rule.example
    if _fits(rule, example, config):
        return example
    low, high = _bound(rule.low, config), _bound(rule.high, config)
    step = 1 if rule.integer else 1.0
    if high is not None and example > high:
        example = high - step if rule.high_open else high
    elif low is not None and example < low:
        example = low + step if rule.low_open else low
    return int(example) if rule.integer else example


def _fix(rule: SettingRange, example: Any) -> str:
    if rule.key is not None:
        return f"config.{rule.method}({rule.setting}={{'{rule.key}': {example!r}}})"
    return f"config.{rule.method}({rule.setting}={example!r})"
