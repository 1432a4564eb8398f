"""The NERS replay buffer: priorities are learned scores, not TD errors.

`NERSEpisodeReplayBuffer` is `FastPrioritizedEpisodeReplayBuffer` with the
NERS sampler (`ners_score_sampler.NERSScoreSampler`): after each update the
Learner sends, for every sampled item, its score `sigma` (computed on the whole
sampled batch, so with its global context), TD error `delta` and target `q`
(`feedback.NERS_SCORES`); the sampler sets the item's priority to
`sigma ** alpha`, so `p_i = sigma_i^alpha / sum_k sigma_k^alpha`, and caches
`delta` and `q` (new transitions start at 1.0 as in the reference).

What the buffer adds is what the scorer's training reads from the storage:
every item sampled since the last sampler update is remembered (the set I_all
of Algorithm 1, in the sampler's `slot_memory`); at an episode end the
algorithm draws I_train from I_all with `sample_sampler_training_batch()`,
takes a REINFORCE step on the Learners, and calls `reset_sampled_set()`.

The buffer also sums the rewards of every episode it is given and hands out the
returns of episodes finished since the last call of
`pop_finished_episode_returns()`: the training returns the replay reward is
computed from, whatever algorithm (NERS-DQN, NERS-SAC, TD3, ACER, or a stock
DQN through `NERSCallback`) feeds it.

For the sampler diagnostics (`rllib_ners.ners.diagnostics`) the memory keeps a
per-slot "scored" mask: set when NERS feedback sets the slot's priority,
cleared when `add` (re)writes the slot; part of `get_state()`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np
from ray.rllib.utils.annotations import override

from rllib_ners.replay_buffers import buffer_state, rllib_states
from rllib_ners.replay_buffers.buffer_names import (
    ACTIONS,
    INDICES,
    N_STEP,
    NEXT_INDICES,
    NEXT_OBS,
    OBS,
    REWARDS,
    SAMPLE_POSITION,  # noqa: F401 (re-exported: NERS Learners import it here)
    TIMESTEPS,
)
from rllib_ners.replay_buffers.buffer_settings import check_setting
from rllib_ners.replay_buffers.fast_prioritized_episode_buffer import (
    FastPrioritizedEpisodeReplayBuffer,
)
from rllib_ners.replay_buffers.frame_stack import observation_keys
from rllib_ners.replay_buffers.ners_score_sampler import NERSScoreSampler
from rllib_ners.replay_buffers.ners_slot_memory import NERSSlotMemory
from rllib_ners.utils.episode_info import GAME_RETURN_KEY, LIFE_LOST_KEY

# Column names of the NERS feature cache in sampler-training batches.
DELTA, TARGET_Q = "delta", "q"

# Batch column: `[obs slot, obs key, new_obs slot, new_obs key]` per item
# (`item_columns`), the NERS Learner's encoding-cache keys.
ENCODING_KEYS = "ners_encoding_keys"

# Episode returns of chunks whose episode never finishes (a killed EnvRunner) are
# forgotten beyond this many open episodes, oldest first.
_MAX_OPEN_RETURNS = 10_000


def _check_scored_by_ners_learner(scored_by_ners_learner, kwargs) -> None:
    """Fails at build time when an Algorithm builds this buffer without a NERS
    learner, so that stock DQN given the NERS buffer type alone stops here with
    the fix, rather than failing at its first priority update.

    Our algorithms (`NERSDQNConfig`, `NERSSACConfig`, `ACERConfig`) and
    `enable_ners()` pass `scored_by_ners_learner`. RLlib's `Algorithm` passes
    `metrics_num_episodes_for_smoothing` to every episode buffer it builds (a
    contract test watches this), so its presence without our flag means a stock
    algorithm built us from a bare `replay_buffer_config["type"]`. A buffer
    built by hand (tests, tools) passes neither and is not checked.
    """
    built_by_algorithm = kwargs.get("metrics_num_episodes_for_smoothing") is not None
    if scored_by_ners_learner or (
        scored_by_ners_learner is None and not built_by_algorithm
    ):
        return
    raise ValueError(
        "NERSEpisodeReplayBuffer needs a learner that scores samples with NERS, "
        "but the algorithm's learner does not. Use `rllib_ners.NERSDQNConfig` (or "
        "`rllib_ners.NERSSACConfig`, `rllib_ners.ACERConfig`), or on a stock "
        "DQNConfig call `rllib_ners.enable_ners(config)` (sets the NERS learner "
        "and callback). (Built by hand with `metrics_num_episodes_for_smoothing`, "
        "for a NERS Learner of your own: pass `scored_by_ners_learner=True`.)"
    )


class NERSEpisodeReplayBuffer(FastPrioritizedEpisodeReplayBuffer):
    """Prioritised episode replay whose priorities come from the NERS scorer.

    `update_priorities()` expects, per sampled item, a row `[sigma, delta, q,
    position]` (`feedback.NERS_SCORES`; any order, `position` being the item's
    `sample_position` column), which the NERS Learners send in place of plain
    TD errors. Plain TD errors raise: this buffer must never run as ordinary
    PER by accident.

    Args: those of `FastPrioritizedEpisodeReplayBuffer`.
    """

    sampler_class = NERSScoreSampler

    def __init__(
        self,
        capacity: int = 10000,
        *,
        scored_by_ners_learner: Optional[bool] = None,
        **kwargs,
    ):
        _check_scored_by_ners_learner(scored_by_ners_learner, kwargs)
        super().__init__(capacity, **kwargs)
        self._init_episode_returns()

    def _init_episode_returns(self) -> None:
        self._finished_returns: List[float] = []
        self._partial_returns: Dict[str, float] = {}

    # ---------------------------------------------------------------- add
    @property
    def slot_memory(self) -> NERSSlotMemory:
        """Per stored transition: the cached TD error and target, I_all, the
        scored mask and n (the sampler's, see `ners_slot_memory`)."""
        return self._sampler.slot_memory

    @override(FastPrioritizedEpisodeReplayBuffer)
    def _after_add(self, step_slots: np.ndarray, chunks: List[dict]) -> None:
        for chunk in chunks:
            ret = self._partial_returns.pop(chunk["id"], 0.0) + float(
                chunk["rewards"].sum()
            )
            if not chunk["done"]:
                self._partial_returns[chunk["id"]] = ret
                continue
            # Envs that split a game into episodes (Atari with episodic life and
            # clipped rewards, `rllib_ners.env.atari`) report the whole game's
            # unclipped return on its last step, and mark the other episode ends
            # as lost lives: the replay reward then compares games, not lives.
            last_info = chunk["infos"][-1]
            last_info = last_info if isinstance(last_info, dict) else {}
            if GAME_RETURN_KEY in last_info:
                self._finished_returns.append(float(last_info[GAME_RETURN_KEY]))
            elif not last_info.get(LIFE_LOST_KEY, False):
                self._finished_returns.append(ret)
        while len(self._partial_returns) > _MAX_OPEN_RETURNS:
            self._partial_returns.pop(next(iter(self._partial_returns)))

    def pop_finished_episode_returns(self) -> List[float]:
        """Returns (and forgets) the returns of episodes finished since last call."""
        returns, self._finished_returns = self._finished_returns, []
        return returns

    # --------------------------------------------------------- priorities
    @override(FastPrioritizedEpisodeReplayBuffer)
    def item_columns(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Adds `ts` and `ENCODING_KEYS`: `[slot, key]` of
        `obs` and of `new_obs` per item (`observation_keys`), under which the
        NERS Learner caches its image encoder's outputs between sampler
        updates."""
        columns = super().item_columns(batch)
        columns[TIMESTEPS] = batch[TIMESTEPS]
        slots = np.stack([batch[INDICES], batch[NEXT_INDICES]], axis=1)
        keys = observation_keys(self._storage, slots, self._frame_stack)
        columns[ENCODING_KEYS] = np.stack(
            [slots[:, 0], keys[:, 0], slots[:, 1], keys[:, 1]], axis=1
        )
        return columns

    @override(FastPrioritizedEpisodeReplayBuffer)
    def sample_batch(self, *args, **kwargs) -> Dict[str, np.ndarray]:
        """`FastPrioritizedEpisodeReplayBuffer.sample_batch()`; remembers each
        item's n (the `n_step` it used), which its score is computed with."""
        batch = super().sample_batch(*args, **kwargs)
        self._sampler.pending_n_steps = np.asarray(batch[N_STEP], dtype=np.int64)
        return batch

    @override(FastPrioritizedEpisodeReplayBuffer)
    def sample_sequences(self, batch_size_B: int, batch_length_T: int, **kwargs):
        """`FastPrioritizedEpisodeReplayBuffer.sample_sequences()` plus the
        `sample_position` column (one per sequence): the rows a sequence
        learner (ACER) returns to `update_priorities()` are for the sequence
        starts (1-step transitions), in any order."""
        batch = super().sample_sequences(batch_size_B, batch_length_T, **kwargs)
        batch[SAMPLE_POSITION] = np.arange(batch[INDICES].shape[0])
        self._sampler.pending_n_steps = np.ones(batch[INDICES].shape[0], np.int64)
        return batch

    # ---------------------------------------------------- sampler training
    @property
    def sampled_set_size(self) -> int:
        """|I_all|: distinct stored transitions sampled since the last update."""
        return int(self.slot_memory.in_sampled_set.sum())

    def sample_sampler_training_batch(
        self,
        train_size: int,
        *,
        n_step=1,
        gamma: float = 0.99,
        draw: str = "uniform_set",
        normalizer_size: int = 0,
    ) -> Optional[Dict[str, Any]]:
        """Draws I_train from I_all, and optionally the normaliser draws U.

        Args:
            train_size: |I_train|.
            n_step, gamma: How the items' n-step returns and `new_obs` are built.
            draw: "uniform_set": uniformly without replacement from the distinct
                transitions replayed since the last update; "replay_multiset":
                with replacement, in proportion to how often each was replayed
                (the reference code's I_train).
            normalizer_size: K > 0 adds `normalizer`: K stored transitions drawn
                uniformly with replacement (the "log_prob" objective's estimate
                of the normaliser's gradient), with `normalizer_scored` (1 where
                the transition was ever scored), `normalizer_leaf` (their
                current leaves) and `num_stored` (N).

        Returns:
            The columns the scorer's features need (`obs`, `new_obs`, `actions`,
            `rewards` as n-step returns, `delta`, `q`, `ts`) and `indices`, or
            None while I_all is empty. Each transition is rebuilt with the n it
            had when it was last scored, so its `rewards` and `new_obs` are the
            ones its priority (and its cached `delta`, `q`) came from; `n_step`
            is drawn from only for items whose n is not known (never scored, or
            states saved before it was recorded).
        """
        train_size = check_setting("train_size", train_size)
        memory = self.slot_memory
        replayed = memory.in_sampled_set & self._storage.is_transition
        candidates = np.flatnonzero(replayed)
        if candidates.size == 0:
            return None
        if draw == "uniform_set":
            chosen = self.rng.choice(
                candidates, size=min(train_size, candidates.size), replace=False
            )
        elif draw == "replay_multiset":
            counts = memory.replay_count[candidates].astype(np.float64)
            chosen = self.rng.choice(
                candidates, size=train_size, replace=True, p=counts / counts.sum()
            )
        else:
            raise ValueError(
                f"Unknown I_train draw {draw!r}; use 'uniform_set' or "
                f"'replay_multiset' (config.ners(train_draw=...))."
            )
        batch = self._sampler_feature_columns(chosen, n_step, gamma)
        if normalizer_size > 0:
            stored = np.flatnonzero(self._storage.is_transition)
            drawn = self.rng.choice(stored, size=int(normalizer_size), replace=True)
            batch["normalizer"] = self._sampler_feature_columns(drawn, n_step, gamma)
            batch["normalizer_scored"] = memory.scored[drawn].astype(np.float32)
            batch["normalizer_leaf"] = self.get_priorities(drawn)
            batch["num_stored"] = int(stored.size)
        return batch

    def _sampler_feature_columns(
        self, slots: np.ndarray, n_step, gamma: float
    ) -> Dict[str, np.ndarray]:
        n_steps = self.slot_memory.scored_n_step[slots].astype(np.int64)
        unknown = n_steps < 1
        if unknown.any():
            n_steps[unknown] = self._draw_n_steps(int(unknown.sum()), n_step)
        columns = self._transition_columns(slots, n_steps, gamma)
        features = (OBS, NEXT_OBS, ACTIONS, REWARDS, TIMESTEPS, INDICES)
        batch = {key: columns[key] for key in features}
        batch[DELTA] = self.slot_memory.delta[slots]
        batch[TARGET_Q] = self.slot_memory.q[slots]
        return batch

    def reset_sampled_set(self) -> None:
        """Empties I_all (after a sampler update)."""
        self.slot_memory.reset_sampled_set()

    # -------------------------------------------------------- diagnostics
    def transition_slots(self) -> np.ndarray:
        """Slots of every stored transition (sorted)."""
        return np.flatnonzero(self._storage.is_transition)

    def diagnostics_columns(self, slots: np.ndarray) -> Dict[str, np.ndarray]:
        """Per slot: its sum-tree `leaf` (`sigma ** alpha`), whether NERS ever
        `scored` it since it was written, and its cached `delta`."""
        slots = np.asarray(slots, dtype=np.int64)
        return {
            "leaf": np.asarray(self._sampler.sum_tree.leaves)[slots],
            "scored": self.slot_memory.scored[slots],
            DELTA: self.slot_memory.delta[slots],
        }

    def slot_stamps(self, slots: np.ndarray) -> np.ndarray:
        """The write stamps of `slots` (change whenever a slot is rewritten)."""
        return self._storage.stamp[np.asarray(slots, dtype=np.int64)]

    def still_stored(self, slots: np.ndarray, stamps: np.ndarray) -> np.ndarray:
        """Whether each slot still holds the transition it held at `stamps`."""
        slots = np.asarray(slots, dtype=np.int64)
        storage = self._storage
        return storage.is_transition[slots] & (storage.stamp[slots] == stamps)

    def scorer_feature_batch(
        self, slots: np.ndarray, n_steps: np.ndarray, *, gamma: float = 0.99
    ) -> Dict[str, np.ndarray]:
        """The scorer's feature columns of the given transitions (as in
        `sample_sampler_training_batch()`), with no random draw."""
        slots = np.asarray(slots, dtype=np.int64)
        columns = self._transition_columns(slots, np.asarray(n_steps), gamma)
        features = (OBS, NEXT_OBS, ACTIONS, REWARDS, TIMESTEPS, INDICES)
        batch = {key: columns[key] for key in features}
        batch[DELTA] = self.slot_memory.delta[slots]
        batch[TARGET_Q] = self.slot_memory.q[slots]
        return batch

    # ------------------------------------------------------ metrics, state
    @override(FastPrioritizedEpisodeReplayBuffer)
    def _log_extra_metrics(self, metrics) -> None:
        metrics.log_value(
            "ners_sampled_set_size", self.sampled_set_size, reduce="mean", window=1
        )
        sampler = self._sampler
        if np.isfinite(sampler.score_mean):
            metrics.log_value(
                "ners_score_mean", sampler.score_mean, reduce="mean", window=1
            )
            metrics.log_value(
                "ners_score_std", sampler.score_std, reduce="mean", window=1
            )

    @override(FastPrioritizedEpisodeReplayBuffer)
    def get_state(self, *, copy: bool = True) -> Dict[str, Any]:
        state = super().get_state(copy=copy)
        state["_finished_returns"] = list(self._finished_returns)
        state["_partial_returns"] = dict(self._partial_returns)
        return state

    # RLlib's priorities are TD errors, not scores: steps loaded from an RLlib
    # state enter as new transitions do (the max score), until scored.
    takes_rllib_priorities = False

    @override(FastPrioritizedEpisodeReplayBuffer)
    def clear(self) -> None:
        super().clear()
        self._init_episode_returns()

    @override(FastPrioritizedEpisodeReplayBuffer)
    def set_state(self, state: Dict[str, Any], *, copy: bool = True) -> None:
        if rllib_states.is_rllib_state(state):
            super().set_state(state)
            return
        buffer_state.check_a_buffer_state(state)
        # States saved before the replay counts or the scored mask existed:
        # every replayed transition counts once, and a stored transition whose
        # cached TD error left the new-transition value 1.0 was scored.
        missing_scored = "_scored" not in state
        if missing_scored or "_replay_count" not in state:
            state = dict(state)
            state.setdefault(
                "_replay_count", np.asarray(state["_in_sampled_set"], np.int64)
            )
            state.setdefault("_scored", np.zeros(self.capacity, dtype=bool))
        super().set_state(state, copy=copy)
        if missing_scored:
            memory = self.slot_memory
            memory.scored = self._storage.is_transition & (memory.delta != 1.0)
        self._finished_returns = list(state["_finished_returns"])
        self._partial_returns = dict(state["_partial_returns"])
