"""Vectorised sum and min trees for prioritised sampling (numpy only, no Ray).

RLlib's `SegmentTree` is a binary tree held in a Python list and walked in
Python, one item at a time. Here every operation takes a whole batch of indices
and costs a fixed, small number of numpy calls, whatever the batch size.

With batches of ~32 indices every numpy call costs about a microsecond of fixed
overhead no matter how little it computes, so the trees are built to need as
few calls as possible rather than as few flops as possible. Both are *two-level*
trees: the leaves are cut into `num_blocks` blocks of `fanout` leaves each
(`fanout ~ sqrt(capacity)`, a power of two, so `fanout ** 2 >= capacity`), and
the only internal level holds one summary per block.

- `SumTree` stores, per block, the *inclusive prefix sums* of its leaves
  (`_prefix[b, j] = leaf[b*F] + ... + leaf[b*F + j]`), and the block sums
  (`_block_sums[b] = _prefix[b, -1]`). A batched prefix-sum search is then two
  `searchsorted` calls: one over the cumulative block sums (a fresh `cumsum` of
  `num_blocks` values, cheap because it is contiguous), one over the gathered
  prefix rows of the hit blocks shifted by their block offsets, which together
  form one sorted array. No per-level loops and no `[batch, fanout]` compares.
- `MinTree` stores the minimum of every block; its `min()` reduces those.

An update rewrites the touched blocks' summaries from their leaves (never
increments them), so repeated updates accumulate no floating point drift.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["MinTree", "SumTree", "last_writes"]


def _block_size(capacity: int) -> int:
    """The block size (`fanout`): the power of two with `fanout ** 2 >= capacity`.

    Searching costs ~`num_blocks` (one contiguous cumsum) plus ~`batch * fanout`
    (gathering the hit blocks), updating ~`batch * fanout`; near `sqrt(capacity)`
    both stay small (512 leaves per block at 100k, 1024 at 1M). At least 16, so
    that tiny trees still have a normal shape.
    """
    bits = math.ceil(math.log2(max(2, capacity)))
    return max(16, 2 ** math.ceil(bits / 2))


def last_writes(indices: np.ndarray, values: np.ndarray):
    """Sorted unique `indices` with, for each, the value given last for it.

    That is the result of assigning `leaf[indices[k]] = values[k]` in order (numpy
    leaves the winner of a duplicated fancy assignment unspecified, so the tree
    must not rely on it). `indices` must be int64 and `values` of the same shape.
    Sorted input (what stratified sampling returns) skips the sort.
    """
    if indices.shape[0] > 1 and not (indices[1:] >= indices[:-1]).all():
        # A stable sort keeps duplicates in call order, so the last of each run
        # of equal indices is the last write.
        order = np.argsort(indices, kind="stable")
        indices, values = indices[order], values[order]
    return _last_of_runs(indices, values)


def _last_of_runs(indices: np.ndarray, values: np.ndarray):
    """For sorted `indices`: keeps the last entry of every run of equal ones."""
    if indices.shape[0] < 2:
        return indices, values
    keep = np.empty(indices.shape[0], dtype=bool)
    np.not_equal(indices[1:], indices[:-1], out=keep[:-1])
    keep[-1] = True
    return indices[keep], values[keep]


def _unique_sorted(sorted_ints: np.ndarray) -> np.ndarray:
    """`np.unique` for already sorted input, in two numpy calls instead of ~8."""
    if sorted_ints.shape[0] < 2:
        return sorted_ints
    keep = np.empty(sorted_ints.shape[0], dtype=bool)
    keep[0] = True
    np.not_equal(sorted_ints[1:], sorted_ints[:-1], out=keep[1:])
    return sorted_ints[keep]


class _BlockTree:
    """`capacity` leaves in `num_blocks` blocks of `fanout`, one summary per block.

    `self._leaves` is padded with the neutral element to `num_blocks * fanout`;
    `self._leaf_blocks` is the same memory seen as `[num_blocks, fanout]`.
    Subclasses define the block summary in `_refresh_blocks`.
    """

    _neutral: float = 0.0

    def __init__(self, capacity: int):
        if int(capacity) != capacity or capacity <= 0:
            raise ValueError(
                f"Tree `capacity` must be a positive integer, got capacity={capacity!r}."
            )
        self.capacity = int(capacity)
        self.fanout = _block_size(self.capacity)
        # Two levels: leaves and block summaries (the root is reduced on demand).
        self.depth = 2
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

    def assign_unique(self, indices: np.ndarray, values: np.ndarray) -> None:
        """`update` for sorted, unique, in-range int64 `indices` (not checked).

        For callers that already deduplicated the indices (e.g. to update a sum
        and a min tree from one batch).
        """
        self._leaves[indices] = values
        self._refresh_blocks(_unique_sorted(indices >> self._shift))

    def update_range(self, start: int, values) -> None:
        """Sets a contiguous run of leaves `[start, start + len(values))`."""
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        stop = start + values.size
        if start < 0 or stop > self.capacity:
            raise ValueError(
                f"Tree range [{start}, {stop}) is outside [0, {self.capacity})."
            )
        if values.size == 0:
            return
        self._leaves[start:stop] = values
        self._refresh_blocks(
            np.arange(start >> self._shift, ((stop - 1) >> self._shift) + 1)
        )

    def _refresh_blocks(self, blocks: np.ndarray) -> None:
        """Recomputes the summaries of `blocks` (sorted, unique) from the leaves."""
        raise NotImplementedError

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

    def __init__(self, capacity: int):
        super().__init__(capacity)
        self._prefix = np.zeros((self.num_blocks, self.fanout))
        self._block_sums = np.zeros(self.num_blocks)
        # `_offsets[b]` = sum of all blocks before `b` (and `_offsets[-1]` the
        # total), refilled by every search; `_offsets[0]` stays 0.
        self._offsets = np.zeros(self.num_blocks + 1)

    def _refresh_blocks(self, blocks: np.ndarray) -> None:
        prefix = np.cumsum(self._leaf_blocks[blocks], axis=1)
        self._prefix[blocks] = prefix
        # Exactly the last prefix sum (a copy, not a new sum): the search relies
        # on `offset[b] + prefix[b, -1] == offset[b + 1]` holding bit for bit.
        self._block_sums[blocks] = prefix[:, -1]

    def total(self) -> float:
        return float(self._block_sums.sum())

    def reduce_all(self) -> float:
        return self.total()

    def _fill_offsets(self) -> float:
        """Refreshes `_offsets` (cumulative block sums); returns their total."""
        np.cumsum(self._block_sums, out=self._offsets[1:])
        total = float(self._offsets[-1])
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
        if values.size == 0:
            return np.zeros(0, dtype=np.int64)
        order = np.argsort(values, kind="stable")
        found = np.empty(values.shape, dtype=np.int64)
        found[order] = self._search_sorted(values[order], total)
        return found

    def sample_stratified(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """Draws `batch_size` leaves proportional to their values.

        The line `[0, total)` is cut into `batch_size` equal strata and one point is
        drawn uniformly in each (as in Schaul et al. 2016 and the NERS reference),
        which lowers the variance of the batch composition against i.i.d. draws.
        The returned indices are sorted.
        """
        total = self._fill_offsets()
        points = rng.random(batch_size)
        points += np.arange(batch_size)
        points *= total / batch_size
        return self._search_sorted(points, total)

    def _search_sorted(self, values: np.ndarray, total: float) -> np.ndarray:
        """`find_prefixsum` for sorted `values`, after `_fill_offsets()`.

        Let `C = _offsets`. Block `b` covers the part `[C[b], C[b+1])` of the
        line; inside it, leaf `j` ends at `C[b] + _prefix[b, j]`. Because
        `_block_sums[b]` *is* `_prefix[b, -1]` and `C` is its sequential cumsum,
        `C[b] + _prefix[b, -1] == C[b + 1]` exactly, so the shifted prefix rows of
        the distinct hit blocks, laid end to end, form one non-decreasing array
        whose entries are the global cumulative sums of those blocks' leaves.
        One `searchsorted` (side="right": first entry `> v`) finds every leaf.
        The hit entry is strictly above its predecessor (or above the block's
        start `C[b] <= v`), so its leaf is positive: zero leaves are never hit.
        """
        # Clamp into [0, total): the last point below the total falls in the
        # last positive leaf, which is what values at or past the total map to.
        np.clip(values, 0.0, np.nextafter(total, 0.0), out=values)
        blocks = np.searchsorted(self._offsets[1:], values, side="right")
        # Distinct hit blocks: each must appear once for the rows to stay sorted.
        hit = _unique_sorted(blocks)
        rows = self._prefix[hit]
        rows += self._offsets[hit][:, None]
        flat = np.searchsorted(rows.reshape(-1), values, side="right")
        # Position `flat` in the concatenated rows -> leaf index.
        return (hit << self._shift)[flat >> self._shift] + (flat & (self.fanout - 1))


class MinTree(_BlockTree):
    """Leaf minimum; unused leaves hold +inf so they never count."""

    _neutral = np.inf

    def __init__(self, capacity: int):
        super().__init__(capacity)
        self._block_mins = np.full(self.num_blocks, np.inf)

    def _refresh_blocks(self, blocks: np.ndarray) -> None:
        self._block_mins[blocks] = self._leaf_blocks[blocks].min(axis=1)

    def min(self) -> float:
        return float(self._block_mins.min())

    def reduce_all(self) -> float:
        return self.min()
