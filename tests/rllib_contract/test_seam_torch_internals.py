"""Contract of `rllib_ners.seam.torch_internals`: torch's private ops and hook
registries behave as the update steps assume."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from rllib_ners.seam.torch_internals import (
    TorchDispatchMode,
    foreach_add_,
    foreach_mul,
    foreach_mul_,
    foreach_norms,
    forward_is_observed,
    fused_adam_step_,
    has_non_finite,
    non_finite_flag,
    unobserved_optimizer_step,
)


def _fail(what_changed: str) -> str:
    return f"torch changed: {what_changed}. Adapt rllib_ners/seam/torch_internals.py."


def _tensors(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator) for shape in ((3, 4), (5,), (2,))]


def test_foreach_ops_equal_the_per_tensor_ops():
    tensors, others = _tensors(0), _tensors(1)
    expected_scaled = [t * 0.3 for t in tensors]
    assert all(
        torch.equal(a, b) for a, b in zip(foreach_mul(tensors, 0.3), expected_scaled)
    ), _fail("torch._foreach_mul")
    inplace = [t.clone() for t in tensors]
    foreach_mul_(inplace, torch.tensor(0.3))
    assert all(torch.equal(a, t * torch.tensor(0.3)) for a, t in zip(inplace, tensors))
    added = [t.clone() for t in tensors]
    foreach_add_(added, others)
    assert all(torch.equal(a, t + o) for a, t, o in zip(added, tensors, others)), _fail(
        "torch._foreach_add_"
    )
    norms = foreach_norms(tensors)
    assert all(
        torch.equal(n, torch.linalg.vector_norm(t)) for n, t in zip(norms, tensors)
    )


@pytest.mark.parametrize(
    "poison, expected", [(None, False), (float("nan"), True), (float("inf"), True)]
)
def test_has_non_finite_finds_nan_and_inf_and_leaves_values_alone(poison, expected):
    tensors = _tensors()
    if poison is not None:
        tensors[1][2] = poison
    before = [t.clone() for t in tensors]
    assert has_non_finite(tensors) is expected, _fail(
        "torch._amp_foreach_non_finite_check_and_unscale_ no longer reports nan/inf"
    )
    for a, b in zip(tensors, before):
        assert torch.equal(a.nan_to_num(), b.nan_to_num())


@pytest.mark.parametrize("poison, expected", [(None, 0.0), (float("nan"), 1.0)])
def test_non_finite_flag_is_a_tensor_on_the_tensors_device(poison, expected):
    tensors = _tensors()
    if poison is not None:
        tensors[0][0] = poison
    flag = non_finite_flag(tensors)
    assert torch.is_tensor(flag) and flag.device == tensors[0].device
    assert flag.shape == (1,) and float(flag) == expected, _fail(
        "torch._amp_foreach_non_finite_check_and_unscale_'s found_inf changed"
    )


def test_has_non_finite_declines_what_its_kernel_does_not_take():
    assert has_non_finite([torch.ones(2), torch.ones(2, dtype=torch.float64)]) is None
    assert has_non_finite([torch.ones(2, dtype=torch.int64)]) is None


def _adam(fused: bool):
    torch.manual_seed(0)
    net = nn.Linear(4, 3)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2, eps=1e-7, fused=fused)
    return net, optimizer


def _step_with(net, optimizer, step):
    for seed in range(3):
        torch.manual_seed(seed)
        net(torch.randn(8, 4)).pow(2).mean().backward()
        step()
        optimizer.zero_grad(set_to_none=True)


def test_the_unobserved_step_is_the_optimizers_own_step():
    plain_net, plain = _adam(fused=False)
    net, optimizer = _adam(fused=False)
    step = unobserved_optimizer_step(optimizer)
    assert step is not None, _fail("Optimizer.step is no longer wrapped (__wrapped__)")
    _step_with(plain_net, plain, plain.step)
    _step_with(net, optimizer, lambda: step(optimizer))
    for a, b in zip(plain_net.parameters(), net.parameters()):
        assert torch.equal(a, b)


def test_a_step_hook_or_the_profiler_makes_the_step_observed():
    _, optimizer = _adam(fused=False)
    handle = optimizer.register_step_pre_hook(lambda *args: None)
    assert unobserved_optimizer_step(optimizer) is None, _fail(
        "Optimizer._optimizer_step_pre_hooks"
    )
    handle.remove()
    handle = optimizer.register_step_post_hook(lambda *args: None)
    assert unobserved_optimizer_step(optimizer) is None
    handle.remove()
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    handle = register_optimizer_step_pre_hook(lambda *args: None)
    try:
        assert unobserved_optimizer_step(optimizer) is None, _fail(
            "torch.optim.optimizer._global_optimizer_pre_hooks"
        )
    finally:
        handle.remove()
    with torch.autograd.profiler.profile():
        assert unobserved_optimizer_step(optimizer) is None, _fail(
            "torch.autograd.profiler._is_profiler_enabled"
        )
    assert unobserved_optimizer_step(optimizer) is not None


def test_the_fused_adam_kernel_steps_as_fused_adam_does():
    net, optimizer = _adam(fused=True)
    _step_with(net, optimizer, optimizer.step)  # Adam creates its state
    twin_net = copy.deepcopy(net)
    twin = torch.optim.Adam(twin_net.parameters(), lr=1e-2, eps=1e-7, fused=True)
    # A copy: load_state_dict would share the state tensors.
    twin.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    torch.manual_seed(9)
    batch = torch.randn(8, 4)
    net(batch).pow(2).mean().backward()
    twin_net(batch).pow(2).mean().backward()
    optimizer.step()
    params = list(twin_net.parameters())
    states = [twin.state[p] for p in params]
    group = twin.param_groups[0]
    fused_adam_step_(
        params,
        [p.grad for p in params],
        [s["exp_avg"] for s in states],
        [s["exp_avg_sq"] for s in states],
        [s["step"] for s in states],
        lr=group["lr"],
        beta1=group["betas"][0],
        beta2=group["betas"][1],
        weight_decay=group["weight_decay"],
        eps=group["eps"],
        maximize=group["maximize"],
    )
    for a, b in zip(net.parameters(), params):
        assert torch.equal(a, b), _fail("torch._fused_adam_'s arguments")
    for p, q in zip(net.parameters(), params):
        assert torch.equal(optimizer.state[p]["step"], twin.state[q]["step"])


def test_forward_hooks_make_a_call_observed():
    layer = nn.Linear(2, 2)
    assert not forward_is_observed(layer)
    handle = layer.register_forward_hook(lambda *args: None)
    assert forward_is_observed(layer), _fail("nn.Module._forward_hooks")
    handle.remove()
    handle = layer.register_forward_pre_hook(lambda *args: None)
    assert forward_is_observed(layer), _fail("nn.Module._forward_pre_hooks")
    handle.remove()
    from torch.nn.modules.module import register_module_forward_hook

    handle = register_module_forward_hook(lambda *args: None)
    try:
        assert forward_is_observed(layer), _fail(
            "torch.nn.modules.module._global_forward_hooks"
        )
    finally:
        handle.remove()
    assert not forward_is_observed(layer)


def test_a_dispatch_mode_sees_the_ops_below_the_python_api_by_name():
    """What `HostReadGuard` (utils/update_graphs.py) relies on: a mode sees
    each aten op, torch's kernels' own host reads included, named
    "aten::op" (default overload) or "aten::op.overload"."""

    class Names(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.append(func.name())
            return func(*args, **(kwargs or {}))

    x = torch.tensor([1.0, -2.0])
    with Names() as names:
        x.sum().item()
        x[x > 0]
        torch.normal(x, x.abs())
    assert "aten::_local_scalar_dense" in names.seen, _fail(".item() dispatch")
    assert "aten::index.Tensor" in names.seen, _fail("boolean-mask indexing")
    assert "aten::normal.Tensor_Tensor" in names.seen, _fail("torch.normal op name")
