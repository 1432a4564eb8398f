"""ACER's math (`retrace_torch`) against straightforward numpy loops, the way
RLlib tests its v-trace: random sequences with terminals in the middle and
padding at the end, several trace cuts `c` and discounts."""

import numpy as np
import pytest
import torch

from rllib_ners.algorithms.acer.torch.retrace_torch import (
    acer_policy_objective,
    importance_weights,
    kl_gradient_wrt_probs,
    retrace_q_targets,
    trust_region_step,
)


def retrace_numpy(
    rewards, q_taken, values, rho, bootstrap, terminated, lengths, gamma, c
):
    """Row by row, step by step, as the paper writes it."""
    B, T = rewards.shape
    out = np.zeros((B, T))
    for b in range(B):
        q_ret = bootstrap[b]
        for t in reversed(range(lengths[b])):
            if terminated[b, t]:
                q_ret = 0.0
            q_ret = rewards[b, t] + gamma * q_ret
            out[b, t] = q_ret
            q_ret = min(c, rho[b, t]) * (q_ret - q_taken[b, t]) + values[b, t]
    return out


def random_sequences(rng, B=7, T=9):
    lengths = rng.integers(1, T + 1, size=B)
    lengths[0] = T
    mask = np.arange(T)[None, :] < lengths[:, None]
    terminated = (rng.random((B, T)) < 0.2) & mask
    terminated[1, : lengths[1] - 1] = False
    terminated[1, lengths[1] - 1] = True  # a row ending in a terminal
    return {
        "rewards": rng.normal(size=(B, T)),
        "q_taken": rng.normal(size=(B, T)),
        "values": rng.normal(size=(B, T)),
        "rho": rng.exponential(1.0, size=(B, T)),
        "bootstrap": rng.normal(size=B),
        "terminated": terminated,
        "lengths": lengths,
        "mask": mask,
    }


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("c", [0.5, 1.0, 10.0])
@pytest.mark.parametrize("gamma", [0.0, 0.9, 0.99, 1.0])
def test_retrace_matches_numpy_loop(seed, c, gamma):
    data = random_sequences(np.random.default_rng(seed))
    expected = retrace_numpy(
        data["rewards"],
        data["q_taken"],
        data["values"],
        data["rho"],
        data["bootstrap"],
        data["terminated"],
        data["lengths"],
        gamma,
        c,
    )
    as_t = lambda x: torch.as_tensor(x, dtype=torch.float64)  # noqa: E731
    got = retrace_q_targets(
        rewards=as_t(data["rewards"]),
        q_taken=as_t(data["q_taken"]),
        values=as_t(data["values"]),
        rho_taken=as_t(data["rho"]),
        bootstrap_values=as_t(data["bootstrap"]),
        terminateds=torch.as_tensor(data["terminated"]),
        mask=torch.as_tensor(data["mask"]),
        gamma=gamma,
        c=c,
    )
    assert data["terminated"][:, :-1].any(), "want terminals mid-sequence"
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_retrace_with_on_policy_ratios_is_the_n_step_return_mixture():
    """rho = 1, c = 1, Q = V: Q_ret is the discounted return bootstrapped by V."""
    rewards = torch.tensor([[1.0, 2.0, 3.0]])
    values = torch.tensor([[5.0, 6.0, 7.0]])
    q_ret = retrace_q_targets(
        rewards=rewards,
        q_taken=values,
        values=values,
        rho_taken=torch.ones(1, 3),
        bootstrap_values=torch.tensor([10.0]),
        terminateds=torch.zeros(1, 3, dtype=torch.bool),
        mask=torch.ones(1, 3, dtype=torch.bool),
        gamma=0.5,
    )
    # Q_ret_2 = 3 + .5*10 = 8; Q_ret_1 = 2 + .5*8 = 6; Q_ret_0 = 1 + .5*6 = 4.
    assert q_ret.tolist() == [[4.0, 6.0, 8.0]]


def test_importance_weights_truncate_and_correct():
    pi = torch.tensor([[[0.8, 0.2]]])
    mu = torch.tensor([[[0.2, 0.8]]])
    out = importance_weights(pi, mu, torch.tensor([[0]]), c=1.0)
    assert torch.allclose(out["rho"], torch.tensor([[[4.0, 0.25]]]))
    assert out["rho_taken"].item() == pytest.approx(4.0)
    assert out["truncated"].item() == pytest.approx(1.0)
    # [1 - c/rho]_+ = [1 - 1/4, 1 - 4]_+ = [0.75, 0].
    assert torch.allclose(out["correction"], torch.tensor([[[0.75, 0.0]]]))


def test_policy_objective_on_a_hand_computed_two_action_three_step_sequence():
    """Gradient of the surrogate w.r.t. the logits equals the hand-derived g_t."""
    logits = torch.tensor([[[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]]], requires_grad=True)
    mu = torch.tensor([[[0.5, 0.5], [0.9, 0.1], [0.5, 0.5]]])
    actions = torch.tensor([[0, 1, 1]])
    q_values = torch.tensor([[[1.0, 3.0], [2.0, 0.0], [0.5, 1.5]]])
    q_ret = torch.tensor([[2.0, 1.0, 3.0]])
    pi = torch.softmax(logits, -1)
    values = (pi * q_values).sum(-1).detach()
    w = importance_weights(pi.detach(), mu, actions, c=1.0)
    objective = acer_policy_objective(
        log_pi=torch.log_softmax(logits, -1),
        pi=pi,
        actions=actions,
        q_ret=q_ret,
        q_values=q_values,
        values=values,
        truncated=w["truncated"],
        correction=w["correction"],
    )
    objective.sum().backward()

    # By hand: d log pi(a) / d logits = onehot(a) - pi.
    p = pi.detach().numpy()[0]
    q = q_values.numpy()[0]
    v = (p * q).sum(-1)
    rho = p / mu.numpy()[0]
    expected = np.zeros((3, 2))
    for t, a in enumerate([0, 1, 1]):
        onehot = np.eye(2)[a]
        expected[t] += (
            min(1.0, rho[t, a]) * (onehot - p[t]) * (q_ret[0, t].item() - v[t])
        )
        for b in range(2):
            coeff = max(0.0, 1.0 - 1.0 / rho[t, b])
            expected[t] += p[t, b] * coeff * (np.eye(2)[b] - p[t]) * (q[t, b] - v[t])
    # Step 1: pi(0)=0.731 over mu(0)=0.9 -> rho(1)=2.69 > 1: the correction acts.
    assert rho[1, 1] > 1.0
    np.testing.assert_allclose(logits.grad.numpy()[0], expected, rtol=1e-5, atol=1e-6)


def test_trust_region_step_keeps_linearised_kl_within_delta():
    rng = np.random.default_rng(0)
    pi = torch.softmax(torch.as_tensor(rng.normal(size=(64, 5))), -1)
    pi_avg = torch.softmax(torch.as_tensor(rng.normal(size=(64, 5))), -1)
    k = kl_gradient_wrt_probs(pi_avg, pi)
    g = torch.as_tensor(rng.normal(size=(64, 5))) * 10.0
    delta = 0.5
    z = trust_region_step(g, k, delta)
    kz = (k * z).sum(-1)
    kg = (k * g).sum(-1)
    assert (kz <= delta * (1 + 1e-6)).all()
    # Inactive constraint: z = g exactly; active: the constraint is met with equality.
    inactive = kg <= delta
    assert inactive.any() and (~inactive).any()
    assert torch.equal(z[inactive], g[inactive])
    torch.testing.assert_close(
        kz[~inactive], torch.full_like(kz[~inactive], delta), rtol=1e-6, atol=0
    )


def test_trust_region_step_bounds_the_true_kl_of_a_small_step():
    """A small step phi + lr z* moves KL(pi_avg || phi) by about lr k.z* <= lr delta;
    the raw gradient g would move it further."""
    rng = np.random.default_rng(1)
    pi_avg = torch.softmax(torch.as_tensor(rng.normal(size=(32, 4))), -1)
    phi = torch.softmax(torch.as_tensor(rng.normal(size=(32, 4))), -1)
    g = torch.as_tensor(rng.normal(size=(32, 4))) * 50.0
    delta, lr = 0.1, 1e-10
    z = trust_region_step(g, kl_gradient_wrt_probs(pi_avg, phi), delta)

    def kl(p):
        return (pi_avg * (pi_avg.log() - p.log())).sum(-1)

    growth_projected = (kl(phi + lr * z) - kl(phi)) / lr
    growth_raw = (kl(phi + lr * g) - kl(phi)) / lr
    assert (growth_projected <= delta * 1.01).all()
    assert (growth_raw > delta * 1.01).any()
