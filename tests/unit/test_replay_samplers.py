"""Every replay method is a sampler keeping one contract (`replay_sampler`), fed
the Learner's typed feedback (`feedback`): uniform, PER, LAP, NERS, ReLo and
LaBER."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rllib_ners import FastPrioritizedEpisodeReplayBuffer, NERSEpisodeReplayBuffer
from rllib_ners.replay_buffers.feedback import (
    NERS_SCORES,
    TD_ERRORS,
    ReplayFeedback,
)
from rllib_ners.replay_buffers.laber_sampler import LargeBatchSampler
from rllib_ners.replay_buffers.ners_score_sampler import NERSScoreSampler
from rllib_ners.replay_buffers.priority_sampler import PrioritySampler
from rllib_ners.replay_buffers.relo_sampler import ReLoSampler
from rllib_ners.replay_buffers.replay_sampler import ReplaySampler

CAPACITY = 16
TD_ERRORS_SEEN = np.array([0.25, 4.0, 2.0, 0.5])
SCORES_SEEN = np.array([3.0, 0.5, 1.5, 9.0])
ONLINE_LOSSES_SEEN = TD_ERRORS_SEEN + 1.0
TARGET_LOSSES_SEEN = np.array([1.0, 0.5, 4.0, 0.0])  # ReLo: .25, 4.5, -1.5, 1.5
TIMES_DRAWN_SEEN = np.array([1.0, 0.0, 2.0, 1.0])

# name -> (sampler, the leaf each item must get from the feedback below)
SAMPLERS = {
    "uniform": (
        lambda: PrioritySampler(CAPACITY, alpha=0.0),
        np.ones(4),
    ),
    "per": (
        lambda: PrioritySampler(CAPACITY, alpha=0.6, beta=0.4),
        TD_ERRORS_SEEN**0.6,
    ),
    "lap": (
        lambda: PrioritySampler(CAPACITY, alpha=0.4, min_priority=1.0),
        np.maximum(TD_ERRORS_SEEN, 1.0) ** 0.4,
    ),
    "ners": (
        lambda: NERSScoreSampler(CAPACITY, alpha=0.5),
        SCORES_SEEN**0.5,
    ),
    "relo": (
        lambda: ReLoSampler(CAPACITY, alpha=0.5, beta=0.4),
        (np.array([0.25, 4.5, 0.0, 1.5]) + 1e-5) ** 0.5,
    ),
    # LaBER stores no priority: its leaves stay uniform.
    "laber": (lambda: LargeBatchSampler(CAPACITY), np.ones(4)),
}
# The samplers whose feedback sets no priority.
SETS_NO_PRIORITY = {"laber"}


def _feedback():
    return ReplayFeedback(
        td_errors=TD_ERRORS_SEEN,
        scores=SCORES_SEEN,
        target_q=-TD_ERRORS_SEEN,
        online_losses=ONLINE_LOSSES_SEEN,
        target_losses=TARGET_LOSSES_SEEN,
        times_drawn=TIMES_DRAWN_SEEN,
    )


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_each_sampler_keeps_the_contract_and_sets_its_own_priorities(name):
    make, expected_leaves = SAMPLERS[name]
    sampler = make()
    assert isinstance(sampler, ReplaySampler)
    slots = np.arange(8)
    sampler.set_new(slots, np.ones(8, dtype=bool), None)
    sampler.on_written(slots)
    drawn, weights = sampler.draw(4, 0.4, np.random.default_rng(0))
    assert drawn.shape == weights.shape == (4,) and weights.dtype == np.float32
    updated = np.array([1, 3, 5, 7])
    applied = sampler.update_priority(updated, _feedback(), np.ones(4, dtype=bool))
    assert applied.all() != (name in SETS_NO_PRIORITY)
    np.testing.assert_allclose(sampler.sum_tree[updated], expected_leaves)
    assert sampler.broken_invariants() == []

    # A restored copy draws exactly what the original draws.
    restored = sampler.emptied()
    assert type(restored) is type(sampler) and restored.sum_tree.total() == 0.0
    restored.set_state(sampler.get_state())
    for copy in (sampler, restored):
        np.testing.assert_array_equal(
            copy.draw(64, 0.4, np.random.default_rng(7))[0],
            sampler.draw(64, 0.4, np.random.default_rng(7))[0],
        )


def test_the_ners_sampler_caches_the_features_and_the_n_of_what_it_scored():
    sampler = NERSScoreSampler(CAPACITY, alpha=1.0)
    slots = np.arange(6)
    sampler.set_new(slots, np.ones(6, dtype=bool), None)
    sampler.on_written(slots)
    sampler.pending_n_steps = np.array([1, 2, 3, 1])
    live = np.array([True, True, False, True])
    feedback = ReplayFeedback(
        td_errors=[0.1, np.nan, 0.3, 0.4],
        scores=[1.0, 2.0, 3.0, np.inf],
        target_q=[5.0, 6.0, 7.0, 8.0],
    )
    applied = sampler.update_priority(np.array([0, 1, 2, 3]), feedback, live)
    # Slot 2 was rewritten since the sample, slot 3's score is not finite.
    np.testing.assert_array_equal(applied, [True, True, False, False])
    memory = sampler.slot_memory
    np.testing.assert_array_equal(memory.scored[:4], [True, True, False, False])
    np.testing.assert_array_equal(memory.scored_n_step[:4], [1, 2, 0, 0])
    # A non-finite feature never reaches the cache (slot 1 keeps 1.0).
    np.testing.assert_allclose(memory.delta[:4], [0.1, 1.0, 1.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(memory.q[:4], [5.0, 1.0, 1.0, 1.0])
    assert sampler.score_mean == 1.5
    sampler.on_evicted(np.array([0]))
    assert not memory.scored[0] and not memory.in_sampled_set[0]


def test_layouts_pack_and_unpack_fields_by_name():
    columns = [
        torch.tensor([0.9, 0.8]),
        torch.tensor([0.1, 0.2]),
        torch.tensor([3.0, 4.0]),
        torch.tensor([1.0, 0.0]),
    ]
    feedback = NERS_SCORES.unpack(NERS_SCORES.pack_columns(columns, torch.stack))
    np.testing.assert_allclose(feedback.scores, [0.9, 0.8], rtol=1e-6)
    np.testing.assert_allclose(feedback.td_errors, [0.1, 0.2], rtol=1e-6)
    np.testing.assert_allclose(feedback.target_q, [3.0, 4.0])
    ordered = feedback.in_sample_order()
    assert ordered.sample_positions is None
    np.testing.assert_allclose(ordered.scores, [0.8, 0.9], rtol=1e-6)
    np.testing.assert_allclose(ordered.target_q, [4.0, 3.0])

    # RLlib's TD errors: one field, any shape flattened.
    np.testing.assert_array_equal(TD_ERRORS.unpack([[1.0], [2.0]]).td_errors, [1, 2])
    assert TD_ERRORS.unpack(np.ones(3)).scores is None
    with pytest.raises(ValueError, match="not a NERS learner"):
        NERS_SCORES.unpack(np.ones(3))
    with pytest.raises(ValueError, match="scores, td_errors, target_q"):
        NERS_SCORES.unpack(np.ones((3, 3)))
    with pytest.raises(ValueError, match="4 fields"):
        NERS_SCORES.pack_columns(columns[:3], torch.stack)
    with pytest.raises(ValueError, match="sample_position"):
        ReplayFeedback(td_errors=[1.0, 2.0], sample_positions=[0, 0]).in_sample_order()


def _episode_buffer(cls, **settings):
    buffer = cls(64, seed=3, **settings)
    buffer.add(
        SingleAgentEpisode(
            observations=[np.array([t], np.float32) for t in range(21)],
            actions=[0] * 20,
            rewards=[1.0] * 20,
            terminated=True,
            len_lookback_buffer=0,
            observation_space=gym.spaces.Box(-1e3, 1e3, (1,), np.float32),
            action_space=gym.spaces.Discrete(2),
        )
    )
    return buffer


def test_typed_feedback_and_rllibs_packed_array_leave_the_same_buffer():
    """`update_feedback()` is what `update_priorities()` does once the array
    RLlib hands over is unpacked, for a TD-error and for the NERS buffer."""
    cases = [
        (FastPrioritizedEpisodeReplayBuffer, TD_ERRORS),
        (NERSEpisodeReplayBuffer, NERS_SCORES),
    ]
    for cls, layout in cases:
        typed = _episode_buffer(cls, alpha=0.6)
        packed = _episode_buffer(cls, alpha=0.6)
        for step in range(3):
            for buffer in (typed, packed):
                buffer.sample_batch(8)
            values = np.linspace(0.1, 2.0, 8) + step
            positions = np.arange(8.0)[::-1]  # as if from two Learners
            columns = {
                "td_errors": values,
                "scores": 2.0 * values,
                "target_q": -values,
                "sample_positions": positions,
            }
            rows = layout.pack_columns([columns[f] for f in layout.fields], np.stack)
            packed.update_priorities(rows)
            # Without positions in the layout the values are in sample order.
            with_positions = "sample_positions" in layout.fields
            order = np.argsort(positions) if with_positions else np.arange(8)
            typed.update_feedback(
                ReplayFeedback(
                    **{
                        field: columns[field][order]
                        for field in layout.fields
                        if field != "sample_positions"
                    }
                )
            )
        state_typed, state_packed = typed.get_state(), packed.get_state()
        np.testing.assert_array_equal(
            state_typed["sum_tree"]["leaves"], state_packed["sum_tree"]["leaves"]
        )
        assert state_typed["_max_priority"] == state_packed["_max_priority"]
        if layout is NERS_SCORES:
            np.testing.assert_array_equal(state_typed["_q"], state_packed["_q"])


def test_a_buffer_builds_the_sampler_of_its_replay_method():
    assert type(_episode_buffer(FastPrioritizedEpisodeReplayBuffer).sampler) is (
        PrioritySampler
    )
    ners = _episode_buffer(NERSEpisodeReplayBuffer)
    assert type(ners.sampler) is NERSScoreSampler
    assert ners.slot_memory is ners.sampler.slot_memory
    ners.clear()
    assert type(ners.sampler) is NERSScoreSampler and not ners.slot_memory.scored.any()
