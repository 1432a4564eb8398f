"""RLlib's own `validate()`, run so that bad settings end as ValueErrors.

Our configs subclass RLlib's and call its `validate()`, which was written for
well-typed settings: RLlib 2.60's `DQNConfig.validate()` compares
`rollout_fragment_length < n_step`, so `n_step=(2, 5)` with an explicit
`rollout_fragment_length` ends in `TypeError: '<' not supported between
instances of 'int' and 'tuple'` (SAC's compares `n_step[1]` for a tuple, and
fails the same way for a list, as Tune's JSON round trips hand it back).

`rllib_validation(config)` wraps the parent's `validate()`:

* `n_step` is checked first, with a ValueError naming it and the fix
  (`rollout_fragment_length`'s range is in `setting_ranges`, which our
  configs check before RLlib's checks run);
* while RLlib's checks run, `n_step` is the largest n of its range: what RLlib
  can compare, and what the range needs (our buffers draw `lo..hi` inclusive);
  a list comes back as a tuple;
* RLlib's checks that index settings are run first with a message of our
  own: `replay_buffer_config` must be a dict with a `type` (RLlib's DQN
  indexes it: "'NoneType' object is not subscriptable"), and
  `rollout_fragment_length` must cover the largest n (RLlib's SAC formats
  `n_step[1]` of an int into its message, a TypeError);
* any TypeError RLlib's checks still raise becomes a ValueError quoting it.

`validate()` may run again on a frozen config, as RLlib's own configs allow
(`algo.config.validate()` after a build): a setting swapped in for RLlib's
checks thaws the config for the block only (`settings_seen_by_rllib`), and a
setting normalised in place is written only when it changes
(`normalize_setting`), which a validated config's never do.
"""

from __future__ import annotations

import contextlib
import numbers
from typing import Any, Iterator

from rllib_ners.replay_buffers.n_step import normalize_n_step
from rllib_ners.seam.config import raise_config_error, thawed


@contextlib.contextmanager
def rllib_validation(config) -> Iterator[None]:
    """Runs the enclosed RLlib `validate()` with comparable settings (see the
    module docstring); raises config errors (`raise_config_error`)."""
    check_n_step_setting(config)
    check_replay_buffer_config_has_a_type(config)
    check_rollout_fragment_covers_n_step(config)
    n_step = config.n_step
    if isinstance(n_step, list):  # Tune's JSON round trips turn tuples to lists
        normalize_setting(config, "n_step", tuple(n_step))
    comparable = {}
    if isinstance(n_step, (tuple, list)):
        comparable["n_step"] = normalize_n_step(n_step)[1]
    try:
        with settings_seen_by_rllib(config, **comparable):
            yield
    except TypeError as error:
        raise_config_error(
            config,
            f"RLlib's validate() of {type(config).__name__} failed on a setting of "
            f"the wrong type: {error}. Check the types of the settings passed to "
            f"config.training(...) and config.env_runners(...).",
        )


@contextlib.contextmanager
def settings_seen_by_rllib(config, **stand_ins: Any) -> Iterator[None]:
    """The enclosed block sees `stand_ins` in place of the config's settings of
    those names, and the config holds its own again after it, however the
    block ends. A frozen config thaws for the block only."""
    own = {name: getattr(config, name) for name in stand_ins}
    with thawed(config):
        try:
            for name, value in stand_ins.items():
                setattr(config, name, value)
            yield
        finally:
            for name, value in own.items():
                setattr(config, name, value)


def normalize_setting(config, name: str, value: Any) -> None:
    """Sets `name` to its normalised `value` where it differs, so that
    validating a validated (and frozen) config writes nothing."""
    if getattr(config, name) != value:
        setattr(config, name, value)


def check_n_step_setting(config) -> None:
    """`n_step` must be an int >= 1 or an inclusive range `(lo, hi)`."""
    try:
        normalize_n_step(config.n_step)
    except ValueError as error:
        raise_config_error(
            config,
            f"{error} Set it with config.training(n_step=3) or a range, e.g. "
            f"config.training(n_step=(2, 5)) (both ends inclusive).",
        )


def check_replay_buffer_config_has_a_type(config) -> None:
    """`replay_buffer_config` must be a dict naming its buffer `type`."""
    buffer_config = config.replay_buffer_config
    if isinstance(buffer_config, dict) and buffer_config.get("type") is not None:
        return
    raise_config_error(
        config,
        f"replay_buffer_config must be a dict with the buffer's 'type', got "
        f"{buffer_config!r}. Set it with config.training(replay_buffer_config="
        f"{{'type': 'rllib_ners.FastPrioritizedEpisodeReplayBuffer', "
        f"'capacity': 100000}}) (a new type replaces the whole dict, as in "
        f"RLlib; a dict without one updates the current settings).",
    )


def check_rollout_fragment_covers_n_step(config) -> None:
    """RLlib's DQN and SAC rule, with one message for both (and TD3, which
    runs DQN's training step): an explicit `rollout_fragment_length` must be
    at least the largest n of `n_step` ("auto" is n_step's largest n)."""
    length = config.rollout_fragment_length
    largest_n = normalize_n_step(config.n_step)[1]
    if config.in_evaluation or not isinstance(length, numbers.Real):
        return  # "auto"; a wrong type is named by `setting_ranges`
    if length < largest_n:
        raise_config_error(
            config,
            f"rollout_fragment_length={length} is smaller than the largest n of "
            f"n_step={config.n_step!r} ({largest_n}), which RLlib's DQN and SAC "
            f"refuse. Set config.env_runners(rollout_fragment_length='auto') "
            f"(n env steps per fragment) or at least {largest_n}.",
        )
