"""Small torch helpers shared by the RLModules and the NERS scorer (no Ray)."""

from __future__ import annotations

import math
import weakref
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rllib_ners.seam.torch_internals import (
    forward_is_observed,
    fused_adam_step_,
    unobserved_optimizer_step,
)

# Each fused Adam's listed tensors (see `FusedAdamLists`), kept for as long as
# the optimizer lives.
_FUSED_ADAM_LISTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def numpy_to_tensor(value, device, *, via_pinned_memory: bool = False) -> torch.Tensor:
    """A numpy array (or tensor) as a torch tensor on `device`, converted as
    RLlib's `convert_to_torch_tensor` converts it: float64 (and any other
    float but float16) becomes float32; a read-only array is copied first
    (`torch.from_numpy` shares the array's memory).

    `via_pinned_memory`, for a CUDA `device`: the host tensor is copied into
    pinned (page-locked) memory and sent with a non-blocking copy, which the
    host queues and leaves; a copy from pageable memory makes the host wait
    for it. The same values either way."""
    if torch.is_tensor(value):
        tensor = value
    else:
        array = np.asarray(value)
        if not array.flags.writeable:
            array = array.copy()
        tensor = torch.from_numpy(array)
    if tensor.is_floating_point() and tensor.dtype != torch.float16:
        tensor = tensor.float()
    if (
        via_pinned_memory
        and tensor.device.type == "cpu"
        and torch.device(device).type == "cuda"
    ):
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def channels_last_conv(
    x: torch.Tensor, conv: nn.Conv2d, scale: float = 1.0
) -> torch.Tensor:
    """`conv(x * scale)` for channels-last `x`, returning NCHW-shaped output.

    The scale is folded into the weight (one pass over the images fewer than
    `x * scale`); `x.permute(0, 3, 1, 2)` is the channels-last memory layout
    that oneDNN convolves without a copy.
    """
    nchw = x.permute(0, 3, 1, 2).float()
    weight = conv.weight * scale if scale != 1.0 else conv.weight
    return F.conv2d(nchw, weight, conv.bias, conv.stride, conv.padding)


def conv_input_extent(
    height: int, width: int, convs: Sequence[nn.Conv2d]
) -> Tuple[int, int]:
    """Rows and columns of an `height x width` input that a stack of convolutions
    reads at all.

    Unpadded strided convolutions can skip the last rows and columns: the
    data-efficient Rainbow CNN (two 5x5 stride-5 convs) reads 75 x 75 of an
    84 x 84 frame, as its first conv's 16th output row and column are never
    used by the second. Convolving `x[:, :75, :75]` gives the same features
    with a ninth less work. Padded or dilated stacks return the full size.
    """
    if any(c.padding != (0, 0) or c.dilation != (1, 1) for c in convs):
        return height, width
    extents = []
    for size, axis in ((height, 0), (width, 1)):
        for conv in convs:
            size = (size - conv.kernel_size[axis]) // conv.stride[axis] + 1
        for conv in reversed(convs):
            size = (size - 1) * conv.stride[axis] + conv.kernel_size[axis]
        extents.append(size)
    return extents[0], extents[1]


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


def uniform_allowed_choice(allowed: torch.Tensor) -> torch.Tensor:
    """`torch.multinomial(allowed.float(), 1).squeeze(1)` for a 2-D boolean mask
    (one row per state): the same draw from the same random numbers, without
    the multinomial's checks of arbitrary weights (three host syncs).

    For one sample torch draws by an exponential race, `argmax(w / E)` with
    `E ~ Exp(1)` filled into a tensor like `w` from the default generator
    (`multinomial_out` in `aten/src/ATen/native/Distributions.cpp`). A 0/1 mask
    is finite and non-negative, so the one check left is that every row allows
    an action; a row that allows none goes to `torch.multinomial` for its error.
    Tested equal to `torch.multinomial`, seed by seed.
    """
    weights = allowed.float()
    if not bool(allowed.any(dim=-1).all()):
        return torch.multinomial(weights, 1).squeeze(1)
    race = torch.empty_like(weights).exponential_(1)
    return torch.argmax(weights / race, dim=-1)


class EpsilonGreedyChoice:
    """RLlib's epsilon-greedy choice over Q-values (`DefaultDQNTorchRLModule.
    _forward_exploration`): the greedy action `argmax(q)`, a random action
    drawn by `torch.multinomial` over the actions whose Q-value is non-zero
    after `nan_to_num(neginf=0)`, and `torch.rand(rows) < epsilon` choosing
    between them, as an int64 tensor.

    On the CPU, outside autograd, the two random draws are the same torch calls
    on the default generator in RLlib's order (`exponential_` of the
    multinomial's race, see `uniform_allowed_choice`, then `uniform_` as
    `torch.rand`), into tensors kept per shape, and the rest is numpy on their
    views: for the one row an EnvRunner acts on, a dozen torch calls on a few
    numbers cost more than the Q-network itself. numpy's float32 division,
    argmax (first maximum; a NaN counts as the maximum) and comparison give
    torch's values. Elsewhere (an accelerator, a tensor with a graph, a row
    without an allowed action) the torch ops run as RLlib's. Tested equal to
    RLlib's module, draw by draw.
    """

    def __init__(self):
        # (rows, actions) -> (race, coin): tensors refilled by every call (their
        # numpy views are taken per call: a copied or pickled view would no
        # longer share the tensor's memory).
        self._draws: Dict[Tuple[int, int], Tuple[torch.Tensor, torch.Tensor]] = {}

    def __call__(self, q: torch.Tensor, epsilon) -> torch.Tensor:
        if (
            q.device.type != "cpu"
            or q.requires_grad
            or q.dim() != 2
            or q.dtype not in (torch.float32, torch.float64)
        ):
            return self._torch_choice(q, epsilon)
        values = q.numpy()
        allowed = (values != 0.0) & (values > -np.inf)  # nan_to_num(neginf=0) != 0
        if not allowed.any(axis=-1).all():
            return self._torch_choice(q, epsilon)  # multinomial's error, as RLlib
        draws = self._draws.get(values.shape)
        if draws is None:
            race = torch.empty(values.shape, dtype=torch.float32)
            coin = torch.empty(values.shape[0], dtype=torch.float32)
            draws = self._draws[values.shape] = (race, coin)
        race, coin = draws
        greedy = values.argmax(axis=-1)
        race.exponential_(1)
        random_actions = (allowed.astype(np.float32) / race.numpy()).argmax(axis=-1)
        coin.uniform_(0, 1)
        # torch compares a float32 tensor with a 0-d tensor or a Python number
        # in float32.
        threshold = np.float32(
            epsilon.item() if isinstance(epsilon, torch.Tensor) else epsilon
        )
        explore = coin.numpy() < threshold
        return torch.from_numpy(np.where(explore, random_actions, greedy))

    @staticmethod
    def _torch_choice(q: torch.Tensor, epsilon) -> torch.Tensor:
        greedy = torch.argmax(q, dim=-1)
        allowed = torch.nan_to_num(q.reshape(-1, q.size(-1)), neginf=0.0) != 0.0
        random_actions = uniform_allowed_choice(allowed)
        explore = torch.rand((q.shape[0],), device=q.device) < epsilon
        return torch.where(explore, random_actions, greedy)


# RLlib's bounds on the log-std of a Gaussian's inputs and the margin that keeps
# squashed actions off +-1 before atanh (`ray.rllib.utils.numpy`), restated
# here to keep this module free of Ray; a test checks they are RLlib's.
MIN_LOG_NN_OUTPUT, MAX_LOG_NN_OUTPUT, SMALL_NUMBER = -5, 2, 1e-6
_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


def _squashed_gaussian_parameters(logits: torch.Tensor):
    """`TorchSquashedGaussian.from_logits`: the location and the clamped scale."""
    loc, log_std = logits.chunk(2, dim=-1)
    return loc, torch.clamp(log_std, MIN_LOG_NN_OUTPUT, MAX_LOG_NN_OUTPUT).exp()


def squash(unsquashed: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """`tanh` onto `[low, high]`: the squashed Gaussian's action for a pre-tanh
    value (RLlib's `TorchSquashedGaussian._squash`)."""
    actions = ((torch.tanh(unsquashed) + 1.0) / 2.0) * (high - low) + low
    return torch.clamp(actions, low, high)


def _squashed_logp(unsquashed, loc, scale) -> torch.Tensor:
    """`TorchSquashedGaussian._squashed_logp`: `Normal(loc, scale).log_prob`
    summed, minus the tanh Jacobian in RLlib's stable form."""
    var = scale**2
    normal_logp = -((unsquashed - loc) ** 2) / (2 * var) - scale.log() - _LOG_SQRT_2PI
    jacobian = 2.0 * (math.log(2.0) - unsquashed - F.softplus(-2.0 * unsquashed))
    return normal_logp.sum(-1) - jacobian.sum(-1)


def squashed_gaussian_sample_and_logp(
    logits: torch.Tensor, low: float = -1.0, high: float = 1.0
) -> Tuple[torch.Tensor, torch.Tensor]:
    """What RLlib's EnvRunner draws from a `TorchSquashedGaussian` (SAC's action
    distribution): `dist = TorchSquashedGaussian.from_logits(logits)`, `actions =
    dist.sample()`, `logp = dist.logp(actions)` (the `GetActions` connector: the
    log-probability of the squashed action, through atanh), as the same tensor
    ops in the same order without the distribution objects. The same random
    draw as `torch.normal` and the same values, bit for bit (tested)."""
    loc, scale = _squashed_gaussian_parameters(logits)
    unsquashed = gaussian_sample(loc, scale)
    actions = squash(unsquashed, low, high)
    # TorchSquashedGaussian.logp: _unsquash, then _squashed_logp.
    unsquashed = (actions - low) / (high - low) * 2.0 - 1.0
    unsquashed = torch.clamp(unsquashed, -1.0 + SMALL_NUMBER, 1.0 - SMALL_NUMBER)
    return actions, _squashed_logp(torch.atanh(unsquashed), loc, scale)


def squashed_gaussian_draw_and_logp(
    logits: torch.Tensor,
    *,
    reparameterized: bool,
    low: float = -1.0,
    high: float = 1.0,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """`TorchSquashedGaussian.from_logits(logits).rsample_and_logp()` (or, not
    `reparameterized`, `.sample_and_logp()`): SAC's training draws, the exact
    log-probability of the pre-squash sample. The same ops, random draws,
    values and gradients, bit for bit (tested), without the distribution
    objects."""
    loc, scale = _squashed_gaussian_parameters(logits)
    if reparameterized:  # torch.distributions.Normal.rsample()
        unsquashed = loc + _standard_normal(loc) * scale
    else:
        unsquashed = gaussian_sample(loc, scale)
    return squash(unsquashed, low, high), _squashed_logp(unsquashed, loc, scale)


def gaussian_sample(loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """`torch.normal(loc, scale)` (what `torch.distributions.Normal.sample()`
    draws), without gradients: the same draw and the same values, bit for bit
    (torch computes `z * scale + loc` from standard normal `z` itself). But
    `torch.normal` with a tensor `scale` checks `scale >= 0` by reading a value
    on the host (`std.min().ge(0).item()` in torch 2.11's distribution
    templates): a wait for the GPU per call, and an op no CUDA graph can
    capture. SAC's `scale` is an exponential, never negative."""
    with torch.no_grad():
        return _standard_normal(loc) * scale + loc


def _standard_normal(like: torch.Tensor) -> torch.Tensor:
    """Standard normal draws in a new contiguous tensor of `like`'s shape."""
    return torch.empty(like.shape, dtype=like.dtype, device=like.device).normal_()


# Element-wise activation modules whose `forward()` is a pure function of its
# input (no parameters, no state): safe to call without `nn.Module.__call__`.
_ELEMENTWISE_ACTIVATIONS = (
    nn.ReLU,
    nn.Tanh,
    nn.Sigmoid,
    nn.SiLU,
    nn.ELU,
    nn.LeakyReLU,
    nn.GELU,
    nn.Identity,
)


def is_elementwise_activation(module: Optional[nn.Module]) -> bool:
    """Whether `module` is None or an element-wise activation module whose
    `forward()` is a pure function of its input."""
    return module is None or isinstance(module, _ELEMENTWISE_ACTIVATIONS)


def mlp_layers_of(net: nn.Module) -> Optional[List[nn.Module]]:
    """The layers of `net` if it is a plain MLP - an `nn.Sequential` (possibly
    wrapped, as in RLlib's `TorchMLPEncoder` and `TorchMLPHead`) of `nn.Linear`
    and element-wise activation modules - else None."""
    sequential = net
    for attribute in ("net", "mlp"):
        if not isinstance(sequential, nn.Sequential):
            sequential = getattr(sequential, attribute, None)
    if not isinstance(sequential, nn.Sequential):
        return None
    layers = list(sequential)
    if not all(
        isinstance(layer, (nn.Linear,) + _ELEMENTWISE_ACTIVATIONS) for layer in layers
    ):
        return None
    return layers


def encoder_head_layers_of(encoder: nn.Module, head: nn.Module):
    """The layers of a plain-MLP encoder followed by a plain-MLP head, or None
    (also for a head that clips log-stds, as RLlib's can: not a plain MLP)."""
    if getattr(head, "clip_log_std", False):
        return None
    encoder_layers, head_layers = mlp_layers_of(encoder), mlp_layers_of(head)
    if encoder_layers is None or head_layers is None:
        return None
    return encoder_layers + head_layers


def call_module(module: nn.Module, *args):
    """`module(*args)`, without `nn.Module.__call__`'s bookkeeping (a few us a
    call) when no forward hooks are registered, on the module or globally:
    then `__call__` runs exactly `forward(*args)`."""
    if forward_is_observed(module):
        return module(*args)
    return module.forward(*args)


def run_mlp_layers(layers: Sequence[nn.Module], x: torch.Tensor) -> torch.Tensor:
    """`nn.Sequential(*layers)(x)` without the per-module call overhead (about
    3 us per module; a 2-layer MLP's own math on one row takes about as long):
    `F.linear` for linear layers, `forward()` for activations. The same ops in
    the same order; module hooks are not run."""
    for layer in layers:
        if type(layer) is nn.Linear:
            x = F.linear(x, layer.weight, layer.bias)
        else:
            x = layer.forward(x)
    return x
