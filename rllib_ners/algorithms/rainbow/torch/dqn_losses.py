"""RLlib 2.60's DQN loss terms (`DQNTorchLearner.compute_loss_for_module`),
one function per term, so that the ordinary update, ReLo and LaBER compute
them with the same ops in the same order.

- `selected_q` / `selected_logits`: the network's output at the taken actions;
- `greedy_next_actions`: the bootstrap action (online argmax with double Q);
- `scalar_td_target`: y = R + gamma^n (1 - terminated) Q_target(s_{t+n}, a*);
- `c51_target_distribution`: C51's projection m of the target distribution
  onto the support (Bellemare et al. 2017, Algorithm 1), RLlib's ops;
- `c51_item_losses`: the per-item cross-entropy -sum_z m log softmax(logits);
- `q_statistics` / `c51_statistics`: RLlib's window-1 metrics, as functions
  (see `FastTorchLearner.log_statistics`).

Each term is RLlib's line for line (RLlib's comments dropped), so a loss built
from them equals RLlib's bit for bit (tested in
`tests/unit/test_rainbow_relo_laber.py` and `tests/unit/test_rainbow_module.py`).
"""

from __future__ import annotations

from typing import Any, Callable, Dict

import torch
from ray.rllib.algorithms.dqn.dqn_learner import (
    ATOMS,
    QF_LOSS_KEY,
    QF_MAX_KEY,
    QF_MEAN_KEY,
    QF_MIN_KEY,
    QF_NEXT_PREDS,
    QF_TARGET_NEXT_PREDS,
    QF_TARGET_NEXT_PROBS,
    TD_ERROR_MEAN_KEY,
)
from ray.rllib.core.columns import Columns
from torch import nn
from torch.nn import functional as F

Statistics = Dict[str, Callable[[], Any]]


def selected_q(q_values: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Q(s, a) at the taken actions (RLlib: -inf Q-values read as 0)."""
    return torch.nan_to_num(
        torch.gather(q_values, dim=-1, index=actions.view(*actions.shape, 1).long()),
        neginf=0.0,
    ).squeeze(dim=-1)


def selected_logits(
    logits: torch.Tensor, actions: torch.Tensor, num_atoms: int
) -> torch.Tensor:
    """C51: the logits of the taken actions, [B, num_atoms] from [B, A, atoms]
    (the first B rows where `logits` holds more, as RLlib's gather reads)."""
    return torch.gather(
        logits,
        dim=1,
        index=actions.view(-1, 1, 1).expand(-1, 1, num_atoms).long(),
    ).squeeze(dim=1)


def greedy_next_actions(config, fwd_out: Dict[str, torch.Tensor]) -> torch.Tensor:
    """The bootstrap action at s_{t+n}, [B, 1]: the online network's argmax
    with double Q, the target network's otherwise."""
    greedy_source = (
        fwd_out[QF_NEXT_PREDS] if config.double_q else fwd_out[QF_TARGET_NEXT_PREDS]
    )
    return torch.argmax(greedy_source, dim=-1).unsqueeze(dim=-1).long()


def scalar_td_target(
    config, batch: Dict[str, torch.Tensor], fwd_out: Dict[str, torch.Tensor]
) -> torch.Tensor:
    """The n-step double-Q TD target y, detached."""
    q_next_best = torch.nan_to_num(
        torch.gather(
            fwd_out[QF_TARGET_NEXT_PREDS],
            dim=-1,
            index=greedy_next_actions(config, fwd_out),
        ),
        neginf=0.0,
    ).squeeze()
    q_next_best_masked = (1.0 - batch[Columns.TERMINATEDS].float()) * q_next_best
    discount = config.gamma ** batch["n_step"]
    return (batch[Columns.REWARDS] + discount * q_next_best_masked).detach()


def c51_target_distribution(
    config, batch: Dict[str, torch.Tensor], fwd_out: Dict[str, torch.Tensor]
) -> torch.Tensor:
    """C51's projected target distribution m, [B, num_atoms], detached: the
    target network's distribution at the bootstrap action, shifted by
    R + gamma^n (1 - terminated) z, clipped to [v_min, v_max] and split onto
    the two neighbouring atoms."""
    num_atoms = config.num_atoms
    q_probs_next_best = torch.gather(
        fwd_out[QF_TARGET_NEXT_PROBS],
        dim=1,
        index=greedy_next_actions(config, fwd_out)
        .view(-1, 1, 1)
        .expand(-1, 1, num_atoms),
    ).squeeze(dim=1)
    z = fwd_out[ATOMS]
    r_tau = torch.clamp(
        batch[Columns.REWARDS].unsqueeze(dim=-1)
        + (
            config.gamma ** batch["n_step"] * (1.0 - batch[Columns.TERMINATEDS].float())
        ).unsqueeze(dim=-1)
        * z,
        config.v_min,
        config.v_max,
    ).squeeze(dim=1)
    b = (r_tau - config.v_min) / (
        (config.v_max - config.v_min) / float(num_atoms - 1.0)
    )
    lower_bound = torch.floor(b)
    upper_bound = torch.ceil(b)
    floor_equal_ceil = ((upper_bound - lower_bound) < 0.5).float()
    lower_projection = nn.functional.one_hot(lower_bound.long(), num_atoms)
    upper_projection = nn.functional.one_hot(upper_bound.long(), num_atoms)
    ml_delta = q_probs_next_best * (upper_bound - b + floor_equal_ceil)
    mu_delta = q_probs_next_best * (b - lower_bound)
    ml_delta = torch.sum(lower_projection * ml_delta.unsqueeze(dim=-1), dim=1)
    mu_delta = torch.sum(upper_projection * mu_delta.unsqueeze(dim=-1), dim=1)
    return (ml_delta + mu_delta).detach()


def c51_item_losses(
    logits_selected: torch.Tensor, target_distribution: torch.Tensor
) -> torch.Tensor:
    """-sum_z m_z log softmax(logits)_z per item (RLlib's
    `nn.CrossEntropyLoss(reduction="none")` with probabilities as targets)."""
    return F.cross_entropy(logits_selected, target_distribution, reduction="none")


def scalar_loss_function(config) -> Callable[..., torch.Tensor]:
    """The per-item loss l(Q, y) of `td_error_loss_fn` (Huber with delta 1, or
    the squared error; RLlib's `nn.HuberLoss` / `nn.MSELoss`)."""
    return F.huber_loss if config.td_error_loss_fn == "huber" else F.mse_loss


def q_statistics(
    loss: torch.Tensor, q_selected: torch.Tensor, td_error: torch.Tensor
) -> Statistics:
    """RLlib's window-1 DQN metrics (loss, mean/max/min Q of the trained rows,
    mean TD error), on detached copies: kept until the iteration's flush, the
    originals would keep the update's autograd graph alive."""
    loss, q_selected, td_error = loss.detach(), q_selected.detach(), td_error.detach()
    return {
        QF_LOSS_KEY: lambda: loss,
        QF_MEAN_KEY: lambda: torch.mean(q_selected),
        QF_MAX_KEY: lambda: torch.max(q_selected),
        QF_MIN_KEY: lambda: torch.min(q_selected),
        TD_ERROR_MEAN_KEY: lambda: torch.mean(td_error),
    }


def c51_statistics(probs: torch.Tensor, z: torch.Tensor) -> Statistics:
    """RLlib's window-1 C51 metrics of the predicted distributions `probs`
    [B, A, atoms] on the support `z` (detached, see `q_statistics`)."""
    probs = probs.detach()

    def mean_probs():
        return probs.mean(dim=0)

    return {
        ATOMS: lambda: torch.mean(z),
        "expectations_abs_diff": lambda: torch.mean(
            torch.abs(torch.diff(torch.sum(mean_probs() * z, dim=1)).mean(dim=0))
        ),
        "dist_total_variation_dist": lambda: (
            torch.diff(mean_probs(), dim=0).abs().sum() * 0.5
        ),
        "dist_max_abs_distance": lambda: torch.max(
            torch.diff(mean_probs(), dim=0).abs()
        ),
        "action_dist_mean_entropy": lambda: torch.mean(
            (mean_probs() * torch.log(mean_probs())).sum(dim=1), dim=0
        ),
    }
