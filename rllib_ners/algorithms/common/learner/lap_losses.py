"""LAP's and PAL's losses (Fujimoto, Meger & Precup, "An Equivalence between
Loss Functions and Non-Uniform Sampling in Experience Replay", NeurIPS 2020).

LAP samples a transition by `max(|delta|, 1)^alpha` (our prioritized buffers
with `min_priority=1.0` and `beta=0.0`) and regresses on the Huber loss with
threshold 1 (`huber`), so that the two together have the expected gradient
of a squared-error loss. PAL is the same expected gradient under uniform
sampling: the per-item loss `pal` divided by the batch's mean
`max(|delta|, 1)^alpha` (`pal_normaliser`, without gradients). No Ray.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

# LAP's threshold: errors below it weigh as squared errors, priorities below
# it are raised to it.
LAP_MIN_PRIORITY = 1.0


def huber(errors: torch.Tensor) -> torch.Tensor:
    """LAP's per-item loss: the Huber loss of the TD errors, threshold 1."""
    return F.huber_loss(
        errors, torch.zeros_like(errors), reduction="none", delta=LAP_MIN_PRIORITY
    )


def pal(errors: torch.Tensor, alpha: float) -> torch.Tensor:
    """PAL's per-item loss: `0.5 delta^2` below the threshold,
    `|delta|^(1 + alpha) / (1 + alpha)` above."""
    absolute = errors.abs()
    return torch.where(
        absolute < LAP_MIN_PRIORITY,
        0.5 * errors.pow(2),
        absolute.pow(1.0 + alpha) / (1.0 + alpha),
    )


def pal_normaliser(priority_errors: torch.Tensor, alpha: float) -> torch.Tensor:
    """The mean of `max(|delta|, 1)^alpha` over the batch, without gradients:
    what PAL's loss is divided by."""
    floored = priority_errors.detach().abs().clamp(min=LAP_MIN_PRIORITY)
    return floored.pow(alpha).mean()
