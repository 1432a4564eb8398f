"""The Learner update pieces' tensor ops equal RLlib's, bit for bit.

* `clip_gradients_foreach` vs RLlib's `clip_gradients` (global norm, with nan
  and inf gradients, below and above the clip value, and the other modes);
* `polyak_update` and `PolyakTargets` (whose CPU targets live in one flat
  tensor) vs RLlib's `update_target_network` (tau 0.005, 0.3 and 1);
* `run_mlp_layers` vs calling the `nn.Sequential` (values and gradients);
* `columns_to_tensors` vs RLlib's `convert_to_torch_tensor` (dtypes, values);
* `uniform_allowed_choice` vs `torch.multinomial` (the same draws, seed by seed,
  and its error for a row that allows nothing);
* `EpsilonGreedyChoice` vs RLlib's epsilon-greedy ops (the same actions and
  draws for Q-values with ties, zeros, nan and infinities, epsilon as a tensor
  or a number, after a copy and a pickle, and RLlib's error);
* `step_optimizer` vs `optimizer.step()`: the same parameters and Adam state
  over steps with learning-rate changes, a state reload, a parameter without
  gradient, two parameter groups and unfused or AMSGrad Adam; hooks still run.
"""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch
from ray.rllib.utils.torch_utils import (
    clip_gradients,
    convert_to_torch_tensor,
    update_target_network,
)
from torch import nn

from rllib_ners.algorithms.common.learner.deferred_updates import columns_to_tensors
from rllib_ners.algorithms.common.learner.gradient_step import (
    all_finite,
    clip_gradients_foreach,
)
from rllib_ners.algorithms.common.learner.target_updates import (
    PolyakTargets,
    flatten_into_one,
    polyak_pairs,
    polyak_update,
)
from rllib_ners.utils import action_sampling
from rllib_ners.utils.action_sampling import (
    EpsilonGreedyChoice,
    gaussian_sample,
    uniform_allowed_choice,
)
from rllib_ners.utils.mlp_layers import mlp_layers_of, run_mlp_layers
from rllib_ners.utils.optimizer_steps import (
    cached_fused_adam_lists,
    step_optimizer,
    step_optimizers,
)

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


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_global_norm_clipping_equals_rllibs_over_scales_and_clip_values(dtype):
    """Below, at and above the clip value (the host-side coefficient), with
    integer and fractional clip values, and norms that overflow float32."""
    generator = torch.Generator().manual_seed(7)
    cases = [(10.0**e, clip) for e in range(-6, 21, 2) for clip in (0.5, 10, 40.0)]
    cases += [(1.0, clip) for clip in (1e-3, 3.3, 123.456)]
    for scale, clip in cases:
        grads = {
            i: (torch.randn(s, generator=generator) * scale).to(dtype)
            for i, s in enumerate(SHAPES)
        }
        ours = {k: v.clone() for k, v in grads.items()}
        norm_ours = clip_gradients_foreach(
            ours, grad_clip=clip, grad_clip_by="global_norm"
        )
        norm_theirs = clip_gradients(grads, grad_clip=clip, grad_clip_by="global_norm")
        assert torch.equal(norm_ours, norm_theirs), (scale, clip)
        for key in ours:
            assert torch.equal(ours[key], grads[key]), (scale, clip, key)
        # The fused check says what RLlib's per-tensor check says.
        rllib_finite = all(bool(torch.isfinite(g).all()) for g in grads.values())
        assert all_finite(list(ours.values())) is rllib_finite, (scale, clip)
    # The clip value exactly: the coefficient's float32 arithmetic decides.
    grads = {0: torch.tensor([3.0, 4.0], dtype=dtype)}
    ours = {0: grads[0].clone()}
    clip_gradients_foreach(ours, grad_clip=5.0, grad_clip_by="global_norm")
    clip_gradients(grads, grad_clip=5.0, grad_clip_by="global_norm")
    assert torch.equal(ours[0], grads[0])


@pytest.mark.parametrize("special", ["nan", "inf"])
def test_global_norm_clipping_keeps_non_finite_gradients_detectable(special):
    grads = _gradients(1.0, special)
    theirs = {k: v.clone() for k, v in grads.items()}
    clip_gradients_foreach(grads, grad_clip=40.0, grad_clip_by="global_norm")
    clip_gradients(theirs, grad_clip=40.0, grad_clip_by="global_norm")
    for key in grads:
        assert torch.equal(grads[key].isfinite(), theirs[key].isfinite()), key
    assert not all_finite(list(grads.values()))


@pytest.mark.parametrize("mode", ["value", "norm"])
def test_other_clip_modes_are_rllibs(mode):
    ours, theirs = _gradients(50.0), _gradients(50.0)
    clip_gradients_foreach(ours, grad_clip=1.0, grad_clip_by=mode)
    clip_gradients(theirs, grad_clip=1.0, grad_clip_by=mode)
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert clip_gradients_foreach(ours, grad_clip=None) is None


@pytest.mark.parametrize("tau", [0.005, 0.3, 1.0])
@pytest.mark.parametrize("path", ["foreach", "flat"])
def test_polyak_update_equals_rllibs_update_target_network(tau, path):
    torch.manual_seed(0)
    main = nn.Sequential(nn.Linear(5, 64), nn.ReLU(), nn.Linear(64, 1))
    target_ours = copy.deepcopy(main)
    for param in target_ours.parameters():
        param.data.normal_()
    # Signed zeros and non-finite targets combine as in RLlib's expression.
    first = next(target_ours.parameters()).data
    first[0, :5] = torch.tensor([0.0, -0.0, float("nan"), float("inf"), -float("inf")])
    target_theirs = copy.deepcopy(target_ours)
    targets = PolyakTargets([(main, target_ours)])
    assert targets.flat is not None  # CPU: the targets in one flat tensor
    for _ in range(50):
        if path == "flat":
            targets.update(tau)
        else:
            polyak_update(*polyak_pairs(main, target_ours), tau)
        update_target_network(main, target_theirs, tau)
        for param in main.parameters():  # the main net moves between updates
            param.data.add_(torch.randn_like(param) * 0.1)
    for ours, theirs in zip(
        target_ours.state_dict().values(), target_theirs.state_dict().values()
    ):
        assert torch.equal(ours.nan_to_num(), theirs.nan_to_num())
        assert torch.equal(ours.isnan(), theirs.isnan())
        assert torch.equal(ours.signbit(), theirs.signbit())


def test_flat_targets_stay_the_modules_tensors_and_follow_a_replaced_one():
    torch.manual_seed(1)
    main = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2))
    target = copy.deepcopy(main)
    params_before = list(target.parameters())
    values_before = [param.detach().clone() for param in params_before]
    targets = PolyakTargets([(main, target)])
    # The same parameter objects and values, now views into one flat tensor.
    assert list(target.parameters()) == params_before
    assert all(torch.equal(p, v) for p, v in zip(target.parameters(), values_before))
    flat = targets.flat.flat_targets
    assert flat.numel() == sum(p.numel() for p in params_before)
    assert params_before[0].data_ptr() == flat.data_ptr()
    # A checkpoint restore copies into them in place: still the flat tensor.
    target.load_state_dict(main.state_dict())
    assert targets.flat.flat_targets is flat
    assert params_before[0].data_ptr() == flat.data_ptr()
    # Something replaces a target's memory: the next update flattens again and
    # updates every target.
    params_before[1].data = params_before[1].data.clone()
    theirs = copy.deepcopy(target)
    targets.update(0.5)
    update_target_network(main, theirs, 0.5)
    assert targets.flat.flat_targets is not flat
    for ours, expected in zip(
        target.state_dict().values(), theirs.state_dict().values()
    ):
        assert torch.equal(ours, expected)
    # The same for a main tensor: the update reads its new memory.
    first_main = next(main.parameters())
    first_main.data = first_main.data + 1.0
    targets.update(0.5)
    update_target_network(main, theirs, 0.5)
    for ours, expected in zip(
        target.state_dict().values(), theirs.state_dict().values()
    ):
        assert torch.equal(ours, expected)


def test_flattening_refuses_shared_or_mixed_tensors():
    shared = torch.zeros(3)
    assert flatten_into_one([shared, shared]) is None
    mixed = [torch.zeros(3), torch.zeros(2, dtype=torch.float64)]
    pointers = [tensor.data_ptr() for tensor in mixed]
    assert flatten_into_one(mixed) is None
    assert [tensor.data_ptr() for tensor in mixed] == pointers  # nothing moved


def test_polyak_pairs_refuse_non_float_state():
    main = nn.BatchNorm1d(3)  # num_batches_tracked is an integer buffer
    assert polyak_pairs(main, copy.deepcopy(main)) is None


def test_plain_mlp_runs_the_same_ops_with_the_same_gradients():
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 2)
    )
    layers = mlp_layers_of(net)
    assert layers is not None and len(layers) == 5
    x = torch.randn(7, 6)
    out_plain = run_mlp_layers(layers, x)
    out_module = net(x)
    assert torch.equal(out_plain, out_module)
    grads_plain = torch.autograd.grad(out_plain.square().sum(), list(net.parameters()))
    grads_module = torch.autograd.grad(
        out_module.square().sum(), list(net.parameters())
    )
    assert all(torch.equal(a, b) for a, b in zip(grads_plain, grads_module))


def test_mlp_layers_of_refuses_other_modules():
    assert mlp_layers_of(nn.Sequential(nn.Linear(3, 3), nn.LayerNorm(3))) is None
    assert mlp_layers_of(nn.Linear(3, 3)) is None


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


@pytest.mark.parametrize("rows, actions", [(1, 2), (5, 3), (64, 18)])
def test_uniform_allowed_choice_draws_what_multinomial_draws(rows, actions):
    for seed in range(50):
        generator = torch.Generator().manual_seed(seed)
        allowed = torch.rand(rows, actions, generator=generator) < 0.6
        allowed[
            torch.arange(rows), torch.randint(actions, (rows,), generator=generator)
        ] = True
        torch.manual_seed(seed)
        theirs = torch.multinomial(allowed.float(), num_samples=1).squeeze(1)
        theirs_next = torch.rand(3)
        torch.manual_seed(seed)
        ours = uniform_allowed_choice(allowed)
        ours_next = torch.rand(3)  # the generator is left where torch leaves it
        assert ours.dtype == theirs.dtype
        assert torch.equal(ours, theirs)
        assert torch.equal(ours_next, theirs_next)
        assert bool(allowed[torch.arange(rows), ours].all())


def _rllibs_epsilon_greedy(q, epsilon):
    """`DefaultDQNTorchRLModule._forward_exploration` after its Q-values, as
    RLlib 2.60 writes it (the categorical's deterministic sample is the argmax)."""
    exploit_actions = torch.argmax(q, dim=-1)
    random_actions = torch.squeeze(
        torch.multinomial(
            (torch.nan_to_num(q.reshape(-1, q.size(-1)), neginf=0.0) != 0.0).float(),
            num_samples=1,
        ),
        dim=1,
    )
    return torch.where(
        torch.rand((q.shape[0],), device=random_actions.device) < epsilon,
        random_actions,
        exploit_actions,
    )


def _crafted_q_values(rows, actions, seed):
    """Q-values with ties, exact zeros, nan and infinities in some rows (every
    row keeps an allowed action)."""
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(rows, actions, generator=generator)
    special = torch.tensor([0.0, float("nan"), float("-inf"), float("inf"), 1.5])
    picks = torch.rand(rows, actions, generator=generator) < 0.3
    q[picks] = special[
        torch.randint(len(special), (int(picks.sum()),), generator=generator)
    ]
    q[0, :] = 1.5  # a tie across the row
    q[torch.arange(rows), torch.randint(actions, (rows,), generator=generator)] = 0.25
    return q


@pytest.mark.parametrize("rows, actions", [(1, 2), (1, 6), (7, 3), (64, 18)])
@pytest.mark.parametrize("as_tensor", [True, False])
def test_epsilon_greedy_choice_acts_and_draws_as_rllib(rows, actions, as_tensor):
    choose = EpsilonGreedyChoice()
    for seed in range(40):
        q = _crafted_q_values(rows, actions, seed)
        value = (0.0, 0.05, 0.3, 0.7, 1.0)[seed % 5] + 1e-9 * seed
        if seed % 4 == 3:
            # Epsilon exactly the first row's coin: `rand < epsilon` is False.
            torch.manual_seed(seed)
            torch.empty(rows, actions).exponential_(1)
            value = float(torch.rand(rows)[0])
        epsilon = torch.tensor(value) if as_tensor else value
        if seed == 20:  # the drawn tensors survive a copy and a pickle
            choose = copy.deepcopy(choose)
        if seed == 30:
            choose = pickle.loads(pickle.dumps(choose))
        torch.manual_seed(seed)
        theirs = _rllibs_epsilon_greedy(q, epsilon)
        theirs_next = torch.rand(3)
        torch.manual_seed(seed)
        ours = choose(q, epsilon)
        ours_next = torch.rand(3)
        assert ours.dtype == theirs.dtype == torch.int64
        assert torch.equal(ours, theirs), seed
        assert torch.equal(ours_next, theirs_next), seed


def test_epsilon_greedy_choice_runs_rllibs_ops_where_numpy_cannot():
    choose = EpsilonGreedyChoice()
    q = _crafted_q_values(5, 4, seed=1)
    for inputs in (q.requires_grad_(), q.detach().double(), q.detach().half()):
        torch.manual_seed(0)
        ours = choose(inputs, 0.5)
        torch.manual_seed(0)
        theirs = _rllibs_epsilon_greedy(inputs.detach(), 0.5)
        assert torch.equal(ours, theirs)
    # A row without an allowed action fails as RLlib's multinomial does.
    empty = torch.tensor([[1.0, 2.0], [0.0, float("nan")]])
    with pytest.raises(RuntimeError) as theirs:
        _rllibs_epsilon_greedy(empty, 0.5)
    with pytest.raises(RuntimeError) as ours:
        choose(empty, 0.5)
    assert str(ours.value) == str(theirs.value)


def test_uniform_allowed_choice_fails_as_multinomial_on_an_empty_row():
    allowed = torch.tensor([[True, False], [False, False]])
    with pytest.raises(RuntimeError) as theirs:
        torch.multinomial(allowed.float(), 1)
    with pytest.raises(RuntimeError) as ours:
        uniform_allowed_choice(allowed)
    assert str(ours.value) == str(theirs.value)


def test_step_optimizer_takes_optimizer_steps_and_runs_hooks():
    def trained(step, hook=False):
        torch.manual_seed(0)
        net = nn.Linear(4, 3)
        optimizer = torch.optim.Adam(net.parameters(), lr=0.1, fused=True)
        calls = []
        if hook:
            optimizer.register_step_post_hook(lambda *args: calls.append(1))
        for _ in range(3):
            net.weight.grad = torch.ones_like(net.weight)
            net.bias.grad = torch.full_like(net.bias, -2.0)
            step(optimizer)
        return [p.detach().clone() for p in net.parameters()], calls

    plain, _ = trained(lambda optimizer: optimizer.step())
    lean, _ = trained(step_optimizer)
    assert all(torch.equal(a, b) for a, b in zip(plain, lean))
    hooked, calls = trained(step_optimizer, hook=True)
    assert calls == [1, 1, 1]
    assert all(torch.equal(a, b) for a, b in zip(plain, hooked))


def _adam_run(step, *, adam_kwargs, groups=1, events=()):
    """Six steps of Adam on a small net; `events` at given steps: a learning-rate
    change, a state reload (`load_state_dict`), a parameter left without grad."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    params = list(net.parameters())
    if groups == 2:
        param_groups = [{"params": params[:2]}, {"params": params[2:], "lr": 0.02}]
    else:
        param_groups = params
    optimizer = torch.optim.Adam(param_groups, lr=0.05, **adam_kwargs)
    generator = torch.Generator().manual_seed(1)
    for i in range(6):
        for param in params:
            param.grad = torch.randn(param.shape, generator=generator)
        if ("no_grad", i) in events:
            params[-1].grad = None
        if ("lr", i) in events:
            optimizer.param_groups[0]["lr"] = 0.001
        if ("reload", i) in events:
            optimizer.load_state_dict(copy.deepcopy(optimizer.state_dict()))
        step(optimizer)
    state = optimizer.state_dict()["state"]
    return [p.detach().clone() for p in params], state, optimizer


@pytest.mark.parametrize(
    "adam_kwargs",
    [
        {"fused": True},
        {"fused": True, "eps": 1.5e-4, "weight_decay": 0.1},
        {},
        {"amsgrad": True},
    ],
)
@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize(
    "events", [(), (("lr", 3),), (("reload", 2),), (("no_grad", 4),)]
)
def test_step_optimizer_equals_adam_step(adam_kwargs, groups, events):
    plain = _adam_run(
        lambda optimizer: optimizer.step(),
        adam_kwargs=adam_kwargs,
        groups=groups,
        events=events,
    )
    lean = _adam_run(
        step_optimizer, adam_kwargs=adam_kwargs, groups=groups, events=events
    )
    assert all(torch.equal(a, b) for a, b in zip(plain[0], lean[0]))
    # Fused Adam (not AMSGrad) ran its kernels directly.
    lists = cached_fused_adam_lists(lean[2])
    direct = adam_kwargs.get("fused", False) and not adam_kwargs.get("amsgrad")
    assert (lists is not None and lists.tensors is not None) == direct
    assert plain[1].keys() == lean[1].keys()
    for index, state in plain[1].items():
        for key, value in state.items():
            assert torch.equal(value, lean[1][index][key]), (index, key)


def test_step_optimizers_shares_kernels_and_equals_stepping_each():
    """Four fused Adams (SAC's: three with one setting, one with another lr) and
    an SGD stepped together: the same parameters and state as one by one."""

    def trained(step_all):
        torch.manual_seed(0)
        nets = [nn.Linear(5, 4) for _ in range(4)]
        optimizers = [
            torch.optim.Adam(net.parameters(), lr=lr, eps=1e-7, fused=True)
            for net, lr in zip(nets[:3], (3e-4, 3e-4, 1e-3))
        ] + [torch.optim.SGD(nets[3].parameters(), lr=0.1)]
        generator = torch.Generator().manual_seed(1)
        for _ in range(4):
            for net in nets:
                for param in net.parameters():
                    param.grad = torch.randn(param.shape, generator=generator)
            step_all(optimizers)
        return [p.detach().clone() for net in nets for p in net.parameters()], [
            o.state_dict()["state"] for o in optimizers
        ]

    one_by_one = trained(lambda optimizers: [o.step() for o in optimizers])
    together = trained(step_optimizers)
    assert all(torch.equal(a, b) for a, b in zip(one_by_one[0], together[0]))
    for theirs, ours in zip(one_by_one[1], together[1]):
        for index, state in theirs.items():
            for key, value in state.items():
                assert torch.equal(value, ours[index][key]), (index, key)


def test_the_squashed_gaussians_bounds_are_rllibs():
    """`action_sampling` restates RLlib's log-std bounds and atanh margin to stay
    free of Ray: they must be RLlib's values."""
    from ray.rllib.utils import numpy as rllib_numpy

    for name in ("MIN_LOG_NN_OUTPUT", "MAX_LOG_NN_OUTPUT", "SMALL_NUMBER"):
        assert getattr(action_sampling, name) == getattr(rllib_numpy, name), name


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(7,), (256, 3), (33, 17)])
def test_gaussian_sample_draws_what_torch_normal_draws(shape, dtype):
    """`gaussian_sample` (no host check of the scale, so a CUDA graph can
    capture it) equals `torch.normal(loc, scale)` from the same seed, bit for
    bit, for the non-contiguous halves SAC's logits are split into."""
    logits = torch.randn(*shape[:-1], 2 * shape[-1], dtype=dtype)
    loc, log_std = logits.chunk(2, dim=-1)
    scale = log_std.exp()
    torch.manual_seed(11)
    expected = torch.normal(loc, scale)
    torch.manual_seed(11)
    got = gaussian_sample(loc, scale)
    assert got.is_contiguous() and torch.equal(got, expected)
