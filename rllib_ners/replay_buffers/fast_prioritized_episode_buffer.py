"""A vectorised, drop-in replacement for RLlib's `PrioritizedEpisodeReplayBuffer`.

`FastPrioritizedEpisodeReplayBuffer` composes parts that each do one thing, as
TorchRL splits a replay buffer into Storage, Writer and Sampler:

- `ring_storage.RingStorage`: ring arrays of observation slots, eviction.
- `writer`: `add()`'s chunks into the ring, continuing stored episodes.
- `priority_sampler.PrioritySampler`: sum/min trees, `alpha`, `beta`; draws
  slots by `p_i = leaf_i / sum_k leaf_k` with `leaf_i = priority_i ** alpha`
  and weighs them by `w_i = (N p_i) ** -beta / max_j w_j`.
- `n_step`: truncated n-step transitions; `sequences`: `[B, T]` step
  sequences; `frame_stack`: k-frame stacks rebuilt at sample time.
- `episode_adapter`: RLlib's `SingleAgentEpisode` in and out (the only part
  that imports Ray besides this module).

The module docstrings of those parts describe the storage layout, sampling,
n-step returns and frame stacking.

Contract: as in RLlib, `sample()` and `update_priorities()` alternate: the
priorities passed to `update_priorities` belong to the items of the last sample.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Tuple, Union

import numpy as np
from ray.rllib.core import DEFAULT_AGENT_ID, DEFAULT_MODULE_ID
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.annotations import override
from ray.rllib.utils.replay_buffers.episode_replay_buffer import EpisodeReplayBuffer
from ray.rllib.utils.replay_buffers.prioritized_episode_buffer import (
    PrioritizedEpisodeReplayBuffer,
)

from rllib_ners.replay_buffers import episode_adapter, rllib_states, writer
from rllib_ners.replay_buffers.buffer_names import (  # noqa: F401 (re-exported)
    ACTIONS,
    INDICES,
    N_STEP,
    NEXT_INDICES,
    NEXT_OBS,
    OBS,
    REWARDS,
    SETTING_FIX,
    TERMINATEDS,
    TIMESTEPS,
    TRUNCATEDS,
    WEIGHTS,
)
from rllib_ners.replay_buffers.frame_stack import stacked_observation_space
from rllib_ners.replay_buffers.n_step import (  # noqa: F401 (re-exported)
    check_gamma,
    draw_n_steps,
    normalize_n_step,
    transition_columns,
)
from rllib_ners.replay_buffers.priority_sampler import (
    NUM_PRIORITIES_NONFINITE_LIFETIME,
    PrioritySampler,
    check_beta,
)
from rllib_ners.replay_buffers.ring_storage import RingStorage, copy_if_array, same
from rllib_ners.replay_buffers.sequences import chunk_pieces, sequence_columns
from rllib_ners.utils.checks import check_positive_int

logger = logging.getLogger(__name__)

# Metric keys of our own (RLlib's constants are used where one exists).
NUM_PRIORITIES_STALE_LIFETIME = "num_priorities_stale_skipped_lifetime"
MAX_PRIORITY = "max_priority"
SAMPLED_N_STEP_MEAN = "sampled_n_step_mean"
SAMPLE_BETA = "beta"


def _check_setting(name: str, value) -> int:
    return check_positive_int(name, value, fix=SETTING_FIX)


def check_weight(weight: Optional[float]) -> None:
    """`add()`'s starting priority: None (the max priority) or a number > 0."""
    if weight is not None and not (np.isfinite(weight) and weight > 0):
        raise ValueError(f"`weight` must be a finite number > 0, got {weight!r}.")


def _check_single_agent_module(module_id: Optional[str]) -> None:
    """RLlib's counters take a `module_id`; a single-agent buffer has one."""
    if module_id not in (None, DEFAULT_MODULE_ID):
        raise ValueError(
            f"This single-agent buffer stores module {DEFAULT_MODULE_ID!r} only, got "
            f"module_id={module_id!r}. For multi-agent replay use "
            f"rllib_ners.FastMultiAgentPrioritizedEpisodeReplayBuffer."
        )


class _SampleTally:
    """What `sample()` calls drew since the last `get_metrics()`: items, the
    distinct steps and episodes per call (summed over calls, as RLlib's
    `num_env_steps_per_sample` is), and the sum of the items' n."""

    def __init__(self):
        self.steps = self.distinct_steps = self.distinct_episodes = 0
        self.n_step_sum = 0

    def count(self, slots: np.ndarray, episode_uid: np.ndarray) -> None:
        self.steps += slots.shape[0]
        # The priority sampler returns sorted slots: distinct ones differ from
        # their predecessor.
        self.distinct_steps += 1 + int(np.count_nonzero(slots[1:] != slots[:-1]))
        self.distinct_episodes += np.unique(episode_uid[slots]).shape[0]


def _rllib_counts(kind: str, *, episodes: int, steps: int) -> Dict[str, Any]:
    """The episode and step counts of RLlib's `_update_add_metrics`, whole-buffer
    and per (default) agent and module, for `kind` "added" or "evicted"."""
    return {
        f"num_episodes_{kind}": episodes,
        f"num_env_steps_{kind}": steps,
        f"agent_to_num_episodes_{kind}": {DEFAULT_AGENT_ID: episodes},
        f"agent_to_num_steps_{kind}": {DEFAULT_AGENT_ID: steps},
        f"module_to_num_episodes_{kind}": {DEFAULT_MODULE_ID: episodes},
        f"module_to_num_steps_{kind}": {DEFAULT_MODULE_ID: steps},
    }


def _per_agent_and_module(**values) -> Dict[str, Dict[str, Any]]:
    """RLlib's `agent_to_<name>` and `module_to_<name>` dicts for one agent."""
    out = {}
    for name, value in values.items():
        out[f"agent_to_{name}"] = {DEFAULT_AGENT_ID: value}
        out[f"module_to_{name}"] = {DEFAULT_MODULE_ID: value}
    return out


class _PartAttribute:
    """A buffer attribute that is an attribute of one of its parts.

    Keeps the buffer's pre-split attribute names (`buffer._obs` is
    `buffer._storage.obs`) for subclasses, tests and tools that read them.
    """

    def __init__(self, part: str, name: str):
        self.part, self.name = part, name

    def __get__(self, buffer, owner=None):
        if buffer is None:
            return self
        return getattr(getattr(buffer, self.part), self.name)

    def __set__(self, buffer, value) -> None:
        setattr(getattr(buffer, self.part), self.name, value)


class FastPrioritizedEpisodeReplayBuffer(
    PrioritizedEpisodeReplayBuffer, metaclass=episode_adapter.EpisodeReplayBufferMeta
):
    """Prioritised episode replay with ring storage and vectorised trees.

    A subclass of RLlib's `PrioritizedEpisodeReplayBuffer` so that stock DQN and
    SAC route their TD errors to `update_priorities()`, but none of the parent's
    storage is used: the parent's Python-list segment trees are never allocated.

    ```python
    from ray.rllib.algorithms.dqn import DQNConfig

    config = DQNConfig().training(
        replay_buffer_config={
            "type": "rllib_ners.FastPrioritizedEpisodeReplayBuffer",
            "capacity": 50000,
            "alpha": 0.6,
            "beta": 0.4,
        }
    )
    ```

    Args:
        capacity: Number of observation slots (see `ring_storage`: every
            stored episode fragment uses one slot beyond its steps).
        batch_size_B: Default number of items (or sequences) per `sample()`.
        batch_length_T: Default sequence length; 1 samples single transitions.
        alpha: Priority exponent, `p_i ~ priority_i ** alpha`; 0 is uniform.
        beta: Default importance-sampling exponent for `sample()` when the caller
            passes none (DQN passes `replay_buffer_config["beta"]`).
        metrics_num_episodes_for_smoothing: Window for the smoothed buffer metrics.
        seed: Seed of the buffer's own random generator (sampling and n-step draws).
        frame_stack: Number of frames `k` in each sampled observation. With
            `k > 1` the observations must be images, `(H, W)` or `(H, W, C)`
            (one frame per step); each is stored once and `obs`/`new_obs` come
            out as `(H, W, k * C)` stacks (see `frame_stack`).
        beta_final: With `beta_annealing_timesteps`, the importance-sampling
            exponent rises linearly from `beta` to `beta_final` over that many
            env steps added after the first sample (PER / data-efficient
            Rainbow: 0.4 -> 1 over the run). `sample()` callers must then pass
            no beta or the initial `beta` (RLlib's DQN passes the config's).
        beta_annealing_timesteps: Length of the annealing, in added env steps.
    """

    def __init__(
        self,
        capacity: int = 10000,
        *,
        batch_size_B: int = 16,
        batch_length_T: int = 1,
        alpha: float = 1.0,
        beta: float = 0.0,
        metrics_num_episodes_for_smoothing: int = 100,
        seed: Optional[int] = None,
        frame_stack: int = 1,
        beta_final: Optional[float] = None,
        beta_annealing_timesteps: Optional[int] = None,
        **kwargs,
    ):
        if kwargs:
            raise ValueError(
                f"Unknown replay buffer settings {sorted(kwargs)} for "
                f"{type(self).__name__}. Remove them from `replay_buffer_config`; "
                f"known settings are capacity, batch_size_B, batch_length_T, alpha, "
                f"beta, beta_final, beta_annealing_timesteps, seed, frame_stack, "
                f"metrics_num_episodes_for_smoothing."
            )
        capacity = _check_setting("capacity", capacity)
        if capacity < 2:
            raise ValueError(
                f"`capacity` must be at least 2 (one step and its next observation), "
                f"got capacity={capacity}."
            )
        batch_size_B = _check_setting("batch_size_B", batch_size_B)
        batch_length_T = _check_setting("batch_length_T", batch_length_T)
        self._frame_stack = _check_setting("frame_stack", frame_stack)
        self._sampler = PrioritySampler(
            capacity,
            alpha=alpha,
            beta=beta,
            beta_final=beta_final,
            beta_annealing_timesteps=beta_annealing_timesteps,
        )
        self._storage = RingStorage(capacity)
        # Deliberately skip PrioritizedEpisodeReplayBuffer.__init__: it allocates
        # two Python-list segment trees of 2 * 2**ceil(log2(capacity)) nodes and a
        # deque of all leaf ids, none of which we use.
        EpisodeReplayBuffer.__init__(
            self,
            capacity,
            batch_size_B=batch_size_B,
            batch_length_T=batch_length_T,
            metrics_num_episodes_for_smoothing=metrics_num_episodes_for_smoothing,
        )
        # One generator for every random draw: sample slots, n per item, and the
        # NERS buffer's sampler-training draw.
        self.rng = np.random.default_rng(seed)

        self._last_sampled_indices = np.zeros(0, dtype=np.int64)
        self._last_sampled_stamps = np.zeros(0, dtype=np.int64)
        # (step slots, chunk lengths) of the last add(), for recent_sequences().
        self._last_added_steps = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        self._num_steps_added_lifetime = 0
        self._num_steps_sampled_lifetime = 0
        self._sampled_n_step_mean = 0.0
        self._warned_overflow = False
        # What get_metrics() reported last, and what was sampled since.
        self._reported = self._lifetime_counts()
        self._tally = _SampleTally()
        # `episodes`, built on first access after a change (None: stale).
        self._episodes_view: Optional[Deque[SingleAgentEpisode]] = None

    # The parts' attributes under the buffer's pre-split names.
    _next = _PartAttribute("_storage", "next")
    _prev = _PartAttribute("_storage", "prev")
    _is_transition = _PartAttribute("_storage", "is_transition")
    _occupied = _PartAttribute("_storage", "occupied")
    _episode_uid = _PartAttribute("_storage", "episode_uid")
    _stamp = _PartAttribute("_storage", "stamp")
    _ts = _PartAttribute("_storage", "ts")
    _rewards = _PartAttribute("_storage", "rewards")
    _terminated = _PartAttribute("_storage", "terminated")
    _truncated = _PartAttribute("_storage", "truncated")
    _obs = _PartAttribute("_storage", "obs")
    _actions = _PartAttribute("_storage", "actions")
    _infos = _PartAttribute("_storage", "infos")
    _extra = _PartAttribute("_storage", "extra")
    _sum_tree = _PartAttribute("_sampler", "sum_tree")
    _min_tree = _PartAttribute("_sampler", "min_tree")
    _num_nonfinite_priorities = _PartAttribute("_sampler", "num_nonfinite_priorities")
    # RLlib's counters under RLlib's names (its `__init__` sets them to 0).
    _num_timesteps = _PartAttribute("_storage", "num_transitions")
    _num_episodes_evicted = _PartAttribute("_storage", "num_episodes_evicted_lifetime")

    # ------------------------------------------------------------------ sizes
    # RLlib's counters, with RLlib's meanings. An episode counts as stored while
    # at least one of its transitions is, and as evicted once the last one is
    # overwritten (RLlib evicts whole episodes, so it has no partly evicted
    # ones; ours keep their newest steps, see `ring_storage`).
    @override(EpisodeReplayBuffer)
    def __len__(self) -> int:
        return self._storage.num_transitions

    @override(EpisodeReplayBuffer)
    def get_num_timesteps(self, module_id: Optional[str] = None) -> int:
        """Number of stored transitions (the steps `sample()` can draw)."""
        _check_single_agent_module(module_id)
        return self._storage.num_transitions

    @override(EpisodeReplayBuffer)
    def get_num_episodes(self, module_id: Optional[str] = None) -> int:
        """Number of stored episodes (each with at least one stored step)."""
        _check_single_agent_module(module_id)
        return self._storage.num_episodes

    @override(EpisodeReplayBuffer)
    def get_num_episodes_evicted(self, module_id: Optional[str] = None) -> int:
        """Number of episodes whose last stored step was evicted, lifetime."""
        _check_single_agent_module(module_id)
        return self._storage.num_episodes_evicted_lifetime

    @override(EpisodeReplayBuffer)
    def get_added_timesteps(self, module_id: Optional[str] = None) -> int:
        """Number of steps ever given to `add()` (kept or not)."""
        _check_single_agent_module(module_id)
        return self._num_steps_added_lifetime

    @override(EpisodeReplayBuffer)
    def get_sampled_timesteps(self, module_id: Optional[str] = None) -> int:
        """Number of items ever sampled."""
        _check_single_agent_module(module_id)
        return self.sampled_timesteps

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
        # RLlib's `EpisodeReplayBuffer.__init__` starts with an empty deque;
        # anything else would be silently lost here.
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

    @property
    def alpha(self) -> float:
        return self._sampler.alpha

    @property
    def frame_stack(self) -> int:
        return self._frame_stack

    @property
    def sampled_observation_space(self):
        """Observation space of sampled `obs`: the stored one, or its k-stack."""
        return stacked_observation_space(
            self._storage.observation_space, self._frame_stack
        )

    # -------------------------------------------------------------------- add
    @override(PrioritizedEpisodeReplayBuffer)
    def add(
        self,
        episodes: Union[List[SingleAgentEpisode], SingleAgentEpisode],
        weight: Optional[float] = None,
    ) -> None:
        """Stores episode chunks; chunks continuing a stored episode are joined.

        A call bringing more observations than `capacity` (a long episode, or
        many episodes at once) keeps the newest `capacity` of them: the oldest
        are overwritten first, as ever. The dropped steps count as added and
        evicted.

        Args:
            episodes: One `SingleAgentEpisode` or a list of them (complete episodes
                or chunks as EnvRunners send them).
            weight: Priority for the new transitions; defaults to the running max
                priority, so new data is sampled at least once soon.
        """
        episodes = episode_adapter.episodes_to_add(
            episodes, SingleAgentEpisode, type(self)
        )
        check_weight(weight)
        chunks = [episode_adapter.read_chunk(e) for e in episodes if len(e) > 0]
        self._add_chunks(chunks, weight)

    def _add_chunks(
        self, chunks: List[dict], weight: Optional[float]
    ) -> Tuple[List[dict], np.ndarray]:
        """Writes chunks (see `writer`); returns the kept chunks and their step
        slots (in chunk order)."""
        no_steps = np.zeros(0, np.int64)
        if not chunks:
            self._last_added_steps = (no_steps, no_steps)
            return [], no_steps
        storage = self._storage
        if not storage.allocated:
            episode_adapter.allocate_storage(storage, chunks[0], self._frame_stack)
        for chunk in chunks:
            episode_adapter.read_extra_columns(chunk, storage.extra)
        kept = chunks
        continuing = writer.plan_continuations(storage, kept)
        num_new = writer.num_new_slots(kept, continuing)
        if num_new > self.capacity:
            kept = writer.newest_that_fit(chunks, self.capacity)
            self._count_dropped(chunks, kept)
            continuing = writer.plan_continuations(storage, kept)
            num_new = writer.num_new_slots(kept, continuing)
        new_slots = storage.head_slots(num_new)
        evicted, finished_episodes = storage.evict(new_slots)
        if evicted.size:
            self._on_evict(evicted)
        obs_slots, step_slots = writer.write_chunks(
            storage, kept, continuing, new_slots
        )
        # Written slots plus the reused tails of continued episodes.
        touched = np.union1d(obs_slots, step_slots)
        self._sampler.set_new(touched, storage.is_transition[touched], weight)

        num_steps = int(sum(c["len"] for c in chunks))
        self._num_steps_added_lifetime += num_steps
        self._num_timesteps_added += num_steps
        self._last_added_steps = (
            step_slots,
            np.array([c["len"] for c in kept], dtype=np.int64),
        )
        self._episodes_view = None
        new_episodes = [c["id"] for c, cont in zip(kept, continuing) if not cont]
        self._on_episodes_changed(finished_episodes, new_episodes)
        self._after_add(step_slots, chunks)
        return kept, step_slots

    def _count_dropped(self, chunks: List[dict], kept: List[dict]) -> None:
        """Counts the steps of `chunks` that `kept` lacks as added and evicted,
        and so are episodes of which nothing was kept nor stored before."""
        storage = self._storage
        dropped = sum(c["len"] for c in chunks) - sum(c["len"] for c in kept)
        storage.num_steps_evicted_lifetime += dropped
        kept_ids = {c["id"] for c in kept}
        lost = {
            c["id"]
            for c in chunks
            if c["id"] not in kept_ids and c["id"] not in storage.open_episodes
        }
        storage.num_episodes_added_lifetime += len(lost)
        storage.num_episodes_evicted_lifetime += len(lost)
        if not self._warned_overflow:
            logger.warning(
                "add() got more observations than the replay buffer's capacity=%d; "
                "it keeps the newest %d steps (the oldest are overwritten first). "
                "Increase `capacity` in `replay_buffer_config` to keep whole "
                "episodes. This warning is shown once.",
                self.capacity,
                sum(c["len"] for c in kept),
            )
            self._warned_overflow = True

    def _after_add(self, step_slots: np.ndarray, chunks: List[dict]) -> None:
        """Hook for subclasses: `step_slots` just became (or were reset as) steps."""

    def _on_evict(self, slots: np.ndarray) -> None:
        """Hook for subclasses: `slots` are being overwritten."""

    def _on_episodes_changed(self, evicted: List[str], added: List[str]) -> None:
        """Hook for subclasses: the ids of the episodes that were just evicted
        (their last transition overwritten), then of those just stored anew
        (a first chunk, or the first after the episode's eviction)."""

    # ----------------------------------------------------------------- sample
    def _draw(self, num_items: int, beta: float) -> Tuple[np.ndarray, np.ndarray]:
        """Draws slots by priority and returns `(slots, importance weights)`."""
        if self._storage.num_transitions == 0:
            raise ValueError(
                "Cannot sample from an empty replay buffer: add episodes first (or "
                "raise `num_steps_sampled_before_learning_starts`)."
            )
        slots, weights = self._sampler.draw(num_items, beta, self.rng)
        self._last_sampled_indices = slots
        self._last_sampled_stamps = self._storage.stamp[slots]
        self._num_steps_sampled_lifetime += num_items
        self.sampled_timesteps += num_items
        self._tally.count(slots, self._storage.episode_uid)
        return slots, weights

    def _resolve_beta(self, beta: Optional[float]) -> float:
        """The importance-sampling exponent of this sample (annealed, if set)."""
        return self._sampler.resolve_beta(beta, self._num_steps_added_lifetime)

    def current_beta(self) -> float:
        """`beta` now: annealed linearly over the env steps added since the
        first sample, or the constant `beta` without annealing."""
        return self._sampler.current_beta(self._num_steps_added_lifetime)

    def _draw_n_steps(self, num_items: int, n_step) -> np.ndarray:
        return draw_n_steps(self.rng, num_items, n_step)

    def sample_batch(
        self,
        num_items: Optional[int] = None,
        *,
        n_step: Union[int, Tuple[int, int], None] = 1,
        gamma: float = 0.99,
        beta: Optional[float] = None,
        include_extra_model_outputs: bool = False,
    ) -> Dict[str, np.ndarray]:
        """Columnar fast path: the same transitions as `sample()`, as numpy columns.

        Returns a dict with `obs`, `new_obs` (the observation `n_step` steps later),
        `actions`, `rewards` (discounted n-step return), `terminateds`,
        `truncateds`, `weights`, `n_step`, `indices` (buffer slots, the keys for
        `update_priorities`) and `ts` (timestep of `obs` in its episode); with
        `include_extra_model_outputs` also every stored extra model output at `t`.
        """
        num_items = _check_setting(
            "num_items", num_items if num_items is not None else self.batch_size_B
        )
        beta = self._resolve_beta(beta)
        check_gamma(gamma)
        n_steps = self._draw_n_steps(num_items, n_step)
        slots, weights = self._draw(num_items, beta)
        batch = self._transition_columns(slots, n_steps, gamma)
        batch[WEIGHTS] = weights
        n_step_sum = int(batch[N_STEP].sum())
        self._sampled_n_step_mean = n_step_sum / num_items
        self._tally.n_step_sum += n_step_sum
        if include_extra_model_outputs:
            for key, column in self._storage.extra.items():
                batch[key] = column[slots]
        return batch

    def _transition_columns(self, slots, n_steps, gamma) -> Dict[str, np.ndarray]:
        """The n-step transitions starting at `slots`, as numpy columns."""
        return transition_columns(
            self._storage, slots, n_steps, gamma, frame_stack=self._frame_stack
        )

    @override(PrioritizedEpisodeReplayBuffer)
    def sample(
        self,
        num_items: Optional[int] = None,
        *,
        batch_size_B: Optional[int] = None,
        batch_length_T: Optional[int] = None,
        n_step: Optional[Union[int, Tuple[int, int]]] = None,
        beta: Optional[float] = None,
        gamma: float = 0.99,
        include_infos: bool = False,
        include_extra_model_outputs: bool = False,
        to_numpy: bool = False,
        **kwargs,
    ) -> List[SingleAgentEpisode]:
        """Samples 1-step episodes (n-step transitions) or sequences, by priority.

        With `batch_length_T` of 0/None/1 (the default) returns `num_items`
        single-step episodes `(o_t, a_t, R_t^n, o_{t+n})` exactly as RLlib's
        `PrioritizedEpisodeReplayBuffer` does, with `weights` and `n_step` in the
        extra model outputs (plus `buffer_index`, the slot for priority updates).

        With `batch_length_T=T > 1` returns `batch_size_B` (or `num_items // T`)
        contiguous slices of at most `T` steps inside one episode, their start
        drawn by priority, carrying every extra model output (e.g.
        `action_dist_inputs`, `action_logp`) plus per-step `weights`. `n_step`
        must then be 1. Slices are shorter where the stored episode ends first.

        Keyword arguments RLlib passes for other buffers (`sample_episodes`,
        `lookback`, `min_batch_length_T`) are accepted; a non-zero `lookback` or
        `min_batch_length_T` raises, since these are not supported here.
        """
        episode_adapter.check_sample_kwargs(kwargs)
        T = batch_length_T if batch_length_T is not None else self.batch_length_T
        if beta is not None:
            check_beta(beta)
        check_gamma(gamma)
        storage = self._storage
        if T and T > 1:
            if normalize_n_step(n_step) != (1, 1):
                raise ValueError(
                    f"Sequence sampling (batch_length_T={T}) needs n_step=1, got "
                    f"n_step={n_step!r}."
                )
            B = batch_size_B or (num_items // T if num_items else self.batch_size_B)
            B = _check_setting("batch_size_B", B)
            batch = self.sample_sequences(B, T, beta=beta, include_infos=include_infos)
            return episode_adapter.sequences_to_episodes(
                batch,
                storage,
                include_infos=include_infos,
                observation_space=self.sampled_observation_space,
                identities=self._episode_identities(batch[INDICES]),
            )

        num_items = num_items or batch_size_B or self.batch_size_B
        batch = self.sample_batch(
            num_items,
            n_step=n_step,
            gamma=gamma,
            beta=beta,
            include_extra_model_outputs=include_extra_model_outputs,
        )
        return episode_adapter.transitions_to_episodes(
            batch,
            storage,
            item_columns=self.item_columns(batch),
            include_infos=include_infos,
            include_extra=include_extra_model_outputs,
            observation_space=self.sampled_observation_space,
            to_numpy=to_numpy,
            identities=self._episode_identities(batch[INDICES]),
        )

    def _episode_identities(self, slots: np.ndarray) -> Optional[Dict[str, list]]:
        """Per sampled item, arguments for its `SingleAgentEpisode` (such as
        `agent_id`); none here (RLlib's single-agent buffer sets none)."""
        return None

    def item_columns(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Per-item values that `sample()` adds to each episode's extra model
        outputs, so that RLlib's learner connector turns them into batch columns.
        """
        return {"buffer_index": batch[INDICES]}

    # ------------------------------------------------------------ sequences
    def sample_sequences(
        self,
        batch_size_B: int,
        batch_length_T: int,
        *,
        beta: Optional[float] = None,
        include_infos: bool = False,
    ) -> Dict[str, np.ndarray]:
        """Columnar sequences: `[B, T]` arrays plus a `mask` of valid steps.

        Starts are drawn by priority; each row follows its episode forward for up
        to `T` steps (columns: see `sequences.sequence_columns`).
        """
        B = _check_setting("batch_size_B", batch_size_B)
        T = _check_setting("batch_length_T", batch_length_T)
        beta = self._resolve_beta(beta)
        starts, weights = self._draw(B, beta)
        self._tally.n_step_sum += B  # each row's start is a 1-step transition
        return sequence_columns(
            self._storage,
            starts,
            weights,
            T,
            frame_stack=self._frame_stack,
            include_infos=include_infos,
        )

    def recent_sequences(
        self, batch_length_T: int, *, include_infos: bool = False
    ) -> Dict[str, np.ndarray]:
        """The steps of the last `add()` call, cut into sequences of at most `T`.

        For on-policy updates (ACER): every chunk of the last `add()` is split at
        `0, T, 2T, ...` into rows that stay inside the chunk; the columns are
        those of `sample_sequences()` with `weights` 1. Does not count as a
        sample (no priority update is expected after it).
        """
        T = _check_setting("batch_length_T", batch_length_T)
        step_slots, chunk_lengths = self._last_added_steps
        if step_slots.size == 0:
            raise ValueError(
                "recent_sequences() needs steps from a preceding add() call; the "
                "last add() stored none."
            )
        starts, max_lengths = chunk_pieces(step_slots, chunk_lengths, T)
        weights = np.ones(starts.size, dtype=np.float32)
        return sequence_columns(
            self._storage,
            starts,
            weights,
            T,
            frame_stack=self._frame_stack,
            max_lengths=max_lengths,
            include_infos=include_infos,
        )

    # ------------------------------------------------------------ priorities
    @override(PrioritizedEpisodeReplayBuffer)
    def update_priorities(self, priorities, module_id: Optional[str] = None) -> None:
        """Sets new priorities for the items of the last `sample()` call.

        Non-finite or negative values are skipped (the item keeps its priority),
        counted in `num_priorities_nonfinite_skipped_lifetime` and warned about
        once. Items whose slot was overwritten since the sample are skipped too.
        """
        priorities = np.asarray(priorities, dtype=np.float64).reshape(-1)
        slots, stamps = self._take_last_sample(priorities.shape[0])
        self.update_priorities_at(slots, priorities, stamps)

    def _take_last_sample(self, num_values: int) -> Tuple[np.ndarray, np.ndarray]:
        """The last sample's slots and stamps, forgotten once handed out.

        Raises (and keeps them) unless `num_values` matches the sample's size.
        """
        slots, stamps = self._last_sampled_indices, self._last_sampled_stamps
        if num_values != slots.shape[0]:
            raise ValueError(
                f"update_priorities() got {num_values} values for {slots.shape[0]} "
                f"sampled items: call it once after each sample(), with one value "
                f"per sampled item, in order."
            )
        self._last_sampled_indices = np.zeros(0, dtype=np.int64)
        self._last_sampled_stamps = np.zeros(0, dtype=np.int64)
        return slots, stamps

    def update_priorities_at(
        self, slots, priorities, stamps: Optional[np.ndarray] = None
    ) -> np.ndarray:
        """Sets priorities at explicit buffer slots; returns the applied mask.

        A slot counts only while it holds a transition and, given `stamps`
        (of the sample), still the one sampled.
        """
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        priorities = np.asarray(priorities, dtype=np.float64).reshape(-1)
        live = self._storage.is_transition[slots]
        if stamps is not None:
            live &= self._storage.stamp[slots] == stamps
        return self._sampler.update(slots, priorities, live)

    def get_priorities(self, slots) -> np.ndarray:
        """The current `priority ** alpha` of the given slots."""
        return np.asarray(self._sampler.sum_tree[np.asarray(slots, dtype=np.int64)])

    # ---------------------------------------------------------------- metrics
    @override(EpisodeReplayBuffer)
    def get_metrics(self) -> Dict[str, Any]:
        """RLlib's buffer metrics (same keys, meanings and reductions), plus ours.

        RLlib logs them on every `add()` and `sample()`; ours tallies counts
        there and logs them here, once, through RLlib's own
        `_update_add_metrics` / `_update_sample_metrics`. `num_resamples` is
        always 0: n-step returns are truncated at episode ends, never redrawn.
        """
        m = self.metrics
        sampler = self._sampler
        delta = self._take_lifetime_deltas()
        self._update_add_metrics(
            **_rllib_counts(
                "added",
                episodes=delta["episodes_added"],
                steps=delta["steps_added"],
            ),
            **_rllib_counts(
                "evicted",
                episodes=delta["episodes_evicted"],
                steps=delta["steps_evicted"],
            ),
        )
        tally = self._take_sample_tally()
        if tally.steps:
            n_step_mean = tally.n_step_sum / tally.steps if tally.n_step_sum else None
            self._update_sample_metrics(
                num_env_steps_sampled=tally.steps,
                num_episodes_per_sample=tally.distinct_episodes,
                num_env_steps_per_sample=tally.distinct_steps,
                sampled_n_step=n_step_mean,
                num_resamples=0,
                **_per_agent_and_module(
                    num_steps_sampled=tally.steps,
                    num_episodes_per_sample=tally.distinct_episodes,
                    num_steps_per_sample=tally.distinct_steps,
                    sampled_n_step=n_step_mean,
                    num_resamples=0,
                ),
            )
        m.log_value(MAX_PRIORITY, sampler.max_priority, reduce="mean", window=1)
        m.log_value(SAMPLE_BETA, self.current_beta(), reduce="mean", window=1)
        m.log_value(
            SAMPLED_N_STEP_MEAN, self._sampled_n_step_mean, reduce="mean", window=1
        )
        for key, value in (
            (NUM_PRIORITIES_NONFINITE_LIFETIME, sampler.num_nonfinite_priorities),
            (NUM_PRIORITIES_STALE_LIFETIME, sampler.num_stale_priorities),
        ):
            # Monotone counters: the latest value is the largest one.
            m.log_value(key, value, reduce="max", window=1)
        self._log_extra_metrics(m)
        return m.reduce()

    def _lifetime_counts(self) -> Dict[str, int]:
        storage = self._storage
        return {
            "steps_added": self._num_steps_added_lifetime,
            "steps_evicted": storage.num_steps_evicted_lifetime,
            "episodes_added": storage.num_episodes_added_lifetime,
            "episodes_evicted": storage.num_episodes_evicted_lifetime,
        }

    def _take_lifetime_deltas(self) -> Dict[str, int]:
        """The lifetime counts' growth since the last call."""
        now = self._lifetime_counts()
        delta = {key: now[key] - self._reported.get(key, 0) for key in now}
        self._reported = now
        return delta

    def _take_sample_tally(self) -> _SampleTally:
        """What was sampled since the last call."""
        tally, self._tally = self._tally, _SampleTally()
        return tally

    def _restart_metrics(self) -> None:
        """After `set_state()`: report only what happens from now on, as
        RLlib's buffers do (their metrics are not part of their state; the
        Algorithm's restored metrics hold the totals)."""
        self._reported = self._lifetime_counts()
        self._tally = _SampleTally()

    def _log_extra_metrics(self, metrics) -> None:
        """Hook for subclasses to add their metrics."""

    def storage_nbytes(self) -> int:
        """Bytes held by the buffer's numpy arrays (storage, bookkeeping, trees).

        Object arrays (`infos`) count their pointers only, not the dicts.
        """
        own = sum(v.nbytes for v in vars(self).values() if isinstance(v, np.ndarray))
        return int(own) + self._storage.nbytes() + self._sampler.nbytes()

    # ------------------------------------------------------------------ state
    # The buffer's own entries of `get_state()`; the storage and the sampler
    # add theirs. Subclasses extend these two tuples.
    _STATE_ARRAYS = ("_last_sampled_indices", "_last_sampled_stamps")
    _STATE_SCALARS = (
        "_num_steps_added_lifetime",
        "_num_steps_sampled_lifetime",
        "_num_timesteps_added",
        "sampled_timesteps",
    )

    @override(PrioritizedEpisodeReplayBuffer)
    def get_state(self, *, copy: bool = True) -> Dict[str, Any]:
        """Everything needed to resume: storage, trees, RNG, counters.

        Args:
            copy: Copy the arrays, so that the state stays as it is while the
                buffer goes on adding. False hands out the live arrays, for a
                checkpoint written at once: no second copy of the storage (a
                100k Atari buffer is ~0.7 GB) is made at save time.
        """
        take = copy_if_array if copy else same
        state = self._storage.get_state(copy=copy)
        state.update(self._sampler.get_state())
        state.update({name: take(getattr(self, name)) for name in self._STATE_ARRAYS})
        state.update({name: getattr(self, name) for name in self._STATE_SCALARS})
        state["capacity"] = self.capacity
        state["frame_stack"] = self._frame_stack
        state["rng"] = self.rng.bit_generator.state
        return state

    @override(PrioritizedEpisodeReplayBuffer)
    def set_state(self, state: Dict[str, Any], *, copy: bool = True) -> None:
        """Restores `get_state()`'s output; `copy=False` adopts its arrays (for a
        state just loaded from a checkpoint that nothing else holds).

        Also takes the state of RLlib's `PrioritizedEpisodeReplayBuffer` or
        `EpisodeReplayBuffer`, so a run checkpointed with RLlib's buffer goes on
        with this one: the episodes (newest kept if they exceed `capacity`),
        each step's priority leaf, the max priority and the lifetime counters
        carry over (see `rllib_states`).
        """
        self._episodes_view = None
        if rllib_states.is_rllib_state(state):
            rllib_states.load_rllib_state(self, state)
            self._restart_metrics()
            return
        if int(state["capacity"]) != self.capacity:
            raise ValueError(
                f"Cannot restore a buffer of capacity {state['capacity']} into one of "
                f"capacity={self.capacity}; build it with the same `capacity`."
            )
        if int(state.get("frame_stack", 1)) != self._frame_stack:
            raise ValueError(
                f"Cannot restore a buffer saved with frame_stack="
                f"{state.get('frame_stack', 1)} into one with frame_stack="
                f"{self._frame_stack}; build it with the same `frame_stack`."
            )
        take = copy_if_array if copy else same
        self._storage.set_state(state, copy=copy)
        self._sampler.set_state(state)
        for name in self._STATE_ARRAYS + self._STATE_SCALARS:
            setattr(self, name, take(state[name]))
        self.rng = np.random.default_rng()
        self.rng.bit_generator.state = state["rng"]
        self._last_added_steps = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        self._restart_metrics()

    # With RLlib's state, its steps' priorities replace the new-step priority
    # (subclasses whose priorities mean something else set this to False).
    _takes_rllib_priorities = True

    def to_rllib_state(self, rllib_class: Optional[type] = None) -> Dict[str, Any]:
        """This buffer's memory as the state of one of RLlib's buffers.

        For `rllib_buffer.set_state(...)` with `rllib_class` RLlib's
        `PrioritizedEpisodeReplayBuffer` (default: stored episodes, priority
        leaves, max priority, counters) or `EpisodeReplayBuffer` (episodes and
        counters). A one-off conversion through RLlib's own `add()`.
        """
        return rllib_states.rllib_state(self, rllib_class)

    def _clear(self) -> None:
        """Forgets every stored step and counter; keeps the settings and RNG."""
        self._storage = RingStorage(self.capacity)
        self._sampler = self._sampler.emptied()
        self._last_sampled_indices = np.zeros(0, dtype=np.int64)
        self._last_sampled_stamps = np.zeros(0, dtype=np.int64)
        self._last_added_steps = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        self._num_steps_added_lifetime = self._num_timesteps_added = 0
        self._num_steps_sampled_lifetime = self.sampled_timesteps = 0
        self._sampled_n_step_mean = 0.0
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
