"""Input checks shared by buffers, NERS settings and algorithm configs (no Ray)."""

from __future__ import annotations

from typing import Any


def is_finite_number(value: Any) -> bool:
    """True for a finite real number; booleans and numeric strings are not
    numbers to a user (`True` is an int to Python)."""
    import math
    import numbers

    return (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


def is_finite_positive_number(value: Any) -> bool:
    """True for a finite real number > 0, by `is_finite_number`'s rules."""
    return is_finite_number(value) and value > 0


def is_positive_int(value: Any, *, allow_zero: bool = False) -> bool:
    """True for an integral number >= 1 (>= 0 with `allow_zero`).

    Integral floats pass (Tune's quantised search spaces hand out `5.0`);
    booleans do not: `True` is an int to Python, never a size to a user.
    """
    import math
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    if not math.isfinite(value) or int(value) != value:
        return False
    return value >= (0 if allow_zero else 1)


def check_positive_int(
    name: str, value: Any, *, fix: str, allow_zero: bool = False
) -> int:
    """Returns `int(value)` or raises a ValueError naming `name` and the `fix`."""
    if not is_positive_int(value, allow_zero=allow_zero):
        low = 0 if allow_zero else 1
        raise ValueError(
            f"`{name}` must be an integer >= {low}, got {name}={value!r}. {fix}"
        )
    return int(value)
