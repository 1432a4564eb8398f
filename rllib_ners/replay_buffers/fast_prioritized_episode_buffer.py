"""A vectorised, drop-in replacement for RLlib's `PrioritizedEpisodeReplayBuffer`.

`FastPrioritizedEpisodeReplayBuffer` is the buffer's front-ends: RLlib's
episode-buffer API (`add()` and `sample()` of `SingleAgentEpisode`s,
`update_priorities()`, RLlib's counters and metrics, `get_state()` /
`set_state()`) and the columnar samplers our algorithms use (`sample_batch()`,
`sample_sequences()`, `recent_sequences()`). The parts (ring storage, priority
trees, bookkeeping) and the mechanics on them are
`ring_replay_buffer.RingReplayBuffer`'s, whose module docstring lists them.

Contract: as in RLlib, `sample()` and `update_priorities()` alternate: the
priorities passed to `update_priorities` belong to the items of the last sample.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.annotations import override
from ray.rllib.utils.replay_buffers.episode_replay_buffer import EpisodeReplayBuffer
from ray.rllib.utils.replay_buffers.prioritized_episode_buffer import (
    PrioritizedEpisodeReplayBuffer,
)

from rllib_ners.replay_buffers import buffer_metrics, episode_adapter, rllib_states
from rllib_ners.replay_buffers.buffer_metrics import (  # noqa: F401 (re-exported)
    MAX_PRIORITY,
    NUM_PRIORITIES_STALE_LIFETIME,
    SAMPLE_BETA,
    SAMPLED_N_STEP_MEAN,
    log_latest,
    log_lifetime_count,
)
from rllib_ners.replay_buffers.buffer_names import (  # noqa: F401 (re-exported)
    ACTIONS,
    INDICES,
    N_STEP,
    NEXT_INDICES,
    NEXT_OBS,
    OBS,
    REWARDS,
    SAMPLE_POSITION,
    SETTING_FIX,
    TERMINATEDS,
    TIMESTEPS,
    TRUNCATEDS,
    WEIGHTS,
)
from rllib_ners.replay_buffers.buffer_settings import check_setting, check_weight
from rllib_ners.replay_buffers.feedback import ReplayFeedback
from rllib_ners.replay_buffers.n_step import (  # noqa: F401 (re-exported)
    check_gamma,
    draw_n_steps,
    normalize_n_step,
    transition_columns,
)
from rllib_ners.replay_buffers.packed_fragments import PackedFragments
from rllib_ners.replay_buffers.priority_sampler import NUM_PRIORITIES_NONFINITE_LIFETIME
from rllib_ners.replay_buffers.ring_replay_buffer import RingReplayBuffer
from rllib_ners.replay_buffers.sequences import chunk_pieces, sequence_columns
from rllib_ners.seam.replay import log_add_metrics, log_sample_metrics


def _check_single_agent_module(module_id: Optional[str]) -> None:
    """RLlib's counters take a `module_id`; a single-agent buffer has one."""
    if module_id not in (None, DEFAULT_MODULE_ID):
        raise ValueError(
            f"This single-agent buffer stores module {DEFAULT_MODULE_ID!r} only, got "
            f"module_id={module_id!r}. For multi-agent replay use "
            f"rllib_ners.FastMultiAgentPrioritizedEpisodeReplayBuffer."
        )


class FastPrioritizedEpisodeReplayBuffer(RingReplayBuffer):
    """Prioritised episode replay with ring storage and vectorised trees.

    A subclass of RLlib's `PrioritizedEpisodeReplayBuffer` so that stock DQN and
    SAC route their TD errors to `update_priorities()` (what else RLlib forces:
    `ring_replay_buffer.RingReplayBuffer`).

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
        min_priority: Priorities below it are raised to it before the exponent
            (default 1e-12: every stored transition stays reachable). LAP
            (Fujimoto et al. 2020) is `min_priority=1.0`, `alpha=0.4`,
            `beta=0.0`: priority `max(|delta|, 1) ** 0.4`, no importance
            weights (with a Huber loss in the learner).
        sampler: The replay method: "priority" (default: uniform replay, PER
            or LAP by the settings above), "relo" (`relo_sampler`: PER with
            ReLo priorities; settings `relo_transform`, `relo_epsilon`) or
            "laber" (`laber_sampler`: a uniform large batch of `laber_m`
            times the items asked for, which the Learner sub-samples;
            settings `laber_m`, `laber_weights`; alpha and beta 0). Both
            need this package's Learners, which send their feedback
            (`rllib_ners.enable_replay` sets one on a stock config).
    """

    # ------------------------------------------------------------------ sizes
    # RLlib's counters, with RLlib's meanings. An episode counts as stored while
    # at least one of its transitions is, and as evicted once the last one is
    # overwritten (RLlib evicts whole episodes, so it has no partly evicted
    # ones; ours keep their newest steps, see `ring_storage`).
    @override(EpisodeReplayBuffer)
    def __len__(self) -> int:
        return self.storage.num_transitions

    @override(EpisodeReplayBuffer)
    def get_num_timesteps(self, module_id: Optional[str] = None) -> int:
        """Number of stored transitions (the steps `sample()` can draw)."""
        _check_single_agent_module(module_id)
        return self.storage.num_transitions

    @override(EpisodeReplayBuffer)
    def get_num_episodes(self, module_id: Optional[str] = None) -> int:
        """Number of stored episodes (each with at least one stored step)."""
        _check_single_agent_module(module_id)
        return self.storage.num_episodes

    @override(EpisodeReplayBuffer)
    def get_num_episodes_evicted(self, module_id: Optional[str] = None) -> int:
        """Number of episodes whose last stored step was evicted, lifetime."""
        _check_single_agent_module(module_id)
        return self.storage.num_episodes_evicted_lifetime

    @override(EpisodeReplayBuffer)
    def get_added_timesteps(self, module_id: Optional[str] = None) -> int:
        """Number of steps ever given to `add()` (kept or not)."""
        _check_single_agent_module(module_id)
        return self.step_counts.steps_added

    @override(EpisodeReplayBuffer)
    def get_sampled_timesteps(self, module_id: Optional[str] = None) -> int:
        """Number of items ever sampled."""
        _check_single_agent_module(module_id)
        return self.sampled_timesteps

    # -------------------------------------------------------------------- add
    @override(PrioritizedEpisodeReplayBuffer)
    def add(
        self,
        episodes: Union[
            SingleAgentEpisode,
            PackedFragments,
            List[Union[SingleAgentEpisode, PackedFragments]],
        ],
        weight: Optional[float] = None,
    ) -> None:
        """Stores episode chunks; chunks continuing a stored episode are joined.

        A call bringing more observations than `capacity` (a long episode, or
        many episodes at once) keeps the newest `capacity` of them: the oldest
        are overwritten first, as ever. The dropped steps count as added and
        evicted.

        Args:
            episodes: One `SingleAgentEpisode` or a list of them (complete episodes
                or chunks as EnvRunners send them), or `PackedFragments` (such
                chunks joined into columns, as our training loop's remote
                EnvRunners ship them; see `packed_fragments`).
            weight: Priority for the new transitions; defaults to the running max
                priority, so new data is sampled at least once soon.
        """
        chunks = episode_adapter.single_agent_chunks(episodes, type(self))
        check_weight(weight)
        self.add_chunks(chunks, weight)

    # ----------------------------------------------------------------- sample
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
        return episode_adapter.sample_episodes(
            self,
            num_items=num_items,
            batch_size_B=batch_size_B,
            batch_length_T=batch_length_T,
            n_step=n_step,
            beta=beta,
            gamma=gamma,
            include_infos=include_infos,
            include_extra_model_outputs=include_extra_model_outputs,
            to_numpy=to_numpy,
            **kwargs,
        )

    def episode_identities(self, slots: np.ndarray) -> Optional[Dict[str, list]]:
        """Per sampled item, arguments for its `SingleAgentEpisode` (such as
        `agent_id`); none here (RLlib's single-agent buffer sets none)."""
        return None

    def item_columns(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Per-item values that `sample()` adds to each episode's extra model
        outputs, so that RLlib's learner connector turns them into batch columns.
        A sampler whose feedback carries sample positions (NERS, ReLo, LaBER)
        gets each item's `sample_position` too.
        """
        columns = {"buffer_index": batch[INDICES]}
        if "sample_positions" in self.sampler.feedback_layout.fields:
            columns[SAMPLE_POSITION] = np.arange(batch[INDICES].shape[0])
        return columns

    # ---------------------------------------------------- columnar sampling
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
        With `device_frames` set (a local GPU Learner, frame stacks), `obs` and
        `new_obs` are uint8 tensors on its device, the same values.
        """
        num_items = check_setting(
            "num_items", num_items if num_items is not None else self.batch_size_B
        )
        # LaBER's sampler draws a large batch, m times the items asked for.
        num_items = self.sampler.items_per_draw(num_items)
        beta = self._resolve_beta(beta)
        check_gamma(gamma)
        n_steps = self._draw_n_steps(num_items, n_step)
        slots, weights = self._draw(num_items, beta)
        batch = self._transition_columns(slots, n_steps, gamma, for_the_learner=True)
        batch[WEIGHTS] = weights
        n_step_sum = int(batch[N_STEP].sum())
        self.step_counts.sampled_n_step_mean = n_step_sum / num_items
        self.step_counts.tally.n_step_sum += n_step_sum
        if include_extra_model_outputs:
            for key, column in self.storage.extra.items():
                batch[key] = column[slots]
        return batch

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
        B = check_setting("batch_size_B", batch_size_B)
        T = check_setting("batch_length_T", batch_length_T)
        if self.sampler.items_per_draw(B) != B:
            raise ValueError(
                f"sample_sequences() cannot serve sampler="
                f"{self.sampler.name!r}: LaBER sub-samples transitions, not "
                f"sequences (ACER). Use sampler='priority' in "
                f"`replay_buffer_config`."
            )
        beta = self._resolve_beta(beta)
        starts, weights = self._draw(B, beta)
        # Each row's start is a 1-step transition.
        self.step_counts.tally.n_step_sum += B
        return sequence_columns(
            self.storage,
            starts,
            weights,
            T,
            frame_stack=self.frame_stack,
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
        T = check_setting("batch_length_T", batch_length_T)
        step_slots, chunk_lengths = self._last_added_steps
        if step_slots.size == 0:
            raise ValueError(
                "recent_sequences() needs steps from a preceding add() call; the "
                "last add() stored none."
            )
        starts, max_lengths = chunk_pieces(step_slots, chunk_lengths, T)
        weights = np.ones(starts.size, dtype=np.float32)
        return sequence_columns(
            self.storage,
            starts,
            weights,
            T,
            frame_stack=self.frame_stack,
            max_lengths=max_lengths,
            include_infos=include_infos,
        )

    # ------------------------------------------------------------ priorities
    @override(PrioritizedEpisodeReplayBuffer)
    def update_priorities(self, priorities, module_id: Optional[str] = None) -> None:
        """Sets new priorities for the items of the last `sample()` call.

        RLlib's entry point: `priorities` is the array a Learner logged under
        RLlib's TD-error key, the feedback packed in the sampler's
        `feedback_layout` (plain TD errors, or the NERS sampler's rows); see
        `update_feedback()`.
        """
        _check_single_agent_module(module_id)
        self.update_feedback(self.sampler.feedback_layout.unpack(priorities))

    def update_feedback(self, feedback: ReplayFeedback) -> None:
        """Hands the sampler the Learner's feedback on the items of the last
        `sample()` call (put in sample order first, by its positions).

        Non-finite or negative priorities are skipped (the item keeps its
        priority), counted in `num_priorities_nonfinite_skipped_lifetime` and
        warned about once. Items whose slot was overwritten since the sample
        are skipped too.
        """
        feedback = feedback.in_sample_order()
        self.update_feedback_of(self._take_last_sample(len(feedback)), feedback)

    @property
    def alpha(self) -> float:
        """The priority exponent (0: uniform replay)."""
        return self._sampler.alpha

    def take_sampled_items(self) -> Tuple[np.ndarray, np.ndarray]:
        """The last `sample()`'s items (slots, and their write stamps), which
        `update_priorities()` then no longer answers: for
        `update_feedback_of()`, when the feedback comes back after the next
        sample."""
        slots = self.last_sampled_slots
        return self._take_last_sample(slots.shape[0])

    def update_feedback_of(
        self, sampled: Tuple[np.ndarray, np.ndarray], feedback: ReplayFeedback
    ) -> None:
        """`update_feedback()` for the items `take_sampled_items()` gave (an
        item rewritten since then is skipped, as there)."""
        slots, stamps = sampled
        self.update_feedback_at(slots, feedback, stamps)

    # ------------------------------------------------------------------ state
    @override(PrioritizedEpisodeReplayBuffer)
    def get_state(self, *, copy: bool = True) -> Dict[str, Any]:
        """Everything needed to resume: storage, trees, RNG, counters.

        Args:
            copy: Copy the arrays, so that the state stays as it is while the
                buffer goes on adding. False hands out the live arrays, for a
                checkpoint written at once: no second copy of the storage (a
                100k Atari buffer is ~0.7 GB) is made at save time.
        """
        return self._gather_state(copy)

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
        self._restore_state(state, copy)

    def to_rllib_state(self, rllib_class: Optional[type] = None) -> Dict[str, Any]:
        """This buffer's memory as the state of one of RLlib's buffers.

        For `rllib_buffer.set_state(...)` with `rllib_class` RLlib's
        `PrioritizedEpisodeReplayBuffer` (default: stored episodes, priority
        leaves, max priority, counters) or `EpisodeReplayBuffer` (episodes and
        counters). A one-off conversion through RLlib's own `add()`.
        """
        return rllib_states.rllib_state(self, rllib_class)

    # ---------------------------------------------------------------- metrics
    @override(EpisodeReplayBuffer)
    def get_metrics(self) -> Dict[str, Any]:
        """RLlib's buffer metrics (same keys, meanings and reductions), plus ours.

        RLlib logs them on every `add()` and `sample()`; ours counts there and
        logs here, once, through RLlib's own metric methods (`buffer_metrics`).
        """
        log_add_metrics(self, **buffer_metrics.add_counts(self.take_lifetime_deltas()))
        tally = self.take_sample_tally()
        if tally.steps:
            log_sample_metrics(self, **buffer_metrics.sample_counts(tally))
        metrics, sampler = self.metrics, self.sampler
        log_latest(metrics, MAX_PRIORITY, sampler.max_priority)
        log_latest(metrics, SAMPLE_BETA, self.current_beta())
        log_latest(metrics, SAMPLED_N_STEP_MEAN, self.step_counts.sampled_n_step_mean)
        log_lifetime_count(
            metrics, NUM_PRIORITIES_NONFINITE_LIFETIME, sampler.num_nonfinite_priorities
        )
        log_lifetime_count(
            metrics, NUM_PRIORITIES_STALE_LIFETIME, sampler.num_stale_priorities
        )
        self._log_extra_metrics(metrics)
        return metrics.reduce()

    def _log_extra_metrics(self, metrics) -> None:
        """Hook for subclasses to add their metrics."""
