"""The fast Learner's tensor ops equal RLlib's, bit for bit.

* `clip_gradients_foreach` vs RLlib's `clip_gradients` (global norm, with nan
  and inf gradients, below and above the clip value, and the other modes);
* `polyak_update` vs RLlib's `update_target_network` (tau 0.005 and 1);
* `run_plain_mlp` vs calling the `nn.Sequential` (values and gradients);
* `columns_to_tensors` vs RLlib's `convert_to_torch_tensor` (dtypes, values).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from ray.rllib.utils.torch_utils import (
    clip_gradients,
    convert_to_torch_tensor,
    update_target_network,
)
from torch import nn

from rllib_ners.algorithms.common.fast_torch_learner import (
    clip_gradients_foreach,
    columns_to_tensors,
    polyak_pairs,
    polyak_update,
)
from rllib_ners.utils.torch_ops import plain_mlp_layers, run_plain_mlp

SHAPES = [(256, 4), (256,), (256, 256), (256,), (2, 256), (2,)]


def _gradients(scale: float, special=None):
    generator = torch.Generator().manual_seed(int(scale * 1000) + len(str(special)))
    grads = {
        i: torch.randn(s, generator=generator) * scale for i, s in enumerate(SHAPES)
    }
    if special == "nan":
        grads[1][3] = float("nan")
    if special == "inf":
        grads[2][0, 0] = float("inf")
    return grads


@pytest.mark.parametrize("special", [None, "nan", "inf"])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 50.0])
def test_global_norm_clipping_equals_rllibs_bit_for_bit(scale, special):
    ours, theirs = _gradients(scale, special), _gradients(scale, special)
    norm_ours = clip_gradients_foreach(ours, grad_clip=40.0, grad_clip_by="global_norm")
    norm_theirs = clip_gradients(theirs, grad_clip=40.0, grad_clip_by="global_norm")
    assert torch.equal(norm_ours, norm_theirs)
    for key in ours:
        assert torch.equal(ours[key].nan_to_num(), theirs[key].nan_to_num()), key
        assert torch.equal(ours[key].isnan(), theirs[key].isnan()), key
    if special is None and scale == 50.0:  # clipping was active
        assert float(norm_ours) > 40.0


@pytest.mark.parametrize("mode", ["value", "norm"])
def test_other_clip_modes_are_rllibs(mode):
    ours, theirs = _gradients(50.0), _gradients(50.0)
    clip_gradients_foreach(ours, grad_clip=1.0, grad_clip_by=mode)
    clip_gradients(theirs, grad_clip=1.0, grad_clip_by=mode)
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert clip_gradients_foreach(ours, grad_clip=None) is None


@pytest.mark.parametrize("tau", [0.005, 1.0])
def test_polyak_update_equals_rllibs_update_target_network(tau):
    torch.manual_seed(0)
    main = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 1))
    target_ours = copy.deepcopy(main)
    for param in target_ours.parameters():
        param.data.normal_()
    target_theirs = copy.deepcopy(target_ours)
    for _ in range(3):
        polyak_update(*polyak_pairs(main, target_ours), tau)
        update_target_network(main, target_theirs, tau)
        for param in main.parameters():  # the main net moves between updates
            param.data.add_(0.1)
    for ours, theirs in zip(
        target_ours.state_dict().values(), target_theirs.state_dict().values()
    ):
        assert torch.equal(ours, theirs)


def test_polyak_pairs_refuse_non_float_state():
    main = nn.BatchNorm1d(3)  # num_batches_tracked is an integer buffer
    assert polyak_pairs(main, copy.deepcopy(main)) is None


def test_plain_mlp_runs_the_same_ops_with_the_same_gradients():
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 2)
    )
    layers = plain_mlp_layers(net)
    assert layers is not None and len(layers) == 5
    x = torch.randn(7, 6)
    out_plain = run_plain_mlp(layers, x)
    out_module = net(x)
    assert torch.equal(out_plain, out_module)
    grads_plain = torch.autograd.grad(out_plain.square().sum(), list(net.parameters()))
    grads_module = torch.autograd.grad(
        out_module.square().sum(), list(net.parameters())
    )
    assert all(torch.equal(a, b) for a, b in zip(grads_plain, grads_module))


def test_plain_mlp_layers_refuse_other_modules():
    assert plain_mlp_layers(nn.Sequential(nn.Linear(3, 3), nn.LayerNorm(3))) is None
    assert plain_mlp_layers(nn.Linear(3, 3)) is None


def test_columns_become_the_tensors_rllib_converts_them_to():
    columns = {
        "obs": np.random.default_rng(0).normal(size=(4, 3)),  # float64
        "actions": np.arange(4),
        "terminateds": np.array([True, False, False, True]),
        "weights": np.ones(4, dtype=np.float32),
        "names": np.array(["a", "b", "c", "d"], dtype=object),
    }
    ours = columns_to_tensors(columns, "cpu")
    theirs = convert_to_torch_tensor(dict(columns), device="cpu")
    assert isinstance(ours["names"], np.ndarray)
    for key in ("obs", "actions", "terminateds", "weights"):
        assert ours[key].dtype == theirs[key].dtype, key
        assert torch.equal(ours[key], theirs[key]), key
