"""LaBER: a uniform large batch that the Learner sub-samples (no Ray).

Lahire, Geist and Rachelson, "Large Batch Experience Replay" (ICML 2022,
arXiv 2110.01528). The best sampling distribution for a mini-batch gradient
is proportional to each item's gradient norm; LaBER approximates it cheaply
at every update:

1. draw a large batch of `m * B` items uniformly from the buffer (here the
   uniform sampler's stratified draw, one item per `1 / (m * B)` of the
   buffer, where the authors' code draws them independently: each item's
   probability is the same, and our `uniform` arm draws the same way);
2. compute each item's *surrogate priority* `s_i`, the norm of its loss's
   gradient with respect to the network's output, in one no-grad forward
   pass with the current networks (`|delta_i|` for a squared error,
   `min(|delta_i|, 1)` for the Huber loss, `||p_i - m_i||_2` for C51's
   cross-entropy);
3. draw `B` of them with replacement, `P(i) = s_i / sum_j s_j`;
4. weigh each drawn item by `w_i = mean_j(s_j) / s_i` ("LaBER-mean", the
   paper's preferred; "lazy" `1 / s_i`, "max" `(1 / s_i) / max_drawn(1 / s_j)`),
   which makes the mini-batch gradient an unbiased estimate of the large
   batch's mean gradient, and step on the `B` items.

No priority is stored: the buffer stays uniform. This sampler is step 1 (the
uniform draw of `m * B` slots, `items_per_draw`); steps 2-4 need the networks
and so run in the Learner (`algorithms.common.learner.replay_methods.
LargeBatchSubsampler`), which sends back `feedback.LABER_SURROGATES` rows:
each large-batch item's surrogate and how often it was drawn. They change no
draw; the sampler keeps their diagnostics. `laber_probabilities` and
`laber_weights` are the formulas in numpy, the reference the Learner's torch
code is tested against.

Settings: `laber_m` (4, the paper's) and `laber_weights` ("mean"); `alpha`
and `beta` must be 0, since the large batch is uniform and LaBER's weights
replace PER's.
"""

from __future__ import annotations

from typing import Any, Dict

import numpy as np

from rllib_ners.replay_buffers.buffer_names import SETTING_FIX
from rllib_ners.replay_buffers.feedback import (
    LABER_SURROGATES,
    FeedbackLayout,
    ReplayFeedback,
)
from rllib_ners.replay_buffers.priority_sampler import MIN_PRIORITY, PrioritySampler
from rllib_ners.replay_buffers.ring_storage import copy_if_array
from rllib_ners.utils.checks import check_positive_int

LABER_WEIGHTS = ("mean", "lazy", "max")
DEFAULT_LABER_M = 4


def laber_probabilities(surrogates: np.ndarray) -> np.ndarray:
    """`P(i) = s_i / sum_j s_j` over the large batch; uniform if all `s` are 0
    (every item then fits exactly, and any draw is as good)."""
    total = surrogates.sum()
    if total <= 0.0:
        return np.full(surrogates.shape, 1.0 / surrogates.shape[0])
    return surrogates / total


def laber_weights(
    surrogates: np.ndarray, drawn: np.ndarray, variant: str = "mean"
) -> np.ndarray:
    """LaBER's importance weights of the `drawn` items of the large batch.

    "mean": `mean(s) / s_i`; "lazy": `1 / s_i`; "max": `(1 / s_i)` divided by
    its largest value among the drawn items. All 1 when every `s` is 0 (the
    draw was then uniform).
    """
    if surrogates.sum() <= 0.0:
        return np.ones(drawn.shape, dtype=np.float64)
    inverse = 1.0 / surrogates[drawn]
    if variant == "mean":
        return surrogates.mean() * inverse
    if variant == "lazy":
        return inverse
    return inverse / inverse.max()


def check_laber_settings(laber_m: Any, laber_weights: Any) -> int:
    """`laber_m` as an int >= 1; raises naming the setting otherwise."""
    m = check_positive_int("laber_m", laber_m, fix=SETTING_FIX)
    if laber_weights not in LABER_WEIGHTS:
        raise ValueError(
            f"`laber_weights` must be one of {LABER_WEIGHTS}, got "
            f"laber_weights={laber_weights!r}; 'mean' (mean(s) / s_i) is the "
            f"paper's preferred. {SETTING_FIX}"
        )
    return m


class LargeBatchSampler(PrioritySampler):
    """Draws LaBER's large batch: `m * B` slots, uniformly, weights 1.

    Args:
        capacity: Number of slots.
        laber_m: The large batch is `laber_m` times the batch asked for.
        laber_weights: The Learner's weights variant ("mean", "lazy", "max").
        alpha: Must be 0 (a uniform large batch).
        beta: Must be 0 (LaBER's weights replace PER's).
        beta_final: Must be None (no beta to anneal).
        beta_annealing_timesteps: Must be None.
        min_priority: As `PrioritySampler`'s (irrelevant with alpha 0).
    """

    feedback_layout: FeedbackLayout = LABER_SURROGATES
    name = "laber"

    def __init__(
        self,
        capacity: int,
        *,
        laber_m: int = DEFAULT_LABER_M,
        laber_weights: str = "mean",
        alpha: float = 0.0,
        beta: float = 0.0,
        beta_final=None,
        beta_annealing_timesteps=None,
        min_priority: float = MIN_PRIORITY,
    ):
        self.laber_m = check_laber_settings(laber_m, laber_weights)
        self.laber_weights = laber_weights
        if (
            alpha != 0
            or (beta or 0) != 0
            or beta_final is not None
            or beta_annealing_timesteps is not None
            or min_priority != MIN_PRIORITY
        ):
            raise ValueError(
                f"sampler='laber' draws its large batch uniformly and weighs the "
                f"sub-sample itself, so PER's settings do not apply: got "
                f"alpha={alpha!r}, beta={beta!r}, beta_final={beta_final!r}, "
                f"beta_annealing_timesteps={beta_annealing_timesteps!r}, "
                f"min_priority={min_priority!r}. Set alpha=0.0 and beta=0.0 and "
                f"remove beta_final, beta_annealing_timesteps and min_priority "
                f"in `replay_buffer_config` (RLlib's DQN "
                f"and SAC defaults carry alpha 0.6, beta 0.4; "
                f"`rllib_ners.enable_replay(config, 'laber')` sets them)."
            )
        super().__init__(capacity, alpha=0.0, beta=0.0)
        # Diagnostics of the last feedback: the share of the large batch drawn
        # at least once, and the mean surrogate.
        self.drawn_fraction = float("nan")
        self.surrogate_mean = float("nan")

    def items_per_draw(self, num_items: int) -> int:
        """The large batch: `laber_m` times the items asked for."""
        return self.laber_m * num_items

    def emptied(self) -> LargeBatchSampler:
        """A sampler with the same settings that has seen nothing."""
        return type(self)(
            self.capacity,
            laber_m=self.laber_m,
            laber_weights=self.laber_weights,
            min_priority=self.min_priority,
        )

    def update_priority(
        self, slots: np.ndarray, feedback: ReplayFeedback, live: np.ndarray
    ) -> np.ndarray:
        """Keeps the diagnostics of the Learner's LaBER rows; sets no priority
        (the large batch is uniform), so applies to no slot."""
        if len(feedback):
            self.drawn_fraction = float(np.mean(feedback.times_drawn > 0))
            self.surrogate_mean = float(np.mean(feedback.td_errors))
        return np.zeros(slots.shape, dtype=bool)

    STATE_SCALARS = PrioritySampler.STATE_SCALARS + ("laber_m", "laber_weights")

    def set_state(self, state: Dict[str, Any], take=copy_if_array) -> None:
        # A uniform checkpoint resumed with LaBER keeps this sampler's settings.
        state = {
            "_laber_m": self.laber_m,
            "_laber_weights": self.laber_weights,
            **state,
        }
        super().set_state(state, take)
