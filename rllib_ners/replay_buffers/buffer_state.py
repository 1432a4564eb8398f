"""The prioritized episode buffer's checkpoint: one flat dict (no Ray).

`gather_state()` collects the entries of the buffer's parts, each under the
key checkpoints have always used: the storage's (`RingStorage.get_state`:
`_next`, `_obs`, ...), the sampler's (`_alpha`, `sum_tree`, ..., and the
NERS sampler's per-slot memory, `_delta`, `_q`, ...), the pending
sample's and the step counts' (`bookkeeping`), RLlib's `sampled_timesteps`,
the settings a restore must match (`capacity`, `frame_stack`) and the random
generator's `rng`, so that a restored buffer draws the same next samples.
`restore_parts()` reads them back.
"""

from __future__ import annotations

from typing import Any, Dict, NamedTuple

import numpy as np

from rllib_ners.replay_buffers.bookkeeping import PendingSample, StepCounts
from rllib_ners.replay_buffers.replay_sampler import ReplaySampler
from rllib_ners.replay_buffers.ring_storage import RingStorage, copy_if_array, same


class BufferParts(NamedTuple):
    """The parts of a buffer that hold its state."""

    storage: RingStorage
    sampler: ReplaySampler
    pending: PendingSample
    counts: StepCounts


def gather_state(
    parts: BufferParts,
    *,
    sampled_timesteps: int,
    frame_stack: int,
    rng: np.random.Generator,
    copy: bool,
) -> Dict[str, Any]:
    """The checkpoint of a buffer; `copy=False` hands out the live arrays."""
    take = copy_if_array if copy else same
    state = parts.storage.get_state(copy=copy)
    state.update(parts.sampler.get_state(take))
    state.update(parts.pending.get_state(take))
    state.update(parts.counts.get_state())
    state["sampled_timesteps"] = sampled_timesteps
    state["capacity"] = parts.storage.capacity
    state["frame_stack"] = frame_stack
    state["rng"] = rng.bit_generator.state
    return state


def check_a_buffer_state(state: Any) -> None:
    """Raises ValueError unless `state` looks like a `get_state()` of our
    buffers (a dict with a `capacity`): anything else would fail on a
    missing key deep inside the restore."""
    if isinstance(state, dict) and "capacity" in state:
        return
    keys = sorted(map(str, state))[:5] if isinstance(state, dict) else None
    raise ValueError(
        f"set_state() takes what get_state() of this buffer (or of RLlib's "
        f"episode buffers) returned, got "
        f"{type(state).__name__}{f' with keys {keys}' if keys else ''}."
    )


def check_restorable(state: Dict[str, Any], *, capacity: int, frame_stack: int) -> None:
    """Raises unless `state` was saved by a buffer with these settings."""
    check_a_buffer_state(state)
    if int(state["capacity"]) != capacity:
        raise ValueError(
            f"Cannot restore a buffer of capacity {state['capacity']} into one of "
            f"capacity={capacity}; build it with the same `capacity`."
        )
    if int(state.get("frame_stack", 1)) != frame_stack:
        raise ValueError(
            f"Cannot restore a buffer saved with frame_stack="
            f"{state.get('frame_stack', 1)} into one with frame_stack="
            f"{frame_stack}; build it with the same `frame_stack`."
        )


def restore_parts(parts: BufferParts, state: Dict[str, Any], *, copy: bool) -> None:
    """Sets the parts from `gather_state()`'s output; `copy=False` adopts its
    arrays."""
    take = copy_if_array if copy else same
    parts.storage.set_state(state, copy=copy)
    parts.sampler.set_state(state, take)
    parts.pending.set_state(state, take)
    parts.counts.set_state(state)


def restored_rng(state: Dict[str, Any]) -> np.random.Generator:
    """A generator that goes on where the saved one stopped."""
    rng = np.random.default_rng()
    rng.bit_generator.state = state["rng"]
    return rng
