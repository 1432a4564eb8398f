"""Mixins whose overrides count only when they come before the class they extend.

Our config, Algorithm and Learner mixins override methods of an RLlib class
(`validate()`, `setup()`, `update()`, ...) and reach it with `super()`. Listed
after that class in a subclass's bases, a mixin falls behind it in the method
resolution order and its overrides are shadowed without a word. A mixin that
extends `PrecedesInBases` names the class it must precede
(`class M(PrecedesInBases, precedes=AlgorithmConfig)`), and every class that
lists it is checked when it is defined: one that puts a subclass of that class
ahead of the mixin is a TypeError naming the fix.
"""

from __future__ import annotations

from typing import Optional

__all__ = ["PrecedesInBases"]


class PrecedesInBases:
    """Base of a mixin that must come before `precedes` (and its subclasses)
    in the bases of any class that lists it; see the module docstring."""

    def __init_subclass__(cls, precedes: Optional[type] = None, **kwargs):
        super().__init_subclass__(**kwargs)
        if precedes is not None:
            # Stored in the mixin's own namespace: subclasses are checked
            # against it, they do not declare it again.
            cls._precedes_in_bases = precedes
        _check_mixin_order(cls)


def _check_mixin_order(cls: type) -> None:
    mro = cls.__mro__
    for position, mixin in enumerate(mro):
        extended = mixin.__dict__.get("_precedes_in_bases")
        if extended is None:
            continue
        for ahead in mro[1:position]:
            if issubclass(ahead, extended) and not issubclass(ahead, mixin):
                raise TypeError(
                    f"class {cls.__qualname__} lists {ahead.__name__} before "
                    f"{mixin.__name__}, so {ahead.__name__}'s methods would "
                    f"shadow the mixin's overrides. List the mixin first: "
                    f"class {cls.__name__}({mixin.__name__}, ..., "
                    f"{ahead.__name__})."
                )
