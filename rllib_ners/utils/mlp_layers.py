"""Plain MLPs' layers, run without `nn.Module.__call__`'s per-module overhead.

`mlp_layers_of` / `encoder_head_layers_of` find the `nn.Linear` and activation
layers of a plain MLP (RLlib's `TorchMLPEncoder` and `TorchMLPHead` included);
`run_mlp_layers` runs them with the same ops in the same order, and
`call_module` calls any module without the bookkeeping when no hook would see
it. No Ray.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from rllib_ners.seam.torch_internals import forward_is_observed

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
