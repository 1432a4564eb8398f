"""Contiguous step sequences read from the ring storage (numpy only, no Ray).

A sequence starts at a stored transition and follows `next` pointers forward
for up to `T` steps, stopping early at the episode's stored end (a terminal or
truncated step, or a tail slot whose next chunk has not arrived). Columns are
`[B, T]` arrays with a `mask` of valid steps; see `sequence_columns`.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np

from rllib_ners.replay_buffers.buffer_names import (
    ACTIONS,
    INDICES,
    OBS,
    REWARDS,
    TERMINATEDS,
    TIMESTEPS,
    TRUNCATEDS,
    WEIGHTS,
)
from rllib_ners.replay_buffers.frame_stack import observations_at
from rllib_ners.replay_buffers.ring_storage import RingStorage


def sequence_columns(
    storage: RingStorage,
    starts: np.ndarray,
    weights: np.ndarray,
    T: int,
    *,
    frame_stack: int = 1,
    max_lengths: Optional[np.ndarray] = None,
    include_infos: bool = False,
) -> Dict[str, np.ndarray]:
    """Follows every start forward for up to `T` (or `max_lengths`) steps.

    `obs` has `T + 1` columns: `obs[:, k]` is the observation before step `k`,
    and `obs[b, lengths[b]]` the observation after the row's last step (for
    bootstrapping); from there on every column repeats it, so `obs[:, T]` is
    each row's bootstrap observation. Other padding repeats the last valid
    entry; `rewards` are 0 and the flags False at padded steps.
    """
    B = starts.shape[0]
    step_slots = np.empty((B, T), dtype=np.int64)
    mask = np.zeros((B, T), dtype=bool)
    current = starts.copy()
    active = np.ones(B, dtype=bool)
    for k in range(T):
        step_slots[:, k] = current
        mask[:, k] = active
        nxt = storage.next[current]
        ended = storage.terminated[current] | storage.truncated[current]
        active = active & ~ended & storage.is_transition[nxt]
        if max_lengths is not None:
            active &= k + 1 < max_lengths
        current = np.where(active, nxt, current)
    lengths = mask.sum(axis=1)
    bootstrap = storage.next[step_slots[np.arange(B), lengths - 1]]
    # Column j holds the observation before step j; from the row's length on
    # that is the bootstrap observation after its last step (padding too).
    after_end = np.arange(T + 1)[None, :] >= lengths[:, None]
    obs_slots = np.where(
        after_end,
        bootstrap[:, None],
        np.concatenate([step_slots, bootstrap[:, None]], axis=1),
    )
    batch = {
        OBS: observations_at(storage, obs_slots, frame_stack),
        ACTIONS: storage.actions[step_slots],
        REWARDS: np.where(mask, storage.rewards[step_slots], 0.0).astype(np.float32),
        TERMINATEDS: mask & storage.terminated[step_slots],
        TRUNCATEDS: mask & storage.truncated[step_slots],
        "mask": mask,
        "lengths": lengths,
        WEIGHTS: weights,
        INDICES: starts,
        "step_indices": step_slots,
        TIMESTEPS: storage.ts[step_slots],
    }
    for key, column in storage.extra.items():
        batch[key] = column[step_slots]
    if include_infos:
        batch["infos"] = storage.infos[obs_slots]
    return batch


def chunk_pieces(
    step_slots: np.ndarray, chunk_lengths: np.ndarray, T: int
) -> Tuple[np.ndarray, np.ndarray]:
    """Cuts chunks of steps at `0, T, 2T, ...` into pieces inside each chunk.

    Args:
        step_slots: The step slots of consecutive chunks, concatenated.
        chunk_lengths: Number of steps of each chunk.
        T: Largest piece length.

    Returns:
        `(starts, max_lengths)`: each piece's first slot and its length.
    """
    # Row r covers chunk positions [r_start, r_start + r_len).
    pieces = -(-chunk_lengths // T)
    chunk_of_row = np.repeat(np.arange(chunk_lengths.size), pieces)
    chunk_offsets = np.concatenate([[0], np.cumsum(chunk_lengths)[:-1]])
    first_row = np.concatenate([[0], np.cumsum(pieces)[:-1]])
    piece = np.arange(pieces.sum()) - first_row[chunk_of_row]
    row_start = piece * T
    max_lengths = np.minimum(T, chunk_lengths[chunk_of_row] - row_start)
    starts = step_slots[chunk_offsets[chunk_of_row] + row_start]
    return starts, max_lengths
