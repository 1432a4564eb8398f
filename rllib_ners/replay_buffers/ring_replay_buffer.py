"""Prioritized replay over ring storage: the base of our episode buffers.

`RingReplayBuffer` composes parts that each do one thing, as TorchRL splits a
replay buffer into Storage, Writer and Sampler:

- `ring_storage.RingStorage`: ring arrays of observation slots, eviction.
- `writer`: `add()`'s chunks into the ring, continuing stored episodes.
- the sampler (`replay_sampler.ReplaySampler`, the class's `sampler_class`):
  `priority_sampler.PrioritySampler` (uniform, PER, LAP) draws slots by
  `p_i = leaf_i / sum_k leaf_k` with `leaf_i = priority_i ** alpha`, weighs
  them by `w_i = (N p_i) ** -beta / max_j w_j` and sets priorities from the
  Learner's feedback (`feedback.ReplayFeedback`); the NERS buffer's is
  `ners_score_sampler.NERSScoreSampler`.
- `n_step`: truncated n-step transitions; `sequences`: `[B, T]` step
  sequences; `frame_stack`: k-frame stacks rebuilt at sample time.
- `bookkeeping`: the sample awaiting priorities and the step counts;
  `buffer_state`: the checkpoint.
- `episode_adapter`: RLlib's `SingleAgentEpisode` in and out; `rllib_states`:
  RLlib's buffer states in and out.

The module docstrings of those parts describe the storage layout, sampling,
n-step returns and frame stacking. `buffer.storage` and `buffer.sampler` hand
out the storage and the sampler to read; the buffer's methods change them.

`RingReplayBuffer` holds the parts and the mechanics on them: storing chunks
(`add_chunks`), drawing slots by priority, setting priorities at slots, the
step counts, the stored episodes (`episodes`) and the checkpoint. Use it
through `fast_prioritized_episode_buffer.FastPrioritizedEpisodeReplayBuffer`,
which adds the front-ends: RLlib's buffer API (`add()` and `sample()` of
episodes, `update_priorities()`, counters, metrics, state) and the columnar
samplers (`sample_batch()`, `sample_sequences()`, `recent_sequences()`).

Contract: as in RLlib, sampling and `update_priorities()` alternate: the
priorities passed to `update_priorities` belong to the items of the last sample.
"""

from __future__ import annotations

import logging
from abc import ABCMeta
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Tuple

import numpy as np
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.annotations import override
from ray.rllib.utils.replay_buffers.episode_replay_buffer import EpisodeReplayBuffer
from ray.rllib.utils.replay_buffers.prioritized_episode_buffer import (
    PrioritizedEpisodeReplayBuffer,
)

from rllib_ners.replay_buffers import (
    buffer_state,
    episode_adapter,
    rllib_states,
    writer,
)
from rllib_ners.replay_buffers.bookkeeping import PendingSample, StepCounts
from rllib_ners.replay_buffers.buffer_names import SETTING_FIX
from rllib_ners.replay_buffers.buffer_settings import (
    check_capacity,
    check_no_unknown_settings,
    check_setting,
)
from rllib_ners.replay_buffers.feedback import ReplayFeedback
from rllib_ners.replay_buffers.frame_stack import stacked_observation_space
from rllib_ners.replay_buffers.n_step import (
    draw_n_steps,
    transition_columns,
)
from rllib_ners.replay_buffers.priority_sampler import MIN_PRIORITY, PrioritySampler
from rllib_ners.replay_buffers.ring_storage import RingStorage
from rllib_ners.replay_buffers.sampler_choice import (
    ALL_METHOD_SETTINGS,
    check_learner_sends_feedback,
    sampler_class_for,
)
from rllib_ners.utils.checks import is_positive_int

logger = logging.getLogger(__name__)

# The constructor's settings, as the error for an unknown one lists them.
SETTINGS = (
    "capacity",
    "batch_size_B",
    "batch_length_T",
    "alpha",
    "beta",
    "beta_final",
    "beta_annealing_timesteps",
    "min_priority",
    "sampler",
    *ALL_METHOD_SETTINGS,
    "learner_sends_feedback",
    "seed",
    "frame_stack",
    "metrics_num_episodes_for_smoothing",
)

_NO_SLOTS = np.zeros(0, dtype=np.int64)

# RLlib's default window of the smoothed buffer metrics.
DEFAULT_SMOOTHING_EPISODES = 100

# The capacity RLlib's `__init__` sizes its (unused) storage by, the smallest
# it takes (see `RingReplayBuffer`).
RLLIB_STORAGE_CAPACITY = 1


class RLlibTypeString(ABCMeta):
    """The metaclass of our buffer classes: `item in cls` answers as `item in
    "<module>.<qualname>"` does (see `RingReplayBuffer` for why)."""

    def __contains__(cls, item) -> bool:
        return isinstance(item, str) and item in f"{cls.__module__}.{cls.__qualname__}"


class RingReplayBuffer(PrioritizedEpisodeReplayBuffer, metaclass=RLlibTypeString):
    """The parts of the prioritized episode buffer and the mechanics on them
    (see the module docstring); the settings are
    `FastPrioritizedEpisodeReplayBuffer`'s.

    What RLlib 2.60 forces on this buffer and on
    `FastMultiAgentPrioritizedEpisodeReplayBuffer`, and why:

    - The base class. Stock DQN and SAC send TD errors to
      `update_priorities()` only on instances of RLlib's
      `PrioritizedEpisodeReplayBuffer` (in RLlib's
      `update_priorities_in_episode_replay_buffer`), so ours subclasses it
      (the multi-agent buffer subclasses its multi-agent counterpart) and
      overrides every public method: ours keeps its data in its own parts.
    - The parent's `__init__`. It sets the settings, `metrics` and
      `sampled_timesteps` we use, and also allocates RLlib's storage, which
      no method of ours reads: two Python-list segment trees and a deque of
      2 * 2**ceil(log2(capacity)) nodes each (at capacity 1e6 about 150 MiB
      and 0.3 s). So it runs with `RLLIB_STORAGE_CAPACITY`, the smallest
      capacity, and `capacity` is set to ours afterwards.
    - `episodes` and `episode_id_to_index` are views of the ring storage;
      their setters take the empty values the parent's `__init__` assigns.
    - The metaclass `RLlibTypeString`. `Algorithm.setup()` evaluates
      `"EpisodeReplayBuffer" in replay_buffer_config["type"]` (in
      `_create_local_replay_buffer_if_necessary`), a TypeError for a class.
      RLlib's configs accept a class as `type`, and `AlgorithmConfig.
      update_from_dict` (how Ray Tune rebuilds each trial's config) turns a
      dotted `type` string into the class, so a stock DQN under Tune meets
      it too. Answering `in` as the dotted path keeps both working.
    """

    # The replay method: the class of the sampler `__init__` builds.
    sampler_class = PrioritySampler

    def __init__(
        self,
        capacity: int = 10000,
        *,
        batch_size_B: int = 16,
        batch_length_T: int = 1,
        alpha: float = 1.0,
        beta: float = 0.0,
        metrics_num_episodes_for_smoothing: Optional[int] = None,
        seed: Optional[int] = None,
        frame_stack: int = 1,
        beta_final: Optional[float] = None,
        beta_annealing_timesteps: Optional[int] = None,
        min_priority: float = MIN_PRIORITY,
        sampler: Optional[str] = None,
        learner_sends_feedback: Optional[bool] = None,
        **kwargs,
    ):
        method_settings = {
            name: kwargs.pop(name) for name in ALL_METHOD_SETTINGS if name in kwargs
        }
        check_no_unknown_settings(kwargs, type(self).__name__, SETTINGS)
        capacity = check_capacity(capacity)
        batch_size_B = check_setting("batch_size_B", batch_size_B)
        batch_length_T = check_setting("batch_length_T", batch_length_T)
        self._frame_stack = check_setting("frame_stack", frame_stack)
        sampler_class = sampler_class_for(sampler, type(self), method_settings)
        # RLlib's Algorithm passes `metrics_num_episodes_for_smoothing` to every
        # episode buffer it builds; None here means a buffer built by hand.
        built_by_algorithm = metrics_num_episodes_for_smoothing is not None
        check_learner_sends_feedback(
            sampler_class, learner_sends_feedback, built_by_algorithm
        )
        if metrics_num_episodes_for_smoothing is None:
            metrics_num_episodes_for_smoothing = DEFAULT_SMOOTHING_EPISODES
        self._sampler = sampler_class(
            capacity,
            alpha=alpha,
            beta=beta,
            beta_final=beta_final,
            beta_annealing_timesteps=beta_annealing_timesteps,
            min_priority=min_priority,
            **method_settings,
        )
        self._storage = RingStorage(capacity)
        super().__init__(
            RLLIB_STORAGE_CAPACITY,
            batch_size_B=batch_size_B,
            batch_length_T=batch_length_T,
            alpha=self._sampler.alpha,
            metrics_num_episodes_for_smoothing=metrics_num_episodes_for_smoothing,
        )
        self.capacity = capacity
        # One generator for every random draw: sample slots, n per item, and the
        # NERS buffer's sampler-training draw.
        self.rng = np.random.default_rng(_checked_seed(seed))
        self._pending = PendingSample()
        self._counts = StepCounts()
        self._counts.restart_reporting(self._storage)
        # (step slots, chunk lengths) of the last add(), for recent_sequences().
        self._last_added_steps = (_NO_SLOTS, _NO_SLOTS)
        self._warned_overflow = False
        # `episodes`, built on first access after a change (None: stale).
        self._episodes_view: Optional[Deque[SingleAgentEpisode]] = None

    # -------------------------------------------------------------- episodes
    @property
    @override(EpisodeReplayBuffer)
    def episodes(self) -> Deque[SingleAgentEpisode]:
        """The stored episodes, oldest first, as RLlib's `episodes` deque.

        Built from the ring on first access after an `add()` (O(stored steps);
        then cached until the next change), so a copy: changing these episodes
        does not change the buffer. A partly evicted episode holds its stored
        steps only (`t_started` > 0). Observations are the stored frames (one
        per step, also with `frame_stack` > 1).
        """
        if self._episodes_view is None:
            self._episodes_view = deque(episode_adapter.stored_episodes(self._storage))
        return deque(self._episodes_view)

    @episodes.setter
    @override(EpisodeReplayBuffer)
    def episodes(self, value) -> None:
        # Takes the empty deque RLlib's `__init__` assigns; anything else would
        # be silently lost here.
        if len(value):
            raise ValueError(
                f"{type(self).__name__}.episodes is a view of the stored data and "
                f"cannot be assigned; add episodes with add()."
            )

    @property
    @override(EpisodeReplayBuffer)
    def episode_id_to_index(self) -> Dict[str, int]:
        """Episode id -> its position in `episodes` (RLlib's mapping, without
        RLlib's offset by the number of evicted episodes)."""
        return {episode.id_: i for i, episode in enumerate(self.episodes)}

    @episode_id_to_index.setter
    @override(EpisodeReplayBuffer)
    def episode_id_to_index(self, value) -> None:
        if len(value):
            raise ValueError(
                f"{type(self).__name__}.episode_id_to_index is derived from the "
                f"stored data and cannot be assigned."
            )

    # ------------------------------------------------------------------ parts
    @property
    def storage(self) -> RingStorage:
        """The ring storage (`ring_storage`): every stored field, by slot."""
        return self._storage

    @property
    def sampler(self) -> PrioritySampler:
        """The sampler (`sampler_class`): the trees, the max priority,
        `alpha`, `beta` and the counts of skipped priorities, and what its
        replay method keeps besides."""
        return self._sampler

    @property
    def step_counts(self) -> StepCounts:
        """Steps added and sampled, and what `get_metrics()` has not reported
        (`bookkeeping.StepCounts`)."""
        return self._counts

    @property
    def last_sampled_slots(self) -> np.ndarray:
        """The slots of the last sample's items, which the next
        `update_priorities()` answers (empty once it has)."""
        return self._pending.slots

    @property
    def last_added_slots(self) -> np.ndarray:
        """The step slots the last `add()` wrote (or rewrote), in chunk order."""
        return self._last_added_steps[0]

    @property
    def alpha(self) -> float:
        return self._sampler.alpha

    @property
    def frame_stack(self) -> int:
        return self._frame_stack

    # Whether sampled transitions' frame stacks are laid out channels-first in
    # memory (the same values and shape: a channels-last view), which builds
    # several times faster and is the NCHW layout a GPU Learner's convolution
    # takes as it is; this package's training loop sets it for a local GPU
    # Learner (`frame_stack.stacked_frames`).
    frames_channels_first: bool = False
    # A `DeviceFrames` mirroring the stored frames on a local Learner's GPU,
    # which then gathers `sample_batch()`'s frame stacks as tensors there
    # (set by this package's training loop; see `device_frames`), or None.
    device_frames = None

    @property
    def sampled_observation_space(self):
        """Observation space of sampled `obs`: the stored one, or its k-stack."""
        return stacked_observation_space(
            self._storage.observation_space, self._frame_stack
        )

    # -------------------------------------------------------------------- add
    def add_chunks(
        self, chunks: List[dict], weight: Optional[float] = None
    ) -> writer.AddedSteps:
        """Stores episode chunks (`episode_adapter.read_chunk`); chunks
        continuing a stored episode are joined (`add()` passes its episodes').

        For callers that need to know where the steps went (the multi-agent
        buffer, RLlib-state loading): returns the kept chunks, their step slots
        and the episodes evicted and stored anew (see `writer.AddedSteps`).
        """
        if not chunks:
            self._last_added_steps = (_NO_SLOTS, _NO_SLOTS)
            return writer.AddedSteps([], _NO_SLOTS, [], [], {})
        storage = self._storage
        if not storage.allocated:
            episode_adapter.allocate_storage(storage, chunks[0], self._frame_stack)
        episode_adapter.check_chunks_fit_storage(storage, chunks)
        for chunk in chunks:
            episode_adapter.read_extra_columns(chunk, storage.extra)
        kept, continuing = writer.fit_to_ring(storage, chunks)
        if kept is not chunks:
            self._warn_overflow(writer.count_dropped(storage, chunks, kept))
        new_slots = storage.head_slots(writer.num_new_slots(kept, continuing))
        evicted, evicted_episodes, steps_evicted = storage.evict(new_slots)
        if evicted.size:
            self._sampler.on_evicted(evicted)
        obs_slots, step_slots = writer.write_chunks(
            storage, kept, continuing, new_slots
        )
        # Written slots plus the reused tails of continued episodes.
        touched = np.union1d(obs_slots, step_slots)
        self._sampler.set_new(touched, storage.is_transition[touched], weight)
        self._sampler.on_written(step_slots)

        self._counts.steps_added += int(sum(c["len"] for c in chunks))
        self._last_added_steps = (
            step_slots,
            np.array([c["len"] for c in kept], dtype=np.int64),
        )
        self._episodes_view = None
        self._after_add(step_slots, chunks)
        new_episodes = [c["id"] for c, cont in zip(kept, continuing) if not cont]
        return writer.AddedSteps(
            kept, step_slots, evicted_episodes, new_episodes, steps_evicted
        )

    def _warn_overflow(self, num_kept: int) -> None:
        if self._warned_overflow:
            return
        logger.warning(
            "add() got more observations than the replay buffer's capacity=%d; "
            "it keeps the newest %d steps (the oldest are overwritten first). "
            "Increase `capacity` in `replay_buffer_config` to keep whole "
            "episodes. This warning is shown once.",
            self.capacity,
            num_kept,
        )
        self._warned_overflow = True

    def _after_add(self, step_slots: np.ndarray, chunks: List[dict]) -> None:
        """Hook for subclasses: `step_slots` just became (or were reset as) steps."""

    # ----------------------------------------------------------------- sample
    def _draw(self, num_items: int, beta: float) -> Tuple[np.ndarray, np.ndarray]:
        """Draws slots by priority and returns `(slots, importance weights)`."""
        storage = self._storage
        if storage.num_transitions == 0:
            raise ValueError(
                "Cannot sample from an empty replay buffer: add episodes first (or "
                "raise `num_steps_sampled_before_learning_starts`)."
            )
        slots, weights = self._sampler.draw(num_items, beta, self.rng)
        self._pending.record(slots, storage.stamp[slots])
        self._counts.steps_sampled += num_items
        self.sampled_timesteps += num_items
        self._counts.tally.count(slots, storage.episode_uid)
        return slots, weights

    def _resolve_beta(self, beta: Optional[float]) -> float:
        """The importance-sampling exponent of this sample (annealed, if set)."""
        return self._sampler.resolve_beta(beta, self._counts.steps_added)

    def current_beta(self) -> float:
        """`beta` now: annealed linearly over the env steps added since the
        first sample, or the constant `beta` without annealing."""
        return self._sampler.current_beta(self._counts.steps_added)

    def _draw_n_steps(self, num_items: int, n_step) -> np.ndarray:
        return draw_n_steps(self.rng, num_items, n_step)

    def _transition_columns(
        self, slots, n_steps, gamma, *, for_the_learner: bool = False
    ) -> Dict[str, np.ndarray]:
        """The n-step transitions starting at `slots`, as numpy columns;
        `for_the_learner` (`sample_batch()`): frame stacks gathered by
        `device_frames` where it is set."""
        return transition_columns(
            self._storage,
            slots,
            n_steps,
            gamma,
            frame_stack=self._frame_stack,
            frames_channels_first=self.frames_channels_first,
            device_frames=self.device_frames if for_the_learner else None,
        )

    # ------------------------------------------------------------ priorities
    def _take_last_sample(self, num_values: int) -> Tuple[np.ndarray, np.ndarray]:
        """The last sample's slots and stamps, forgotten once handed out (see
        `bookkeeping.PendingSample.take`)."""
        return self._pending.take(num_values)

    def set_last_sample(self, slots) -> None:
        """Makes `slots` the items the next `update_priorities()` answers, as
        if just sampled (a state loaded from RLlib's buffer may owe those)."""
        slots = np.asarray(slots, dtype=np.int64)
        self._pending.record(slots, self._storage.stamp[slots])

    def update_priorities_at(
        self, slots, priorities, stamps: Optional[np.ndarray] = None
    ) -> np.ndarray:
        """Sets TD-error priorities at explicit buffer slots (PER, LAP,
        uniform); returns the applied mask (see `update_feedback_at`)."""
        return self.update_feedback_at(
            slots, ReplayFeedback(td_errors=priorities), stamps
        )

    def update_feedback_at(
        self, slots, feedback: ReplayFeedback, stamps: Optional[np.ndarray] = None
    ) -> np.ndarray:
        """Hands the sampler a Learner's feedback on explicit buffer slots (in
        sample order); returns the mask of slots it was applied to.

        A slot counts only while it holds a transition and, given `stamps`
        (of the sample), still the one sampled.
        """
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        if len(feedback) != slots.shape[0]:
            raise ValueError(
                f"Got replay feedback on {len(feedback)} items for "
                f"{slots.shape[0]} sampled items: one value per item, in sample "
                f"order."
            )
        live = self._storage.is_transition[slots]
        if stamps is not None:
            live &= self._storage.stamp[slots] == stamps
        return self._sampler.update_priority(slots, feedback, live)

    def get_priorities(self, slots) -> np.ndarray:
        """The current `priority ** alpha` of the given slots."""
        return np.asarray(self._sampler.sum_tree[np.asarray(slots, dtype=np.int64)])

    # ---------------------------------------------------------------- metrics
    def take_lifetime_deltas(self) -> Dict[str, int]:
        """The growth of the lifetime counts (`steps_added`, `steps_evicted`,
        `episodes_added`, `episodes_evicted`) since the last call, for
        `get_metrics()` (the multi-agent buffer's too)."""
        return self._counts.take_lifetime_deltas(self._storage)

    def take_sample_tally(self):
        """What was sampled since the last call (a `bookkeeping.SampleTally`),
        for `get_metrics()` (the multi-agent buffer's too)."""
        return self._counts.take_sample_tally()

    def storage_nbytes(self) -> int:
        """Bytes held by the buffer's numpy arrays (storage, bookkeeping, trees).

        Object arrays (`infos`) count their pointers only, not the dicts.
        """
        own = sum(v.nbytes for v in vars(self).values() if isinstance(v, np.ndarray))
        parts = self._storage.nbytes() + self._sampler.nbytes()
        return int(own) + parts + self._pending.nbytes()

    # ------------------------------------------------------------------ state
    def _gather_state(self, copy: bool) -> Dict[str, Any]:
        """This buffer's checkpoint (`buffer_state`)."""
        return buffer_state.gather_state(
            self._parts(),
            sampled_timesteps=self.sampled_timesteps,
            frame_stack=self._frame_stack,
            rng=self.rng,
            copy=copy,
        )

    def _restore_state(self, state: Dict[str, Any], copy: bool) -> None:
        """Restores `_gather_state()`'s output, or loads RLlib's state."""
        self._episodes_view = None
        if rllib_states.is_rllib_state(state):
            rllib_states.load_rllib_state(self, state)
        else:
            buffer_state.check_restorable(
                state, capacity=self.capacity, frame_stack=self._frame_stack
            )
            buffer_state.restore_parts(self._parts(), state, copy=copy)
            self.sampled_timesteps = state["sampled_timesteps"]
            self.rng = buffer_state.restored_rng(state)
            self._last_added_steps = (_NO_SLOTS, _NO_SLOTS)
        self._counts.restart_reporting(self._storage)

    def _parts(self) -> buffer_state.BufferParts:
        return buffer_state.BufferParts(
            self._storage, self._sampler, self._pending, self._counts
        )

    # With RLlib's state, its steps' priorities replace the new-step priority
    # (subclasses whose priorities mean something else set this to False).
    takes_rllib_priorities = True

    def carry_over_lifetime_counts(
        self, *, episodes_evicted: int, steps_added: int, steps_sampled: int
    ) -> None:
        """The lifetime counts of a memory just loaded from elsewhere (RLlib's
        state): `episodes_evicted` episodes it had evicted count as added and
        evicted, `steps_added` steps were added (those not stored count as
        evicted), `steps_sampled` sampled."""
        storage = self._storage
        storage.count_episodes_evicted_before(episodes_evicted)
        self._counts.steps_added = steps_added
        storage.num_steps_evicted_lifetime = steps_added - storage.num_transitions
        self.sampled_timesteps = self._counts.steps_sampled = steps_sampled

    def clear(self) -> None:
        """Forgets every stored step and counter; keeps the settings and RNG."""
        self._storage = RingStorage(self.capacity)
        self._sampler = self._sampler.emptied()
        self._pending = PendingSample()
        self._counts = StepCounts()
        self._counts.restart_reporting(self._storage)
        self.sampled_timesteps = 0
        self._last_added_steps = (_NO_SLOTS, _NO_SLOTS)
        self._episodes_view = None

    # ------------------------------------------------------------- invariants
    def check_invariants(self) -> None:
        """Raises `RuntimeError` naming every broken invariant, if any.

        Used by tests and the soak benchmark: the trees equal their leaves, only
        stored transitions have priority, and every pointer reaches stored data of
        the same episode.
        """
        problems = self._sampler.broken_invariants()
        problems += self._storage.broken_invariants(self._sampler.sum_tree.leaves)
        if problems:
            raise RuntimeError(
                "Replay buffer invariants broken: " + "; ".join(problems)
            )


def _checked_seed(seed: Any) -> Any:
    """`seed` for numpy's generator: None, an integer >= 0 or a sequence of
    them (the multi-agent buffer seeds each module's buffer with
    `[seed, module hash]`); raises naming the setting otherwise (numpy's own
    error names neither)."""
    if seed is None:
        return None
    entropy = seed if isinstance(seed, (list, tuple)) else [seed]
    if len(entropy) == 0 or not all(
        is_positive_int(value, allow_zero=True) for value in entropy
    ):
        raise ValueError(
            f"`seed` must be an integer >= 0, got seed={seed!r}. {SETTING_FIX}"
        )
    return [int(value) for value in seed] if entropy is seed else int(seed)
