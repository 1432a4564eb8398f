"""ACER's off-policy corrections as pure torch functions (no RLlib, no state).

Wang et al. 2016, "Sample Efficient Actor-Critic with Experience Replay". All
tensors are batch-major: `[B, T]` for per-step values, `[B, T, A]` over actions.
`mask[b, t]` marks real steps; a row's padding comes after its last real step.

Notation: `pi` is the current policy, `mu` the behaviour policy that acted,
`rho_t(a) = pi(a|s_t) / mu(a|s_t)`, `Q` the critic, `V(s) = sum_a pi(a|s) Q(s,a)`.

Retrace target, computed backwards over each sequence (eq. 5 of the paper):

    Q_ret(s_t, a_t) = r_t + gamma * (1 - d_t) * next_t
    next_t          = rhobar_{t+1} (Q_ret(s_{t+1}, a_{t+1}) - Q(s_{t+1}, a_{t+1}))
                      + V(s_{t+1})
    rhobar_t        = min(c_retrace, rho_t(a_t))

with `next_t = V(s_T)` after a row's last real step (the bootstrap value) and
`d_t` = 1 when the episode terminated at step t, so a terminal inside a sequence
cuts the trace there (the next step starts a new episode).

Policy gradient with truncated importance sampling and bias correction (eq. 9):

    g_t = min(c, rho_t(a_t)) * grad log pi(a_t|s_t) * (Q_ret_t - V(s_t))
          + sum_a pi(a|s_t) [1 - c / rho_t(a)]_+ * grad log pi(a|s_t)
                                                 * (Q(s_t, a) - V(s_t))

Efficient trust region (eq. 12): with `phi` the policy's distribution
statistics (here its probabilities), `g` the gradient of the objective w.r.t.
`phi` and `k` the gradient of `KL(pi_avg || pi_phi)` w.r.t. `phi`,

    z* = g - max(0, (k . g - delta) / ||k||^2) * k,

the step closest to `g` whose linearised KL change `k . z*` is at most `delta`.
"""

from __future__ import annotations

from typing import Dict

import torch


def retrace_q_targets(
    *,
    rewards: torch.Tensor,
    q_taken: torch.Tensor,
    values: torch.Tensor,
    rho_taken: torch.Tensor,
    bootstrap_values: torch.Tensor,
    terminateds: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    c: float = 1.0,
) -> torch.Tensor:
    """Retrace targets `Q_ret` of shape `[B, T]` (0 at padded steps).

    Args:
        rewards: `r_t`, `[B, T]`.
        q_taken: `Q(s_t, a_t)` of the critic, `[B, T]`.
        values: `V(s_t)`, `[B, T]`.
        rho_taken: Importance ratios `pi(a_t|s_t) / mu(a_t|s_t)`, `[B, T]`.
        bootstrap_values: `V` of the observation after each row's last real
            step, `[B]`. Ignored where that step terminated the episode.
        terminateds: Whether the episode terminated at step t, `[B, T]`.
        mask: Real (True) or padded (False) steps, `[B, T]`.
        gamma: Discount factor.
        c: Truncation of the traces, `min(c, rho)` (Retrace uses 1).

    Returns the targets as a tensor without gradient.
    """
    with torch.no_grad():
        mask = mask.bool()
        not_done = 1.0 - terminateds.to(values.dtype)
        rho_bar = torch.clamp(rho_taken, max=c)
        q_ret = torch.zeros_like(values)
        carry = bootstrap_values.to(values.dtype)
        for t in range(values.shape[1] - 1, -1, -1):
            target = rewards[:, t] + gamma * not_done[:, t] * carry
            q_ret[:, t] = torch.where(mask[:, t], target, torch.zeros_like(target))
            # Padded steps keep the carry: the last real step then sees V(s_T).
            new_carry = rho_bar[:, t] * (target - q_taken[:, t]) + values[:, t]
            carry = torch.where(mask[:, t], new_carry, carry)
        return q_ret


def importance_weights(
    pi: torch.Tensor, mu: torch.Tensor, actions: torch.Tensor, c: float
) -> Dict[str, torch.Tensor]:
    """Ratios and truncations for the ACER policy gradient (no gradient).

    Args:
        pi: Current policy probabilities `[B, T, A]`.
        mu: Behaviour policy probabilities `[B, T, A]`.
        actions: Actions taken, `[B, T]` (int).
        c: Truncation threshold of the policy gradient.

    Returns:
        `rho`: all ratios `pi / mu`, `[B, T, A]`; `rho_taken`: the taken
        action's ratio, `[B, T]`; `truncated`: `min(c, rho_taken)`;
        `correction`: the bias-correction coefficients `[1 - c / rho(a)]_+`,
        `[B, T, A]` (0 where `rho(a) <= c`).
    """
    with torch.no_grad():
        # mu comes from a softmax and is > 0; the floor only guards underflow.
        rho = pi / mu.clamp(min=1e-12)
        rho_taken = rho.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        correction = torch.clamp(1.0 - c / rho.clamp(min=1e-12), min=0.0)
        return {
            "rho": rho,
            "rho_taken": rho_taken,
            "truncated": torch.clamp(rho_taken, max=c),
            "correction": correction,
        }


def acer_policy_objective(
    *,
    log_pi: torch.Tensor,
    pi: torch.Tensor,
    actions: torch.Tensor,
    q_ret: torch.Tensor,
    q_values: torch.Tensor,
    values: torch.Tensor,
    truncated: torch.Tensor,
    correction: torch.Tensor,
) -> torch.Tensor:
    """Per-step surrogate whose gradient is ACER's `g_t`, `[B, T]`.

    Only `log_pi` carries gradient; advantages and weights are constants, and
    `pi` weights the bias-correction expectation (detached).

    Args:
        log_pi: `log pi(.|s_t)`, `[B, T, A]`, with gradient.
        pi: `pi(.|s_t)`, `[B, T, A]` (detached inside).
        actions: `[B, T]`.
        q_ret: Retrace targets `[B, T]`.
        q_values: `Q(s_t, .)`, `[B, T, A]`.
        values: `V(s_t)`, `[B, T]`.
        truncated: `min(c, rho_t(a_t))`, `[B, T]`.
        correction: `[1 - c / rho_t(a)]_+`, `[B, T, A]`.
    """
    log_pi_taken = log_pi.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    advantage = (q_ret - values).detach()
    truncated_term = truncated.detach() * log_pi_taken * advantage
    q_advantage = (q_values - values.unsqueeze(-1)).detach()
    weights = (pi.detach() * correction.detach() * q_advantage).detach()
    correction_term = (weights * log_pi).sum(-1)
    return truncated_term + correction_term


def trust_region_step(
    g: torch.Tensor, k: torch.Tensor, delta: float, eps: float = 1e-8
) -> torch.Tensor:
    """`z* = g - max(0, (k.g - delta) / |k|^2) k` over the last axis.

    Args:
        g: Gradient of the objective w.r.t. the distribution statistics `phi`.
        k: Gradient of `KL(pi_avg || pi_phi)` w.r.t. `phi`.
        delta: Largest allowed linearised KL change per step.
        eps: Keeps the division finite where `k` is zero.
    """
    excess = (k * g).sum(-1, keepdim=True) - delta
    scale = torch.clamp(excess / ((k * k).sum(-1, keepdim=True) + eps), min=0.0)
    return g - scale * k


def kl_gradient_wrt_probs(
    pi_avg: torch.Tensor, pi: torch.Tensor, eps: float = 1e-8
) -> torch.Tensor:
    """`d KL(pi_avg || pi) / d pi = -pi_avg / pi` (probability statistics)."""
    return -pi_avg / (pi + eps)
