"""Priority sampler of the episode buffer: sees slots and priorities only (no Ray).

Like TorchRL's `PrioritizedSampler`, it knows nothing of episodes: it keeps one
*leaf* per storage slot in a sum tree and a min tree, draws slots in proportion
to their leaves and weighs them for importance sampling.

- Leaf of a slot with priority (score) `s_i`: `leaf_i = max(s_i, m) ** alpha`
  (`priority_leaf` of the floored priority), `m` the `min_priority` (1e-12 by
  default, so that no stored transition becomes unreachable; LAP's 1,
  Fujimoto et al. 2020); slots that hold no transition have leaf 0.
- Sampling probability: `p_i = leaf_i / sum_k leaf_k`, drawn stratified (one
  uniform point in each of `B` equal strata of the total, Schaul et al. 2016).
- Importance-sampling weight: `w_i = (N p_i) ** -beta / max_j w_j`, `N` the
  number of stored transitions and `max_j w_j = (N p_min) ** -beta` taken over
  the whole buffer via the min tree (`importance_weights`), as RLlib and the PER
  paper do.

`alpha = 0` samples uniformly, `alpha = 1` fully by priority. `beta` is 0 for
no correction and 1 for full correction; it may be annealed linearly from
`beta` to `beta_final` over `beta_annealing_timesteps` env steps added after
the first sample (PER, data-efficient Rainbow).

Three replay methods are this one sampler with their settings, since they
differ in nothing else: uniform replay (`alpha = 0`, every leaf 1), PER
(Schaul et al. 2016: `alpha > 0`, priority `|delta|`) and LAP (Fujimoto et
al. 2020: `min_priority = 1`, `alpha = 0.4`, `beta = 0`: priority
`max(|delta|, 1) ** alpha`). Each reads the TD errors of the Learner's
feedback (`feedback.TD_ERRORS`); the NERS sampler (`ners_score_sampler`)
extends it to read NERS's scores. The contract every sampler keeps is
`replay_sampler.ReplaySampler`.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from rllib_ners.replay_buffers.buffer_names import SETTING_FIX
from rllib_ners.replay_buffers.feedback import TD_ERRORS, FeedbackLayout, ReplayFeedback
from rllib_ners.replay_buffers.replay_sampler import ReplaySampler
from rllib_ners.replay_buffers.ring_storage import copy_if_array
from rllib_ners.replay_buffers.sum_tree import (
    DEFAULT_TYPICAL_BATCH,
    MinTree,
    SumTree,
    last_writes,
)
from rllib_ners.utils.checks import (
    check_positive_int,
    is_finite_number,
    is_finite_positive_number,
)

logger = logging.getLogger(__name__)

# Metric key: priorities skipped because they were NaN, infinite or negative.
NUM_PRIORITIES_NONFINITE_LIFETIME = "num_priorities_nonfinite_skipped_lifetime"

# The default floor of priorities: no stored transition becomes unreachable.
MIN_PRIORITY = 1e-12


def priority_leaf(score, alpha: float):
    """The sum-tree leaf of a priority: `leaf_i = score_i ** alpha`.

    A slot is then drawn with probability `p_i = leaf_i / sum_k leaf_k`. With
    `alpha = 0` every leaf is 1 (uniform sampling, `0 ** 0 = 1` included).

    Args:
        score: A priority `>= 0` (float) or an array of them.
        alpha: The priority exponent, `>= 0`.

    Returns:
        `score ** alpha`, of the type of `score` (float in, float out).
    """
    return score**alpha


def importance_weights(leaves: np.ndarray, leaf_min: float, beta: float):
    """Importance-sampling weights `w_i = (N p_i) ** -beta / max_j w_j`.

    With `p_i = leaf_i / sum_k leaf_k` and `max_j w_j = (N p_min) ** -beta`
    (the smallest leaf gives the largest weight), `N` and the sum cancel:
    `w_i = (leaf_i / leaf_min) ** -beta`, computed so (fewer numpy calls).

    Args:
        leaves: float64 leaves of the drawn slots.
        leaf_min: The smallest positive leaf in the buffer.
        beta: The importance-sampling exponent in `[0, 1]`.

    Returns:
        float64 weights in `(0, 1]`.
    """
    ratio = leaves / leaf_min
    return ratio ** (-beta)


def check_min_priority(min_priority) -> float:
    """`min_priority` as a float > 0; raises otherwise."""
    if not is_finite_positive_number(min_priority):
        raise ValueError(
            f"`min_priority` must be a finite number > 0, got "
            f"min_priority={min_priority!r}. Priorities below it are raised to it "
            f"before the exponent: 1e-12 (the default) keeps every stored "
            f"transition reachable, 1.0 is LAP's max(|delta|, 1) ** alpha."
        )
    return float(min_priority)


def check_beta(beta, name: str = "beta") -> float:
    """`beta` (the setting `name`: "beta" or "beta_final") as a float in
    `[0, 1]` (None is 0); raises otherwise."""
    if beta is None:
        return 0.0
    if not (is_finite_number(beta) and 0.0 <= beta <= 1.0):
        raise ValueError(
            f"`{name}` must be a number in [0, 1], got {name}={beta!r}. It is "
            f"the importance-sampling exponent: 0 means no correction, 1 full "
            f"correction. {SETTING_FIX}"
        )
    return float(beta)


class PrioritySampler(ReplaySampler):
    """Sum/min trees over `capacity` slots, `alpha`, max priority and `beta`:
    uniform replay, PER and LAP by their settings (see the module docstring).

    Raises a ValueError naming the fix for a bad setting.

    Args:
        capacity: Number of slots (leaves).
        alpha: Priority exponent (see `priority_leaf`).
        beta: Importance-sampling exponent (see `importance_weights`), the start
            of the annealing if `beta_final` is given.
        beta_final: End of the linear `beta` annealing, or None.
        beta_annealing_timesteps: Length of the annealing in added env steps.
        min_priority: Priorities below it are raised to it before the exponent.
    """

    # What the sampler reads of the Learner's feedback: its TD errors.
    feedback_layout: FeedbackLayout = TD_ERRORS
    name = "priority"

    def __init__(
        self,
        capacity: int,
        *,
        alpha: float = 1.0,
        beta: Optional[float] = 0.0,
        beta_final: Optional[float] = None,
        beta_annealing_timesteps: Optional[int] = None,
        min_priority: float = MIN_PRIORITY,
    ):
        if not (is_finite_number(alpha) and alpha >= 0.0):
            raise ValueError(
                f"`alpha` must be a finite number >= 0, got alpha={alpha!r}. "
                f"0 samples uniformly, 1 fully by priority. {SETTING_FIX}"
            )
        self.default_beta = check_beta(beta)
        if (beta_final is None) != (beta_annealing_timesteps is None):
            raise ValueError(
                f"Beta annealing needs both `beta_final` and "
                f"`beta_annealing_timesteps` in `replay_buffer_config`, got "
                f"beta_final={beta_final!r}, "
                f"beta_annealing_timesteps={beta_annealing_timesteps!r}."
            )
        self.beta_final = (
            None if beta_final is None else check_beta(beta_final, "beta_final")
        )
        self.beta_annealing_timesteps = (
            None
            if beta_annealing_timesteps is None
            else check_positive_int(
                "beta_annealing_timesteps", beta_annealing_timesteps, fix=SETTING_FIX
            )
        )
        self.alpha = float(alpha)
        self.min_priority = check_min_priority(min_priority)
        self.capacity = capacity
        self.sum_tree = SumTree(capacity)
        self.min_tree = MinTree(capacity)
        # The batch size the trees are laid out for (`lay_out_for`): the first
        # draw's, kept in checkpoints; None until then (the trees' default).
        self.layout_batch: Optional[int] = None
        # The largest priority seen: new transitions get it (sampled soon).
        self.max_priority = max(1.0, self.min_priority)
        # Env steps added when the first sample was drawn (annealing starts).
        self.beta_anneal_start: Optional[int] = None
        self.num_nonfinite_priorities = 0
        self.num_stale_priorities = 0
        self._warned_nonfinite = False

    def emptied(self) -> PrioritySampler:
        """A sampler with the same settings and no priorities."""
        return type(self)(
            self.capacity,
            alpha=self.alpha,
            beta=self.default_beta,
            beta_final=self.beta_final,
            beta_annealing_timesteps=self.beta_annealing_timesteps,
            min_priority=self.min_priority,
        )

    # ------------------------------------------------------------------ beta
    def resolve_beta(self, beta: Optional[float], num_added: int) -> float:
        """The `beta` of a sample (annealed, if set); starts the annealing.

        Args:
            beta: The caller's beta, or None for the buffer's.
            num_added: Env steps added to the buffer so far.
        """
        if self.beta_annealing_timesteps is None:
            return self.default_beta if beta is None else check_beta(beta)
        if beta is not None and not np.isclose(beta, self.default_beta):
            raise ValueError(
                f"sample(beta={beta!r}) conflicts with the buffer's beta annealing "
                f"({self.default_beta} -> {self.beta_final}); pass no beta, or "
                f"remove `beta_final`/`beta_annealing_timesteps` from "
                f"`replay_buffer_config`."
            )
        if self.beta_anneal_start is None:
            self.beta_anneal_start = num_added
        return self.current_beta(num_added)

    def current_beta(self, num_added: int) -> float:
        """`beta` now: annealed linearly over the env steps added since the
        first sample, or the constant `beta` without annealing."""
        if self.beta_annealing_timesteps is None or self.beta_anneal_start is None:
            return self.default_beta
        done = num_added - self.beta_anneal_start
        fraction = min(1.0, done / self.beta_annealing_timesteps)
        return self.default_beta + fraction * (self.beta_final - self.default_beta)

    # ------------------------------------------------------------------ draw
    def draw(
        self, num_items: int, beta: float, rng: np.random.Generator
    ) -> Tuple[np.ndarray, np.ndarray]:
        """Draws `num_items` sorted slots by priority; returns them and their
        float32 importance weights. The only random draw: `rng.random(B)`.
        The first draw lays the trees out for its batch size (`lay_out_for`)."""
        if self.layout_batch is None:
            self.lay_out_for(num_items)
        slots = self.sum_tree.sample_stratified(num_items, rng)
        weights = importance_weights(self.sum_tree[slots], self.min_tree.min(), beta)
        return slots, weights.astype(np.float32)

    def lay_out_for(self, batch: int) -> None:
        """Lays the trees out (their block size) for draws and priority updates
        of `batch` indices, keeping every leaf: a training batch of 256 (SAC,
        TD3) wants smaller blocks than the default layout's, made for 32. The
        summaries are recomputed from the leaves, as on a restore, so the
        layout depends on the batch and the leaves only, and a checkpoint
        (which keeps the batch) restores the same trees."""
        self.layout_batch = int(batch)
        trees = (self.sum_tree, self.min_tree)
        if all(tree.typical_batch == self.layout_batch for tree in trees):
            return
        self.sum_tree, self.min_tree = (
            _relaid(tree, self.layout_batch) for tree in trees
        )

    # ------------------------------------------------------------ priorities
    def set_leaves(self, slots: np.ndarray, values: np.ndarray) -> None:
        """Writes leaf values (>= 0) to both trees; the last write wins.

        Both trees share the capacity and so the block layout: the indices are
        deduplicated and mapped to blocks once for the pair. Zero (non-transition
        slots) is +inf in the min tree, so it never counts as the minimum.
        """
        slots, values = last_writes(
            np.asarray(slots, dtype=np.int64), np.asarray(values, dtype=np.float64)
        )
        blocks = self.sum_tree.blocks_of(slots)
        self.sum_tree.assign_unique(slots, values, blocks)
        self.min_tree.assign_unique(
            slots, np.where(values > 0.0, values, np.inf), blocks
        )

    def set_new(
        self, slots: np.ndarray, is_step: np.ndarray, weight: Optional[float]
    ) -> None:
        """Gives new steps among `slots` the leaf of `weight` (default: the max
        priority) and the other slots (tails) leaf 0."""
        priority = self.max_priority if weight is None else float(weight)
        leaf = priority_leaf(max(priority, self.min_priority), self.alpha)
        self.set_leaves(slots, np.where(is_step, leaf, 0.0))

    def priorities_of(self, feedback: ReplayFeedback) -> np.ndarray:
        """The priority of each item the feedback is about: its TD error."""
        return feedback.td_errors

    def update_priority(
        self, slots: np.ndarray, feedback: ReplayFeedback, live: np.ndarray
    ) -> np.ndarray:
        """Sets the priorities of the sampled `slots` (in sample order) from the
        Learner's feedback; returns the mask of slots whose priority was set
        (see `set_priorities`)."""
        return self.set_priorities(slots, self.priorities_of(feedback), live)

    def on_written(self, step_slots: np.ndarray) -> None:
        """`step_slots` now hold new transitions (nothing to do here: `set_new`
        gave them their leaves)."""

    def on_evicted(self, slots: np.ndarray) -> None:
        """`slots` are being overwritten (nothing to do here: `set_new` sets
        their leaves when they are written)."""

    def set_priorities(
        self, slots: np.ndarray, priorities: np.ndarray, live: np.ndarray
    ) -> np.ndarray:
        """Sets `priorities` (float64) at `slots` where valid; returns that mask.

        Non-finite or negative values are skipped (counted, warned about once),
        and so are slots that are not `live` (no longer holding the item).
        """
        if slots.shape == priorities.shape and slots.shape[0] > 0:
            # Fast path for the usual call (right after a sample): every priority
            # finite and >= 0 and every slot still holding its sampled transition.
            # min() is NaN if any value is, so `p_min >= 0` also rejects NaNs.
            p_min, p_max = priorities.min(), priorities.max()
            if p_min >= 0.0 and p_max < np.inf and live.all():
                floor = self.min_priority
                self.max_priority = max(self.max_priority, float(p_max), floor)
                if p_min < floor:
                    priorities = np.maximum(priorities, floor)
                self.set_leaves(slots, priority_leaf(priorities, self.alpha))
                return np.ones(slots.shape, dtype=bool)
        valid = np.isfinite(priorities) & (priorities >= 0.0)
        num_bad = int((~valid).sum())
        if num_bad:
            self.num_nonfinite_priorities += num_bad
            if not self._warned_nonfinite:
                logger.warning(
                    "%d non-finite or negative priorities were skipped (e.g. NaN TD "
                    "errors); the items keep their old priority. Counted in the "
                    "replay buffer metric %r; this warning is shown once.",
                    num_bad,
                    NUM_PRIORITIES_NONFINITE_LIFETIME,
                )
                self._warned_nonfinite = True
        self.num_stale_priorities += int((valid & ~live).sum())
        apply = valid & live
        if apply.any():
            new = np.maximum(priorities[apply], self.min_priority)
            self.max_priority = max(self.max_priority, float(new.max()))
            self.set_leaves(slots[apply], priority_leaf(new, self.alpha))
        return apply

    def broken_invariants(self) -> List[str]:
        """What is wrong with the trees (nothing: an empty list)."""
        total, leaves = self.sum_tree.total(), self.sum_tree.leaves
        if not np.isclose(total, leaves.sum(), rtol=1e-9, atol=1e-12):
            return ["sum tree total differs from the sum of its leaves"]
        return []

    # ------------------------------------------------------------------ state
    STATE_SCALARS = (
        "alpha",
        "min_priority",
        "default_beta",
        "beta_final",
        "beta_annealing_timesteps",
        "beta_anneal_start",
        "max_priority",
        "num_nonfinite_priorities",
        "num_stale_priorities",
        "layout_batch",
    )

    def nbytes(self) -> int:
        """Bytes of the trees' arrays."""
        return int(
            sum(
                value.nbytes
                for tree in (self.sum_tree, self.min_tree)
                for value in vars(tree).values()
                if isinstance(value, np.ndarray)
            )
        )

    def get_state(self, take=copy_if_array) -> Dict[str, Any]:
        """Trees and scalars under their checkpoint names (`_alpha`, ...);
        `take` (copy or not) is for subclasses' arrays."""
        state = {f"_{name}": getattr(self, name) for name in self.STATE_SCALARS}
        state["sum_tree"] = self.sum_tree.get_state()
        state["min_tree"] = self.min_tree.get_state()
        return state

    def set_state(self, state: Dict[str, Any], take=copy_if_array) -> None:
        # States saved before `min_priority` was a setting had the default;
        # before `layout_batch` was kept, the trees had the default layout.
        state = {"_min_priority": MIN_PRIORITY, "_layout_batch": None, **state}
        for name in self.STATE_SCALARS:
            setattr(self, name, state[f"_{name}"])
        layout = self.layout_batch or DEFAULT_TYPICAL_BATCH
        if self.sum_tree.typical_batch != layout:
            self.sum_tree = SumTree(self.capacity, layout)
            self.min_tree = MinTree(self.capacity, layout)
        self.sum_tree.set_state(state["sum_tree"])
        self.min_tree.set_state(state["min_tree"])


def _relaid(tree, typical_batch: int):
    """`tree`'s leaves in a new tree of its class laid out for `typical_batch`."""
    relaid = type(tree)(tree.capacity, typical_batch)
    relaid.set_state(tree.get_state())
    return relaid
