"""Rainbow RLModule, its learner and config: each extension checked on crafted inputs.

The loss is RLlib's `DQNTorchLearner` loss run on our module's outputs, so the C51
projection, the double-Q target and the n-step discount are checked through the
learner itself against NumPy references. No Ray cluster is started.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.dqn.default_dqn_rl_module import (
    ATOMS,
    QF_LOGITS,
    QF_NEXT_PREDS,
    QF_PREDS,
    QF_PROBS,
    QF_TARGET_NEXT_PREDS,
    QF_TARGET_NEXT_PROBS,
)
from ray.rllib.algorithms.dqn.torch.default_dqn_torch_rl_module import (
    DefaultDQNTorchRLModule,
)
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.base import ENCODER_OUT
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.metrics import TD_ERROR_KEY
from ray.rllib.utils.schedules.scheduler import Scheduler

from rllib_ners import (
    FastPrioritizedEpisodeReplayBuffer,
    NERSDQNConfig,
    NoisyLinear,
    RainbowDQNConfig,
    RainbowTorchRLModule,
)
from rllib_ners.algorithms.rainbow.presets import cartpole_dqn
from rllib_ners.algorithms.rainbow.torch.rainbow_torch_rl_module import (
    NEXT_OBS_ENCODER_OUT,
    OBS_ENCODER_OUT,
)

MID = "default_policy"
OBS_SPACE = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT_SPACE = gym.spaces.Discrete(3)
IMG_SPACE = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
GAMMA = 0.9


def _module(space=OBS_SPACE, **model_config) -> RainbowTorchRLModule:
    module = RainbowTorchRLModule(
        observation_space=space,
        action_space=ACT_SPACE,
        model_config={"fcnet_hiddens": [16], "head_fcnet_hiddens": [8], **model_config},
    )
    module.make_target_networks()
    return module


def _target(module: RainbowTorchRLModule, online: torch.nn.Module) -> torch.nn.Module:
    """The target copy of `online` (RLlib's `TargetNetworkAPI`)."""
    (target,) = [t for o, t in module.get_target_network_pairs() if o is online]
    return target


def _optimizer(learner) -> torch.optim.Optimizer:
    """The Learner's one optimizer."""
    ((_, optimizer),) = learner.get_optimizers_for_module(MID)
    return optimizer


def _learner(**training):
    config = (
        RainbowDQNConfig()
        .environment("CartPole-v1")
        .training(gamma=GAMMA, **training)
        .rl_module(model_config={"fcnet_hiddens": [16], "head_fcnet_hiddens": [8]})
    )
    return config.build_learner(env=gym.make("CartPole-v1"))


def _loss(learner, batch, fwd_out):
    """RLlib's DQN loss on `fwd_out`, plus the TD errors it logged."""
    learner.metrics.delete(MID, TD_ERROR_KEY, key_error=False)
    loss = learner.compute_loss_for_module(
        module_id=MID,
        config=learner.config.get_config_for_module(MID),
        batch=batch,
        fwd_out=fwd_out,
    )
    td = np.concatenate(
        [np.ravel(x) for x in learner.metrics.peek((MID, TD_ERROR_KEY))]
    )
    return loss, td


def _obs(n, seed=0):
    return torch.as_tensor(
        np.random.default_rng(seed).uniform(-1, 1, (n, 4)), dtype=torch.float32
    )


# ------------------------------------------------------------------ noisy nets
def test_noisy_linear_init_and_factorised_noise():
    torch.manual_seed(0)
    layer = NoisyLinear(16, 5, sigma0=0.5)
    bound = 1 / np.sqrt(16)
    assert torch.all(layer.weight_mu.abs() <= bound)
    torch.testing.assert_close(layer.weight_sigma, torch.full((5, 16), 0.5 * bound))
    torch.testing.assert_close(layer.bias_sigma, torch.full((5,), 0.5 * bound))
    weight, bias = layer.noisy_weight_and_bias()
    # eps_w = f(eps_out) f(eps_in)^T: rank one, built from sign(x) sqrt(|x|) draws.
    eps_w = ((weight - layer.weight_mu) / layer.weight_sigma).detach()
    assert torch.linalg.matrix_rank(eps_w) == 1
    torch.testing.assert_close(eps_w, torch.outer(layer.eps_out, layer.eps_in))
    torch.testing.assert_close(
        ((bias - layer.bias_mu) / layer.bias_sigma).detach(), layer.eps_out
    )
    x = torch.randn(3, 16)
    torch.testing.assert_close(
        layer(x, noise=False), x @ layer.weight_mu.T + layer.bias_mu
    )
    # Noise is not state: checkpoints and weight syncs never carry it.
    assert set(layer.state_dict()) == {
        "weight_mu",
        "weight_sigma",
        "bias_mu",
        "bias_sigma",
    }


def test_noisy_weights_change_between_resets_and_sigmas_get_gradients():
    learner = _learner(noisy=True, num_atoms=11, v_min=-5.0, v_max=5.0, n_step=2)
    module = learner.module[MID]
    noisy = [m for m in module.modules() if isinstance(m, NoisyLinear)]
    # Two layers in each of the online value and advantage streams, and as many
    # in the target streams.
    assert len(noisy) == 8
    online = [m for m in module.af.modules() if isinstance(m, NoisyLinear)]
    w1 = online[0].noisy_weight_and_bias()[0].detach().clone()
    module.reset_noise()
    w2 = online[0].noisy_weight_and_bias()[0].detach().clone()
    assert not torch.equal(w1, w2)

    obs = _obs(8)
    batch = {
        Columns.OBS: obs,
        Columns.NEXT_OBS: obs.flip(0),
        Columns.ACTIONS: torch.tensor([0, 1] * 4),
        Columns.REWARDS: torch.linspace(-1, 1, 8),
        Columns.TERMINATEDS: torch.tensor([False] * 7 + [True]),
        "n_step": torch.full((8,), 2),
        "weights": torch.ones(8),
    }
    fwd_out = module.forward_train(batch)
    loss, _ = _loss(learner, batch, fwd_out)
    loss.backward()
    for stream in (module.af, module.vf):
        for layer in stream.noisy_layers():
            for sigma in (layer.weight_sigma, layer.bias_sigma):
                assert sigma.grad is not None and sigma.grad.abs().sum() > 0
    for stream in (_target(module, module.af), _target(module, module.vf)):
        for layer in stream.noisy_layers():
            assert layer.weight_sigma.grad is None


@pytest.mark.parametrize("rows", [1, 3, 4, 5, 64])
def test_noisy_layer_paths_agree_in_values_and_gradients(rows):
    """Few rows take the factorised path (no weight matrix), many rows the
    weight matrix: both compute (mu + sigma * eps_out eps_in^T) x + b."""
    torch.manual_seed(0)
    layer = NoisyLinear(7, 5, sigma0=0.5)
    torch.nn.init.normal_(layer.weight_sigma)
    x = torch.randn(rows, 7)
    out = layer(x)
    weight, bias = layer.noisy_weight_and_bias()
    expected = x @ weight.T + bias
    torch.testing.assert_close(out, expected)
    grads = torch.autograd.grad(out.sum(), list(layer.parameters()))
    expected_grads = torch.autograd.grad(expected.sum(), list(layer.parameters()))
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want)


def test_reused_noisy_weights_are_built_once_and_never_stand_in_for_gradients():
    from rllib_ners.algorithms.rainbow.noisy_linear import noisy_weights_reused

    torch.manual_seed(0)
    layer = NoisyLinear(7, 5, sigma0=0.5)
    x = torch.randn(6, 7)
    built = []
    plain_build = layer.noisy_weight_and_bias
    layer.noisy_weight_and_bias = lambda: built.append(1) or plain_build()
    with noisy_weights_reused([layer]):
        with torch.no_grad():
            first = layer(x)
        assert not first.requires_grad and len(built) == 1
        # Gradients on: a weight built without them is built again.
        second = layer(x)
        assert second.requires_grad and len(built) == 2
        with torch.no_grad():
            third = layer(x)
        assert len(built) == 2
        assert torch.equal(first, second.detach()) and torch.equal(first, third)
    layer(x)  # outside the block: built per pass again
    assert len(built) == 3 and layer._held_weights is None


@pytest.mark.parametrize("double_q", [True, False])
def test_train_forward_builds_each_online_noisy_weight_once_with_equal_results(
    monkeypatch, double_q
):
    """The online passes on s_t and s_{t+n} share one noisy weight per layer:
    the same outputs and gradients, bit for bit, as a weight built per pass."""
    import contextlib

    from rllib_ners.algorithms.rainbow.torch import rainbow_torch_rl_module

    torch.manual_seed(3)
    module = _module(noisy=True, num_atoms=5, v_min=-2.0, v_max=2.0, double_q=double_q)
    module.reset_noise()
    module.reset_noise(target=True)
    batch = {Columns.OBS: _obs(9, seed=1), Columns.NEXT_OBS: _obs(9, seed=2)}
    online = module._noisy_layers()
    built = []
    plain_build = NoisyLinear.noisy_weight_and_bias

    def counted(layer):
        built.append(layer)
        return plain_build(layer)

    monkeypatch.setattr(NoisyLinear, "noisy_weight_and_bias", counted)

    def one_pass():
        built.clear()
        module.zero_grad(set_to_none=True)
        out = module._forward_train_stateless(batch)
        out[QF_PREDS].square().sum().backward()
        grads = {
            name: p.grad.clone()
            for name, p in module.named_parameters()
            if p.grad is not None
        }
        online_builds = sum(any(layer is o for o in online) for layer in built)
        return out, grads, online_builds

    reused, reused_grads, reused_builds = one_pass()
    monkeypatch.setattr(
        rainbow_torch_rl_module,
        "noisy_weights_reused",
        lambda layers: contextlib.nullcontext(),
    )
    per_pass, per_pass_grads, per_pass_builds = one_pass()
    assert reused_builds == len(online)
    assert per_pass_builds == len(online) * (2 if double_q else 1)
    assert set(reused) == set(per_pass)
    for key in reused:
        assert torch.equal(reused[key], per_pass[key]), key
    assert set(reused_grads) == set(per_pass_grads) and reused_grads
    for name in reused_grads:
        assert torch.equal(reused_grads[name], per_pass_grads[name]), name


def test_forward_train_draws_fresh_noise_and_the_target_its_own():
    module = _module(noisy=True)
    obs = _obs(6)
    batch = {Columns.OBS: obs, Columns.NEXT_OBS: obs}
    first = module.forward_train(batch)
    online_eps = module.af.layers[0].eps_in.clone()
    target_eps = _target(module, module.af).layers[0].eps_in.clone()
    second = module.forward_train(batch)
    assert not torch.allclose(first[QF_PREDS], second[QF_PREDS])
    assert not torch.allclose(first[QF_TARGET_NEXT_PREDS], second[QF_TARGET_NEXT_PREDS])
    assert not torch.equal(online_eps, module.af.layers[0].eps_in)
    assert not torch.equal(target_eps, _target(module, module.af).layers[0].eps_in)
    # Same weights (the target was just copied) but independent noise.
    assert not torch.equal(online_eps, target_eps)
    # The online net uses one draw for s_t and s_{t+n} (the double-Q argmax):
    # with next_obs == obs both halves agree exactly.
    torch.testing.assert_close(second[QF_PREDS], second[QF_NEXT_PREDS])


def test_noisy_acting_is_greedy_on_noisy_q_and_ignores_epsilon():
    # epsilon=1 would make every action random in an epsilon-greedy module.
    module = _module(noisy=True, std_init=2.0, epsilon=[(0, 1.0), (1, 1.0)])
    obs = _obs(256, seed=1)
    actions_per_call = []
    for _ in range(3):
        actions = module.forward_exploration({Columns.OBS: obs}, t=0)[Columns.ACTIONS]
        # The noise just drawn is still in the layers: recompute the noisy Q.
        q = module.compute_q_values({Columns.OBS: obs})[QF_PREDS]
        assert torch.equal(actions, q.argmax(-1))
        actions_per_call.append(actions)
    # Fresh noise at every acting call changes some greedy actions.
    assert not torch.equal(actions_per_call[0], actions_per_call[1])

    plain = _module(noisy=False, epsilon=[(0, 1.0), (1, 1.0)])
    actions = plain.forward_exploration({Columns.OBS: obs}, t=0)[Columns.ACTIONS]
    greedy = plain.compute_q_values({Columns.OBS: obs})[QF_PREDS].argmax(-1)
    assert (actions != greedy).float().mean() > 0.2  # random actions


def test_evaluation_is_deterministic_with_noisy_nets():
    module = _module(noisy=True, std_init=2.0, num_atoms=7)
    obs = _obs(64, seed=2)
    module.forward_exploration({Columns.OBS: obs}, t=0)
    first = module.forward_inference({Columns.OBS: obs})[Columns.ACTIONS]
    q_mean = module._qf_forward_helper(
        {Columns.OBS: obs}, module.encoder, module._heads(target=False), noise=False
    )[QF_PREDS]
    for _ in range(3):
        module.forward_exploration({Columns.OBS: obs}, t=0)
        module.reset_noise()
        assert torch.equal(
            module.forward_inference({Columns.OBS: obs})[Columns.ACTIONS], first
        )
    assert torch.equal(first, q_mean.argmax(-1))
    # The mean network really drops sigma: zeroing every sigma changes nothing.
    with torch.no_grad():
        for layer in module.af.noisy_layers() + module.vf.noisy_layers():
            layer.weight_sigma.zero_()
            layer.bias_sigma.zero_()
    noiseless = module.compute_q_values({Columns.OBS: obs})[QF_PREDS]
    torch.testing.assert_close(noiseless, q_mean)


# --------------------------------------------------------------------- dueling
@pytest.mark.parametrize("num_atoms", [1, 5])
def test_dueling_subtracts_the_mean_advantage(num_atoms):
    module = _module(dueling=True, num_atoms=num_atoms, v_min=-2.0, v_max=2.0)
    obs = _obs(10, seed=3)
    out = module.compute_q_values({Columns.OBS: obs})
    with torch.no_grad():
        features = module.encoder({Columns.OBS: obs})[ENCODER_OUT]
        adv = module.af(features).view(10, 3, num_atoms).numpy()
        value = module.vf(features).view(10, 1, num_atoms).numpy()
    expected = value + adv - adv.mean(axis=1, keepdims=True)
    if num_atoms == 1:
        np.testing.assert_allclose(
            out[QF_PREDS].detach().numpy(), expected[..., 0], rtol=1e-5, atol=1e-6
        )
    else:
        # Per atom: logits[a, z] = V[z] + A[a, z] - mean_a' A[a', z].
        np.testing.assert_allclose(
            out[QF_LOGITS].detach().numpy(), expected, rtol=1e-5, atol=1e-6
        )
        probs = np.exp(expected) / np.exp(expected).sum(-1, keepdims=True)
        atoms = np.linspace(-2.0, 2.0, num_atoms)
        np.testing.assert_allclose(
            out[QF_PREDS].detach().numpy(),
            (probs * atoms).sum(-1),
            rtol=1e-5,
            atol=1e-6,
        )
    # Shifting every advantage by the same amount leaves Q unchanged.
    with torch.no_grad():
        module.af.layers[-1].bias += 3.0
    shifted = module.compute_q_values({Columns.OBS: obs})[QF_PREDS]
    torch.testing.assert_close(shifted, out[QF_PREDS], rtol=1e-5, atol=1e-5)


def test_without_dueling_the_advantage_stream_is_the_q_stream():
    module = _module(dueling=False)
    assert not hasattr(module, "vf")
    obs = _obs(5)
    with torch.no_grad():
        expected = module.af(module.encoder({Columns.OBS: obs})[ENCODER_OUT])
    torch.testing.assert_close(
        module.compute_q_values({Columns.OBS: obs})[QF_PREDS], expected
    )


# -------------------------------------------------------------------- double Q
def _crafted_fwd_out(q_curr, q_next_online, q_target_next):
    return {
        QF_PREDS: torch.tensor(q_curr, dtype=torch.float32),
        QF_NEXT_PREDS: torch.tensor(q_next_online, dtype=torch.float32),
        QF_TARGET_NEXT_PREDS: torch.tensor(q_target_next, dtype=torch.float32),
    }


@pytest.mark.parametrize("double_q", [True, False])
def test_double_q_evaluates_the_online_argmax_with_the_target(double_q):
    learner = _learner(double_q=double_q, td_error_loss_fn="mse")
    q_curr = [[1.0, 2.0], [0.5, -0.5], [3.0, 0.0]]
    # Online argmax at s' is 0, 1, 0; the target's own argmax is 1, 0, 1.
    q_next_online = [[9.0, 1.0], [0.0, 5.0], [2.0, 1.0]]
    q_target_next = [[1.0, 4.0], [7.0, 2.0], [-1.0, 3.0]]
    batch = {
        Columns.ACTIONS: torch.tensor([1, 0, 0]),
        Columns.REWARDS: torch.tensor([0.5, 1.0, -2.0]),
        Columns.TERMINATEDS: torch.tensor([False, False, True]),
        "n_step": torch.tensor([1, 3, 2]),
        "weights": torch.ones(3),
    }
    _, td = _loss(
        learner, batch, _crafted_fwd_out(q_curr, q_next_online, q_target_next)
    )
    tgt = np.array(q_target_next)
    if double_q:
        next_value = tgt[np.arange(3), np.argmax(q_next_online, axis=1)]
    else:
        next_value = tgt.max(axis=1)
    n = np.array([1, 3, 2])
    not_done = np.array([1.0, 1.0, 0.0])
    y = np.array([0.5, 1.0, -2.0]) + GAMMA**n * not_done * next_value
    q_sel = np.array([2.0, 0.5, 3.0])
    np.testing.assert_allclose(td, np.abs(q_sel - y), rtol=1e-6)


def test_module_feeds_online_next_q_and_target_next_q():
    module = _module(noisy=False, double_q=True)
    with torch.no_grad():  # make online and target differ
        for p in module.af.parameters():
            p.add_(0.3)
    obs, next_obs = _obs(6, seed=4), _obs(6, seed=5)
    out = module.forward_train({Columns.OBS: obs, Columns.NEXT_OBS: next_obs})
    online_next = module.compute_q_values({Columns.OBS: next_obs})[QF_PREDS]
    target_next = module.forward_target({Columns.OBS: next_obs})[QF_PREDS]
    torch.testing.assert_close(out[QF_NEXT_PREDS], online_next)
    torch.testing.assert_close(out[QF_TARGET_NEXT_PREDS], target_next)
    assert not torch.allclose(online_next, target_next)


@pytest.mark.parametrize("double_q", [True, False])
def test_train_forward_returns_detached_encodings_only_in_training(double_q):
    module = _module(noisy=True, double_q=double_q)
    obs, next_obs = _obs(5, seed=6), _obs(5, seed=7)
    out = module.forward_train({Columns.OBS: obs, Columns.NEXT_OBS: next_obs})
    with torch.no_grad():
        expected_obs = module.encoder({Columns.OBS: obs})[ENCODER_OUT]
        expected_next = module.encoder({Columns.OBS: next_obs})[ENCODER_OUT]
    torch.testing.assert_close(out[OBS_ENCODER_OUT], expected_obs)
    assert not out[OBS_ENCODER_OUT].requires_grad
    if double_q:  # s_t+n went through the online encoder anyway
        torch.testing.assert_close(out[NEXT_OBS_ENCODER_OUT], expected_next)
        assert not out[NEXT_OBS_ENCODER_OUT].requires_grad
    else:  # only the target net saw s_t+n: its encoding is not the online one
        assert NEXT_OBS_ENCODER_OUT not in out
    for acting in (
        module.forward_exploration({Columns.OBS: obs}, t=0),
        module.forward_inference({Columns.OBS: obs}),
    ):
        assert set(acting) == {Columns.ACTIONS}


@pytest.mark.parametrize(
    "training",
    [
        {"noisy": True, "num_atoms": 11, "v_min": -5.0, "v_max": 5.0},
        {"noisy": True, "num_atoms": 1, "dueling": False},
        {"noisy": False, "num_atoms": 1, "double_q": False},
        {
            "noisy": False,
            "num_atoms": 11,
            "v_min": -5.0,
            "v_max": 5.0,
            "dueling": False,
        },
    ],
)
def test_train_forward_equals_rllibs_concatenated_pass_in_values_and_gradients(
    training,
):
    """Our training forward keeps s_{t+n} out of autograd; RLlib's runs the online
    net on [s_t; s_{t+n}] with gradients. Same noise, same outputs, same loss,
    same gradients in every parameter (the s_{t+n} half only feeds an argmax
    and the detached targets)."""
    learner = _learner(n_step=2, **training)
    module = learner.module[MID]
    with torch.no_grad():  # online and target nets differ
        for p in module.af.parameters():
            p.add_(0.05 * torch.randn_like(p))
    B = 7
    batch = {
        Columns.OBS: _obs(B, seed=8),
        Columns.NEXT_OBS: _obs(B, seed=9),
        Columns.ACTIONS: torch.as_tensor([0, 1, 1, 0, 1, 0, 1]),
        Columns.REWARDS: torch.linspace(-1.0, 2.0, B),
        Columns.TERMINATEDS: torch.as_tensor([0, 0, 1, 0, 0, 0, 1], dtype=torch.bool),
        "n_step": torch.as_tensor([1, 2, 1, 2, 2, 1, 1]),
        "weights": torch.linspace(0.5, 1.5, B),
    }
    results = []
    for forward in ("ours", "rllib"):
        module.zero_grad(set_to_none=True)
        if forward == "ours":
            fwd_out = module.forward_train(batch)  # draws this update's noise
        else:  # same noise: RLlib's forward does not redraw it
            fwd_out = DefaultDQNTorchRLModule._forward_train(module, batch)
            for key in (QF_LOGITS, QF_PROBS):
                if key in fwd_out:
                    fwd_out[key] = fwd_out[key][:B]
        loss, td = _loss(learner, batch, fwd_out)
        loss.backward()
        grads = {
            name: p.grad.clone()
            for name, p in module.named_parameters()
            if p.grad is not None
        }
        results.append((fwd_out, loss.detach(), td, grads))
    (ours, loss, td, grads), (rllib, loss_ref, td_ref, grads_ref) = results
    # Ours also hands out the encodings (tested on their own above).
    ours = {
        key: value
        for key, value in ours.items()
        if key not in (OBS_ENCODER_OUT, NEXT_OBS_ENCODER_OUT)
    }
    assert set(ours) == set(rllib)
    for key in ours:
        torch.testing.assert_close(ours[key], rllib[key], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(loss, loss_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(td, td_ref, rtol=1e-5, atol=1e-6)
    assert set(grads) == set(grads_ref)
    # Only online parameters receive gradients, and all of them do.
    assert grads and not any(name.startswith("_target") for name in grads)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, grads_ref[name], rtol=1e-5, atol=1e-6)
    # Nothing in the s_{t+n} outputs can carry a gradient.
    assert not ours[QF_TARGET_NEXT_PREDS].requires_grad
    if QF_NEXT_PREDS in ours:
        assert not ours[QF_NEXT_PREDS].requires_grad


def test_one_noise_draw_serves_all_layers_with_independent_entries():
    from rllib_ners.algorithms.rainbow.noisy_linear import reset_noise_of

    layers = [NoisyLinear(6, 4), NoisyLinear(4, 3), NoisyLinear(3, 2)]
    torch.manual_seed(3)
    reset_noise_of(layers)
    torch.manual_seed(3)
    draw = torch.randn(6 + 4 + 4 + 3 + 3 + 2)
    expected = (draw.sign() * draw.abs().sqrt()).split([6, 4, 4, 3, 3, 2])
    for layer, eps_in, eps_out in zip(layers, expected[0::2], expected[1::2]):
        torch.testing.assert_close(layer.eps_in, eps_in)
        torch.testing.assert_close(layer.eps_out, eps_out)
    before = [layer.eps_in.clone() for layer in layers]
    reset_noise_of(layers)
    assert all(not torch.equal(b, layer.eps_in) for b, layer in zip(before, layers))


# ------------------------------------------------------------------------- C51
def project_numpy(rewards, discounts, probs, v_min, v_max):
    """Bellemare et al. (2017), Algorithm 1: project r + discount * z onto z."""
    num_atoms = probs.shape[-1]
    z = np.linspace(v_min, v_max, num_atoms)
    dz = (v_max - v_min) / (num_atoms - 1)
    m = np.zeros_like(probs)
    for i in range(len(rewards)):
        for j in range(num_atoms):
            tz = np.clip(rewards[i] + discounts[i] * z[j], v_min, v_max)
            b = (tz - v_min) / dz
            lo, hi = int(np.floor(b)), int(np.ceil(b))
            if lo == hi:
                m[i, lo] += probs[i, j]
            else:
                m[i, lo] += probs[i, j] * (hi - b)
                m[i, hi] += probs[i, j] * (b - lo)
    return m


@pytest.mark.parametrize("dueling", [True, False])
def test_c51_projection_of_rllibs_loss_on_our_outputs_matches_numpy(dueling):
    v_min, v_max, num_atoms = -10.0, 10.0, 51
    learner = _learner(
        num_atoms=num_atoms, v_min=v_min, v_max=v_max, double_q=True, dueling=dueling
    )
    module = learner.module[MID]
    # Returns inside the support, far outside on both sides (clipped), exactly on
    # atoms, and terminal transitions (all mass on the projected reward).
    rewards = np.array([0.3, 25.0, -40.0, 2.0, -9.9, 1.234, 0.0, 10.0], np.float32)
    terminated = np.array([0, 0, 0, 1, 0, 1, 0, 0], bool)
    n_step = np.array([1, 3, 1, 2, 5, 1, 3, 1])
    actions = np.array([0, 1, 1, 0, 1, 0, 0, 1])
    B = len(rewards)
    obs, next_obs = _obs(B, seed=6), _obs(B, seed=7)
    weights = np.linspace(0.5, 1.5, B).astype(np.float32)
    batch = {
        Columns.OBS: obs,
        Columns.NEXT_OBS: next_obs,
        Columns.ACTIONS: torch.as_tensor(actions),
        Columns.REWARDS: torch.as_tensor(rewards),
        Columns.TERMINATEDS: torch.as_tensor(terminated),
        "n_step": torch.as_tensor(n_step),
        "weights": torch.as_tensor(weights),
    }
    fwd_out = module.forward_train(batch)
    assert fwd_out[QF_LOGITS].shape == (B, 2, num_atoms)
    fwd_out[QF_LOGITS].retain_grad()
    loss, td = _loss(learner, batch, fwd_out)
    loss.backward()

    # Reference: next action = online argmax, distribution = target's at it.
    next_action = fwd_out[QF_NEXT_PREDS].argmax(-1).numpy()
    target_probs = (
        fwd_out[QF_TARGET_NEXT_PROBS].detach().numpy()[np.arange(B), next_action]
    )
    discounts = GAMMA**n_step * (1.0 - terminated)
    m_ref = project_numpy(
        rewards.astype(np.float64),
        discounts,
        target_probs.astype(np.float64),
        v_min,
        v_max,
    )
    np.testing.assert_allclose(m_ref.sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(
        fwd_out[ATOMS].numpy(), np.linspace(v_min, v_max, num_atoms), atol=1e-6
    )

    # The loss is mean_i w_i CE(logits_i[a_i], m_i); its gradient in the selected
    # logits is w_i (softmax - m_i) / B, which recovers RLlib's projected m_i.
    logits_sel = fwd_out[QF_LOGITS].detach()[np.arange(B), actions]
    grad_sel = fwd_out[QF_LOGITS].grad[np.arange(B), actions].numpy()
    m_rllib = torch.softmax(logits_sel, -1).numpy() - grad_sel * B / weights[:, None]
    np.testing.assert_allclose(m_rllib, m_ref, atol=2e-5)
    # Terminal rows: all mass on the two atoms around the reward (2.0 is an atom).
    assert m_ref[3, 30] == pytest.approx(1.0)
    # Clipped rows: 25 + ... > v_max puts everything on the top atom.
    assert m_ref[1, -1] == pytest.approx(1.0)
    assert m_ref[2, 0] == pytest.approx(1.0)
    # The logged TD error is the per-sample cross-entropy (used as PER priority).
    log_p = torch.log_softmax(logits_sel, -1).numpy()
    np.testing.assert_allclose(td, -(m_ref * log_p).sum(-1), rtol=1e-4)


# ---------------------------------------------------------------------- n-step
def test_n_step_targets_use_gamma_to_the_n_and_stop_at_terminals():
    """Our buffer's n-step returns + RLlib's learner target on a crafted episode:
    y_t = sum_k<n' g^k r_{t+k} + g^n' (1 - term) Q_target(s_{t+n'}), with n' the
    steps actually taken (shorter at the terminal end)."""
    rewards = [1.0, 2.0, 4.0, 8.0, 16.0]
    episode = SingleAgentEpisode(
        observations=[np.array([t, 0, 0, 0], np.float32) for t in range(6)],
        actions=[0] * 5,
        rewards=rewards,
        terminated=True,
        observation_space=gym.spaces.Box(-10, 10, (4,), np.float32),
        action_space=gym.spaces.Discrete(2),
        len_lookback_buffer=0,
    )
    buffer = FastPrioritizedEpisodeReplayBuffer(capacity=100, alpha=0.0, seed=0)
    buffer.add([episode])
    sample = buffer.sample_batch(400, n_step=3, gamma=GAMMA)
    t = sample["obs"][:, 0].astype(int)
    assert set(t) == {0, 1, 2, 3, 4}
    # Q_target(s') = 100 + index of s' (distinct per next state), Q(s, a) = 0.
    next_t = sample["new_obs"][:, 0]
    q_target_next = np.stack([100.0 + next_t, 100.0 + next_t], axis=1)
    learner = _learner(double_q=False, td_error_loss_fn="mse")
    batch = {
        Columns.ACTIONS: torch.as_tensor(sample["actions"]),
        Columns.REWARDS: torch.as_tensor(sample["rewards"]),
        Columns.TERMINATEDS: torch.as_tensor(sample["terminateds"]),
        "n_step": torch.as_tensor(sample["n_step"]),
        "weights": torch.ones(len(t)),
    }
    fwd_out = _crafted_fwd_out(np.zeros((len(t), 2)), q_target_next, q_target_next)
    _, td = _loss(learner, batch, fwd_out)

    used = np.minimum(3, 5 - t)
    expected_return = np.array(
        [sum(GAMMA**k * rewards[s + k] for k in range(u)) for s, u in zip(t, used)]
    )
    hits_terminal = t + used == 5
    expected_y = expected_return + np.where(
        hits_terminal, 0.0, GAMMA**used * (100.0 + t + used)
    )
    np.testing.assert_array_equal(sample["n_step"], used)
    np.testing.assert_array_equal(next_t, t + used)
    np.testing.assert_allclose(td, expected_y, rtol=1e-5)
    # Spot values: t=0 -> 1 + .9*2 + .81*4 + .729*103; t=4 -> 16 (terminal).
    assert expected_y[t == 0][0] == pytest.approx(1 + 1.8 + 3.24 + 0.729 * 103)
    assert expected_y[t == 4][0] == pytest.approx(16.0)


# ---------------------------------------------------------------- adam epsilon
def test_adam_epsilon_reaches_the_optimizer():
    learner = _learner(adam_epsilon=1.5e-4)
    optimizer = _optimizer(learner)
    assert isinstance(optimizer, torch.optim.Adam)
    assert optimizer.param_groups[0]["eps"] == 1.5e-4
    default = _learner()
    optimizer = _optimizer(default)
    assert optimizer.param_groups[0]["eps"] == 1e-8


def test_ners_learner_inherits_adam_epsilon():
    config = (
        NERSDQNConfig()
        .environment("CartPole-v1")
        .training(adam_epsilon=1.5e-4, noisy=True)
    )
    learner = config.build_learner(env=gym.make("CartPole-v1"))
    optimizer = _optimizer(learner)
    assert optimizer.param_groups[0]["eps"] == 1.5e-4
    assert isinstance(learner.module[MID], RainbowTorchRLModule)
    assert learner.module[MID].uses_noisy


# -------------------------------------------------------------------- encoders
@pytest.mark.parametrize(
    "kind, features", [("data_efficient", 64 * 3 * 3), ("nature", 64 * 7 * 7)]
)
def test_image_encoders_output_shapes_and_scale_uint8(kind, features):
    module = _module(IMG_SPACE, cnn_encoder=kind, num_atoms=51, noisy=True)
    pixels = torch.randint(0, 256, (2, 84, 84, 4), dtype=torch.uint8)
    out = module.encoder({Columns.OBS: pixels})[ENCODER_OUT]
    assert out.shape == (2, features)
    scaled = module.encoder({Columns.OBS: pixels.float() / 255.0})[ENCODER_OUT]
    torch.testing.assert_close(out, scaled)
    assert not torch.allclose(
        out, module.encoder({Columns.OBS: pixels.float()})[ENCODER_OUT]
    )
    convs = [m for m in module.encoder.modules() if isinstance(m, torch.nn.Conv2d)]
    if kind == "data_efficient":
        assert [(c.out_channels, c.kernel_size, c.stride) for c in convs] == [
            (32, (5, 5), (5, 5)),
            (64, (5, 5), (5, 5)),
        ]
    fwd = module.forward_train({Columns.OBS: pixels, Columns.NEXT_OBS: pixels})
    assert fwd[QF_PREDS].shape == (2, 3)
    assert fwd[QF_PROBS].shape == (2, 3, 51)


@pytest.mark.parametrize("kind", ["data_efficient", "nature"])
def test_fast_encoder_paths_equal_plain_conv2d_in_values_and_gradients(kind):
    """Patch products (data-efficient) and the folded 1/255 scale (both) compute
    exactly `net(obs / 255)` through conv2d, forward and backward."""
    from rllib_ners.algorithms.rainbow.torch.rainbow_networks import (
        RainbowCNNEncoder,
    )

    torch.manual_seed(0)
    encoder = RainbowCNNEncoder((84, 84, 4), kind)
    pixels = torch.randint(0, 256, (5, 84, 84, 4), dtype=torch.uint8)
    outputs, grads = [], []
    for path in (encoder.features, encoder.forward_conv):
        encoder.zero_grad()
        out = path(pixels)
        (out * torch.linspace(-1, 1, out.shape[1])).sum().backward()
        outputs.append(out.detach())
        grads.append([p.grad.clone() for p in encoder.parameters()])
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-5, atol=1e-5)
    for fast, plain in zip(*grads):
        torch.testing.assert_close(fast, plain, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["data_efficient", "nature"])
@pytest.mark.parametrize("height, width", [(84, 84), (64, 80), (51, 97)])
def test_encoders_convolve_only_what_they_read(kind, height, width):
    """The fast path crops the rows/columns no convolution reads (75 x 75 of
    84 x 84 for the data-efficient CNN); the Nature CNN reads all of 84 x 84."""
    from rllib_ners.algorithms.rainbow.torch.rainbow_networks import (
        RainbowCNNEncoder,
    )
    from rllib_ners.networks.conv_stack import conv_input_extent

    torch.manual_seed(1)
    encoder = RainbowCNNEncoder((height, width, 4), kind)
    read = conv_input_extent(height, width, encoder._convs)
    if (height, width) == (84, 84):
        assert read == ((75, 75) if kind == "data_efficient" else (84, 84))
    pixels = torch.randint(0, 256, (3, height, width, 4), dtype=torch.uint8)
    torch.testing.assert_close(
        encoder.features(pixels), encoder.forward_conv(pixels), rtol=1e-5, atol=1e-5
    )
    # Changing what lies outside the read region changes nothing; changing the
    # last row and column inside it does.
    outside = pixels.clone()
    outside[:, read[0] :] = 0
    outside[:, :, read[1] :] = 0
    torch.testing.assert_close(encoder.features(outside), encoder.features(pixels))
    inside = pixels.clone()
    inside[:, read[0] - 1] = 255 - inside[:, read[0] - 1]
    inside[:, :, read[1] - 1] = 255 - inside[:, :, read[1] - 1]
    assert not torch.allclose(
        encoder.forward_conv(inside), encoder.forward_conv(pixels)
    )


def test_input_extent_of_padded_convolutions_is_the_whole_image():
    from rllib_ners.networks.conv_stack import conv_input_extent

    convs = [torch.nn.Conv2d(4, 8, 5, 5, padding=1), torch.nn.Conv2d(8, 8, 5, 5)]
    assert conv_input_extent(84, 84, convs) == (84, 84)


def test_image_encoder_errors_name_the_setting():
    with pytest.raises(ValueError, match="cnn_encoder"):
        _module(IMG_SPACE, cnn_encoder="resnet")
    with pytest.raises(ValueError, match="cnn_encoder"):
        _module(OBS_SPACE, cnn_encoder="nature")
    with pytest.raises(ValueError, match="too small"):
        _module(gym.spaces.Box(0, 255, (20, 20, 4), np.uint8), cnn_encoder="nature")
    # RLlib's CNN settings: our CNNs would ignore them; conv_filters' CNN takes them.
    with pytest.raises(ValueError, match="conv_activation.*RLlib's CNN"):
        _module(IMG_SPACE, conv_activation="tanh")
    with pytest.raises(ValueError, match="conv_kernel_initializer"):
        _module(IMG_SPACE, cnn_encoder="nature", conv_kernel_initializer="zeros_")
    rllibs = _module(
        IMG_SPACE, conv_filters=[[8, 4, 2], [8, 3, 2]], conv_activation="tanh"
    )
    assert any(isinstance(m, torch.nn.Tanh) for m in rllibs.encoder.modules())


@pytest.mark.parametrize(
    "shape, dtype, kind",
    [
        ((10, 10, 4), bool, "small"),
        ((10, 10, 4), np.uint8, "small"),
        ((35, 40, 1), np.float32, "small"),
        ((36, 36, 2), np.float32, "nature"),
        ((84, 84, 4), np.uint8, "nature"),
    ],
)
def test_default_cnn_fits_the_images_and_takes_bool_and_uint8(shape, dtype, kind):
    """No cnn_encoder: the Nature CNN when the images are large enough, else the
    small CNN (one 3x3 stride-1 conv, 16 channels). bool pixels count as 0/1,
    uint8 ones are scaled by 1/255."""
    high = 1 if dtype is bool else 255
    space = gym.spaces.Box(0, high, shape, dtype)
    module = _module(space, num_atoms=51, noisy=True)
    assert module.encoder.kind == kind
    obs = torch.as_tensor(np.stack([space.sample() for _ in range(3)]))
    out = module.encoder({Columns.OBS: obs})[ENCODER_OUT]
    as_float = obs.float() / (255.0 if dtype is np.uint8 else 1.0)
    torch.testing.assert_close(
        out, module.encoder({Columns.OBS: as_float})[ENCODER_OUT]
    )
    fwd = module.forward_train({Columns.OBS: obs, Columns.NEXT_OBS: obs})
    assert fwd[QF_PREDS].shape == (3, 3) and torch.isfinite(fwd[QF_PREDS]).all()
    if kind == "small":
        convs = [m for m in module.encoder.modules() if isinstance(m, torch.nn.Conv2d)]
        assert [(c.out_channels, c.kernel_size, c.stride) for c in convs] == [
            (16, (3, 3), (1, 1))
        ]


def test_cnn_minimum_image_sizes():
    from rllib_ners.networks.conv_stack import cnn_fits, min_image_size

    assert min_image_size("nature") == 36
    assert min_image_size("data_efficient") == 25
    assert min_image_size("small") == 3
    for kind in ("nature", "data_efficient", "small"):
        size = min_image_size(kind)
        assert cnn_fits((size, size + 7, 1), kind)
        assert not cnn_fits((size - 1, size + 7, 1), kind)


# ------------------------------------------------- default = RLlib's DQN network
def test_defaults_reproduce_rllibs_default_dqn_network():
    """dueling, 1 atom, no noise: same layers, same init, same Q as RLlib's module
    under the same seed (NERS-DQN kept its behaviour when it switched modules)."""
    env = gym.make("CartPole-v1")
    from ray.rllib.algorithms.dqn import DQNConfig

    ours_config = cartpole_dqn(RainbowDQNConfig())
    rllib_config = cartpole_dqn(DQNConfig())
    torch.manual_seed(0)
    ours = RainbowTorchRLModule(
        observation_space=env.observation_space,
        action_space=env.action_space,
        model_config=ours_config.model_config,
    )
    torch.manual_seed(0)
    theirs = DefaultDQNTorchRLModule(
        observation_space=env.observation_space,
        action_space=env.action_space,
        model_config=rllib_config.model_config,
    )
    obs = _obs(9)
    torch.testing.assert_close(
        ours.compute_q_values({Columns.OBS: obs})[QF_PREDS],
        theirs.compute_q_values({Columns.OBS: obs})[QF_PREDS],
    )
    assert [p.shape for p in ours.parameters()] == [
        p.shape for p in theirs.parameters()
    ]


# ---------------------------------------------------------------------- config
def _validated(**training):
    config = RainbowDQNConfig().environment("CartPole-v1").training(**training)
    config.validate()
    return config


def test_noisy_with_an_explicit_epsilon_raises_but_defaults_pass():
    with pytest.raises(ValueError, match="noisy=True.*epsilon"):
        _validated(noisy=True, epsilon=[(0, 1.0), (5000, 0.02)])
    with pytest.raises(ValueError, match="epsilon"):
        _validated(noisy=True, epsilon=0.1)
    _validated(noisy=True)  # DQN's default schedule is simply not used
    _validated(noisy=True, epsilon=0.0)
    _validated(noisy=False, epsilon=[(0, 1.0), (5000, 0.02)])


@pytest.mark.parametrize(
    "training, match",
    [
        ({"categorical_distribution_temperature": 0.5}, "categorical_distribution"),
        ({"before_learn_on_batch": lambda *a: a}, "before_learn_on_batch"),
        ({"num_atoms": 51, "td_error_loss_fn": "mse"}, "td_error_loss_fn"),
        ({"adam_epsilon": 0.0}, "adam_epsilon"),
        ({"sigma0": -1.0}, "sigma0"),
        ({"burn_in_len": 10}, "burn_in_len"),
    ],
)
def test_settings_without_effect_raise(training, match):
    with pytest.raises(ValueError, match=match):
        _validated(**training)


def test_clip_rewards_raises():
    config = RainbowDQNConfig().environment("CartPole-v1", clip_rewards=True)
    with pytest.raises(ValueError, match="clip_rewards"):
        config.validate()


def test_hiddens_sets_the_stream_layers_and_conflicts_raise():
    config = _validated(hiddens=[32, 16], noisy=True)
    spec = config.get_default_rl_module_spec()
    spec.observation_space, spec.action_space = OBS_SPACE, gym.spaces.Discrete(2)
    module = spec.build()
    assert [layer.out_features for layer in module.af.layers] == [32, 16, 2]
    assert [layer.out_features for layer in module.vf.layers] == [32, 16, 1]
    config = (
        RainbowDQNConfig()
        .environment("CartPole-v1")
        .training(hiddens=[32])
        .rl_module(model_config={"head_fcnet_hiddens": [64]})
    )
    with pytest.raises(ValueError, match="head_fcnet_hiddens"):
        config.validate()


def test_noisy_with_a_module_without_noisy_layers_raises():
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    config = (
        RainbowDQNConfig()
        .environment("CartPole-v1")
        .training(noisy=True)
        .rl_module(rl_module_spec=RLModuleSpec(module_class=DefaultDQNTorchRLModule))
    )
    with pytest.raises(ValueError, match="RainbowTorchRLModule"):
        config.validate()


@pytest.mark.parametrize("rows", [1, 64])  # an EnvRunner's one env, or many
@pytest.mark.parametrize("dueling", [True, False])
def test_epsilon_greedy_acts_and_draws_as_rllibs_module(dueling, rows):
    """Our lean epsilon-greedy takes RLlib's actions with RLlib's random draws:
    after it, the global RNG is where RLlib's would leave it."""
    epsilon_schedule = [(0, 1.0), (100, 0.05)]
    module = _module(dueling=dueling, epsilon=epsilon_schedule)
    module.eval()
    obs = _obs(rows, seed=3)
    # Without dueling the Q-network is a plain MLP: the acting pass runs its
    # layers directly (`_acting_q_values`); with dueling, the module's calls.
    module._forward_exploration({Columns.OBS: obs}, t=0)
    assert (module._acting_layers is None) == dueling
    for t in (0, 40, 77, 100, 5000):
        torch.manual_seed(t)
        ours = module._forward_exploration({Columns.OBS: obs}, t=t)[Columns.ACTIONS]
        ours_next_draw = torch.rand(4)
        # RLlib's scheduler holds epsilon at t (a float32 tensor) after ours too.
        epsilon = module.epsilon_schedule.get_current_value()
        assert epsilon.dtype == torch.float32
        expected = torch.tensor(Scheduler(epsilon_schedule).update(t))
        assert torch.equal(epsilon.cpu(), expected)
        torch.manual_seed(t)
        theirs = DefaultDQNTorchRLModule._forward_exploration(
            module, {Columns.OBS: obs}, t=t
        )[Columns.ACTIONS]
        theirs_next_draw = torch.rand(4)
        assert ours.dtype == theirs.dtype == torch.int64
        assert torch.equal(ours, theirs)
        assert torch.equal(ours_next_draw, theirs_next_draw)
    # Greedy at epsilon 0.05 mostly; random at epsilon 1.
    torch.manual_seed(0)
    many = _obs(64, seed=3)
    greedy = module._forward_exploration({Columns.OBS: many}, t=5000)[Columns.ACTIONS]
    q = module.compute_q_values({Columns.OBS: many})["qf_preds"].argmax(-1)
    assert (greedy == q).float().mean() > 0.85


# ------------------------------------------------- scalar-Q loss = RLlib's loss
def _scalar_q_batch(n, seed):
    rng = np.random.default_rng(seed)
    return {
        Columns.OBS: _obs(n, seed),
        Columns.NEXT_OBS: _obs(n, seed + 1),
        Columns.ACTIONS: torch.as_tensor(rng.integers(0, 2, n)),  # CartPole
        Columns.REWARDS: torch.as_tensor(rng.normal(size=n), dtype=torch.float32),
        Columns.TERMINATEDS: torch.as_tensor(rng.random(n) < 0.3),
        Columns.TRUNCATEDS: torch.zeros(n, dtype=torch.bool),
        "weights": torch.as_tensor(rng.uniform(0.2, 1.0, n), dtype=torch.float32),
        "n_step": torch.as_tensor(rng.integers(1, 4, n)),
    }


@pytest.mark.parametrize("loss_fn", ["huber", "mse"])
@pytest.mark.parametrize("double_q", [True, False])
@pytest.mark.parametrize("size", [1, 32])
def test_scalar_q_loss_equals_rllibs_loss_gradients_and_metrics(
    loss_fn, double_q, size
):
    """`RainbowDQNTorchLearner`'s scalar-Q loss against RLlib's own
    `DQNTorchLearner.compute_loss_for_module` on the same forward outputs: the
    same loss and gradients bit for bit, the same TD errors, and the same
    reported statistics, whether logged directly or deferred to the flush."""
    from ray.rllib.algorithms.dqn.torch.dqn_torch_learner import DQNTorchLearner
    from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

    from rllib_ners.utils.deferred_metrics import DeferredMetrics

    learner = _learner(double_q=double_q, td_error_loss_fn=loss_fn)
    config = learner.config.get_config_for_module(MID)
    module = learner.module[MID]
    batch = _scalar_q_batch(size, seed=size)

    def run(loss_function, metrics):
        learner.metrics = metrics
        module.zero_grad(set_to_none=True)
        fwd_out = module.forward_train(batch)
        loss = loss_function(
            learner, module_id=MID, config=config, batch=batch, fwd_out=fwd_out
        )
        loss.backward()
        grads = [p.grad.clone() for p in module.parameters() if p.grad is not None]
        if isinstance(metrics, DeferredMetrics):
            logger = MetricsLogger(root=True)
            metrics.flush_into(logger)
            metrics = logger
        return loss.detach(), grads, metrics.reduce()[MID]

    ours = run(type(learner).compute_loss_for_module, DeferredMetrics())
    ours_direct = run(type(learner).compute_loss_for_module, MetricsLogger(root=True))
    theirs = run(DQNTorchLearner.compute_loss_for_module, MetricsLogger(root=True))
    for candidate in (ours, ours_direct):
        assert torch.equal(candidate[0], theirs[0])
        assert len(candidate[1]) == len(theirs[1]) > 0
        assert all(torch.equal(a, b) for a, b in zip(candidate[1], theirs[1]))
        # The same metrics (the order RLlib logs them in means nothing).
        assert set(candidate[2]) == set(theirs[2])
        for key, value in theirs[2].items():
            np.testing.assert_array_equal(
                _peeked(candidate[2][key]), _peeked(value), err_msg=key
            )


def _peeked(value):
    value = value.peek() if hasattr(value, "peek") else value
    if isinstance(value, (list, tuple)):
        return np.concatenate([np.ravel(np.asarray(item)) for item in value])
    return np.asarray(value, dtype=np.float64)
