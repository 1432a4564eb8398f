"""Small torch helpers shared by the RLModules and the NERS scorer (no Ray)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


def is_patch_conv(conv: nn.Conv2d) -> bool:
    """Whether `conv` maps non-overlapping patches (stride == kernel, no padding,
    no dilation or groups), so that `patch_conv` computes it."""
    return (
        conv.stride == conv.kernel_size
        and conv.padding in ((0, 0), 0, "valid")
        and conv.dilation == (1, 1)
        and conv.groups == 1
    )


def patch_conv(x: torch.Tensor, conv: nn.Conv2d, scale: float = 1.0) -> torch.Tensor:
    """`conv(x * scale)` for channels-last `x` `[B, H, W, C]` when stride == kernel.

    Such a convolution is one matrix product of the non-overlapping patches
    with the flattened kernel: no NCHW permute, and uint8 pixels are converted
    once, on the cropped patches, with `scale` folded into the (small) weight.
    Same result as conv2d (tested), about 2x faster on CPU. Returns channels-last
    `[B, H', W', out]`; pixels beyond the last full patch are dropped, as conv2d
    drops them.
    """
    k = conv.kernel_size[0]
    batch, height, width, channels = x.shape
    rows, cols = (height - k) // k + 1, (width - k) // k + 1
    patches = (
        x[:, : rows * k, : cols * k, :]
        .reshape(batch, rows, k, cols, k, channels)
        .transpose(2, 3)
        .reshape(batch * rows * cols, k * k * channels)
        .float()
    )
    # (out, C, kh, kw) -> (kh * kw * C, out), the patches' element order.
    weight = conv.weight.permute(2, 3, 1, 0).reshape(k * k * channels, -1)
    out = torch.addmm(conv.bias, patches, weight * scale if scale != 1.0 else weight)
    return out.reshape(batch, rows, cols, -1)


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
