"""Adam built fused, and optimizer steps without torch's per-step wrapper.

`make_adam` builds a `torch.optim.Adam` fused into one kernel per step;
`step_optimizer` / `step_optimizers` make `optimizer.step()`'s update with less
per-call overhead, fused Adams through their listed tensors (`FusedAdamLists`).
The same values as `optimizer.step()` (tested). No Ray.
"""

from __future__ import annotations

import weakref
from typing import Dict, List, Optional, Sequence

import torch

from rllib_ners.seam.torch_internals import fused_adam_step_, unobserved_optimizer_step

# Each fused Adam's listed tensors (see `FusedAdamLists`), kept for as long as
# the optimizer lives.
_FUSED_ADAM_LISTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def make_adam(params, **kwargs) -> torch.optim.Adam:
    """`torch.optim.Adam`, fused into one kernel per step for float parameters on
    CPU or CUDA: much less per-tensor overhead than the default for-loop
    implementation on CPU. Same update, same state dict. Other devices get the
    default implementation. `params` may be tensors or parameter groups."""
    params = list(params)
    tensors = [
        tensor
        for item in params
        for tensor in (item["params"] if isinstance(item, dict) else [item])
    ]
    fused = bool(tensors) and all(
        p.device.type in ("cpu", "cuda") and torch.is_floating_point(p) for p in tensors
    )
    return torch.optim.Adam(params, fused=fused or None, **kwargs)


def step_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """`optimizer.step()`, the same update with less per-call overhead.

    When nothing would see the difference (no step hooks, global or on this
    optimizer, and no torch profiler running) it skips torch's wrapper around
    every step (a profiler record and two walks over the hooks, ~10 us a call).
    A fused `torch.optim.Adam` whose state exists (after its first step) then
    runs its two kernels directly (`FusedAdamLists`): what `Adam.step` ends up
    calling, without regrouping every parameter's state per step (~25 us on a
    DQN's six tensors). Anything else takes `optimizer.step()`.
    """
    step_optimizers([optimizer])


def step_optimizers(optimizers: Sequence[torch.optim.Optimizer]) -> None:
    """`step_optimizer` for each of `optimizers`; the param groups of fused
    Adams with the same settings, device and dtype share one kernel call (the
    kernel updates each tensor on its own: the same values as step by step,
    e.g. SAC's four optimizers in one call instead of four)."""
    fused: Dict[tuple, list] = {}
    for optimizer in optimizers:
        step = unobserved_optimizer_step(optimizer)
        if step is None:
            optimizer.step()
            continue
        lists = FusedAdamLists.of(optimizer)
        parts = lists.kernel_parts() if lists is not None else None
        if parts is None:
            step(optimizer)
            continue
        for key, part in parts:
            fused.setdefault(key, []).append(part)
    for (lr, beta1, beta2, weight_decay, eps, maximize, _), parts in fused.items():
        params, grads, exp_avgs, exp_avg_sqs, steps = (
            [tensor for part in parts for tensor in part[i]] for i in range(5)
        )
        fused_adam_step_(
            params,
            grads,
            exp_avgs,
            exp_avg_sqs,
            steps,
            lr=lr,
            beta1=beta1,
            beta2=beta2,
            weight_decay=weight_decay,
            eps=eps,
            maximize=maximize,
        )


def cached_fused_adam_lists(optimizer) -> Optional[FusedAdamLists]:
    """The lists `step_optimizers` built for `optimizer`, if it built any."""
    return _FUSED_ADAM_LISTS.get(optimizer)


class FusedAdamLists:
    """A fused Adam's parameters and state tensors, listed once per group, and
    its step as `Adam.step` -> `_fused_adam` runs it for one device and dtype:
    `_foreach_add_(steps, 1)`, then `_fused_adam_` with the group's settings.

    The lists stay valid while the optimizer keeps its state and param-group
    objects (`load_state_dict` replaces both: the lists are then rebuilt)."""

    __slots__ = ("state", "groups", "tensors")

    @classmethod
    def of(cls, optimizer) -> Optional[FusedAdamLists]:
        """The optimizer's lists, or None if `Adam.step` must run."""
        lists = _FUSED_ADAM_LISTS.get(optimizer)
        if lists is None or not lists.is_current(optimizer):
            lists = cls.build(optimizer)
            if lists is None:  # no state yet: ask again after the next step
                return None
            _FUSED_ADAM_LISTS[optimizer] = lists
        return lists if lists.tensors is not None else None

    @classmethod
    def build(cls, optimizer) -> Optional[FusedAdamLists]:
        lists = cls()
        lists.state = optimizer.state
        lists.groups = list(optimizer.param_groups)
        lists.tensors = None  # not served (settings): remembered as such
        if type(optimizer) is not torch.optim.Adam:
            return lists
        if (
            getattr(optimizer, "grad_scale", None) is not None
            or getattr(optimizer, "found_inf", None) is not None
        ):
            return lists
        tensors = []
        for group in optimizer.param_groups:
            if (
                not group["fused"]
                or group["amsgrad"]
                or group["capturable"]
                or group["differentiable"]
                or group["decoupled_weight_decay"]
                or torch.is_tensor(group["lr"])
                or any(torch.is_tensor(beta) for beta in group["betas"])
            ):
                return lists
            params = list(group["params"])
            kinds = {(param.device, param.dtype) for param in params}
            if len(kinds) > 1 or any(torch.is_complex(param) for param in params):
                return lists
            states = [optimizer.state.get(param) for param in params]
            if not all(state and "exp_avg" in state for state in states):
                return None  # before the first step: Adam creates the state
            tensors.append(
                (
                    params,
                    [state["exp_avg"] for state in states],
                    [state["exp_avg_sq"] for state in states],
                    [state["step"] for state in states],
                )
            )
        lists.tensors = tensors
        return lists

    def is_current(self, optimizer) -> bool:
        groups = optimizer.param_groups
        return (
            optimizer.state is self.state
            and len(groups) == len(self.groups)
            and all(a is b for a, b in zip(groups, self.groups))
        )

    def kernel_parts(self) -> Optional[List[tuple]]:
        """Per param group: `(settings key, (params, grads, exp_avgs,
        exp_avg_sqs, steps))` for `fused_adam_step_`; None (nothing done) if a
        parameter has no gradient (`Adam.step` would skip it: left to it)."""
        parts = []
        for group, (params, exp_avgs, exp_avg_sqs, steps) in zip(
            self.groups, self.tensors
        ):
            if not params:
                continue
            grads = [param.grad for param in params]
            if any(grad is None for grad in grads):
                return None
            beta1, beta2 = group["betas"]
            key = (
                group["lr"],
                beta1,
                beta2,
                group["weight_decay"],
                group["eps"],
                group["maximize"],
                (params[0].device, params[0].dtype),
            )
            parts.append((key, (params, grads, exp_avgs, exp_avg_sqs, steps)))
        return parts
