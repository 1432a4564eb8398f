"""SumTree / MinTree against plain numpy brute force."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rllib_ners.replay_buffers.sum_tree import MinTree, SumTree

# 1, 2 and 3 give one block of 16 leaves, 100 and 5000 blocks of 16, 100_000
# blocks of 32 (`_block_size` for the default batch of 32).
CAPACITIES = [1, 2, 3, 100, 5000, 100_000]

SETTINGS = settings(
    deadline=None,
    max_examples=40,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def expected_prefixsum(leaves: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Brute force: smallest i with cumsum[i] > v; past the end -> last positive."""
    cumsum = np.cumsum(leaves)
    idx = np.searchsorted(cumsum, values, side="right")
    last_positive = int(np.flatnonzero(leaves > 0)[-1])
    return np.where(idx >= len(leaves), last_positive, idx)


def sequential_assign(leaves: np.ndarray, indices, values) -> None:
    for i, v in zip(np.asarray(indices).tolist(), np.asarray(values).tolist()):
        leaves[i] = v


@st.composite
def update_batches(draw):
    """A capacity plus a few update batches with many repeated indices."""
    capacity = draw(st.sampled_from(CAPACITIES))
    # Index pool: a few fixed hot spots (first/last leaves, fanout borders) plus
    # random ones, so that duplicates within a batch are common.
    hot = {0, capacity - 1, capacity // 2, min(capacity - 1, 63), min(capacity - 1, 64)}
    extra = draw(st.lists(st.integers(0, capacity - 1), min_size=1, max_size=12))
    pool = sorted(hot | set(extra))
    batches = []
    for _ in range(draw(st.integers(1, 4))):
        size = draw(st.integers(1, 40))
        idx = draw(st.lists(st.sampled_from(pool), min_size=size, max_size=size))
        # Integer priorities (incl. many zeros) so every float sum is exact.
        vals = draw(st.lists(st.integers(0, 7), min_size=size, max_size=size))
        batches.append((np.array(idx, dtype=np.int64), np.array(vals, dtype=float)))
    return capacity, batches


@SETTINGS
@given(update_batches(), st.integers(0, 2**32 - 1))
def test_sum_tree_matches_brute_force(case, seed):
    capacity, batches = case
    tree = SumTree(capacity)
    leaves = np.zeros(capacity)
    rng = np.random.default_rng(seed)
    for idx, vals in batches:
        tree.update(idx, vals)
        sequential_assign(leaves, idx, vals)  # last write wins
        np.testing.assert_array_equal(tree.leaves, leaves)
        np.testing.assert_array_equal(tree[idx], leaves[idx])
        assert tree.total() == leaves.sum()
        total = leaves.sum()
        if total == 0:
            with pytest.raises(ValueError):
                tree.find_prefixsum([0.0])
            continue
        cumsum = np.cumsum(leaves)
        positive_cumsums = np.unique(cumsum[leaves > 0])
        queries = np.concatenate(
            [
                rng.uniform(0.0, total, size=200),
                # Exact boundaries: v == cumsum[i] must go to the next positive leaf.
                positive_cumsums[-50:],
                positive_cumsums[:50],
                positive_cumsums[:50] - 0.5,
                [0.0, total, total + 0.5, total * 3.0],
            ]
        )
        got = tree.find_prefixsum(queries)
        np.testing.assert_array_equal(got, expected_prefixsum(leaves, queries))
        # Zero-priority leaves are never returned.
        assert np.all(leaves[got] > 0)


@SETTINGS
@given(update_batches(), st.integers(0, 2**32 - 1))
def test_min_tree_matches_brute_force(case, seed):
    capacity, batches = case
    tree = MinTree(capacity)
    assert tree.min() == np.inf  # unused leaves are +inf
    leaves = np.full(capacity, np.inf)
    rng = np.random.default_rng(seed)
    for idx, _ in batches:
        vals = rng.uniform(-5.0, 5.0, size=len(idx))
        tree.update(idx, vals)
        sequential_assign(leaves, idx, vals)
        np.testing.assert_array_equal(tree.leaves, leaves)
        assert tree.min() == leaves.min()


@pytest.mark.parametrize("capacity", CAPACITIES)
def test_duplicate_indices_last_write_wins(capacity):
    tree = SumTree(capacity)
    mtree = MinTree(capacity)
    last = capacity - 1
    idx = np.array([last, 0, last, 0, last], dtype=np.int64)
    vals = np.array([5.0, 9.0, 1.0, 2.0, 3.0])
    tree.update(idx, vals)
    mtree.update(idx, -vals)
    expected = np.zeros(capacity)
    sequential_assign(expected, idx, vals)
    np.testing.assert_array_equal(tree.leaves, expected)
    assert tree.total() == expected.sum()
    assert mtree.min() == (-expected[expected > 0]).min()
    # Scalar values broadcast over all indices.
    tree.update(np.arange(capacity), 1.0)
    assert tree.total() == capacity


@pytest.mark.parametrize("capacity", [100, 5000, 100_000])
def test_large_random_batches(capacity):
    """Big batches of random repeated indices against brute force."""
    rng = np.random.default_rng(7)
    tree = SumTree(capacity)
    leaves = np.zeros(capacity)
    for _ in range(5):
        idx = rng.integers(0, capacity, size=3000)
        idx[::7] = idx[0]  # force many duplicates of one index
        vals = rng.integers(0, 4, size=3000).astype(float)
        tree.update(idx, vals)
        sequential_assign(leaves, idx, vals)
    np.testing.assert_array_equal(tree.leaves, leaves)
    assert tree.total() == leaves.sum()
    q = rng.uniform(0, leaves.sum() * 1.01, size=5000)
    got = tree.find_prefixsum(q)
    np.testing.assert_array_equal(got, expected_prefixsum(leaves, q))
    assert np.all(leaves[got] > 0)


@pytest.mark.parametrize("capacity", [3, 5000, 100_000])
def test_no_drift_after_many_float_updates(capacity):
    """Internal nodes are recomputed, so zeroing all leaves gives exactly 0."""
    rng = np.random.default_rng(1)
    tree = SumTree(capacity)
    for _ in range(50):
        idx = rng.integers(0, capacity, size=200)
        tree.update(idx, rng.uniform(0, 1e6, size=200) * np.pi)
    assert tree.total() == pytest.approx(float(np.sum(tree.leaves)), rel=1e-12)
    tree.update(np.arange(capacity), 0.0)
    assert tree.total() == 0.0


def test_a_partly_filled_tree_searches_only_its_written_blocks():
    """A buffer fills its slots from the first: the search's cumsum stops after
    the last block written to, with the brute-force result, and extends when a
    later block is written (or restored)."""
    capacity = 1_000_000
    tree = SumTree(capacity)
    rng = np.random.default_rng(5)
    leaves = np.zeros(capacity)
    # Integer priorities (some zero), so that every float sum is exact.
    leaves[:3000] = rng.integers(0, 5, size=3000)
    leaves[2999] = 1.0
    tree.update(np.arange(3000), leaves[:3000])
    assert tree._used_blocks == 2999 // tree.fanout + 1 < tree.num_blocks
    q = rng.uniform(0, leaves.sum() * 1.01, size=2000)
    np.testing.assert_array_equal(tree.find_prefixsum(q), expected_prefixsum(leaves, q))
    # Zeroing the last leaves keeps the result right (the blocks stay counted).
    tree.update([2999], [0.0])
    leaves[2999] = 0.0
    np.testing.assert_array_equal(tree.find_prefixsum(q), expected_prefixsum(leaves, q))
    # A far leaf: the search reaches it.
    tree.update([capacity - 1], [1e6])
    leaves[capacity - 1] = 1e6
    q = np.concatenate([q, leaves.sum() - rng.uniform(0, 1e6, size=100)])
    np.testing.assert_array_equal(tree.find_prefixsum(q), expected_prefixsum(leaves, q))
    restored = SumTree(capacity)
    restored.set_state(tree.get_state())
    assert restored._used_blocks == tree.num_blocks
    np.testing.assert_array_equal(restored.find_prefixsum(q), tree.find_prefixsum(q))


@pytest.mark.parametrize("capacity", CAPACITIES)
def test_get_state_set_state_round_trip(capacity):
    rng = np.random.default_rng(capacity + 1)
    tree, mtree = SumTree(capacity), MinTree(capacity)
    idx = rng.integers(0, capacity, size=50)
    vals = rng.integers(1, 9, size=50).astype(float)
    tree.update(idx, vals)
    mtree.update(idx, vals)
    state, mstate = tree.get_state(), mtree.get_state()

    restored, mrestored = SumTree(capacity), MinTree(capacity)
    restored.set_state(state)
    mrestored.set_state(mstate)
    np.testing.assert_array_equal(restored.leaves, tree.leaves)
    assert restored.total() == tree.total()
    assert mrestored.min() == mtree.min()
    q = rng.uniform(0, tree.total() * 1.05, size=500)
    np.testing.assert_array_equal(restored.find_prefixsum(q), tree.find_prefixsum(q))

    # The state is a snapshot: later writes to the tree do not leak into it.
    tree.update([0], [1000.0])
    other = SumTree(capacity)
    other.set_state(state)
    assert other.total() == restored.total()

    # Restoring replaces everything, including leaves set before set_state.
    dirty = SumTree(capacity)
    dirty.update(np.arange(capacity), 3.0)
    dirty.set_state(state)
    np.testing.assert_array_equal(dirty.leaves, restored.leaves)
    assert dirty.total() == restored.total()

    with pytest.raises(ValueError):
        SumTree(capacity + 1).set_state(state)


@pytest.mark.parametrize("capacity", CAPACITIES)
def test_out_of_range_raises(capacity):
    tree = SumTree(capacity)
    mtree = MinTree(capacity)
    for t in (tree, mtree):
        with pytest.raises(ValueError):
            t.update([capacity], [1.0])
        with pytest.raises(ValueError):
            t.update([0, -1], [1.0, 1.0])
    # Failed updates did not write anything.
    assert tree.total() == 0.0
    assert mtree.min() == np.inf
    with pytest.raises(ValueError):
        tree.find_prefixsum([0.5])  # empty tree


@pytest.mark.parametrize("capacity", [0, -3, 2.5])
def test_bad_capacity_raises(capacity):
    with pytest.raises(ValueError, match="capacity"):
        SumTree(capacity)
    with pytest.raises(ValueError, match="capacity"):
        MinTree(capacity)


def test_leaves_view_is_read_only():
    tree = SumTree(10)
    tree.update([3], [2.0])
    with pytest.raises(ValueError):
        tree.leaves[3] = 5.0
    assert tree.total() == 2.0


def test_sample_stratified_frequencies():
    prios = np.array([0.0, 1.0, 0.0, 2.0, 3.0, 0.0, 4.0, 0.0, 0.0, 10.0])
    tree = SumTree(len(prios))
    tree.update(np.arange(len(prios)), prios)
    rng = np.random.default_rng(0)
    counts = np.zeros(len(prios))
    for _ in range(200):
        np.add.at(counts, tree.sample_stratified(100, rng), 1)
    assert np.all(counts[prios == 0] == 0)
    np.testing.assert_allclose(counts / counts.sum(), prios / prios.sum(), atol=0.01)
