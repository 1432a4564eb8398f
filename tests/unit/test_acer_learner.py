"""ACERTorchLearner without Ray: loss terms on a hand-computed 2-action, 3-step
sequence, which parameters each loss moves, the average policy's Polyak update,
and the trust region keeping the step within delta of the average policy."""

import math

import gymnasium as gym
import numpy as np
import pytest
import ray
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from rllib_ners import ACERConfig
from rllib_ners.algorithms.acer.acer_learner import (
    ENTROPY_KEY,
    POLICY_LOSS_KEY,
    Q_LOSS_KEY,
    Q_RET_MEAN_KEY,
)
from rllib_ners.algorithms.acer.default_acer_rl_module import QF_PREDS

OBS_SPACE = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT_SPACE = gym.spaces.Discrete(2)


def make_learner(**training):
    config = (
        ACERConfig()
        .environment(observation_space=OBS_SPACE, action_space=ACT_SPACE)
        .rl_module(model_config={"fcnet_hiddens": [8], "head_fcnet_hiddens": [8]})
        .training(**training)
        .debugging(seed=0)
    )
    learner = config.build_learner(
        env=None, spaces={DEFAULT_MODULE_ID: (OBS_SPACE, ACT_SPACE)}
    )
    return config, learner


def hand_batch():
    """One sequence: 3 steps, not terminated, bootstrap observation at index 3."""
    mu = np.array([[0.5, 0.5], [0.5, 0.5], [0.25, 0.75]])
    return {
        Columns.OBS: torch.zeros(1, 4, 3),
        Columns.ACTIONS: torch.tensor([[1, 0, 1]]),
        Columns.REWARDS: torch.tensor([[2.0, 0.0, 1.0]]),
        Columns.TERMINATEDS: torch.zeros(1, 3, dtype=torch.bool),
        Columns.LOSS_MASK: torch.ones(1, 3, dtype=torch.bool),
        Columns.ACTION_DIST_INPUTS: torch.as_tensor(np.log(mu), dtype=torch.float32)[
            None
        ],
        "weights": torch.ones(1),
    }


def hand_fwd_out():
    ln3 = math.log(3.0)
    # pi: [.5, .5], [.75, .25], [.25, .75], bootstrap [.5, .5].
    logits = torch.tensor([[[0.0, 0.0], [ln3, 0.0], [0.0, ln3], [0.0, 0.0]]])
    q = torch.tensor([[[1.0, 2.0], [2.0, 0.0], [0.0, 4.0], [2.0, 2.0]]])
    return {
        Columns.ACTION_DIST_INPUTS: logits.requires_grad_(),
        QF_PREDS: q.requires_grad_(),
    }


def metrics_of(learner):
    return {
        k: float(v)
        for k, v in learner.metrics.reduce()[DEFAULT_MODULE_ID].items()
        if k in (POLICY_LOSS_KEY, Q_LOSS_KEY, ENTROPY_KEY, Q_RET_MEAN_KEY)
    }


def test_loss_terms_on_a_hand_computed_sequence():
    """gamma .5, c = retrace_c = 1. V = [1.5, 1.5, 3], V(s_3) = 2.
    Retrace backwards: Q_ret2 = 1 + .5*2 = 2, carry = 1*(2-4)+3 = 1;
    Q_ret1 = 0 + .5*1 = .5, carry = 1*(.5-2)+1.5 = 0; Q_ret0 = 2 + .5*0 = 2.
    Critic: .5 * mean((2-2)^2, (.5-2)^2, (2-4)^2) = .5 * 6.25 / 3.
    Actor: rho_taken = [1, 1.5, 1] -> truncated to [1, 1, 1];
    terms min(c,rho) log pi(a) (Q_ret - V) = .5 log .5, -1 * log .75, -1 * log .75;
    bias correction only at step 1, action 0: rho(0) = 1.5,
    pi(0) [1 - 1/1.5] log pi(0) (Q(s1,0) - V1) = .75 * 1/3 * log .75 * .5."""
    config, learner = make_learner(
        gamma=0.5,
        truncation_c=1.0,
        retrace_c=1.0,
        entropy_coeff=0.1,
        use_trust_region=False,
        q_loss_coeff=0.5,
    )
    loss = learner.compute_loss_for_module(
        module_id=DEFAULT_MODULE_ID,
        config=config,
        batch=hand_batch(),
        fwd_out=hand_fwd_out(),
    )
    log = math.log
    objective = 0.5 * log(0.5) - log(0.75) - log(0.75) + 0.75 / 3 * log(0.75) * 0.5
    h_half, h_quarter = log(2.0), -(0.75 * log(0.75) + 0.25 * log(0.25))
    entropy_sum = h_half + 2 * h_quarter
    policy_loss = -(objective + 0.1 * entropy_sum) / 3
    q_loss = 0.5 * (0.0 + 1.5**2 + 2.0**2) / 3
    m = metrics_of(learner)
    assert m[Q_RET_MEAN_KEY] == pytest.approx((2 + 0.5 + 2) / 3, abs=1e-6)
    assert m[Q_LOSS_KEY] == pytest.approx(q_loss, abs=1e-6)
    assert m[POLICY_LOSS_KEY] == pytest.approx(policy_loss, abs=1e-6)
    assert m[ENTROPY_KEY] == pytest.approx(entropy_sum / 3, abs=1e-6)
    assert float(loss.detach()) == pytest.approx(policy_loss + 0.5 * q_loss, abs=1e-6)


def test_terminal_and_padding_and_weights():
    """A terminal at the last real step stops the bootstrap; padded steps and
    zero-weight rows contribute nothing."""
    config, learner = make_learner(gamma=0.5, use_trust_region=False, entropy_coeff=0.0)
    batch = hand_batch()
    batch[Columns.TERMINATEDS] = torch.tensor([[False, True, False]])
    batch[Columns.LOSS_MASK] = torch.tensor([[True, True, False]])
    learner.compute_loss_for_module(
        module_id=DEFAULT_MODULE_ID, config=config, batch=batch, fwd_out=hand_fwd_out()
    )
    # Q_ret1 = 0 (terminal), carry = 1*(0 - 2) + 1.5 = -.5; Q_ret0 = 2 + .5 * -.5.
    m = metrics_of(learner)
    assert m[Q_RET_MEAN_KEY] == pytest.approx((1.75 + 0.0) / 2, abs=1e-6)
    assert m[Q_LOSS_KEY] == pytest.approx(
        0.5 * ((1.75 - 2) ** 2 + 2.0**2) / 2, abs=1e-6
    )

    # Doubling the batch with a zero-weight copy leaves every term unchanged
    # except the averaging over real steps, which counts the copy's steps.
    doubled = {k: torch.cat([v, v]) for k, v in batch.items()}
    doubled["weights"] = torch.tensor([1.0, 0.0])
    fwd = {k: torch.cat([v, v]).detach() for k, v in hand_fwd_out().items()}
    learner.compute_loss_for_module(
        module_id=DEFAULT_MODULE_ID, config=config, batch=doubled, fwd_out=fwd
    )
    assert metrics_of(learner)[Q_LOSS_KEY] == pytest.approx(m[Q_LOSS_KEY] / 2, abs=1e-6)


def _train_batch(rng, B=4, T=5):
    mu_logits = rng.normal(size=(B, T, 2)).astype(np.float32)
    return MultiAgentBatch(
        {
            DEFAULT_MODULE_ID: SampleBatch(
                {
                    Columns.OBS: rng.uniform(-1, 1, size=(B, T + 1, 3)).astype(
                        np.float32
                    ),
                    Columns.ACTIONS: rng.integers(0, 2, size=(B, T)),
                    Columns.REWARDS: rng.normal(size=(B, T)).astype(np.float32),
                    Columns.TERMINATEDS: np.zeros((B, T), bool),
                    Columns.LOSS_MASK: np.ones((B, T), bool),
                    Columns.ACTION_DIST_INPUTS: mu_logits,
                    "weights": np.ones(B, np.float32),
                }
            )
        },
        env_steps=B * T,
    )


def _params(net):
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def test_update_moves_average_policy_by_tau_and_q_head_only_by_the_critic(ray_down):
    config, learner = make_learner(tau=0.25, use_trust_region=False, q_loss_coeff=0.5)
    module = learner.module[DEFAULT_MODULE_ID].unwrapped()
    for net in (module._average_encoder, module._average_pi):
        for p in net.parameters():
            p.data.add_(0.3)  # make average != current
    old_avg_pi, old_pi = _params(module._average_pi), _params(module.pi)
    old_avg_enc, old_enc = _params(module._average_encoder), _params(module.encoder)
    learner.update(batch=_train_batch(np.random.default_rng(0)), timesteps={})
    assert not ray.is_initialized()
    for avg_old, cur_old, avg_net, cur_net in (
        (old_avg_pi, old_pi, module._average_pi, module.pi),
        (old_avg_enc, old_enc, module._average_encoder, module.encoder),
    ):
        new_cur, new_avg = cur_net.state_dict(), avg_net.state_dict()
        for key in avg_old:
            assert not torch.equal(new_cur[key], cur_old[key]), key  # it learned
            torch.testing.assert_close(
                new_avg[key], 0.25 * new_cur[key] + 0.75 * avg_old[key]
            )
    assert all(not p.requires_grad for p in module._average_pi.parameters())


def test_critic_loss_has_no_gradient_into_policy_head():
    """loss(q_loss_coeff=2) - loss(q_loss_coeff=1) is the critic loss alone."""
    config, learner = make_learner(use_trust_region=False, entropy_coeff=0.0)
    module = learner.module[DEFAULT_MODULE_ID].unwrapped()
    batch = {
        k: torch.as_tensor(v)
        for k, v in _train_batch(np.random.default_rng(1))
        .policy_batches[DEFAULT_MODULE_ID]
        .items()
    }
    fwd = module.forward_train(batch)
    losses = [
        learner.compute_loss_for_module(
            module_id=DEFAULT_MODULE_ID,
            config=config.copy(copy_frozen=False).training(q_loss_coeff=coeff),
            batch=batch,
            fwd_out=fwd,
        )
        for coeff in (1.0, 2.0)
    ]
    critic = losses[1] - losses[0]
    critic.backward()
    pi_grad = torch.cat([p.grad.flatten() for p in module.pi.parameters()])
    q_grad = torch.cat([p.grad.flatten() for p in module.qf.parameters()])
    assert pi_grad.abs().max() < 1e-6 < q_grad.abs().max()


def test_policy_loss_has_no_gradient_into_q_head():
    config, learner = make_learner(use_trust_region=True, q_loss_coeff=1e-9)
    module = learner.module[DEFAULT_MODULE_ID].unwrapped()
    batch = {
        k: torch.as_tensor(v)
        for k, v in _train_batch(np.random.default_rng(2))
        .policy_batches[DEFAULT_MODULE_ID]
        .items()
    }
    loss = learner.compute_loss_for_module(
        module_id=DEFAULT_MODULE_ID,
        config=config,
        batch=batch,
        fwd_out=module.forward_train(batch),
    )
    loss.backward()
    q_grad = torch.cat([p.grad.flatten() for p in module.qf.parameters()])
    pi_grad = torch.cat([p.grad.flatten() for p in module.pi.parameters()])
    assert q_grad.abs().max() < 1e-6 < pi_grad.abs().max()


@pytest.mark.parametrize("delta", [1e-3, 0.1])
def test_trust_region_step_is_what_the_surrogate_applies(delta, monkeypatch):
    """The learner projects g with k = -pi_avg/pi, keeps k . z* <= delta per step,
    and its surrogate's gradient w.r.t. the logits is that of -z* . pi / N."""
    from rllib_ners.algorithms.acer.torch import acer_torch_learner

    seen = {}
    original = acer_torch_learner.trust_region_step

    def recording(g, k, d):
        seen["g"], seen["k"] = g, k
        seen["z"] = original(g, k, d)
        return seen["z"]

    monkeypatch.setattr(acer_torch_learner, "trust_region_step", recording)
    config, learner = make_learner(
        use_trust_region=True,
        trust_region_delta=delta,
        entropy_coeff=0.01,
        q_loss_coeff=1e-12,
    )
    module = learner.module[DEFAULT_MODULE_ID].unwrapped()
    for p in module._average_pi.parameters():
        p.data.add_(0.5)  # an average policy away from the current one
    batch = {
        k: torch.as_tensor(v)
        for k, v in _train_batch(np.random.default_rng(3), B=8)
        .policy_batches[DEFAULT_MODULE_ID]
        .items()
    }
    fwd = module.forward_train(batch)
    logits = fwd[Columns.ACTION_DIST_INPUTS]
    loss = learner.compute_loss_for_module(
        module_id=DEFAULT_MODULE_ID, config=config, batch=batch, fwd_out=fwd
    )
    (grad_logits,) = torch.autograd.grad(loss, logits)
    z, k, g = seen["z"], seen["k"], seen["g"]
    with torch.no_grad():
        pi_avg = torch.softmax(
            module.forward_target({Columns.OBS: batch[Columns.OBS][:, :-1]})[
                "target_network_action_dist_inputs"
            ],
            -1,
        )
        pi = torch.softmax(logits[:, :-1], -1)
        # d KL(pi_avg || pi) / d pi, written out (the Learner's epsilon aside).
        torch.testing.assert_close(k, -pi_avg / pi, rtol=1e-5, atol=1e-6)
        assert ((k * z).sum(-1) <= delta * (1 + 1e-3) + 1e-6).all()  # float32
        assert ((k * g).sum(-1) > delta).any(), "the constraint should bind somewhere"
        # d(-z.pi/N)/d logits = -pi * (z - sum(pi z)) / N.
        n = batch[Columns.LOSS_MASK].sum()
        expected = -pi * (z - (pi * z).sum(-1, keepdim=True)) / n
    torch.testing.assert_close(grad_logits[:, :-1], expected, rtol=1e-4, atol=1e-6)


def test_trust_region_keeps_the_updated_policy_closer_to_the_average():
    """Same start, same batch, one small gradient step on the policy loss, with
    the average policy far *behind* (params + 2 * gradient, as if the policy had
    been moving this way for a while): KL(average || new policy) then grows
    without a trust region and grows far less with a tight one."""

    def kl_growth(use_trust_region):
        torch.manual_seed(0)
        config, learner = make_learner(
            use_trust_region=use_trust_region,
            trust_region_delta=1e-3,
            entropy_coeff=0.0,
            q_loss_coeff=1e-12,
        )
        module = learner.module[DEFAULT_MODULE_ID].unwrapped()
        batch = {
            k: torch.as_tensor(v)
            for k, v in _train_batch(np.random.default_rng(4), B=16)
            .policy_batches[DEFAULT_MODULE_ID]
            .items()
        }
        obs = batch[Columns.OBS][:, :-1]
        pairs = [
            (module.encoder, module._average_encoder),
            (module.pi, module._average_pi),
        ]
        params = [p for net, _ in pairs for p in net.parameters()]
        averages = [p for _, avg in pairs for p in avg.parameters()]

        def policy_gradient(cfg):
            loss = learner.compute_loss_for_module(
                module_id=DEFAULT_MODULE_ID,
                config=cfg,
                batch=batch,
                fwd_out=module.forward_train(batch),
            )
            return torch.autograd.grad(loss, params)

        plain = config.copy(copy_frozen=False).training(use_trust_region=False)
        behind = policy_gradient(plain)
        with torch.no_grad():
            for avg, param, grad in zip(averages, params, behind):
                avg.copy_(param + 2.0 * grad)  # far behind: KL is first-order

        def kl():
            with torch.no_grad():
                pi = torch.softmax(
                    module.forward_train({Columns.OBS: obs})[
                        Columns.ACTION_DIST_INPUTS
                    ],
                    -1,
                )
                avg = torch.softmax(
                    module.forward_target({Columns.OBS: obs})[
                        "target_network_action_dist_inputs"
                    ],
                    -1,
                )
                return float((avg * (avg.log() - pi.log())).sum(-1).mean())

        before = kl()
        grads = policy_gradient(config)
        with torch.no_grad():
            for param, grad in zip(params, grads):
                param -= 0.05 * grad
        return kl() - before

    unconstrained, constrained = kl_growth(False), kl_growth(True)
    assert unconstrained > 0
    assert constrained < 0.5 * unconstrained


def _acer_module(**model_config):
    config = ACERConfig().environment("CartPole-v1")
    spec = config.rl_module(model_config=model_config).get_rl_module_spec(
        env=gym.make("CartPole-v1")
    )
    return spec.build()


def test_the_heads_take_the_head_initializers_and_refuse_layer_norm():
    module = _acer_module(
        fcnet_hiddens=[8],
        head_fcnet_hiddens=[8],
        head_fcnet_kernel_initializer="zeros_",
        head_fcnet_bias_initializer="constant_",
        head_fcnet_bias_initializer_kwargs={"val": 0.5},
    )
    heads = [
        layer
        for head in (module.pi, module.qf)
        for layer in head.modules()
        if isinstance(layer, torch.nn.Linear)
    ]
    assert len(heads) == 4
    for layer in heads:
        assert torch.count_nonzero(layer.weight) == 0
        assert torch.all(layer.bias == 0.5)
    with pytest.raises(ValueError, match="head_fcnet_use_layernorm"):
        _acer_module(head_fcnet_use_layernorm=True)
