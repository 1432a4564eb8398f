"""Vectorised sum and min trees for prioritised sampling (numpy only, no Ray).

RLlib's `SegmentTree` is a binary tree held in a Python list and walked in
Python, one item at a time. Here every operation takes a whole batch of indices
and costs a fixed, small number of numpy calls, whatever the batch size.

Design: with batches of ~32 indices a numpy call costs about a microsecond of
fixed overhead however little it computes, and `cumsum` (which does not
vectorise) about 4 ns per element. So the trees minimise numpy calls and
cumsum'd elements, not flops. Both are stored as just two levels: the leaves,
cut into `num_blocks` blocks of `fanout` leaves, and one summary per block.

- `SumTree` keeps, per block, the *inclusive prefix sums* of its leaves
  (`_prefix[b, j] = leaf[b*F] + ... + leaf[b*F + j]`) and the block sums. A
  batched prefix-sum search `cumsum`s the block sums (the level above the
  blocks is never stored: one contiguous cumsum over all blocks is cheaper than
  walking more levels), `searchsorted`s the blocks, and finds the leaf inside
  each block with one compare + `argmax` over the gathered prefix rows. That is
  about 15 numpy calls per search, with no loop over levels. The cumsum stops
  after the last block ever written to (`_used_blocks`): a replay buffer fills
  its slots from the first, and the blocks after hold only zeros, which add
  nothing to the sums and are never hit, so a search of a buffer 1% full
  cumsums 1% of the blocks, with the same result.
- `MinTree` keeps the minimum of every block; `min()` reduces those.

An update rewrites the touched blocks' summaries from their leaves (never
increments them), so repeated updates accumulate no floating point drift.

`fanout` is chosen near `sqrt(capacity / batch) / 2` for the typical number
of indices per search or update (`typical_batch`, 32 unless the owner lays the
tree out for its batch): at the full tree's balance of the two cumsums (over
all blocks per search, over the touched blocks per update) it would be
`sqrt(capacity / batch)`, but the search cumsums only the blocks written so
far, so while a buffer fills, smaller blocks win. For capacity 1M, batch 256
(SAC's and TD3's) that is 32 leaves per block, for batch 32 64.
"""

from __future__ import annotations

import abc
import math

import numpy as np

__all__ = ["DEFAULT_TYPICAL_BATCH", "MinTree", "SumTree", "last_writes"]

# Typical number of indices per search or update (a training batch), where the
# owner does not say. Only used to pick the block size; any batch size works.
DEFAULT_TYPICAL_BATCH = 32


def _block_size(capacity: int, typical_batch: int = DEFAULT_TYPICAL_BATCH) -> int:
    """Leaves per block: the power of two nearest `sqrt(capacity /
    typical_batch) / 2`, >= 16 (see the module docstring).

    A search of a full tree cumsums `capacity / fanout` block sums, an update
    of `typical_batch` scattered leaves as many blocks of `fanout` leaves: the
    sum of both is smallest at `sqrt(capacity / typical_batch)`; half that
    suits a tree still filling, whose search cumsums fewer blocks.
    """
    if int(typical_batch) != typical_batch or typical_batch <= 0:
        raise ValueError(
            f"Tree `typical_batch` must be a positive integer, got "
            f"typical_batch={typical_batch!r}."
        )
    ideal = math.sqrt(max(1, capacity) / typical_batch) / 2
    return max(16, 2 ** round(math.log2(max(1.0, ideal))))


def last_writes(indices: np.ndarray, values: np.ndarray):
    """Sorted unique `indices`, each with the value given last for it.

    That is the result of assigning `leaf[indices[k]] = values[k]` in order (numpy
    leaves the winner of a duplicated fancy assignment unspecified, so the trees
    must not rely on it). Takes int64 `indices` and `values` of the same shape.
    Strictly increasing input (the usual case: stratified samples are sorted and
    rarely repeat) is returned as is after one check.
    """
    if indices.shape[0] < 2 or (indices[1:] > indices[:-1]).all():
        return indices, values
    # A stable sort keeps repeated indices in call order, so the last entry of
    # each run of equal indices is the last write.
    order = np.argsort(indices, kind="stable")
    indices, values = indices[order], values[order]
    keep = np.empty(indices.shape[0], dtype=bool)
    np.not_equal(indices[1:], indices[:-1], out=keep[:-1])
    keep[-1] = True
    return indices[keep], values[keep]


class _BlockTree(abc.ABC):
    """`capacity` leaves in `num_blocks` blocks of `fanout`, one summary per block.

    `self._leaves` is padded with the neutral element to `num_blocks * fanout`;
    `self._leaf_blocks` is the same memory seen as `[num_blocks, fanout]`.
    Subclasses define the block summary in `_refresh_blocks`.
    """

    _neutral: float = 0.0

    def __init__(self, capacity: int, typical_batch: int = DEFAULT_TYPICAL_BATCH):
        if int(capacity) != capacity or capacity <= 0:
            raise ValueError(
                f"Tree `capacity` must be a positive integer, got "
                f"capacity={capacity!r}."
            )
        self.capacity = int(capacity)
        self.typical_batch = int(typical_batch)
        self.fanout = _block_size(self.capacity, self.typical_batch)
        self._shift = self.fanout.bit_length() - 1
        self.num_blocks = -(-self.capacity // self.fanout)
        self._leaves = np.full(self.num_blocks * self.fanout, self._neutral)
        self._leaf_blocks = self._leaves.reshape(self.num_blocks, self.fanout)

    # ---- reads --------------------------------------------------------------
    @property
    def leaves(self) -> np.ndarray:
        """A read-only view of the `capacity` leaf values."""
        view = self._leaves[: self.capacity]
        view.flags.writeable = False
        return view

    def __getitem__(self, indices):
        return self._leaves[: self.capacity][indices]

    # ---- writes -------------------------------------------------------------
    def update(self, indices, values) -> None:
        """Sets `leaf[indices] = values` and refreshes the touched blocks.

        Repeated indices are allowed: the last value given for an index wins, as
        with sequential assignment.
        """
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        values = np.broadcast_to(np.asarray(values, dtype=np.float64), indices.shape)
        if indices.size == 0:
            return
        if indices.min() < 0 or indices.max() >= self.capacity:
            raise ValueError(
                f"Tree indices must lie in [0, {self.capacity}), got "
                f"[{indices.min()}, {indices.max()}]."
            )
        self.assign_unique(*last_writes(indices, values))

    def blocks_of(self, indices: np.ndarray) -> np.ndarray:
        """The blocks holding sorted `indices`, for `assign_unique`.

        A block may be listed more than once (refreshing it twice is harmless).
        Only long index lists are deduplicated: ~32 scattered indices rarely
        share a block, and the dedup would cost more than it saves.
        """
        blocks = indices >> self._shift
        if blocks.shape[0] > 2 * DEFAULT_TYPICAL_BATCH:
            keep = np.empty(blocks.shape[0], dtype=bool)
            keep[0] = True
            np.not_equal(blocks[1:], blocks[:-1], out=keep[1:])
            blocks = blocks[keep]
        return blocks

    def assign_unique(
        self, indices: np.ndarray, values: np.ndarray, blocks: np.ndarray = None
    ) -> None:
        """`update` for sorted, unique, in-range int64 `indices` (not checked).

        For callers that already deduplicated the indices, e.g. to update a sum
        and a min tree of the same capacity from one batch, passing the same
        `blocks_of(indices)` to both.
        """
        self._leaves[indices] = values
        self._refresh_blocks(self.blocks_of(indices) if blocks is None else blocks)

    @abc.abstractmethod
    def _refresh_blocks(self, blocks: np.ndarray) -> None:
        """Recomputes the summaries of `blocks` from their leaves."""

    # ---- state --------------------------------------------------------------
    def get_state(self) -> dict:
        return {"capacity": self.capacity, "leaves": self.leaves.copy()}

    def set_state(self, state: dict) -> None:
        if int(state["capacity"]) != self.capacity:
            raise ValueError(
                f"Cannot restore a tree of capacity {state['capacity']} into one of "
                f"capacity {self.capacity}."
            )
        self._leaves[:] = self._neutral
        self._leaves[: self.capacity] = state["leaves"]
        self._refresh_blocks(np.arange(self.num_blocks))


class SumTree(_BlockTree):
    """Leaf sums with a batched, stratifiable prefix-sum search."""

    _neutral = 0.0
    # Largest number of values searched at once (bounds the gathered rows).
    _SEARCH_CHUNK = 4096

    def __init__(self, capacity: int, typical_batch: int = DEFAULT_TYPICAL_BATCH):
        super().__init__(capacity, typical_batch)
        self._prefix = np.zeros((self.num_blocks, self.fanout))
        self._block_sums = np.zeros(self.num_blocks)
        # `_offsets[b]` = sum of the blocks before `b`, up to `_offsets[u]` =
        # total for `u = _used_blocks`; refilled by every search. `_offsets[0]`
        # stays 0.
        self._offsets = np.zeros(self.num_blocks + 1)
        # The blocks from the first to the last one written to (the blocks
        # after it hold only zero leaves).
        self._used_blocks = 0
        self._arange = np.arange(DEFAULT_TYPICAL_BATCH, dtype=np.float64)

    def _refresh_blocks(self, blocks: np.ndarray) -> None:
        prefix = np.cumsum(self._leaf_blocks.take(blocks, axis=0), axis=1)
        self._prefix[blocks] = prefix
        # A copy of the last prefix sum, not a fresh (differently rounded) sum:
        # the search relies on `_offsets[b] + _prefix[b, -1] == _offsets[b + 1]`
        # holding bit for bit.
        self._block_sums[blocks] = prefix[:, -1]
        if blocks.shape[0]:
            self._used_blocks = max(self._used_blocks, int(blocks.max()) + 1)

    def set_state(self, state: dict) -> None:
        super().set_state(state)
        written = np.flatnonzero(self._block_sums)
        self._used_blocks = int(written[-1]) + 1 if written.shape[0] else 0

    def total(self) -> float:
        return float(self._block_sums.sum())

    def _fill_offsets(self) -> float:
        """Refreshes `_offsets` (cumulative block sums) up to the last used
        block; returns the total."""
        used = self._used_blocks
        np.cumsum(self._block_sums[:used], out=self._offsets[1 : used + 1])
        total = float(self._offsets[used])
        if not total > 0.0:
            raise ValueError("Cannot search a SumTree whose total priority is 0.")
        return total

    def find_prefixsum(self, values) -> np.ndarray:
        """For each `v` returns the smallest leaf index `i` with `cumsum[i] > v`.

        That is the leaf hit by a point `v` thrown onto the line of priorities,
        so leaves with priority 0 are never returned. Values at or beyond the
        total (which floating point rounding can produce) map to the last leaf
        with positive priority. Raises if the tree is empty.
        """
        values = np.array(values, dtype=np.float64).reshape(-1)
        total = self._fill_offsets()
        # Clamp into [0, total): the last point below the total falls into the
        # last positive leaf, which is where values at or past the total belong.
        np.clip(values, 0.0, math.nextafter(total, 0.0), out=values)
        if values.shape[0] <= self._SEARCH_CHUNK:
            return self._search(values)
        return np.concatenate(
            [
                self._search(values[i : i + self._SEARCH_CHUNK])
                for i in range(0, values.shape[0], self._SEARCH_CHUNK)
            ]
        )

    def sample_stratified(
        self, batch_size: int, rng: np.random.Generator
    ) -> np.ndarray:
        """Draws `batch_size` leaves proportional to their values.

        The line `[0, total)` is cut into `batch_size` equal strata and one point is
        drawn uniformly in each (as in Schaul et al. 2016 and the NERS reference),
        which lowers the variance of the batch composition against i.i.d. draws.
        The returned indices are sorted.
        """
        total = self._fill_offsets()
        if self._arange.shape[0] < batch_size:
            self._arange = np.arange(batch_size, dtype=np.float64)
        points = rng.random(batch_size)
        points += self._arange[:batch_size]
        points *= total / batch_size
        # `(k + u) * total / n` can round up to `total` itself; keep it below.
        np.minimum(points, math.nextafter(total, 0.0), out=points)
        return self._search(points)

    def _search(self, values: np.ndarray) -> np.ndarray:
        """`find_prefixsum` for values in `[0, total)`, after `_fill_offsets()`.

        Let `C = _offsets`. Block `b` covers `[C[b], C[b+1])` on the line, and
        leaf `j` of it ends at `C[b] + _prefix[b, j]`. Since `_block_sums[b]` *is*
        `_prefix[b, -1]` and `C` is its sequential cumsum, the last of these
        equals `C[b + 1]` exactly, so for the block `b` found by `searchsorted`
        some leaf of `b` ends above `v`, and `argmax` of `ends > v` finds the
        first one. Its end is above `v`, while the end before it (or the block
        start `C[b]`) is not, so the leaf is positive: zero leaves are never hit.
        """
        used = self._used_blocks
        blocks = np.searchsorted(self._offsets[1 : used + 1], values, side="right")
        ends = self._prefix.take(blocks, axis=0)
        ends += self._offsets.take(blocks)[:, None]
        inside = (ends > values[:, None]).argmax(axis=1)
        return (blocks << self._shift) + inside


class MinTree(_BlockTree):
    """Leaf minimum; unused leaves hold +inf so they never count."""

    _neutral = np.inf

    def __init__(self, capacity: int, typical_batch: int = DEFAULT_TYPICAL_BATCH):
        super().__init__(capacity, typical_batch)
        self._block_mins = np.full(self.num_blocks, np.inf)

    def _refresh_blocks(self, blocks: np.ndarray) -> None:
        self._block_mins[blocks] = self._leaf_blocks.take(blocks, axis=0).min(axis=1)

    def min(self) -> float:
        return float(self._block_mins.min())
