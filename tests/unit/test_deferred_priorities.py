"""`deferred_priorities`: a round's priority writes held on the device and
written at its end, where that changes no draw (uniform replay).

The training loop's use is tested in tests/integration/test_fast_training_loop.py
(bit-identical training with alpha = 0; a different buffer with alpha > 0,
which is why it is not deferred there)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from rllib_ners.algorithms.common.training.deferred_priorities import (
    DeferredPriorityWrites,
    deferred_priority_writes_blocker,
)
from rllib_ners.replay_buffers import (
    FastPrioritizedEpisodeReplayBuffer,
    NERSEpisodeReplayBuffer,
)
from rllib_ners.replay_buffers.feedback import (
    LABER_SURROGATES,
    TD_ERRORS,
    ReplayFeedback,
)

ON_GPU = SimpleNamespace(device=torch.device("cuda"))


@pytest.mark.parametrize(
    "buffer, learner, reason",
    [
        (FastPrioritizedEpisodeReplayBuffer(100, alpha=0.0), ON_GPU, None),
        (FastPrioritizedEpisodeReplayBuffer(100, alpha=0.6), ON_GPU, "alpha=0.6"),
        (NERSEpisodeReplayBuffer(100), ON_GPU, "not the prioritized buffer"),
        (FastPrioritizedEpisodeReplayBuffer(100, alpha=0.0), None, "remote"),
        (
            FastPrioritizedEpisodeReplayBuffer(100, alpha=0.0),
            SimpleNamespace(device=torch.device("cpu")),
            "on cpu",
        ),
    ],
)
def test_writes_wait_only_where_no_draw_changes(buffer, learner, reason):
    blocker = deferred_priority_writes_blocker(buffer, learner)
    if reason is None:
        assert blocker is None
    else:
        assert reason in blocker


class RecordingBuffer:
    def __init__(self, layout=TD_ERRORS):
        self.sampler = SimpleNamespace(feedback_layout=layout)
        self.writes = []
        self.feedback = []

    def update_feedback_of(self, sampled, feedback):
        self.writes.append((sampled, feedback.td_errors))
        self.feedback.append(feedback)


def test_a_flush_writes_each_update_in_order_after_one_copy():
    writes = DeferredPriorityWrites()
    samples = [(np.array([3, 1]), np.array([7, 8])), (np.array([1]), np.array([8]))]
    writes.hold(samples[0], torch.tensor([[0.5], [2.0]]))
    writes.hold(samples[1], torch.tensor([4.0]))
    buffer = RecordingBuffer()
    writes.flush(buffer)
    assert len(writes) == 0
    [(first, p_first), (second, p_second)] = buffer.writes
    assert first is samples[0] and second is samples[1]
    np.testing.assert_array_equal(p_first, [0.5, 2.0])
    np.testing.assert_array_equal(p_second, [4.0])
    writes.flush(buffer)  # nothing held: nothing written
    assert len(buffer.writes) == 2


def test_a_flush_unpacks_rows_in_the_samplers_feedback_layout():
    """LaBER's rows (TD error, times drawn, sample position) reach the buffer
    as LaBER feedback in sample order, as `update_priorities()` hands them
    over; before, they were flattened into three times as many TD errors (the
    error a local GPU Learner hit with Rainbow and LaBER on 2026-12-04)."""
    writes = DeferredPriorityWrites()
    sampled = (np.array([5, 2, 9]), np.array([1, 1, 1]))
    # Positions 2, 0, 1: a sharded batch's rows come back Learner by Learner.
    rows = torch.tensor([[0.75, 2.0, 2.0], [0.25, 0.0, 0.0], [0.5, 1.0, 1.0]])
    writes.hold(sampled, rows)
    buffer = RecordingBuffer(LABER_SURROGATES)
    writes.flush(buffer)
    [feedback] = buffer.feedback
    expected = LABER_SURROGATES.unpack(rows.numpy()).in_sample_order()
    np.testing.assert_array_equal(feedback.td_errors, [0.25, 0.5, 0.75])
    np.testing.assert_array_equal(feedback.td_errors, expected.td_errors)
    np.testing.assert_array_equal(feedback.times_drawn, [0.0, 1.0, 2.0])
    assert feedback.sample_positions is None


def test_holding_the_wrong_number_of_priorities_fails_at_once():
    with pytest.raises(ValueError, match="3 priorities for 2 sampled items"):
        DeferredPriorityWrites().hold(
            (np.array([0, 1]), np.array([0, 0])), torch.zeros(3)
        )


def test_taken_items_are_written_as_update_priorities_writes_them():
    """`take_sampled_items()` / `update_feedback_of()` after a later sample
    leave the buffer as `update_priorities()` right after each sample would
    (alpha = 0: the draws do not depend on the priorities)."""
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    def filled():
        buffer = FastPrioritizedEpisodeReplayBuffer(50, alpha=0.0, seed=0)
        buffer.add(
            SingleAgentEpisode(
                observations=[np.float32([t]) for t in range(31)],
                actions=[0] * 30,
                rewards=[1.0] * 30,
                len_lookback_buffer=0,
            )
        )
        return buffer

    def record_priority_writes(buffer):
        """With alpha = 0 every leaf is 1 whatever is written, so the test
        compares what reaches the sampler: slots, values and live masks."""
        writes, write = [], buffer._sampler.update_priority

        def recording(slots, feedback, live):
            writes.append((slots.copy(), np.array(feedback.td_errors), live.copy()))
            return write(slots, feedback, live)

        buffer._sampler.update_priority = recording
        return writes

    now, later = filled(), filled()
    writes_now = record_priority_writes(now)
    writes_later = record_priority_writes(later)
    priorities = [np.linspace(0.1, 3.0, 8), np.linspace(5.0, 0.2, 8)]
    held = []
    for p in priorities:
        a = now.sample_batch(8)
        now.update_priorities(p)
        b = later.sample_batch(8)
        np.testing.assert_array_equal(a["indices"], b["indices"])
        held.append(later.take_sampled_items())
    for sampled, p in zip(held, priorities):
        later.update_feedback_of(sampled, ReplayFeedback(td_errors=p))
    assert len(writes_now) == len(writes_later) == 2
    for (slots, values, live), (slots_l, values_l, live_l), sampled, p in zip(
        writes_now, writes_later, held, priorities
    ):
        np.testing.assert_array_equal(slots, slots_l)
        np.testing.assert_array_equal(slots, sampled[0])
        np.testing.assert_array_equal(values, values_l)
        np.testing.assert_array_equal(values, p)
        assert live.all() and live_l.all()
    state_now, state_later = now.get_state(), later.get_state()
    assert state_now["_max_priority"] == state_later["_max_priority"] == 5.0
    np.testing.assert_array_equal(
        state_now["sum_tree"]["leaves"], state_later["sum_tree"]["leaves"]
    )
    with pytest.raises(ValueError, match="feedback on 2 items for 8 sampled items"):
        later.update_feedback_of(held[0], ReplayFeedback(td_errors=[1.0, 2.0]))
