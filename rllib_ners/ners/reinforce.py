"""The sampler's REINFORCE objectives and its score-to-priority maps (no Ray).

One sampler step sees I_train (transitions replayed since the last update) and a
replay reward `r_re` (did the agent's return go up?). Minimising the loss moves
the scorer's parameters theta by `r_re * grad(...)`:

* "log_score" (Oh et al. 2021, Eq. 7): `L = -r_re * mean_{i in I_train} log s_i`,
  with `s_i = sigma_i` (sigmoid parameterisation) or `s_i = exp(logit_i)`
  (per_residual). Every item is pushed the same way; nothing says "more of this
  one, less of the others", so alone it cannot reshape the distribution.
* "log_prob": the score-function gradient of the sampling distribution itself,
  `log p_i = log leaf_i - log Z`, `Z = sum_k leaf_k` over the N stored
  transitions. Z is estimated from U, K stored transitions drawn uniformly:

      Z_hat = (N / K) * sum_{u in U} [ m_u * leaf_u(theta) + (1 - m_u) * fixed_u ]
      L = -r_re * [ mean_{i in I_train} log leaf_i - log Z_hat ]

  where `m_u` is 1 for transitions that were ever scored and `fixed_u` the
  (theta-independent) priority a never-scored transition holds in the tree.
  `grad log Z_hat` is the self-normalised importance estimate of
  `E_p[grad log leaf]`: consistent, exact when U is the whole buffer, and
  invariant, like the true log p_i, to adding a constant to every log leaf
  (for an unbounded per_residual correction: to every logit), so the scores
  cannot drift together (with Z taken from the tree as a constant they do, and
  the priorities then collapse).

Score-to-priority maps (the sum-tree leaf, before the buffer's `^alpha`):
* "sigmoid": `base = sigma = sigmoid(logit)`, so `leaf = sigma^alpha`;
* "per_residual": `base = (|delta| + eps) * exp(c(logit))`, so
  `leaf = (|delta| + eps)^alpha * exp(alpha * c(logit))`: PER's priority times a
  learned correction that is about 1 for a fresh scorer. The log-correction
  `c(logit) = b * tanh(logit / b)` is bounded by `b = max_log_correction`
  (identity near 0): the scorer re-weights PER by at most `exp(alpha * b)`
  either way. Unbounded, Adam's steps (each about the learning rate, however
  noisy the replay reward) let the logits random-walk apart, and within a
  few thousand updates a handful of transitions held nearly all the mass
  (Acrobot: max/min priority 8e7, effective sample fraction 0.003, learning
  lost). `None` lifts the bound (a hard clip at +-20 keeps leaves finite).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Optional, Tuple

import torch

from rllib_ners.ners.settings import NERSSettings

# Without a bound the per_residual logit is still clipped here: exp(20) ~ 5e8 is
# plenty of range, and the leaf stays finite in float32 for any alpha <= 1.
MAX_ABS_LOGIT = 20.0
# The floor under a never-scored transition's leaf before its log is taken.
MIN_FIXED_LEAF = 1e-300


def _check_reward(replay_reward: float) -> float:
    if not math.isfinite(replay_reward):
        raise ValueError(f"The replay reward must be finite, got {replay_reward!r}.")
    return float(replay_reward)


def log_correction(
    logits: torch.Tensor, max_log_correction: Optional[float]
) -> torch.Tensor:
    """per_residual's learned log-correction `b * tanh(logit / b)` (module doc),
    or the logit clipped to +-MAX_ABS_LOGIT when the bound `b` is None."""
    if max_log_correction is None:
        return logits.clamp(-MAX_ABS_LOGIT, MAX_ABS_LOGIT)
    return max_log_correction * torch.tanh(logits / max_log_correction)


def priority_base(
    logits: torch.Tensor,
    delta: torch.Tensor,
    *,
    parameterization: str,
    per_epsilon: float = 1e-6,
    max_log_correction: Optional[float] = None,
) -> torch.Tensor:
    """The value the buffer raises to `alpha` to get a leaf (see module doc)."""
    if parameterization == "sigmoid":
        return torch.sigmoid(logits)
    if parameterization == "per_residual":
        correction = log_correction(logits, max_log_correction)
        return (delta.abs() + per_epsilon) * torch.exp(correction)
    raise ValueError(f"Unknown NERS parameterization {parameterization!r}.")


def learned_log_score(
    logits: torch.Tensor,
    *,
    parameterization: str,
    log_eps: float = 1e-6,
    max_log_correction: Optional[float] = None,
) -> torch.Tensor:
    """`log s`, the learned part of a log priority: `log(sigma + eps)`
    ("sigmoid", finite at sigma -> 0 as the paper's loss has it) or the
    log-correction ("per_residual")."""
    if parameterization == "sigmoid":
        return torch.log(torch.sigmoid(logits) + log_eps)
    if parameterization == "per_residual":
        return log_correction(logits, max_log_correction)
    raise ValueError(f"Unknown NERS parameterization {parameterization!r}.")


def log_leaf(
    logits: torch.Tensor,
    delta: torch.Tensor,
    *,
    alpha: float,
    parameterization: str,
    per_epsilon: float = 1e-6,
    log_eps: float = 1e-6,
    max_log_correction: Optional[float] = None,
) -> torch.Tensor:
    """`log leaf = alpha * log base`, differentiable in the logits."""
    log_base = learned_log_score(
        logits,
        parameterization=parameterization,
        log_eps=log_eps,
        max_log_correction=max_log_correction,
    )
    if parameterization == "per_residual":
        log_base = torch.log(delta.abs() + per_epsilon) + log_base
    return alpha * log_base


def log_score_loss(
    logits: torch.Tensor,
    replay_reward: float,
    *,
    parameterization: str,
    log_eps: float = 1e-6,
    max_log_correction: Optional[float] = None,
) -> torch.Tensor:
    """The paper's objective: `-r_re * mean_i log s_i` over I_train."""
    replay_reward = _check_reward(replay_reward)
    log_score = learned_log_score(
        logits,
        parameterization=parameterization,
        log_eps=log_eps,
        max_log_correction=max_log_correction,
    )
    return -replay_reward * log_score.mean()


def log_prob_loss(
    train_log_leaf: torch.Tensor,
    normalizer_log_leaf: torch.Tensor,
    normalizer_scored: torch.Tensor,
    normalizer_fixed_leaf: torch.Tensor,
    replay_reward: float,
    *,
    num_stored: int,
) -> torch.Tensor:
    """The log-probability objective (module doc): its gradient is
    `-r_re * mean_i grad log p_i`, exactly when U is the whole buffer.

    Args:
        train_log_leaf: `log leaf_i` for I_train, differentiable.
        normalizer_log_leaf: `log leaf_u` for U, K uniform draws of stored
            transitions, differentiable.
        normalizer_scored: 1 for items of U that were ever scored, else 0.
        normalizer_fixed_leaf: The tree's leaf of each item of U (used for the
            never-scored ones, whose priority does not depend on the scorer).
        replay_reward: r_re.
        num_stored: N, the stored transitions U was drawn from.
    """
    replay_reward = _check_reward(replay_reward)
    scored = normalizer_scored > 0.5
    fixed = normalizer_fixed_leaf.to(normalizer_log_leaf.dtype)
    log_terms = torch.where(
        scored, normalizer_log_leaf, torch.log(fixed.clamp_min(MIN_FIXED_LEAF))
    )
    log_z = torch.logsumexp(log_terms, dim=0) + math.log(
        num_stored / normalizer_log_leaf.shape[0]
    )
    return -replay_reward * (train_log_leaf.mean() - log_z)


def sampler_loss(
    logits_of: Callable[[Dict[str, Any]], torch.Tensor],
    batch: Dict[str, Any],
    replay_reward: float,
    settings: NERSSettings,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The loss of one sampler step on a batch from the NERS buffer's
    `sample_sampler_training_batch()`, per `settings.objective`.

    Args:
        logits_of: Maps numpy feature columns to score logits, with gradients
            (each call's columns are their own global context).
        batch: I_train's columns; for "log_prob" also `normalizer`,
            `normalizer_scored`, `normalizer_leaf`, `num_stored` and `alpha`.
        replay_reward: r_re.
        settings: The sampler's settings.

    Returns:
        The loss and I_train's logits.
    """
    logits = logits_of(batch)
    if settings.objective == "log_score":
        loss = log_score_loss(
            logits,
            replay_reward,
            parameterization=settings.parameterization,
            log_eps=settings.log_eps,
            max_log_correction=settings.max_log_correction,
        )
        return loss, logits
    leaf_args = {
        "alpha": float(batch["alpha"]),
        "parameterization": settings.parameterization,
        "per_epsilon": settings.per_epsilon,
        "log_eps": settings.log_eps,
        "max_log_correction": settings.max_log_correction,
    }
    normalizer = batch["normalizer"]
    device = logits.device
    train_delta = torch.as_tensor(batch["delta"], device=device)
    norm_delta = torch.as_tensor(normalizer["delta"], device=device)
    loss = log_prob_loss(
        log_leaf(logits, train_delta, **leaf_args),
        log_leaf(logits_of(normalizer), norm_delta, **leaf_args),
        torch.as_tensor(batch["normalizer_scored"], device=device),
        torch.as_tensor(batch["normalizer_leaf"], device=device),
        replay_reward,
        num_stored=int(batch["num_stored"]),
    )
    return loss, logits
