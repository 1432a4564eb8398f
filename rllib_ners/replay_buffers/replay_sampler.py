"""The contract between the episode buffer and a replay method (no Ray).

As TorchRL splits a replay buffer into storage, writer and sampler, our
buffers (`ring_replay_buffer`) keep episodes in a ring storage (`ring_storage`,
`writer`) and leave to a *sampler* which stored slots a sample draws, how they
are weighed, and how the Learner's feedback about them (`feedback`) changes
later draws. A replay method is one sampler class:

- `priority_sampler.PrioritySampler`: uniform replay, PER and LAP (its
  settings), priorities from TD errors;
- `ners_score_sampler.NERSScoreSampler`: NERS, priorities from the learned
  scores, with the per-slot memory its scorer reads;
- `relo_sampler.ReLoSampler`: ReLo, PER with priorities from the reducible
  loss (Sujit et al. 2023);
- `laber_sampler.LargeBatchSampler`: LaBER's uniform large batch, which the
  Learner sub-samples (Lahire et al. 2022).

The buffer builds its sampler from `replay_buffer_config` (its `"sampler"`
setting, `sampler_choice`, or its class's `sampler_class`), calls
`set_new`/`on_written`/`on_evicted` as it writes, `draw` to sample (asking
`items_per_draw` how many), and `update_priority` with the feedback for the
last sample's slots (those still holding the sampled transition are
`live`). A Learner sends its feedback packed in the sampler's
`feedback_layout`. `tests/unit/test_replay_samplers.py` holds every sampler
of the package to this contract.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from rllib_ners.replay_buffers.feedback import FeedbackLayout, ReplayFeedback


class ReplaySampler(ABC):
    """What a buffer asks of its sampler (every method is abstract)."""

    # The fields the sampler reads from a Learner's feedback, and how they
    # are packed on the way (RLlib's TD-error array for TD-error samplers).
    feedback_layout: FeedbackLayout
    capacity: int
    # The `"sampler"` setting that chooses it (`sampler_choice`).
    name: str

    def items_per_draw(self, num_items: int) -> int:
        """How many items a sample asked for `num_items` draws: the same, but
        for LaBER's large batch."""
        return num_items

    @abstractmethod
    def draw(
        self, num_items: int, beta: float, rng: np.random.Generator
    ) -> Tuple[np.ndarray, np.ndarray]:
        """`num_items` stored slots and their float32 importance weights."""

    @abstractmethod
    def resolve_beta(self, beta: Optional[float], num_added: int) -> float:
        """The importance-sampling exponent of the sample about to be drawn."""

    @abstractmethod
    def set_new(
        self, slots: np.ndarray, is_step: np.ndarray, weight: Optional[float]
    ) -> None:
        """Just-written `slots`: new steps (`is_step`) become drawable with
        `weight` (None: the sampler's choice), the other slots undrawable."""

    @abstractmethod
    def on_written(self, step_slots: np.ndarray) -> None:
        """`step_slots` now hold new transitions (after `set_new`)."""

    @abstractmethod
    def on_evicted(self, slots: np.ndarray) -> None:
        """`slots` are about to be overwritten."""

    @abstractmethod
    def update_priority(
        self, slots: np.ndarray, feedback: ReplayFeedback, live: np.ndarray
    ) -> np.ndarray:
        """The Learner's feedback on the sampled `slots`, in sample order;
        returns the mask of slots it was applied to."""

    @abstractmethod
    def emptied(self) -> ReplaySampler:
        """A sampler with the same settings that has seen nothing."""

    @abstractmethod
    def nbytes(self) -> int:
        """Bytes of its arrays."""

    @abstractmethod
    def broken_invariants(self) -> List[str]:
        """What is wrong with its state (nothing: an empty list)."""

    @abstractmethod
    def get_state(self, take) -> Dict[str, Any]:
        """Its checkpoint, as flat entries of the buffer's state."""

    @abstractmethod
    def set_state(self, state: Dict[str, Any], take) -> None:
        """Restores `get_state()`'s output."""
