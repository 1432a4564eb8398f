"""Small torch helpers shared by the RLModules and the NERS scorer (no Ray)."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch
from torch import nn
from torch.nn import functional as F


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


def plain_mlp_layers(net: nn.Module) -> Optional[List[nn.Module]]:
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


def run_plain_mlp(layers: Sequence[nn.Module], x: torch.Tensor) -> torch.Tensor:
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
