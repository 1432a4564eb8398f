"""The Ray-free parts of the prioritized episode buffer, each on its own.

The priority leaf and the importance weights are checked against plain numpy
formulas; storage, writer, n-step gathering and sequences on hand-built chunks
(plain dicts, no RLlib episodes).
"""

from __future__ import annotations

import ast
import importlib.util
import pathlib

import numpy as np
import pytest

from rllib_ners.replay_buffers import n_step, sequences, writer
from rllib_ners.replay_buffers.bookkeeping import PendingSample, StepCounts
from rllib_ners.replay_buffers.priority_sampler import (
    PrioritySampler,
    importance_weights,
    priority_leaf,
)
from rllib_ners.replay_buffers.ring_storage import RingStorage

RAY_FREE_PARTS = [
    "agent_episodes",
    "bookkeeping",
    "buffer_names",
    "buffer_settings",
    "buffer_state",
    "frame_stack",
    "n_step",
    "ners_slot_memory",
    "priority_sampler",
    "feedback",
    "ners_score_sampler",
    "replay_sampler",
    "ring_storage",
    "sequences",
    "sum_tree",
    "writer",
]


@pytest.mark.parametrize("name", RAY_FREE_PARTS)
def test_part_does_not_import_ray(name):
    """Invariant: the storage, writer, sampler, bookkeeping and gathering parts
    need no Ray."""
    spec = importlib.util.find_spec(f"rllib_ners.replay_buffers.{name}")
    tree = ast.parse(pathlib.Path(spec.origin).read_text())
    imported = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            imported.append(node.module or "")
    assert not [m for m in imported if m == "ray" or m.startswith("ray.")]


# ------------------------------------------------------------------ formulas
@pytest.mark.parametrize("alpha", [0.0, 0.4, 0.6, 1.0, 2.5])
def test_priority_leaf_is_score_to_the_alpha(alpha):
    """leaf_i = score_i ** alpha, for arrays and floats (alpha=0: all ones)."""
    scores = np.array([0.0, 1e-12, 0.5, 1.0, 3.0, 1e6])
    np.testing.assert_array_equal(priority_leaf(scores, alpha), np.power(scores, alpha))
    assert priority_leaf(2.0, alpha) == 2.0**alpha
    assert isinstance(priority_leaf(2.0, alpha), float)
    if alpha == 0.0:
        np.testing.assert_array_equal(priority_leaf(scores, alpha), 1.0)


@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_importance_weights_match_the_per_formula(beta):
    """w_i = (N p_i) ** -beta / max_j (N p_j) ** -beta, p_i = leaf_i / sum leaf."""
    rng = np.random.default_rng(0)
    all_leaves = rng.uniform(0.01, 5.0, size=50)
    drawn = rng.integers(0, 50, size=16)
    N, p = all_leaves.size, all_leaves / all_leaves.sum()
    expected = (N * p[drawn]) ** -beta / ((N * p) ** -beta).max()
    got = importance_weights(all_leaves[drawn], all_leaves.min(), beta)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert got.max() <= 1.0
    if beta == 0.0:
        np.testing.assert_array_equal(got, 1.0)


# ------------------------------------------------------------------- sampler
def test_sampler_draws_by_leaf_and_skips_bad_priorities():
    sampler = PrioritySampler(8, alpha=0.5, beta=1.0)
    sampler.set_leaves(np.arange(4), priority_leaf(np.array([1.0, 4.0, 9.0, 0.0]), 0.5))
    slots, weights = sampler.draw(600, 1.0, np.random.default_rng(1))
    assert set(slots.tolist()) <= {0, 1, 2}
    counts = np.bincount(slots, minlength=3)[:3] / 600
    np.testing.assert_allclose(counts, [1 / 6, 2 / 6, 3 / 6], atol=0.01)
    assert weights.dtype == np.float32
    np.testing.assert_allclose(weights, 1.0 / np.sqrt([1.0, 4.0, 9.0])[slots])

    live = np.array([True, True, False])
    applied = sampler.set_priorities(
        np.array([0, 1, 2]), np.array([np.nan, 16.0, 25.0]), live
    )
    np.testing.assert_array_equal(applied, [False, True, False])
    assert sampler.num_nonfinite_priorities == 1
    assert sampler.num_stale_priorities == 1
    assert sampler.max_priority == 16.0
    np.testing.assert_array_equal(sampler.sum_tree[np.arange(3)], [1.0, 4.0, 3.0])


def _sampler_with_leaves(capacity: int, num_filled: int) -> PrioritySampler:
    sampler = PrioritySampler(capacity, alpha=0.6, beta=0.4)
    values = np.random.default_rng(3).random(num_filled) + 0.1
    sampler.set_leaves(np.arange(num_filled), values)
    return sampler


def test_the_first_draw_lays_the_trees_out_for_its_batch():
    sampler = _sampler_with_leaves(1_000_000, 3000)
    leaves, total = sampler.sum_tree.leaves.copy(), sampler.sum_tree.total()
    assert sampler.layout_batch is None and sampler.sum_tree.fanout == 64
    sampler.draw(256, 0.4, np.random.default_rng(0))
    # SAC's and TD3's batch of 256 wants smaller blocks; every leaf is kept.
    assert sampler.layout_batch == 256
    assert sampler.sum_tree.fanout == sampler.min_tree.fanout == 32
    np.testing.assert_array_equal(sampler.sum_tree.leaves, leaves)
    assert sampler.sum_tree.total() == pytest.approx(total, rel=1e-12)
    assert sampler.min_tree.min() == leaves[:3000].min()
    sampler.draw(32, 0.4, np.random.default_rng(0))  # later sizes keep it
    assert sampler.sum_tree.fanout == 32


@pytest.mark.parametrize("drawn_before_checkpoint", [False, True])
def test_a_restored_sampler_has_the_same_trees_and_draws(drawn_before_checkpoint):
    original = _sampler_with_leaves(1_000_000, 3000)
    if drawn_before_checkpoint:
        original.draw(256, 0.4, np.random.default_rng(1))
    state = original.get_state()
    restored = _sampler_with_leaves(1_000_000, 10)
    restored.draw(32, 0.4, np.random.default_rng(1))  # laid out otherwise
    restored.set_state(state)
    assert restored.layout_batch == original.layout_batch
    assert restored.sum_tree.fanout == original.sum_tree.fanout
    for seed in range(5):
        slots, weights = original.draw(256, 0.4, np.random.default_rng(seed))
        again, again_weights = restored.draw(256, 0.4, np.random.default_rng(seed))
        np.testing.assert_array_equal(again, slots)
        np.testing.assert_array_equal(again_weights, weights)
        priorities = np.random.default_rng(seed).random(256) * 3
        for sampler in (original, restored):
            sampler.set_priorities(slots, priorities, np.ones(256, dtype=bool))
    # A state saved before the layout was kept restores the default one.
    del state["_layout_batch"]
    old = _sampler_with_leaves(1_000_000, 10)
    old.draw(256, 0.4, np.random.default_rng(1))
    old.set_state(state)
    assert old.layout_batch is None and old.sum_tree.fanout == 64


def test_sampler_beta_annealing_and_bad_settings():
    sampler = PrioritySampler(
        4, alpha=1.0, beta=0.4, beta_final=1.0, beta_annealing_timesteps=100
    )
    assert sampler.current_beta(500) == 0.4  # not started before the first sample
    assert sampler.resolve_beta(None, 500) == 0.4
    assert sampler.current_beta(550) == pytest.approx(0.7)
    assert sampler.current_beta(10_000) == 1.0
    with pytest.raises(ValueError, match="replay_buffer_config"):
        PrioritySampler(4, beta_final=1.0)
    with pytest.raises(ValueError, match="alpha"):
        PrioritySampler(4, alpha=-1.0)


# ------------------------------------------------ storage, writer, gathering
def chunk(id_, rewards, *, t_started=0, done=True):
    n = len(rewards)
    return {
        "id": id_,
        "len": n,
        "t_started": t_started,
        "obs": np.arange(t_started, t_started + n + 1, dtype=np.float32)[:, None],
        "infos": [{}] * (n + 1),
        "actions": np.zeros(n, dtype=np.int64),
        "rewards": np.asarray(rewards, dtype=np.float64),
        "extra": {},
        "terminated": done,
        "truncated": False,
        "done": done,
    }


def write(storage, chunks):
    continuing = writer.plan_continuations(storage, chunks)
    new_slots = storage.head_slots(writer.num_new_slots(chunks, continuing))
    evicted, _, _ = storage.evict(new_slots)
    return writer.write_chunks(storage, chunks, continuing, new_slots), evicted


def test_writer_joins_chunks_and_storage_evicts_fifo():
    storage = RingStorage(8)
    storage.allocate(np.zeros((1, 1), np.float32), np.zeros(1, np.int64), {})
    (_, steps), _ = write(storage, [chunk("a", [1.0, 2.0], done=False)])
    np.testing.assert_array_equal(steps, [0, 1])
    # The continuation reuses tail slot 2 as its first step: 2 new slots.
    (_, steps), _ = write(storage, [chunk("a", [3.0, 4.0], t_started=2)])
    np.testing.assert_array_equal(steps, [2, 3])
    assert storage.num_transitions == 4 and storage.num_tails == 1
    np.testing.assert_array_equal(storage.obs[:5, 0], [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(storage.next[:4], [1, 2, 3, 4])
    # Four more slots (5, 6, 7, 0) wrap around and evict the oldest one.
    (_, steps), evicted = write(storage, [chunk("b", [5.0, 6.0, 7.0])])
    np.testing.assert_array_equal(evicted, [0])
    assert storage.num_transitions == 6 and storage.num_steps_evicted_lifetime == 1
    assert storage.broken_invariants(np.where(storage.is_transition, 1.0, 0.0)) == []

    state = storage.get_state()
    restored = RingStorage(8)
    restored.set_state(state)
    for name in RingStorage.STATE_ARRAYS:
        np.testing.assert_array_equal(getattr(restored, name), getattr(storage, name))


def test_n_step_returns_truncate_at_the_episode_end():
    storage = RingStorage(16)
    storage.allocate(np.zeros((1, 1), np.float32), np.zeros(1, np.int64), {})
    write(storage, [chunk("a", [1.0, 2.0, 4.0])])  # slots 0, 1, 2 (+ tail 3)
    gamma = 0.5
    walk = n_step.n_step_transitions(
        storage, np.array([0, 1, 2]), np.array([3, 3, 3]), gamma
    )
    np.testing.assert_allclose(walk["rewards"], [1 + 1 + 1, 2 + 2, 4])
    np.testing.assert_array_equal(walk["n_step"], [3, 2, 1])
    np.testing.assert_array_equal(walk["next_slot"], [3, 3, 3])
    assert walk["terminateds"].all()
    assert n_step.normalize_n_step((2, 5)) == (2, 5)
    with pytest.raises(ValueError, match=r"config\.training\(.*n_step="):
        n_step.normalize_n_step(0)
    ns = n_step.draw_n_steps(np.random.default_rng(0), 1000, (1, 3))
    assert set(ns.tolist()) == {1, 2, 3}


def test_sequences_stop_at_the_episode_end_and_cut_chunks():
    storage = RingStorage(16)
    storage.allocate(np.zeros((1, 1), np.float32), np.zeros(1, np.int64), {})
    (_, steps), _ = write(storage, [chunk("a", [1.0] * 5)])
    batch = sequences.sequence_columns(
        storage, np.array([0, 3]), np.ones(2, np.float32), 4
    )
    np.testing.assert_array_equal(batch["lengths"], [4, 2])
    np.testing.assert_array_equal(batch["obs"][1, :, 0], [3, 4, 5, 5, 5])
    starts, lengths = sequences.chunk_pieces(steps, np.array([5]), 2)
    np.testing.assert_array_equal(starts, [0, 2, 4])
    np.testing.assert_array_equal(lengths, [2, 2, 1])


def test_an_overflowing_call_keeps_its_newest_steps_and_says_where_they_went():
    storage = RingStorage(8)
    storage.allocate(np.zeros((1, 1), np.float32), np.zeros(1, np.int64), {})
    chunks = [chunk("a", [1.0] * 4), chunk("b", [2.0] * 6)]
    for source, one in enumerate(chunks):
        one["source"] = source
    kept, continuing = writer.fit_to_ring(storage, chunks)
    # 12 observations for 8 slots: b whole (7 slots), a's newest step (2 slots).
    assert [(c["id"], c["len"]) for c in kept] == [("b", 6)]
    assert continuing == [False]
    assert writer.count_dropped(storage, chunks, kept) == 6
    assert storage.num_steps_evicted_lifetime == 4
    assert storage.num_episodes_added_lifetime == 1  # a: nothing kept
    assert storage.num_episodes_evicted_lifetime == 1
    new_slots = storage.head_slots(writer.num_new_slots(kept, continuing))
    _, step_slots = writer.write_chunks(storage, kept, continuing, new_slots)
    added = writer.AddedSteps(kept, step_slots, [], ["b"], {})
    slots_of = writer.step_slots_by_source(chunks, added)
    np.testing.assert_array_equal(slots_of[0], [-1, -1, -1, -1])
    np.testing.assert_array_equal(slots_of[1], step_slots)


def test_the_pending_sample_is_answered_once_and_by_size():
    pending = PendingSample()
    pending.record(np.array([3, 5]), np.array([7, 9]))
    with pytest.raises(ValueError, match="2 sampled items"):
        pending.take(3)
    slots, stamps = pending.take(2)
    np.testing.assert_array_equal(slots, [3, 5])
    np.testing.assert_array_equal(stamps, [7, 9])
    assert pending.slots.size == 0 and pending.stamps.size == 0


def test_step_counts_report_the_growth_since_the_last_report():
    storage = RingStorage(4)
    counts = StepCounts()
    counts.restart_reporting(storage)
    counts.steps_added += 5
    storage.num_steps_evicted_lifetime += 2
    assert counts.take_lifetime_deltas(storage) == {
        "steps_added": 5,
        "steps_evicted": 2,
        "episodes_added": 0,
        "episodes_evicted": 0,
    }
    counts.steps_added += 1
    assert counts.take_lifetime_deltas(storage)["steps_added"] == 1
    counts.tally.count(np.array([1, 1, 2]), np.array([0, 7, 7, 8]))
    tally = counts.take_sample_tally()
    assert (tally.steps, tally.distinct_steps, tally.distinct_episodes) == (3, 2, 1)
    assert counts.take_sample_tally().steps == 0
