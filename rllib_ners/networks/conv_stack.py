"""The image CNNs of this package: the Nature-DQN CNN, the data-efficient CNN and
a small CNN for small images.

Rainbow's encoder (`algorithms/rainbow`), ACER's trunk and the NERS scorer's image
encoder (the NERS reference's feature net is the data-efficient CNN) are all a
`ConvStack`. It takes channels-last `[B, H, W, C]` images, RLlib's layout (frame
stacks on the last axis); uint8 pixels are scaled to [0, 1] inside, so replay can
keep compact uint8 frames; any other dtype (float, bool) is used as its float
value (bool as 0/1).

Each kind needs images of a least size (`min_image_size`): 36x36 for "nature",
25x25 for "data_efficient", 3x3 for "small" (one 3x3 stride-1 conv with 16
channels, the convolution of MinAtar's own DQN, Young & Tian 2019, for its 10x10
images). `fitting_cnn_kind` picks a preferred kind when it fits, else "small".

`ConvStack.features` convolves channels-last images without an NCHW copy
(`channels_last_conv`) and only the rows and columns the convolutions read
(`conv_input_extent`).
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import gymnasium as gym
import torch
from torch import nn
from torch.nn import functional as F

from rllib_ners.utils.spaces import is_image_space

# uint8 pixels are divided by this (to [0, 1]).
MAX_PIXEL = 255.0
# The model_config key that picks the CNN (Rainbow's and ACER's modules).
CNN_ENCODER_KEY = "cnn_encoder"

# (out_channels, kernel, stride) per conv layer, each followed by a ReLU.
CNN_LAYERS: Dict[str, List[Tuple[int, int, int]]] = {
    # Mnih et al. 2015.
    "nature": [(32, 8, 4), (64, 4, 2), (64, 3, 1)],
    # van Hasselt et al. 2019, as in Kaixhin/Rainbow and the NERS reference.
    "data_efficient": [(32, 5, 5), (64, 5, 5)],
    # Young & Tian 2019 (MinAtar's DQN): for small images, e.g. MinAtar's 10x10.
    "small": [(16, 3, 1)],
}


def cnn_output_hw(height: int, width: int, kind: str) -> Tuple[int, int]:
    """Spatial size after the (unpadded) convolutions of `kind`."""
    for _, kernel, stride in CNN_LAYERS[kind]:
        height = (height - kernel) // stride + 1
        width = (width - kernel) // stride + 1
    return height, width


def min_image_size(kind: str) -> int:
    """The least height (and width) of an image that the CNN `kind` takes."""
    size = 1
    for _, kernel, stride in reversed(CNN_LAYERS[kind]):
        size = (size - 1) * stride + kernel
    return size


def cnn_fits(obs_shape: Sequence[int], kind: str) -> bool:
    """Whether `[H, W, C]` images are large enough for the CNN `kind`."""
    return min(int(obs_shape[0]), int(obs_shape[1])) >= min_image_size(kind)


def fitting_cnn_kind(obs_shape: Sequence[int], preferred: str) -> str:
    """`preferred` when `[H, W, C]` images are large enough for it, else "small"."""
    return preferred if cnn_fits(obs_shape, preferred) else "small"


# RLlib's CNN settings (conv_filters' CNN) and their defaults; our CNNs have
# ReLU layers with PyTorch's initialisation and take none of them.
RLLIB_CNN_DEFAULTS = {
    "conv_activation": "relu",
    "conv_kernel_initializer": None,
    "conv_kernel_initializer_kwargs": None,
    "conv_bias_initializer": None,
    "conv_bias_initializer_kwargs": None,
}


def rllib_cnn_settings(cfg: dict) -> dict:
    """The settings of RLlib's CNN in `cfg` that differ from their defaults."""
    return {
        key: cfg[key]
        for key, default in RLLIB_CNN_DEFAULTS.items()
        if cfg.get(key, default) != default
    }


def _refuse_rllib_cnn_settings(cfg: dict, kind: str) -> str:
    """`kind`, unless `cfg` sets RLlib's CNN settings, which it would ignore."""
    settings = rllib_cnn_settings(cfg)
    if settings:
        raise ValueError(
            f"model_config {settings} configure RLlib's CNN, which conv_filters "
            f"builds; the {kind!r} CNN has ReLU layers with PyTorch's "
            f"initialisation. Remove them, or set conv_filters for RLlib's CNN."
        )
    return kind


def resolve_cnn_encoder(observation_space: gym.Space, cfg: dict):
    """Our CNN kind ("nature", "data_efficient", "small") for image spaces, or
    None for RLlib's own encoders (vectors, or a CNN from `conv_filters`)."""
    kind = cfg.get(CNN_ENCODER_KEY)
    if kind is not None and kind not in CNN_LAYERS:
        raise ValueError(
            f"Unknown model_config cnn_encoder={kind!r}; use 'nature', "
            f"'data_efficient', 'small', or None (a CNN that fits the images, or "
            f"RLlib's CNN from conv_filters)."
        )
    if not is_image_space(observation_space):
        if kind is not None:
            raise ValueError(
                f"model_config cnn_encoder={kind!r} needs [H, W, C] image "
                f"observations, got {observation_space}. Remove cnn_encoder."
            )
        return None
    if kind is None:
        if cfg.get("conv_filters"):
            return None
        return _refuse_rllib_cnn_settings(
            cfg, fitting_cnn_kind(observation_space.shape, "nature")
        )
    if cfg.get("conv_filters"):
        raise ValueError(
            f"model_config sets both cnn_encoder={kind!r} and conv_filters; "
            f"remove one (conv_filters builds RLlib's CNN instead)."
        )
    return _refuse_rllib_cnn_settings(cfg, kind)


def cnn_output_dim(obs_shape: Sequence[int], kind: str) -> int:
    """Flattened feature size of the CNN `kind` on `[H, W, C]` observations."""
    if kind not in CNN_LAYERS:
        raise ValueError(
            f"Unknown cnn_encoder={kind!r}; use one of {sorted(CNN_LAYERS)}, e.g. "
            f'config.rl_module(model_config={{"cnn_encoder": "data_efficient"}}).'
        )
    height, width = cnn_output_hw(int(obs_shape[0]), int(obs_shape[1]), kind)
    if height < 1 or width < 1:
        raise ValueError(
            f"Images of shape {tuple(obs_shape)} are too small for "
            f"cnn_encoder={kind!r} (convolutions {CNN_LAYERS[kind]}, at least "
            f"{min_image_size(kind)}x{min_image_size(kind)} pixels); use "
            f"cnn_encoder='small', or leave cnn_encoder unset to pick a CNN that "
            f"fits."
        )
    return CNN_LAYERS[kind][-1][0] * height * width


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


class ConvStack(nn.Module):
    """Conv + ReLU layers of `kind`, then flatten: `features(obs) -> [B, D]`."""

    def __init__(self, obs_shape: Sequence[int], kind: str = "nature"):
        super().__init__()
        self.output_dim = cnn_output_dim(obs_shape, kind)
        self.kind = kind
        layers: List[nn.Module] = []
        in_channels = int(obs_shape[2])
        for out_channels, kernel, stride in CNN_LAYERS[kind]:
            layers += [nn.Conv2d(in_channels, out_channels, kernel, stride), nn.ReLU()]
            in_channels = out_channels
        self.net = nn.Sequential(*layers, nn.Flatten())

        self._convs = [m for m in self.net if isinstance(m, nn.Conv2d)]
        # The input rows/columns the convolutions read (75 x 75 of 84 x 84 for
        # the data-efficient CNN): `features` convolves only those.
        height, width = int(obs_shape[0]), int(obs_shape[1])
        self._read_hw = conv_input_extent(height, width, self._convs)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """`net(obs / 255)` on channels-last stacks: the images are convolved in
        the channels-last layout they come in (oneDNN's fast path; no NCHW copy)
        and the 1/255 scale is folded into the first kernel (no scaled copy of
        the images), and only the rows and columns the convolutions read are
        convolved. Faster than `forward_conv` on CPU, with the same values
        (`tests/unit/test_ners_image_encoder.py` compares the two)."""
        scale = 1.0 / MAX_PIXEL if obs.dtype == torch.uint8 else 1.0
        height, width = self._read_hw
        x = channels_last_conv(obs[:, :height, :width], self._convs[0], scale).relu()
        for conv in self._convs[1:]:
            x = conv(x).relu()
        return x.flatten(1)

    def forward_conv(self, obs: torch.Tensor) -> torch.Tensor:
        """`net(obs / 255)` as written, through NCHW copies (what the tests
        compare `features` with)."""
        x = obs.float() / MAX_PIXEL if obs.dtype == torch.uint8 else obs.float()
        return self.net(x.permute(0, 3, 1, 2))
