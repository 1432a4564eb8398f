"""The sampler's REINFORCE objectives and priority maps against brute-force numpy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rllib_ners.ners.reinforce import (
    log_leaf,
    log_prob_loss,
    log_score_loss,
    priority_base,
)


def _linear_case(parameterization, seed=0, n=12, dim=3):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim))
    delta = rng.uniform(0.1, 2.0, size=n)
    theta = rng.normal(size=dim) * 0.5
    return x, delta, theta


def _numpy_log_p(x, delta, theta, alpha, parameterization, eps=1e-6, bound=None):
    logits = x @ theta
    if parameterization == "sigmoid":
        log_leaf_np = alpha * np.log(1 / (1 + np.exp(-logits)) + eps)
    else:
        correction = logits if bound is None else bound * np.tanh(logits / bound)
        log_leaf_np = alpha * (np.log(np.abs(delta) + eps) + correction)
    return log_leaf_np - np.log(np.exp(log_leaf_np).sum())


def _central_differences(objective, theta, step=1e-6):
    """The numpy gradient of `objective` at `theta`, one coordinate at a time."""
    grad = np.zeros_like(theta)
    for k in range(theta.size):
        shift = np.zeros_like(theta)
        shift[k] = step
        grad[k] = (objective(theta + shift) - objective(theta - shift)) / (2 * step)
    return grad


@pytest.mark.parametrize(
    "parameterization, bound",
    [("sigmoid", None), ("per_residual", None), ("per_residual", 0.7)],
)
def test_log_prob_gradient_equals_brute_force_when_U_is_the_whole_buffer(
    parameterization, bound
):
    alpha, reward = 0.6, 1.7
    x, delta, theta = _linear_case(parameterization)
    train = np.array([0, 3, 3, 7])  # I_train, with a repeat
    theta_t = torch.tensor(theta, requires_grad=True)
    leaf_args = {
        "alpha": alpha,
        "parameterization": parameterization,
        "max_log_correction": bound,
    }
    all_log_leaf = log_leaf(torch.tensor(x) @ theta_t, torch.tensor(delta), **leaf_args)
    loss = log_prob_loss(
        all_log_leaf[train],
        all_log_leaf,
        torch.ones(len(x), dtype=torch.float64),
        torch.zeros(len(x), dtype=torch.float64),
        reward,
        num_stored=len(x),
    )
    loss.backward()

    # Brute force: -r * mean_i grad log p_i by central differences in numpy.
    def objective(th):
        return (
            -reward
            * _numpy_log_p(x, delta, th, alpha, parameterization, bound=bound)[
                train
            ].mean()
        )

    np.testing.assert_allclose(
        theta_t.grad.numpy(),
        _central_differences(objective, theta),
        rtol=1e-5,
        atol=1e-8,
    )


def test_never_scored_items_enter_the_normaliser_at_their_fixed_priority():
    # True distribution: scored leaves exp(theta . x), unscored ones a constant c.
    x, delta, theta = _linear_case("per_residual", n=6)
    scored = np.array([1, 1, 1, 1, 1, 0], dtype=float)
    fixed = np.full(6, 3.0)
    theta_t = torch.tensor(theta, requires_grad=True)
    leaves = log_leaf(
        torch.tensor(x) @ theta_t,
        torch.tensor(np.ones(6)),
        alpha=1.0,
        parameterization="per_residual",
        per_epsilon=1e-300,
    )
    loss = log_prob_loss(
        leaves[:2],
        leaves,
        torch.tensor(scored),
        torch.tensor(fixed),
        1.0,
        num_stored=6,
    )
    loss.backward()

    def objective(th):
        leaf = np.where(scored > 0, np.exp(x @ th), fixed)
        return -(np.log(leaf[:2]) - np.log(leaf.sum())).mean()

    np.testing.assert_allclose(
        theta_t.grad.numpy(),
        _central_differences(objective, theta),
        rtol=1e-5,
        atol=1e-8,
    )


def test_log_prob_is_invariant_to_shifting_every_logit():
    x, delta, theta = _linear_case("per_residual", n=8)
    losses = []
    for shift in (0.0, 7.0):
        leaves = log_leaf(
            torch.tensor(x @ theta + shift),
            torch.tensor(delta),
            alpha=0.6,
            parameterization="per_residual",
        )
        losses.append(
            log_prob_loss(
                leaves[:3], leaves, torch.ones(8), torch.ones(8), 2.0, num_stored=8
            ).item()
        )
    assert losses[0] == pytest.approx(losses[1], rel=1e-9)


def test_log_score_has_no_per_item_contrast():
    # The paper's objective moves every item of I_train alike: its gradient in
    # the logits is the same for every item.
    logits = torch.zeros(5, requires_grad=True)
    log_score_loss(logits, 2.0, parameterization="per_residual").backward()
    assert torch.allclose(logits.grad, torch.full((5,), -2.0 / 5))


def test_priority_base_per_residual_starts_as_per():
    delta = torch.tensor([0.0, 0.5, 3.0])
    base = priority_base(
        torch.zeros(3), delta, parameterization="per_residual", per_epsilon=1e-6
    )
    torch.testing.assert_close(base, delta.abs() + 1e-6)
    sigma = priority_base(torch.zeros(3), delta, parameterization="sigmoid")
    torch.testing.assert_close(sigma, torch.full((3,), 0.5))
    # Huge logits stay finite.
    big = priority_base(
        torch.tensor([1e4]), torch.ones(1), parameterization="per_residual"
    )
    assert torch.isfinite(big).all()


def test_max_log_correction_bounds_the_learned_reweighting_of_per():
    delta = torch.full((5,), 2.0)
    logits = torch.tensor([-1e4, -3.0, 0.0, 1e-3, 1e4])
    base = priority_base(
        logits,
        delta,
        parameterization="per_residual",
        per_epsilon=1e-6,
        max_log_correction=3.0,
    )
    correction = torch.log(base / (2.0 + 1e-6))
    # Never beyond the bound, however large the logit ...
    assert correction.abs().max() <= 3.0 + 1e-5
    assert correction[0] == pytest.approx(-3.0, abs=1e-4)
    assert correction[-1] == pytest.approx(3.0, abs=1e-4)
    # ... b * tanh(logit / b): the identity near 0, compressed further out.
    assert correction[2] == pytest.approx(0.0, abs=1e-6)
    assert correction[3] == pytest.approx(1e-3, rel=1e-4)
    assert correction[1] == pytest.approx(3.0 * np.tanh(-1.0), rel=1e-5)
    # The paper's objective sees the same bounded log-correction.
    loss = log_score_loss(
        logits[1:2].clone().requires_grad_(),
        1.0,
        parameterization="per_residual",
        max_log_correction=3.0,
    )
    assert loss.item() == pytest.approx(-3.0 * np.tanh(-1.0), rel=1e-5)


def test_bad_rewards_and_totals_raise():
    leaves = torch.zeros(3)
    with pytest.raises(ValueError, match="replay reward"):
        log_prob_loss(
            leaves, leaves, torch.ones(3), torch.ones(3), float("inf"), num_stored=3
        )
