"""NERS-SAC's Learner computes RLlib's SAC losses and gradients with one backward.

`one_backward_sac_update` against RLlib's own `SACTorchLearner`, both built from the
same config, loaded with the same weights and fed the same batch under the same
torch seed: the losses are equal and every parameter's gradient is equal bit
for bit (both critics, the policy, the temperature), for our `SACTorchRLModule`
and for RLlib's multi-stream `DefaultSACTorchRLModule`, with and without twin
critics. Every metric RLlib reports is ours too, with RLlib's value; the total
loss to float rounding (ours adds its terms in the SAC paper's order, RLlib in
its own). After the optimizer steps the weights agree to float rounding (ours
are fused Adams, RLlib's the per-tensor loop: the same update, summed in
another order).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.sac.torch.default_sac_torch_rl_module import (
    DefaultSACTorchRLModule,
)
from ray.rllib.algorithms.sac.torch.sac_torch_learner import SACTorchLearner
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import Learner
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from rllib_ners.algorithms.common.learner.deferred_updates import DEFER_METRICS
from rllib_ners.algorithms.ners_sac.presets import sac_config
from rllib_ners.algorithms.ners_sac.torch.sac_torch_rl_module import SACTorchRLModule

BATCH = 64
LOSS_KEYS = ("qf_loss", "qf_twin_loss", "policy_loss", "alpha_loss")


def _batch(seed: int, obs_dim: int, act_dim: int):
    rng = np.random.default_rng(seed)
    columns = {
        "obs": rng.normal(size=(BATCH, obs_dim)).astype(np.float32),
        "new_obs": rng.normal(size=(BATCH, obs_dim)).astype(np.float32),
        "actions": rng.uniform(-1, 1, size=(BATCH, act_dim)).astype(np.float32),
        "rewards": rng.normal(size=BATCH).astype(np.float32),
        "terminateds": rng.random(BATCH) < 0.2,
        "truncateds": np.zeros(BATCH, dtype=bool),
        "weights": rng.uniform(0.5, 1, size=BATCH).astype(np.float32),
        "n_step": np.ones(BATCH, dtype=np.int64),
    }
    return MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(columns)}, env_steps=BATCH)


def _learners(module_class, twin_q, critic_loss="huber"):
    """Ours and RLlib's SACTorchLearner from one config, with the same weights.
    RLlib's critics regress with its Huber loss whatever `critic_loss` says."""
    env = gym.make("Hopper-v5")
    config = sac_config(
        "Hopper-v5", replay="uniform", capacity=1000, hiddens=(64, 64)
    ).training(twin_q=twin_q, critic_loss=critic_loss)
    if module_class is not None:
        config = config.rl_module(
            rl_module_spec=RLModuleSpec(module_class=module_class)
        )
    ours = config.build_learner(env=env)
    theirs = (
        config.copy(copy_frozen=False)
        .learners(learner_class=SACTorchLearner)
        .build_learner(env=env)
    )
    theirs.set_state(ours.get_state(components=["rl_module"]))
    return ours, theirs


def _losses(result):
    values = result[DEFAULT_MODULE_ID]
    return {key: float(values[key].peek()) for key in LOSS_KEYS if key in values}


@pytest.mark.parametrize("twin_q", [True, False])
@pytest.mark.parametrize(
    "module_class", [None, DefaultSACTorchRLModule], ids=["ours", "rllibs"]
)
def test_one_backward_update_equals_rllibs_sac_learner(
    module_class, twin_q, one_torch_thread
):
    ours, theirs = _learners(module_class, twin_q)
    expected_module = module_class or SACTorchRLModule
    assert type(ours.module[DEFAULT_MODULE_ID]) is expected_module
    assert ours.one_backward_blocker is None
    ours_params = dict(ours.module[DEFAULT_MODULE_ID].named_parameters())
    theirs_params = dict(theirs.module[DEFAULT_MODULE_ID].named_parameters())
    timesteps = {"num_env_steps_sampled_lifetime": 1000}
    for step in range(3):
        batch = _batch(step, 11, 3)
        torch.manual_seed(100 + step)
        ours_result = ours.update(batch=batch, timesteps=timesteps)
        torch.manual_seed(100 + step)
        theirs_result = theirs.update(batch=batch, timesteps=timesteps)
        ours_losses, theirs_losses = _losses(ours_result), _losses(theirs_result)
        assert set(ours_losses) == set(theirs_losses)
        if step == 0:  # every reported metric, RLlib's values
            _assert_same_metrics(ours_result, theirs_result)
        for key in ours_losses:
            assert ours_losses[key] == pytest.approx(theirs_losses[key], rel=1e-5), key
        trained = [n for n in ours_params if not n.startswith("target")]
        assert trained and all(ours_params[n].grad is not None for n in trained)
        for name in trained:
            ours_grad, theirs_grad = ours_params[name].grad, theirs_params[name].grad
            if step == 0:  # same weights, same batch, same draws: same bits
                assert torch.equal(ours_grad, theirs_grad), name
            else:
                torch.testing.assert_close(ours_grad, theirs_grad, rtol=1e-4, atol=1e-6)
        for name, param in ours_params.items():
            torch.testing.assert_close(param, theirs_params[name], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(
            ours.curr_log_alpha[DEFAULT_MODULE_ID],
            theirs.curr_log_alpha[DEFAULT_MODULE_ID],
            rtol=1e-5,
            atol=1e-7,
        )


def _assert_same_metrics(ours_result, theirs_result):
    """Ours reports every metric RLlib's Learner reports, under RLlib's keys (in
    any order), each with RLlib's value bit for bit, except the total loss:
    that to the rounding of its terms' re-ordered float32 sum."""
    ours, theirs = ours_result[DEFAULT_MODULE_ID], theirs_result[DEFAULT_MODULE_ID]
    assert set(ours) == set(theirs)
    for key, value in theirs.items():
        a, b = _reported(value), _reported(ours[key])
        if key == Learner.TOTAL_LOSS_KEY:
            terms = [_reported(theirs[term]) for term in LOSS_KEYS if term in theirs]
            _assert_same_sum_to_rounding(b, a, terms)
            continue
        if isinstance(a, list):
            a, b = (
                np.concatenate([np.ravel(x) for x in a]),
                np.concatenate([np.ravel(x) for x in b]),
            )
        np.testing.assert_array_equal(np.asarray(b), np.asarray(a), err_msg=key)


def _reported(value):
    return value.peek() if hasattr(value, "peek") else value


def _assert_same_sum_to_rounding(ours, theirs, terms):
    """`ours` and `theirs` add the same float32 `terms` in two orders (ours:
    actor, temperature, critics, as the SAC paper writes the total; RLlib's:
    the temperature after the first critic). Each of the n - 1 additions
    rounds by at most half an eps of a partial sum, none of which exceeds
    sum |term|, so the totals differ by at most (n - 1) eps sum |term|: at
    most 1.4e-6 here, where the critic and actor terms are about 1 (the temperature's
    is 0 at the first step, log alpha = 0), so a missing or extra term fails."""
    eps = torch.finfo(torch.float32).eps
    bound = (len(terms) - 1) * eps * sum(abs(float(term)) for term in terms)
    torch.testing.assert_close(
        torch.as_tensor(ours), torch.as_tensor(theirs), rtol=0, atol=bound
    )


class _HalfSquaredError(torch.nn.Module):
    """Stands in for `torch.nn.HuberLoss` inside RLlib's SAC loss: the SAC
    paper's `0.5 (Q - y)^2`, so RLlib's own code computes the MSE oracle."""

    def __init__(self, reduction="mean", delta=1.0):
        super().__init__()
        self.reduction = reduction

    def forward(self, prediction, target):
        loss = 0.5 * (prediction - target) ** 2
        return loss if self.reduction == "none" else loss.mean()


@pytest.mark.parametrize("update", ["lean", "rllibs"])
def test_mse_critic_loss_is_rllibs_loss_with_squared_errors(
    update, monkeypatch, one_torch_thread
):
    """`critic_loss="mse"`: losses and gradients equal RLlib's SAC loss with its
    Huber terms replaced by squared errors, in the lean update and in RLlib's
    four-backward update alike; policy and temperature losses are RLlib's."""
    ours, theirs = _learners(None, True, critic_loss="mse")
    if update == "rllibs":
        ours.one_backward_blocker = "RLlib's update is under test"
    ours_params = dict(ours.module[DEFAULT_MODULE_ID].named_parameters())
    theirs_params = dict(theirs.module[DEFAULT_MODULE_ID].named_parameters())
    timesteps = {"num_env_steps_sampled_lifetime": 1000}
    huber_losses = []
    for step in range(2):
        batch = _batch(step, 11, 3)
        torch.manual_seed(100 + step)
        ours_result = ours.update(batch=batch, timesteps=timesteps)
        with monkeypatch.context() as patch:
            patch.setattr(torch.nn, "HuberLoss", _HalfSquaredError)
            torch.manual_seed(100 + step)
            theirs_result = theirs.update(batch=batch, timesteps=timesteps)
        ours_losses, theirs_losses = _losses(ours_result), _losses(theirs_result)
        if step == 0:
            _assert_same_metrics(ours_result, theirs_result)
        assert set(ours_losses) == set(LOSS_KEYS) == set(theirs_losses)
        for key in LOSS_KEYS:
            assert ours_losses[key] == pytest.approx(theirs_losses[key], rel=1e-5), key
        for name, param in ours_params.items():
            if name.startswith("target"):
                continue
            if step == 0:  # same weights, batch and draws: the same bits
                assert torch.equal(param.grad, theirs_params[name].grad), name
            else:
                torch.testing.assert_close(
                    param.grad, theirs_params[name].grad, rtol=1e-4, atol=1e-6
                )
        huber_losses.append(ours_losses["qf_loss"])
    # The test batches' TD errors exceed 1, where the two losses differ: the
    # squared error of the first step is far above what Huber would give.
    _, huber_learner = _learners(None, True, critic_loss="huber")
    torch.manual_seed(100)
    huber = _losses(huber_learner.update(batch=_batch(0, 11, 3), timesteps=timesteps))
    assert huber_losses[0] > 1.5 * huber["qf_loss"]


def test_the_presets_use_the_sac_papers_critic_loss_and_bad_values_fail():
    assert sac_config("Pendulum-v1", replay="uniform").critic_loss == "mse"
    with pytest.raises(ValueError, match=r"critic_loss='l1'.*critic_loss='mse'"):
        sac_config("Pendulum-v1", replay="uniform").training(
            critic_loss="l1"
        ).validate()


def test_deferred_updates_train_the_same_weights(one_torch_thread):
    """The update with deferred metrics is the same `_update` (same weights after
    each step as RLlib's per-update metrics path on a twin learner)."""
    ours, _ = _learners(None, True)
    twin, _ = _learners(None, True)
    twin.set_state(ours.get_state())
    for step in range(3):
        batch = _batch(step, 11, 3)
        torch.manual_seed(step)
        ours.update(batch=batch, timesteps={}, **{DEFER_METRICS: True})
        torch.manual_seed(step)
        twin.update(batch=batch, timesteps={})
    for (name, a), b in zip(
        ours.module[DEFAULT_MODULE_ID].state_dict().items(),
        twin.module[DEFAULT_MODULE_ID].state_dict().values(),
    ):
        assert torch.equal(a, b), name
    reduced = ours.reduce_deferred_metrics()
    assert set(LOSS_KEYS) <= set(reduced[DEFAULT_MODULE_ID])


def test_sac_module_critics_take_the_concatenated_state_and_action():
    env = gym.make("Hopper-v5")
    config = sac_config("Hopper-v5", replay="uniform", hiddens=(256, 256))
    module = config.get_rl_module_spec(env=env).build()
    assert isinstance(module, SACTorchRLModule)
    first = module.qf_encoder.net.mlp[0]
    assert (first.in_features, first.out_features) == (11 + 3, 256)
    sizes = [p.numel() for p in module.qf_encoder.parameters()] + [
        p.numel() for p in module.qf.parameters()
    ]
    assert sum(sizes) == 14 * 256 + 256 + 256 * 256 + 256 + 256 + 1
    inference = config.get_rl_module_spec(env=env, inference_only=True).build()
    assert not hasattr(inference, "qf_encoder")


@pytest.mark.parametrize("inference_only", [True, False])
def test_policy_pass_runs_plain_layers_with_rllibs_values(inference_only):
    """`SACTorchRLModule` runs a plain-MLP policy's layers directly when acting:
    the same action-distribution inputs, bit for bit, as RLlib's module calls."""
    env = gym.make("Hopper-v5")
    config = sac_config("Hopper-v5", replay="uniform", hiddens=(32, 32))
    module = config.get_rl_module_spec(env=env, inference_only=inference_only).build()
    obs = torch.as_tensor(
        np.random.default_rng(0).normal(size=(5, 11)), dtype=torch.float32
    )
    with torch.no_grad():
        ours = module._forward_exploration({Columns.OBS: obs})
        theirs = DefaultSACTorchRLModule._forward_inference(module, {Columns.OBS: obs})
    assert module._policy_layers  # the plain path ran
    key = Columns.ACTION_DIST_INPUTS
    assert list(ours) == [key]
    assert torch.equal(ours[key], theirs[key])


def test_images_need_rllibs_module():
    space = gym.spaces.Box(0, 255, (8, 8, 3), dtype=np.uint8)
    spec = RLModuleSpec(
        module_class=SACTorchRLModule,
        observation_space=space,
        action_space=gym.spaces.Box(-1, 1, (2,)),
        model_config={
            "twin_q": True,
            "fcnet_hiddens": [16],
            "conv_filters": [[4, 3, 2]],
        },
    )
    with pytest.raises(ValueError, match="DefaultSACTorchRLModule"):
        spec.build()


def test_compiled_updates_take_rllibs_update(caplog):
    env = gym.make("Hopper-v5")
    config = sac_config("Hopper-v5", replay="uniform", hiddens=(16,)).framework(
        torch_compile_learner=True
    )
    with caplog.at_level("INFO"):
        learner = config.build_learner(env=env)
    assert learner.one_backward_blocker == "the update is torch-compiled"
    # Said once, in one log line, when the Learner is built.
    said = [r for r in caplog.records if "one-backward" in r.getMessage()]
    assert len(said) == 1 and "torch-compiled" in said[0].getMessage()
