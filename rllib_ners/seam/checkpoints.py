"""RLlib's `Checkpointable`: which components a `get_state()` call asks for.

Pinned by `tests/rllib_contract/test_seam_checkpoints.py`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["includes_component"]


def includes_component(
    checkpointable, name: str, components: Any, not_components: Any
) -> bool:
    """Whether `checkpointable.get_state(components, not_components=...)`
    should include the state entry `name`, by RLlib's rule (every component
    when `components` is None, or `name` and its sub-paths listed; never one
    in `not_components`). RLlib's `Checkpointable` exposes the rule only as
    its private `_check_component`."""
    return checkpointable._check_component(name, components, not_components)
