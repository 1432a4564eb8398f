"""What the NERS buffer knows of each stored transition, by slot (no Ray).

- `delta`, `q`: the latest TD error and target value the Learner reported for
  the transition (1.0 until it is first scored, as in the reference code): the
  scorer's features besides those read from the storage.
- `in_sampled_set`, `replay_count`: the set I_all of Algorithm 1 (transitions
  replayed since the last sampler update) and how often each was replayed
  (I_all as a multiset, for `train_draw="replay_multiset"`).
- `scored`, `scored_n_step`: whether the scorer ever set the transition's
  priority (it is then the scorer's, not the fixed priority new transitions
  get; the sampler diagnostics read it), and the n of its n-step return then
  (0: not known), with which the sampler's training batch rebuilds it.

A slot (re)written by `add()` starts afresh; an evicted slot leaves I_all.
Saved under the checkpoint keys the buffer's state has always used (`_delta`,
`_q`, ...).
"""

from __future__ import annotations

from typing import Any, Callable, Dict

import numpy as np

# The cached TD error and target of a transition not scored yet.
UNSCORED_VALUE = 1.0


class NERSSlotMemory:
    """The per-slot NERS arrays of a buffer of `capacity` slots."""

    # Saved as they are (copied unless the state is taken without copies).
    STATE_ARRAYS = ("delta", "q", "in_sampled_set", "replay_count", "scored")

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.delta = np.full(capacity, UNSCORED_VALUE, dtype=np.float32)
        self.q = np.full(capacity, UNSCORED_VALUE, dtype=np.float32)
        self.in_sampled_set = np.zeros(capacity, dtype=bool)
        self.replay_count = np.zeros(capacity, dtype=np.int64)
        self.scored = np.zeros(capacity, dtype=bool)
        self.scored_n_step = np.zeros(capacity, dtype=np.int32)

    def reset_written(self, step_slots: np.ndarray) -> None:
        """`step_slots` were just (re)written: new transitions, not scored."""
        self.delta[step_slots] = UNSCORED_VALUE
        self.q[step_slots] = UNSCORED_VALUE
        self.scored_n_step[step_slots] = 0
        self.scored[step_slots] = False

    def forget_evicted(self, slots: np.ndarray) -> None:
        """`slots` are being overwritten: out of I_all, not scored."""
        self.in_sampled_set[slots] = False
        self.replay_count[slots] = 0
        self.scored[slots] = False

    def record_scores(
        self,
        slots: np.ndarray,
        applied: np.ndarray,
        delta: np.ndarray,
        q: np.ndarray,
        n_steps: np.ndarray,
    ) -> None:
        """The Learner's rows for the sampled `slots`, where `applied` (their
        priority was set): the features (where finite), the n, I_all."""
        cache_ok = applied & np.isfinite(delta) & np.isfinite(q)
        self.delta[slots[cache_ok]] = delta[cache_ok]
        self.q[slots[cache_ok]] = q[cache_ok]
        self.scored_n_step[slots[applied]] = n_steps[applied]
        self.in_sampled_set[slots[applied]] = True
        np.add.at(self.replay_count, slots[applied], 1)
        self.scored[slots[applied]] = True

    def reset_sampled_set(self) -> None:
        """Empties I_all (after a sampler update)."""
        self.in_sampled_set[:] = False
        self.replay_count[:] = 0

    def nbytes(self) -> int:
        arrays = [getattr(self, name) for name in self.STATE_ARRAYS]
        return int(sum(a.nbytes for a in arrays) + self.scored_n_step.nbytes)

    def get_state(self, take: Callable) -> Dict[str, Any]:
        state = {f"_{name}": take(getattr(self, name)) for name in self.STATE_ARRAYS}
        state["_scored_n_step"] = take(self.scored_n_step)
        return state

    def set_state(self, state: Dict[str, Any], take: Callable) -> None:
        """Restores `get_state()`'s output. States saved before `scored_n_step`
        existed restore it as "n not known"."""
        for name in self.STATE_ARRAYS:
            setattr(self, name, take(state[f"_{name}"]))
        self.scored_n_step = np.zeros(self.capacity, dtype=np.int32)
        if "_scored_n_step" in state:
            self.scored_n_step = take(
                np.asarray(state["_scored_n_step"], dtype=np.int32)
            )
