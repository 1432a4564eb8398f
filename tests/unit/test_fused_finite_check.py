"""The fused nan/inf check steps exactly as RLlib's `apply_gradients` does, with
finite gradients and with nan/inf ones (which RLlib zeroes before stepping)."""

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.learner.torch.torch_learner import TorchLearner

from rllib_ners import RainbowDQNConfig
from rllib_ners.seam.learner import learner_parameters

OBS, ACT = gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2)


def _learner():
    torch.manual_seed(0)
    config = (
        RainbowDQNConfig()
        .environment(observation_space=OBS, action_space=ACT)
        .rl_module(model_config={"fcnet_hiddens": [8], "head_fcnet_hiddens": [8]})
    )
    return config.build_learner(spaces={DEFAULT_MODULE_ID: (OBS, ACT)})


def _grads(learner, poison=None):
    torch.manual_seed(1)
    grads = {pid: torch.randn_like(p) for pid, p in learner_parameters(learner).items()}
    if poison is not None:
        first = next(iter(grads))
        grads[first].view(-1)[0] = poison
    return grads


def _assert_same_finite_parameters(ours, theirs):
    """Both Learners' parameters equal, bit for bit, and finite."""
    for (pid, a), b in zip(
        learner_parameters(ours).items(), learner_parameters(theirs).values()
    ):
        assert torch.equal(a, b), pid
        assert torch.isfinite(a).all()


@pytest.mark.parametrize("poison", [None, float("nan"), float("inf")])
def test_same_step_as_rllibs_apply_gradients(poison, monkeypatch):
    ours = _learner()
    theirs = copy.deepcopy(ours)
    rllib_apply = TorchLearner.apply_gradients
    calls = []

    def counting(self, gradients):
        calls.append(self is ours)
        return rllib_apply(self, gradients)

    monkeypatch.setattr(TorchLearner, "apply_gradients", counting)
    ours.apply_gradients(_grads(ours, poison))
    # Finite gradients take the fused path; nan/inf go through RLlib's code.
    assert calls == ([] if poison is None else [True])
    rllib_apply(theirs, _grads(theirs, poison))
    _assert_same_finite_parameters(ours, theirs)
    before = _learner()
    moved = [
        not torch.equal(a, b)
        for a, b in zip(
            learner_parameters(ours).values(), learner_parameters(before).values()
        )
    ]
    assert all(moved)


@pytest.mark.parametrize("poison", [None, float("nan"), float("inf")])
def test_clipped_gradients_step_as_rllib_without_a_second_norm(poison, monkeypatch):
    """After a global-norm clip of every gradient (DQN's default grad_clip=40):
    the same clipped gradients and the same step as RLlib's
    `postprocess_gradients` + `apply_gradients`, finiteness decided by the fused
    check (no norm over the gradients besides the clip's)."""
    from ray.rllib.utils.torch_utils import clip_gradients

    ours = _learner()
    theirs = copy.deepcopy(ours)
    assert ours.config.grad_clip_by == "global_norm" and ours.config.grad_clip
    norms = []
    total_norm = torch.nn.utils.get_total_norm
    monkeypatch.setattr(
        torch.nn.utils,
        "get_total_norm",
        lambda *args, **kwargs: norms.append(1) or total_norm(*args, **kwargs),
    )
    ours.apply_gradients(ours.postprocess_gradients(_grads(ours, poison)))
    assert norms == []
    # RLlib's own clip and apply on the copy.
    monkeypatch.setattr(type(theirs), "clip_gradients", staticmethod(clip_gradients))
    TorchLearner.apply_gradients(
        theirs, theirs.postprocess_gradients(_grads(theirs, poison))
    )
    _assert_same_finite_parameters(ours, theirs)


@pytest.mark.parametrize("poison", [None, float("nan"), float("inf")])
def test_step_without_host_reads_steps_as_rllib(poison, monkeypatch):
    """A Learner whose tensors are on a GPU (`host_reads=False`, forced here on
    the CPU) clips and steps without reading a value on the host: RLlib's
    tensor clip coefficient, nan/inf set as RLlib's `apply_gradients` sets
    them; the same parameters as RLlib's step. Updates with nan/inf are
    counted on the device under NUM_NON_FINITE_GRADIENT_UPDATES."""
    from ray.rllib.core import ALL_MODULES
    from ray.rllib.utils.torch_utils import clip_gradients

    from rllib_ners.algorithms.common.learner.gradient_step import (
        NUM_NON_FINITE_GRADIENT_UPDATES,
    )

    ours = _learner()
    ours.host_reads = False
    theirs = copy.deepcopy(ours)

    def no_host_read(*args, **kwargs):
        raise AssertionError("a tensor value was read on the host")

    with monkeypatch.context() as patch:
        patch.setattr(torch.Tensor, "item", no_host_read)
        patch.setattr(torch.Tensor, "__bool__", no_host_read)
        patch.setattr(torch.Tensor, "__float__", no_host_read)
        for _ in range(2):
            ours.apply_gradients(ours.postprocess_gradients(_grads(ours, poison)))
    monkeypatch.setattr(type(theirs), "clip_gradients", staticmethod(clip_gradients))
    for _ in range(2):
        TorchLearner.apply_gradients(
            theirs, theirs.postprocess_gradients(_grads(theirs, poison))
        )
    _assert_same_finite_parameters(ours, theirs)
    counted = ours.metrics.peek((ALL_MODULES, NUM_NON_FINITE_GRADIENT_UPDATES))
    assert float(counted) == (0.0 if poison is None else 2.0)
