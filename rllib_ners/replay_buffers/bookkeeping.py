"""What the prioritized episode buffer keeps besides its ring and trees (no Ray).

- `PendingSample`: the slots of the last sample, which the next
  `update_priorities()` answers, with their write stamps: a slot rewritten in
  between (its stamp changed) no longer holds the sampled transition, and its
  priority is skipped.
- `StepCounts`: the lifetime counts of steps added and sampled, and what
  `get_metrics()` has not reported yet (a `SampleTally`, the lifetime counts
  at the last report); the multi-agent buffer's `AddTally` counts what its
  `add()` calls brought.

`PendingSample` and `StepCounts` save themselves under the checkpoint keys the
buffer's state has always used (`_last_sampled_indices`,
`_num_steps_added_lifetime`, ...).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from rllib_ners.replay_buffers.ring_storage import RingStorage

_NO_SLOTS = np.zeros(0, dtype=np.int64)


class PendingSample:
    """The last sample's slots and their stamps, until priorities come back."""

    def __init__(self):
        self.slots = _NO_SLOTS
        self.stamps = _NO_SLOTS

    def record(self, slots: np.ndarray, stamps: np.ndarray) -> None:
        self.slots, self.stamps = slots, stamps

    def take(self, num_values: int) -> Tuple[np.ndarray, np.ndarray]:
        """The slots and stamps, forgotten once handed out.

        Raises (and keeps them) unless `num_values` matches the sample's size.
        """
        slots, stamps = self.slots, self.stamps
        if num_values != slots.shape[0]:
            raise ValueError(
                f"update_priorities() got {num_values} values for {slots.shape[0]} "
                f"sampled items: call it once after each sample(), with one value "
                f"per sampled item, in order."
            )
        self.slots = self.stamps = _NO_SLOTS
        return slots, stamps

    def nbytes(self) -> int:
        return int(self.slots.nbytes + self.stamps.nbytes)

    def get_state(self, take: Callable) -> Dict[str, Any]:
        return {
            "_last_sampled_indices": take(self.slots),
            "_last_sampled_stamps": take(self.stamps),
        }

    def set_state(self, state: Dict[str, Any], take: Callable) -> None:
        self.slots = take(state["_last_sampled_indices"])
        self.stamps = take(state["_last_sampled_stamps"])


class SampleTally:
    """What `sample()` calls drew since the last `get_metrics()`: items, the
    distinct steps and episodes per call (summed over calls, as RLlib's
    `num_env_steps_per_sample` is), and the sum of the items' n."""

    def __init__(self):
        self.steps = self.distinct_steps = self.distinct_episodes = 0
        self.n_step_sum = 0

    def count(self, slots: np.ndarray, episode_uid: np.ndarray) -> None:
        """Counts one draw of `slots` (sorted, as the priority sampler returns
        them), whose episodes `episode_uid[slots]` names."""
        self.steps += slots.shape[0]
        # Sorted slots: distinct ones differ from their predecessor.
        self.distinct_steps += 1 + int(np.count_nonzero(slots[1:] != slots[:-1]))
        self.distinct_episodes += np.unique(episode_uid[slots]).shape[0]

    def n_step_mean(self) -> Optional[float]:
        """The items' mean n, or None when no n was tallied."""
        return self.n_step_sum / self.steps if self.n_step_sum else None


class AddTally:
    """What the multi-agent buffer's `add()` calls brought and evicted since
    the last `get_metrics()`, whole-buffer and per agent and module."""

    def __init__(self):
        self.env_steps = self.episodes_added = self.episodes_evicted = 0
        self.agent_steps = defaultdict(int)
        self.module_steps = defaultdict(int)
        self.agent_episodes_added = defaultdict(int)
        self.module_episodes_added = defaultdict(int)
        self.agent_episodes_evicted = defaultdict(int)
        self.module_episodes_evicted = defaultdict(int)


class StepCounts:
    """Steps added and sampled over the buffer's life, the mean n of the last
    `sample_batch()`, and what `get_metrics()` has not reported yet.

    The lifetime counts of episodes and evicted steps live in the storage,
    which evicts; `lifetime_counts(storage)` gathers all four.
    """

    def __init__(self):
        self.steps_added = 0
        self.steps_sampled = 0
        self.sampled_n_step_mean = 0.0
        self.tally = SampleTally()
        # `lifetime_counts()` at the last report.
        self.reported: Dict[str, int] = {}

    def lifetime_counts(self, storage: RingStorage) -> Dict[str, int]:
        return {
            "steps_added": self.steps_added,
            "steps_evicted": storage.num_steps_evicted_lifetime,
            "episodes_added": storage.num_episodes_added_lifetime,
            "episodes_evicted": storage.num_episodes_evicted_lifetime,
        }

    def take_lifetime_deltas(self, storage: RingStorage) -> Dict[str, int]:
        """The lifetime counts' growth since the last call."""
        now = self.lifetime_counts(storage)
        delta = {key: now[key] - self.reported.get(key, 0) for key in now}
        self.reported = now
        return delta

    def take_sample_tally(self) -> SampleTally:
        """What was sampled since the last call."""
        tally, self.tally = self.tally, SampleTally()
        return tally

    def restart_reporting(self, storage: RingStorage) -> None:
        """Reports only what happens from now on (after a restore: RLlib's
        buffers keep no metrics in their state either; the Algorithm's restored
        metrics hold the totals)."""
        self.reported = self.lifetime_counts(storage)
        self.tally = SampleTally()

    def get_state(self) -> Dict[str, Any]:
        return {
            "_num_steps_added_lifetime": self.steps_added,
            "_num_steps_sampled_lifetime": self.steps_sampled,
            # RLlib's name for the steps added: checkpoints have always held it.
            "_num_timesteps_added": self.steps_added,
        }

    def set_state(self, state: Dict[str, Any]) -> None:
        self.steps_added = state["_num_steps_added_lifetime"]
        self.steps_sampled = state["_num_steps_sampled_lifetime"]
