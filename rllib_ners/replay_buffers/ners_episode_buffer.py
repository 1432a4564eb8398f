"""The NERS replay buffer: priorities are learned scores, not TD errors.

On top of `FastPrioritizedEpisodeReplayBuffer` it keeps, per stored transition,
the latest TD error `delta`, the latest target value `q` (both refreshed by the
Learner on every update; new transitions start at 1.0 as in the reference) and
the timestep `t` inside the episode. After each update the Learner returns, for
every sampled item, its score `sigma` (computed on the whole sampled batch, so
with its global context), `delta` and `q`; the buffer sets the item's priority to
`sigma ** alpha`, so `p_i = sigma_i^alpha / sum_k sigma_k^alpha`.

Every item sampled since the last sampler update is remembered (the set I_all of
Algorithm 1). At an episode end the algorithm draws I_train uniformly from I_all
with `sample_sampler_training_batch()`, takes a REINFORCE step on the Learners,
and calls `reset_sampled_set()`.

The buffer also sums the rewards of every episode it is given and hands out the
returns of episodes finished since the last call of
`pop_finished_episode_returns()`: the training returns the replay reward is
computed from, whatever route (NERSDQN or stock DQN + callback) feeds it.

For the sampler diagnostics (`rllib_ners.ners.diagnostics`) it keeps a per-slot
"scored" mask: set when a NERS row sets the slot's priority, cleared when `add`
(re)writes the slot; part of `get_state()`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np
from ray.rllib.utils.annotations import override

from rllib_ners.replay_buffers.fast_prioritized_episode_buffer import (
    ACTIONS,
    INDICES,
    NEXT_OBS,
    OBS,
    REWARDS,
    SETTING_FIX,
    TIMESTEPS,
    FastPrioritizedEpisodeReplayBuffer,
)
from rllib_ners.utils.checks import check_positive_int
from rllib_ners.utils.episode_info import GAME_RETURN_KEY, LIFE_LOST_KEY

# Column names of the NERS feature cache in sampler-training batches.
DELTA, TARGET_Q = "delta", "q"

# Learners that return `[score, delta, q]` rows under TD_ERROR_KEY set this.
SUPPORTS_NERS_REPLAY_ATTR = "supports_ners_replay"

# Batch column: each sampled item's position in its `sample()` call. Learners
# append it to their rows, since with several Learners RLlib shards the batch
# (interleaving the items) and concatenates their rows Learner by Learner.
SAMPLE_POSITION = "sample_position"

# Episode returns of chunks whose episode never finishes (a killed EnvRunner) are
# forgotten beyond this many open episodes, oldest first.
_MAX_OPEN_RETURNS = 10_000


def _check_scored_by_ners_learner(scored_by_ners_learner, kwargs) -> None:
    """Fails at build time when an Algorithm builds this buffer without a NERS
    learner, so that stock DQN given the NERS buffer type alone stops here with
    the fix, rather than failing at its first priority update.

    Our algorithms (`NERSDQNConfig`, `ACERConfig`) and `enable_ners()` pass
    `scored_by_ners_learner`. RLlib's `Algorithm` passes
    `metrics_num_episodes_for_smoothing` to every episode buffer it builds (a
    contract test watches this), so its presence without our flag means a stock
    algorithm built us from a bare `replay_buffer_config["type"]`. A buffer
    built by hand (tests, tools) passes neither and is not checked.
    """
    built_by_algorithm = "metrics_num_episodes_for_smoothing" in kwargs
    if scored_by_ners_learner or (
        scored_by_ners_learner is None and not built_by_algorithm
    ):
        return
    raise ValueError(
        "NERSEpisodeReplayBuffer needs a learner that scores samples with NERS, "
        "but the algorithm's learner does not. Use `rllib_ners.NERSDQNConfig` (or "
        "`rllib_ners.ACERConfig`), or on a stock DQNConfig call "
        "`rllib_ners.enable_ners(config)` (sets the NERS learner and callback)."
    )


class NERSEpisodeReplayBuffer(FastPrioritizedEpisodeReplayBuffer):
    """Prioritised episode replay whose priorities come from the NERS scorer.

    `update_priorities()` expects, per sampled item, a row `[sigma, delta, q]` (an
    array of shape `[num_items, 3]`, in sample order) or `[sigma, delta, q,
    position]` (any order; `position` is the item's `sample_position` column),
    which `NERSDQNTorchLearner` reports in place of plain TD errors. Plain TD
    errors raise: this buffer must never run as ordinary PER by accident.

    Args: those of `FastPrioritizedEpisodeReplayBuffer`.
    """

    def __init__(
        self,
        capacity: int = 10000,
        *,
        scored_by_ners_learner: Optional[bool] = None,
        **kwargs,
    ):
        _check_scored_by_ners_learner(scored_by_ners_learner, kwargs)
        super().__init__(capacity, **kwargs)
        self._delta = np.ones(self.capacity, dtype=np.float32)
        self._q = np.ones(self.capacity, dtype=np.float32)
        self._in_sampled_set = np.zeros(self.capacity, dtype=bool)
        # Whether a NERS row ever set the slot's priority (since it was written).
        self._scored = np.zeros(self.capacity, dtype=bool)
        self._finished_returns: List[float] = []
        self._partial_returns: Dict[str, float] = {}
        self._score_mean = float("nan")
        self._score_std = float("nan")

    # ---------------------------------------------------------------- add
    @override(FastPrioritizedEpisodeReplayBuffer)
    def _after_add(self, step_slots: np.ndarray, chunks: List[dict]) -> None:
        self._delta[step_slots] = 1.0
        self._q[step_slots] = 1.0
        self._scored[step_slots] = False
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

    @override(FastPrioritizedEpisodeReplayBuffer)
    def _on_evict(self, slots: np.ndarray) -> None:
        self._in_sampled_set[slots] = False
        self._scored[slots] = False

    def pop_finished_episode_returns(self) -> List[float]:
        """Returns (and forgets) the returns of episodes finished since last call."""
        returns, self._finished_returns = self._finished_returns, []
        return returns

    # --------------------------------------------------------- priorities
    @override(FastPrioritizedEpisodeReplayBuffer)
    def item_columns(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        columns = super().item_columns(batch)
        columns[TIMESTEPS] = batch[TIMESTEPS]
        columns[SAMPLE_POSITION] = np.arange(batch[TIMESTEPS].shape[0])
        return columns

    @override(FastPrioritizedEpisodeReplayBuffer)
    def update_priorities(self, priorities, module_id: Optional[str] = None) -> None:
        """Takes `[sigma, delta, q]` rows for the items of the last `sample()`.

        Rows with a fourth column, the item's `sample_position`, may come in any
        order (several Learners); they are put back in sample order first. Sets
        each item's priority to `sigma ** alpha`, refreshes its cached
        `delta` and `q`, and adds it to the sampled set I_all. Non-finite values
        never reach the trees or the cache (they are skipped and counted).
        """
        rows = np.asarray(priorities, dtype=np.float64)
        if rows.ndim == 2 and rows.shape[1] == 4:
            rows = self._rows_in_sample_order(rows)
        if rows.ndim != 2 or rows.shape[1] != 3:
            raise ValueError(
                f"{type(self).__name__}.update_priorities() needs one "
                f"[score, delta, q] row per sampled item "
                f"(shape [{len(self._last_sampled_indices)}, 3]), "
                f"got shape {rows.shape}. Plain TD errors mean the learner is not a "
                f"NERS learner: use NERSDQNConfig or `rllib_ners.enable_ners(config)`."
            )
        slots, stamps = self._take_last_sample(rows.shape[0])
        scores, delta, q = rows[:, 0], rows[:, 1], rows[:, 2]
        applied = self.update_priorities_at(slots, scores, stamps)
        cache_ok = applied & np.isfinite(delta) & np.isfinite(q)
        self._delta[slots[cache_ok]] = delta[cache_ok]
        self._q[slots[cache_ok]] = q[cache_ok]
        self._in_sampled_set[slots[applied]] = True
        self._scored[slots[applied]] = True
        if applied.any():
            self._score_mean = float(scores[applied].mean())
            self._score_std = float(scores[applied].std())

    def _rows_in_sample_order(self, rows: np.ndarray) -> np.ndarray:
        """`[sigma, delta, q, position]` rows, sorted by position, minus it."""
        position = rows[:, 3]
        order = np.argsort(position, kind="stable")
        if not np.array_equal(position[order], np.arange(rows.shape[0])):
            raise ValueError(
                f"{type(self).__name__}.update_priorities() got rows whose "
                f"`{SAMPLE_POSITION}` column is not 0..{rows.shape[0] - 1} once each: "
                f"return exactly one row per item of the last sample(), from all "
                f"Learners together."
            )
        return rows[order, :3]

    @override(FastPrioritizedEpisodeReplayBuffer)
    def sample_sequences(self, batch_size_B: int, batch_length_T: int, **kwargs):
        """`FastPrioritizedEpisodeReplayBuffer.sample_sequences()` plus the
        `sample_position` column (one per sequence): the rows a sequence
        learner (ACER) returns to `update_priorities()` are for the sequence
        starts, in any order."""
        batch = super().sample_sequences(batch_size_B, batch_length_T, **kwargs)
        batch[SAMPLE_POSITION] = np.arange(batch[INDICES].shape[0])
        return batch

    # ---------------------------------------------------- sampler training
    @property
    def sampled_set_size(self) -> int:
        """|I_all|: distinct stored transitions sampled since the last update."""
        return int(self._in_sampled_set.sum())

    def sample_sampler_training_batch(
        self, train_size: int, *, n_step=1, gamma: float = 0.99
    ) -> Optional[Dict[str, np.ndarray]]:
        """Draws I_train uniformly (without replacement) from I_all.

        Returns the columns the scorer's features need (`obs`, `new_obs`,
        `actions`, `rewards` as n-step returns, `delta`, `q`, `ts`) and `indices`,
        or None while I_all is empty.
        """
        train_size = check_positive_int("train_size", train_size, fix=SETTING_FIX)
        candidates = np.flatnonzero(self._in_sampled_set & self._storage.is_transition)
        if candidates.size == 0:
            return None
        chosen = self.rng.choice(
            candidates, size=min(train_size, candidates.size), replace=False
        )
        n_steps = self._draw_n_steps(chosen.size, n_step)
        columns = self._transition_columns(chosen, n_steps, gamma)
        features = (OBS, NEXT_OBS, ACTIONS, REWARDS, TIMESTEPS, INDICES)
        batch = {key: columns[key] for key in features}
        batch[DELTA] = self._delta[chosen]
        batch[TARGET_Q] = self._q[chosen]
        return batch

    def reset_sampled_set(self) -> None:
        """Empties I_all (after a sampler update)."""
        self._in_sampled_set[:] = False

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
            "scored": self._scored[slots],
            DELTA: self._delta[slots],
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
        batch[DELTA] = self._delta[slots]
        batch[TARGET_Q] = self._q[slots]
        return batch

    # ------------------------------------------------------ metrics, state
    @override(FastPrioritizedEpisodeReplayBuffer)
    def _log_extra_metrics(self, metrics) -> None:
        metrics.log_value(
            "ners_sampled_set_size", self.sampled_set_size, reduce="mean", window=1
        )
        if np.isfinite(self._score_mean):
            metrics.log_value(
                "ners_score_mean", self._score_mean, reduce="mean", window=1
            )
            metrics.log_value(
                "ners_score_std", self._score_std, reduce="mean", window=1
            )

    _STATE_ARRAYS = FastPrioritizedEpisodeReplayBuffer._STATE_ARRAYS + (
        "_delta",
        "_q",
        "_in_sampled_set",
    )
    _STATE_SCALARS = FastPrioritizedEpisodeReplayBuffer._STATE_SCALARS + (
        "_score_mean",
        "_score_std",
    )

    @override(FastPrioritizedEpisodeReplayBuffer)
    def get_state(self, *, copy: bool = True) -> Dict[str, Any]:
        state = super().get_state(copy=copy)
        state["_finished_returns"] = list(self._finished_returns)
        state["_partial_returns"] = dict(self._partial_returns)
        state["_scored"] = self._scored.copy() if copy else self._scored
        return state

    @override(FastPrioritizedEpisodeReplayBuffer)
    def set_state(self, state: Dict[str, Any], *, copy: bool = True) -> None:
        super().set_state(state, copy=copy)
        self._finished_returns = list(state["_finished_returns"])
        self._partial_returns = dict(state["_partial_returns"])
        if "_scored" in state:
            scored = np.asarray(state["_scored"], dtype=bool)
            self._scored = scored.copy() if copy else scored
        else:
            # A state saved before the mask existed: a transition counts as
            # scored when its cached TD error left the initial 1.0.
            self._scored = self._storage.is_transition & (self._delta != 1.0)
