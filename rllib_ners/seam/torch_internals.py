"""torch: the private ops and hook registries the update steps use.

A small network's update on a CPU is dominated by per-tensor and per-call
overhead: one kernel per parameter tensor, torch's wrapper around every
optimizer step, `nn.Module.__call__`'s bookkeeping. The functions here reach
the multi-tensor ("foreach") kernels and the fused Adam kernel that torch's
own optimizers and `GradScaler` use, and tell when skipping a wrapper would
be observable (a hook or the profiler would miss a call). `TorchDispatchMode`
lets `utils.update_graphs.HostReadGuard` see the ops an update dispatches. Each
is pinned by
`tests/rllib_contract/test_seam_torch_internals.py`. No Ray imports.
"""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Union

import torch
from torch import nn

# The base class of a mode that sees every aten op below the Python API
# (torch's kernels' own calls included), as `op.name()`: "aten::item" for an
# op's default overload, "aten::normal.Tensor_Tensor" for another. Public in
# use (torch's docs and tests), private in location.
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = [
    "TorchDispatchMode",
    "foreach_add_",
    "foreach_mul",
    "foreach_mul_",
    "foreach_norms",
    "forward_is_observed",
    "fused_adam_step_",
    "has_non_finite",
    "unobserved_optimizer_step",
]

Scalar = Union[float, torch.Tensor]


def foreach_mul_(tensors: Sequence[torch.Tensor], factor: Scalar) -> None:
    """`t *= factor` for every tensor, as one multi-tensor kernel."""
    torch._foreach_mul_(tensors, factor)


def foreach_mul(tensors: Sequence[torch.Tensor], factor: Scalar) -> List[torch.Tensor]:
    """`[t * factor for t in tensors]`, as one multi-tensor kernel."""
    return torch._foreach_mul(tensors, factor)


def foreach_add_(
    tensors: Sequence[torch.Tensor], others: Union[Sequence[torch.Tensor], Scalar]
) -> None:
    """`t += other` pairwise (or `t += scalar`), as one multi-tensor kernel."""
    torch._foreach_add_(tensors, others)


def foreach_norms(tensors: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """The 2-norm of each tensor, as one multi-tensor kernel."""
    return torch._foreach_norm(tensors, 2.0)


def non_finite_flag(tensors: Sequence[torch.Tensor]) -> Optional[torch.Tensor]:
    """A `[1]` float tensor on the tensors' device: 1.0 where any holds a nan
    or inf, else 0.0, from one fused pass (the kernel `GradScaler` runs to
    unscale gradients, here with a scale of exactly 1.0, which leaves every
    value as it is) and read nowhere. None where torch has no such kernel for
    the tensors' device and dtype, or they differ in either."""
    first = tensors[0]
    if not all(t.device == first.device and t.dtype == first.dtype for t in tensors):
        return None
    if first.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return None
    found_inf = torch.zeros(1, device=first.device)
    try:
        torch._amp_foreach_non_finite_check_and_unscale_(
            tensors, found_inf, torch.ones(1, device=first.device)
        )
    except (RuntimeError, NotImplementedError):
        return None
    return found_inf


def has_non_finite(tensors: Sequence[torch.Tensor]) -> Optional[bool]:
    """Whether any tensor holds a nan or inf (`non_finite_flag`, read on the
    host); None where that has no kernel."""
    found_inf = non_finite_flag(tensors)
    return None if found_inf is None else bool(found_inf)


def unobserved_optimizer_step(optimizer: torch.optim.Optimizer) -> Optional[Callable]:
    """The optimizer class's own step function, without torch's wrapper (a
    profiler record and two walks over the step hooks per call), when nothing
    would see the difference: no step hooks on the optimizer or globally, no
    profiler running. None otherwise (call `optimizer.step()` then)."""
    from torch.optim import optimizer as optimizer_module

    inner = getattr(type(optimizer).step, "__wrapped__", None)
    if (
        inner is None
        or optimizer_module._global_optimizer_pre_hooks
        or optimizer_module._global_optimizer_post_hooks
        or torch.autograd.profiler._is_profiler_enabled
        or optimizer._optimizer_step_pre_hooks
        or optimizer._optimizer_step_post_hooks
    ):
        return None
    return inner


def fused_adam_step_(
    params: List[torch.Tensor],
    grads: List[torch.Tensor],
    exp_avgs: List[torch.Tensor],
    exp_avg_sqs: List[torch.Tensor],
    steps: List[torch.Tensor],
    *,
    lr: float,
    beta1: float,
    beta2: float,
    weight_decay: float,
    eps: float,
    maximize: bool,
) -> None:
    """One step of `torch.optim.Adam(fused=True)` (no amsgrad, no grad scale)
    on tensors of one device and dtype: what `Adam.step` runs once it has
    grouped a param group's state, `steps += 1` then the fused kernel."""
    torch._foreach_add_(steps, 1)
    torch._fused_adam_(
        params,
        grads,
        exp_avgs,
        exp_avg_sqs,
        [],
        steps,
        amsgrad=False,
        lr=lr,
        beta1=beta1,
        beta2=beta2,
        weight_decay=weight_decay,
        eps=eps,
        maximize=maximize,
        grad_scale=None,
        found_inf=None,
    )


def forward_is_observed(module: nn.Module) -> bool:
    """Whether calling `module(x)` runs forward hooks (on the module or
    global) besides `module.forward(x)`."""
    from torch.nn.modules import module as module_module

    return bool(
        module._forward_hooks
        or module._forward_pre_hooks
        or module_module._global_forward_hooks
        or module_module._global_forward_pre_hooks
    )
