"""Contract of `rllib_ners.seam.learner`: the Learner internals an update reads,
checked on RLlib's own DQN and SAC Learners."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.algorithms.sac import SACConfig
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.metrics import (
    DIFF_NUM_GRAD_UPDATES_VS_SAMPLER_POLICY,
    NUM_MODULE_STEPS_TRAINED,
    WEIGHTS_SEQ_NO,
)
from ray.rllib.utils.torch_utils import convert_to_torch_tensor

from rllib_ners.seam.learner import (
    advance_weights_seq_no,
    check_learner_built,
    count_trained_env_steps,
    learner_optimizers,
    learner_parameters,
    log_off_policyness,
    log_steps_trained,
    losses_per_optimizer,
    scales_gradients,
    use_clip_function,
    uses_torch_lr_schedulers,
    weights_seq_no,
)

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACTIONS = gym.spaces.Discrete(2)
BOX_ACTIONS = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
MID = DEFAULT_MODULE_ID


def _fail(what_changed: str) -> str:
    return f"RLlib changed: {what_changed}. Adapt rllib_ners/seam/learner.py."


def _dqn_config():
    return (
        DQNConfig()
        .environment(observation_space=OBS, action_space=ACTIONS)
        .rl_module(model_config={"fcnet_hiddens": [8], "head_fcnet_hiddens": [8]})
    )


def _dqn_learner(config=None):
    config = config or _dqn_config()
    return config.build_learner(spaces={MID: (OBS, ACTIONS)})


def _dqn_batch(size: int = 6, seq_no: int = 0):
    rng = np.random.default_rng(0)
    columns = {
        Columns.OBS: rng.uniform(-1, 1, (size, 4)).astype(np.float32),
        Columns.NEXT_OBS: rng.uniform(-1, 1, (size, 4)).astype(np.float32),
        Columns.ACTIONS: rng.integers(0, 2, size),
        Columns.REWARDS: rng.normal(size=size).astype(np.float32),
        Columns.TERMINATEDS: np.zeros(size, bool),
        Columns.TRUNCATEDS: np.zeros(size, bool),
        "weights": np.ones(size, np.float32),
        "n_step": np.ones(size, np.int64),
        WEIGHTS_SEQ_NO: np.full(size, seq_no),
    }
    return MultiAgentBatch({MID: SampleBatch(columns)}, env_steps=size)


def test_parameters_and_optimizers_are_the_learners():
    learner = _dqn_learner()
    optimizers = learner_optimizers(learner)
    expected = [optimizer for _, optimizer in learner.get_optimizers_for_module(MID)]
    assert optimizers == expected, _fail(
        "Learner._module_optimizers no longer lists the optimizers in order"
    )
    optimized = {
        id(param)
        for optimizer in optimizers
        for group in optimizer.param_groups
        for param in group["params"]
    }
    params = learner_parameters(learner)
    assert {id(p) for p in params.values()} == optimized, _fail(
        "Learner._params no longer maps every optimized parameter"
    )
    assert all(learner.get_param_ref(p) in params for p in params.values())


def test_mixed_precision_and_torch_lr_schedulers_are_seen():
    learner = _dqn_learner()
    assert not scales_gradients(learner) and not uses_torch_lr_schedulers(learner)
    config = _dqn_config().experimental(
        _torch_grad_scaler_class=torch.amp.GradScaler,
        _torch_lr_scheduler_classes=[
            lambda optimizer: torch.optim.lr_scheduler.ConstantLR(optimizer)
        ],
    )
    learner = _dqn_learner(config)
    assert scales_gradients(learner), _fail("TorchLearner._grad_scalers")
    assert uses_torch_lr_schedulers(learner), _fail(
        "TorchLearner._lr_scheduler_classes"
    )


def test_an_unbuilt_learner_is_refused():
    config = _dqn_config()
    learner = config.get_default_learner_class()(
        config=config,
        module_spec=config.get_multi_rl_module_spec(spaces={MID: (OBS, ACTIONS)}),
    )
    with pytest.raises(ValueError):
        check_learner_built(learner)
    learner.build()
    check_learner_built(learner)


def test_the_weights_seq_no_advances_as_update_advances_it():
    learner = _dqn_learner()
    assert weights_seq_no(learner) == 0
    learner.update(batch=_dqn_batch(), timesteps={})
    assert weights_seq_no(learner) == 1, _fail("Learner._weights_seq_no")
    advance_weights_seq_no(learner)
    assert weights_seq_no(learner) == 2


def test_count_trained_env_steps_adds_to_the_counters_rllibs_update_adds_to(
    monkeypatch,
):
    learner = _dqn_learner()
    counted = {"env": [], "module": []}
    for kind, counter in (
        ("env", learner._metrics_all_modules_num_env_steps_trained),
        ("module", learner._metrics_all_modules_num_module_steps_trained),
    ):
        monkeypatch.setattr(
            counter,
            "inc",
            lambda value=1.0, tags=None, kind=kind: counted[kind].append(value),
        )
    batch = _dqn_batch()
    learner.update(batch=batch, timesteps={})
    assert counted == {"env": [batch.env_steps()], "module": [batch.env_steps()]}, (
        _fail("Learner.update() counts trained steps elsewhere")
    )
    count_trained_env_steps(learner, 7)
    assert counted == {
        "env": [batch.env_steps(), 7],
        "module": [batch.env_steps(), 7],
    }


def test_update_bookkeeping_logs_rllibs_keys():
    learner = _dqn_learner()
    advance_weights_seq_no(learner)
    advance_weights_seq_no(learner)
    batch = _dqn_batch(seq_no=0)
    tensors = {
        mid: convert_to_torch_tensor(dict(module_batch))
        for mid, module_batch in batch.policy_batches.items()
    }
    log_off_policyness(learner, tensors)
    log_steps_trained(learner, batch)
    results = learner.metrics.reduce()
    off_policy = results[MID][DIFF_NUM_GRAD_UPDATES_VS_SAMPLER_POLICY]
    assert float(off_policy.peek()) == 2.0, _fail(
        "TorchLearner._compute_off_policyness"
    )
    assert results[MID][NUM_MODULE_STEPS_TRAINED].peek() == 6, _fail(
        "Learner._log_steps_trained_metrics"
    )


def test_sac_keeps_one_loss_per_optimizer():
    config = (
        SACConfig()
        .environment(observation_space=OBS, action_space=BOX_ACTIONS)
        .rl_module(model_config={"fcnet_hiddens": [8]})
    )
    learner = config.build_learner(spaces={MID: (OBS, BOX_ACTIONS)})
    rng = np.random.default_rng(0)
    batch = {
        Columns.OBS: torch.as_tensor(rng.uniform(-1, 1, (5, 4)), dtype=torch.float32),
        Columns.NEXT_OBS: torch.zeros(5, 4),
        Columns.ACTIONS: torch.zeros(5, 2),
        Columns.REWARDS: torch.ones(5),
        Columns.TERMINATEDS: torch.zeros(5, dtype=torch.bool),
        "weights": torch.ones(5),
        "n_step": torch.ones(5, dtype=torch.int64),
    }
    fwd_out = {MID: learner.module[MID].forward_train(batch)}
    learner.compute_losses(fwd_out=fwd_out, batch={MID: batch})
    keys = {key for _, key in losses_per_optimizer(learner)}
    assert keys == {"qf_loss", "qf_twin_loss", "policy_loss", "alpha_loss"}, _fail(
        "SACTorchLearner._temp_losses no longer holds one loss per optimizer"
    )


def test_use_clip_function_routes_rllibs_clipping_to_the_function():
    calls = []

    def recording(gradients_dict, *, grad_clip, grad_clip_by):
        calls.append((grad_clip, grad_clip_by))
        return torch.tensor(0.0)

    config = _dqn_config().training(grad_clip=3.0, grad_clip_by="global_norm")
    learner = config.get_default_learner_class()(
        config=config,
        module_spec=config.get_multi_rl_module_spec(spaces={MID: (OBS, ACTIONS)}),
    )
    learner.build()
    use_clip_function(learner, recording)
    gradients = {
        pid: torch.ones_like(p) for pid, p in learner_parameters(learner).items()
    }
    learner.postprocess_gradients(gradients)
    assert calls == [(3.0, "global_norm")], _fail(
        "TorchLearner no longer clips through _get_clip_function()"
    )
