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
* any TypeError RLlib's checks still raise becomes a ValueError quoting it.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from rllib_ners.replay_buffers.n_step import normalize_n_step
from rllib_ners.seam.config import raise_config_error


@contextlib.contextmanager
def rllib_validation(config) -> Iterator[None]:
    """Runs the enclosed RLlib `validate()` with comparable settings (see the
    module docstring); raises config errors (`raise_config_error`)."""
    check_n_step_setting(config)
    n_step = config.n_step
    if isinstance(n_step, (tuple, list)):
        config.n_step = normalize_n_step(n_step)[1]
    try:
        yield
    except TypeError as error:
        raise_config_error(
            config,
            f"RLlib's validate() of {type(config).__name__} failed on a setting of "
            f"the wrong type: {error}. Check the types of the settings passed to "
            f"config.training(...) and config.env_runners(...).",
        )
    finally:
        config.n_step = tuple(n_step) if isinstance(n_step, list) else n_step


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
