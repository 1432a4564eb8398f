"""ReLo: PER with priorities from the reducible loss (no Ray).

Sujit, Nath, Braga and Ebrahimi Kahou, "Prioritizing Samples in Reinforcement
Learning with Reducible Loss" (NeurIPS 2023, arXiv 2208.10483). The priority
of a sampled transition is the part of its loss that training can still
reduce: its loss under the online network minus its loss under the target
network (the paper's hold-out model), against the same TD target `y_i`:

    ReLo_i = L(Q_online(s_i, a_i), y_i) - L(Q_target(s_i, a_i), y_i)

The Learner computes both losses (one extra no-grad pass of the target
network) and sends them as `feedback.RELO_LOSSES` rows; this sampler maps them
to priorities (`relo_priority`). Everything else is PER's (`PrioritySampler`):
leaves `p_i ** alpha`, stratified draws, importance weights normalised by the
buffer's smallest leaf, `beta` annealing, new items at the running maximum
priority. So a ReLo run differs from a PER run in its priorities only.

The map from ReLo to a priority, `relo_transform`, follows the authors' code,
since the paper states only the clip:

- `"clip"` (SAC on DMC and Gym, DQN on MinAtar): `max(ReLo_i, 0) + epsilon`,
  `epsilon = 1e-5` keeping every item drawable;
- `"exp"` (their C51 Rainbow on Atari): `ReLo_i + 1` where `ReLo_i >= 0`,
  `exp(ReLo_i)` below: positive, continuous at 0, and items the target
  network fits better still ordered by how much better.

Choices the paper leaves open, and the ones taken (said where they differ
from the authors' code): `alpha` and `beta` are the buffer's settings (the
presets take the code's alpha 0.5 and beta 0.4 as their PER does, annealed to
1 by the Atari presets and the study, fixed by the SAC and TD3 presets; the
authors' SAC code reached beta 1 at its first update); the weights are
normalised by the buffer's smallest leaf, as PER, RLlib and our `per` arm do
(the authors' code divides by the batch's largest weight). Two more
differences from the authors' SAC code, both shared with our `per` arm: the
importance weights reach the critics' loss only (their SAC also weighs the
actor's loss), and the SAC critics' loss is `0.5 (Q - y)^2` (theirs
`(Q - y)^2`), so our SAC ReLo is half theirs, which moves it against the fixed
`epsilon` and the initial maximum priority 1 only.
"""

from __future__ import annotations

from typing import Any, Dict

import numpy as np

from rllib_ners.replay_buffers.feedback import (
    RELO_LOSSES,
    FeedbackLayout,
    ReplayFeedback,
)
from rllib_ners.replay_buffers.priority_sampler import PrioritySampler
from rllib_ners.replay_buffers.ring_storage import copy_if_array
from rllib_ners.utils.checks import is_finite_number

RELO_TRANSFORMS = ("clip", "exp")
DEFAULT_RELO_EPSILON = 1e-5


def relo_priority(relo: np.ndarray, transform: str, epsilon: float) -> np.ndarray:
    """The priority of each item from its reducible loss `relo` (float64).

    Args:
        relo: `L_online - L_target` per item.
        transform: "clip": `max(relo, 0) + epsilon`; "exp": `relo + 1` where
            `relo >= 0`, else `exp(relo)`.
        epsilon: Added by "clip" (unused by "exp").

    Returns:
        float64 priorities, > 0 where `relo` is finite, else NaN (skipped).
    """
    if transform == "clip":
        return np.maximum(relo, 0.0) + epsilon
    return np.where(relo >= 0.0, relo + 1.0, np.exp(np.minimum(relo, 0.0)))


def check_relo_settings(relo_transform: Any, relo_epsilon: Any) -> None:
    """Raises naming the setting and its choices for a bad ReLo setting."""
    if relo_transform not in RELO_TRANSFORMS:
        raise ValueError(
            f"`relo_transform` must be one of {RELO_TRANSFORMS}, got "
            f"relo_transform={relo_transform!r}. 'clip' (max(ReLo, 0) + "
            f"relo_epsilon) is the paper's; 'exp' its authors' map for C51 "
            f"Rainbow. Set it in `replay_buffer_config`."
        )
    if not (is_finite_number(relo_epsilon) and relo_epsilon > 0):
        raise ValueError(
            f"`relo_epsilon` must be a finite number > 0, got "
            f"relo_epsilon={relo_epsilon!r}: 'clip' adds it so that no item's "
            f"priority is 0 (the paper's 1e-5). Set it in `replay_buffer_config`."
        )
    if relo_transform == "exp" and relo_epsilon != DEFAULT_RELO_EPSILON:
        raise ValueError(
            f"`relo_epsilon` is added by relo_transform='clip' only, got "
            f"relo_epsilon={relo_epsilon!r} with relo_transform='exp', whose "
            f"priorities are > 0 without it. Leave relo_epsilon out, or set "
            f"relo_transform='clip'."
        )


class ReLoSampler(PrioritySampler):
    """PER whose priority of an item is its reducible loss, `L_online -
    L_target`, through `relo_priority`; everything else is PER's.

    Args:
        capacity: Number of slots.
        relo_transform: "clip" or "exp" (`relo_priority`).
        relo_epsilon: Added by "clip".
        **settings: `PrioritySampler`'s (alpha, beta, annealing, min_priority).
    """

    feedback_layout: FeedbackLayout = RELO_LOSSES
    name = "relo"

    def __init__(
        self,
        capacity: int,
        *,
        relo_transform: str = "clip",
        relo_epsilon: float = DEFAULT_RELO_EPSILON,
        **settings,
    ):
        check_relo_settings(relo_transform, relo_epsilon)
        super().__init__(capacity, **settings)
        if self.alpha == 0.0:
            # Every leaf would be p ** 0 = 1: uniform replay under ReLo's name.
            raise ValueError(
                "`alpha` must be > 0 with sampler='relo', got alpha=0, which "
                "draws every item with the same probability whatever its "
                "reducible loss. Set replay_buffer_config['alpha'] (the authors' "
                "0.5), or sampler='priority' with alpha 0 for uniform replay."
            )
        self.relo_transform = relo_transform
        self.relo_epsilon = float(relo_epsilon)

    def emptied(self) -> ReLoSampler:
        """A sampler with the same settings and no priorities."""
        return type(self)(
            self.capacity,
            relo_transform=self.relo_transform,
            relo_epsilon=self.relo_epsilon,
            alpha=self.alpha,
            beta=self.default_beta,
            beta_final=self.beta_final,
            beta_annealing_timesteps=self.beta_annealing_timesteps,
            min_priority=self.min_priority,
        )

    def priorities_of(self, feedback: ReplayFeedback) -> np.ndarray:
        """The priority of each item: its ReLo through `relo_transform`."""
        relo = feedback.online_losses - feedback.target_losses
        return relo_priority(relo, self.relo_transform, self.relo_epsilon)

    STATE_SCALARS = PrioritySampler.STATE_SCALARS + ("relo_transform", "relo_epsilon")

    def set_state(self, state: Dict[str, Any], take=copy_if_array) -> None:
        # A PER checkpoint resumed with ReLo keeps this sampler's ReLo settings.
        state = {
            "_relo_transform": self.relo_transform,
            "_relo_epsilon": self.relo_epsilon,
            **state,
        }
        super().set_state(state, take)
