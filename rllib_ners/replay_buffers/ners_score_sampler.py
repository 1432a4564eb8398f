"""The NERS sampler: priorities are the scorer's outputs, not TD errors (no Ray).

NERS (Oh et al., ICLR 2021) draws a stored transition `i` with probability
`p_i = sigma_i ** alpha / sum_k sigma_k ** alpha`, where `sigma_i` is the
score its learned scorer gave the item when it was last sampled. So it is the
priority sampler (`priority_sampler`: the trees, `alpha`, `beta`, the floor)
with `sigma` for `|delta|`, reading the Learner's feedback in the NERS layout
(`feedback.NERS_SCORES`: score, TD error, TD target, sample position).

It also keeps what the scorer's features need besides the storage, per slot
(`ners_slot_memory.NERSSlotMemory`): the TD error `delta` and target `q` the
Learner last reported (the feedback's other fields), the set I_all of items
sampled since the last sampler update, and the n of each item's n-step return
when it was scored (`pending_n_steps` holds the last sample's until its
feedback comes back). The NERS buffer (`ners_episode_buffer`) draws the
scorer's training batches from that memory.
"""

from __future__ import annotations

from typing import Any, Dict

import numpy as np

from rllib_ners.replay_buffers.feedback import (
    NERS_SCORES,
    FeedbackLayout,
    ReplayFeedback,
)
from rllib_ners.replay_buffers.ners_slot_memory import NERSSlotMemory
from rllib_ners.replay_buffers.priority_sampler import PrioritySampler
from rllib_ners.replay_buffers.ring_storage import copy_if_array

_NO_N_STEPS = np.zeros(0, dtype=np.int64)


class NERSScoreSampler(PrioritySampler):
    """Draws by NERS scores and keeps the per-slot memory the scorer reads.

    Args: those of `PrioritySampler`.
    """

    feedback_layout: FeedbackLayout = NERS_SCORES
    name = "ners"

    def __init__(self, capacity: int, **settings):
        super().__init__(capacity, **settings)
        self.slot_memory = NERSSlotMemory(capacity)
        # The n of each item of the last sample, until its feedback comes back.
        self.pending_n_steps = _NO_N_STEPS
        # Mean and standard deviation of the last feedback's applied scores.
        self.score_mean = float("nan")
        self.score_std = float("nan")

    def priorities_of(self, feedback: ReplayFeedback) -> np.ndarray:
        """The priority of each item: its score `sigma`."""
        return feedback.scores

    def update_priority(
        self, slots: np.ndarray, feedback: ReplayFeedback, live: np.ndarray
    ) -> np.ndarray:
        """Sets each item's priority to `sigma ** alpha` (where valid, as
        `PrioritySampler`), caches its `delta` and `q`, records the n it was
        sampled with and adds it to I_all. Non-finite values never reach the
        trees or the cache."""
        n_steps = self.pending_n_steps
        if n_steps.shape != slots.shape:  # e.g. restored from an older state
            n_steps = np.zeros(slots.shape, dtype=np.int64)
        self.pending_n_steps = _NO_N_STEPS
        scores = self.priorities_of(feedback)
        applied = self.set_priorities(slots, scores, live)
        self.slot_memory.record_scores(
            slots, applied, feedback.td_errors, feedback.target_q, n_steps
        )
        if applied.any():
            self.score_mean = float(scores[applied].mean())
            self.score_std = float(scores[applied].std())
        return applied

    def on_written(self, step_slots: np.ndarray) -> None:
        """New transitions: not scored, their features the unscored value."""
        self.slot_memory.reset_written(step_slots)

    def on_evicted(self, slots: np.ndarray) -> None:
        """Overwritten slots leave I_all."""
        self.slot_memory.forget_evicted(slots)

    def nbytes(self) -> int:
        return super().nbytes() + self.slot_memory.nbytes()

    # Saved under the keys the NERS buffer's state has always used.
    def get_state(self, take=copy_if_array) -> Dict[str, Any]:
        state = super().get_state(take)
        state.update(self.slot_memory.get_state(take))
        state["_score_mean"] = self.score_mean
        state["_score_std"] = self.score_std
        state["_last_sampled_n_steps"] = take(self.pending_n_steps)
        return state

    def set_state(self, state: Dict[str, Any], take=copy_if_array) -> None:
        """Restores `get_state()`'s output; a state saved before the pending
        n-steps were kept restores as "no sample pending"."""
        super().set_state(state, take)
        self.slot_memory.set_state(state, take)
        self.score_mean = state["_score_mean"]
        self.score_std = state["_score_std"]
        self.pending_n_steps = _NO_N_STEPS
        if "_last_sampled_n_steps" in state:
            self.pending_n_steps = take(
                np.asarray(state["_last_sampled_n_steps"], dtype=np.int64)
            )
