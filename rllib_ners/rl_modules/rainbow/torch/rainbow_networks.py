"""Torch building blocks of the Rainbow RLModule: Q streams and image encoders.

* `QStream`: an MLP head (hidden layers + output layer) made of `nn.Linear` or,
  with `noisy=True`, of factorised-Gaussian `NoisyLinear` layers. Rainbow's value
  and advantage streams are one `QStream` each.
* `RainbowCNNEncoder`: the Nature-DQN CNN (Mnih et al. 2015) or the data-efficient
  Rainbow CNN of van Hasselt et al. 2019 (as in Kaixhin/Rainbow and the NERS
  reference: two 5x5 stride-5 convolutions, 32 and 64 channels). Takes channels-last
  `[B, H, W, C]` images (RLlib's layout, e.g. frame stacks on the last axis); uint8
  pixels are scaled to [0, 1] inside, so replay can keep compact uint8 frames.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.base import ENCODER_OUT
from ray.rllib.models.utils import get_activation_fn, get_initializer_fn
from torch import nn

from rllib_ners.rl_modules.rainbow.noisy_linear import NoisyLinear
from rllib_ners.torch_utils import channels_last_conv, conv_input_extent

# (out_channels, kernel, stride) per conv layer, each followed by a ReLU.
CNN_LAYERS: Dict[str, List[Tuple[int, int, int]]] = {
    "nature": [(32, 8, 4), (64, 4, 2), (64, 3, 1)],
    "data_efficient": [(32, 5, 5), (64, 5, 5)],
}


def cnn_output_hw(height: int, width: int, kind: str) -> Tuple[int, int]:
    """Spatial size after the (unpadded) convolutions of `kind`."""
    for _, kernel, stride in CNN_LAYERS[kind]:
        height = (height - kernel) // stride + 1
        width = (width - kernel) // stride + 1
    return height, width


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
            f"cnn_encoder={kind!r} (convolutions {CNN_LAYERS[kind]}); use 84x84 "
            f"frames or another cnn_encoder."
        )
    return CNN_LAYERS[kind][-1][0] * height * width


class RainbowCNNEncoder(nn.Module):
    """Conv stack + flatten; `forward({obs: [B, H, W, C]}) -> {encoder_out: [B, D]}`."""

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

    def forward(self, batch: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        return {ENCODER_OUT: self.features(batch[Columns.OBS])}

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """`net(obs / 255)` on channels-last stacks: the images are convolved in
        the channels-last layout they come in (oneDNN's fast path; no NCHW copy)
        and the 1/255 scale is folded into the first kernel (no scaled copy of
        the images), and only the rows and columns the convolutions read are
        convolved. About 2x faster than `forward_conv` on CPU (fwd+bwd of 64
        data-efficient stacks: 2.6 vs 4-5 ms on 2 threads), same values."""
        scale = 1.0 / 255.0 if obs.dtype == torch.uint8 else 1.0
        height, width = self._read_hw
        x = channels_last_conv(obs[:, :height, :width], self._convs[0], scale).relu()
        for conv in self._convs[1:]:
            x = conv(x).relu()
        return x.flatten(1)

    def forward_conv(self, obs: torch.Tensor) -> torch.Tensor:
        """The plain formulation `net(obs / 255)` (reference for the tests)."""
        x = obs.float() / 255.0 if obs.dtype == torch.uint8 else obs.float()
        return self.net(x.permute(0, 3, 1, 2))


class QStream(nn.Module):
    """MLP head: hidden layers with activation, then a linear output layer.

    With `noisy=True` every layer is a `NoisyLinear` (as in Rainbow's value and
    advantage streams); `forward(x, noise=False)` then uses the mean weights.
    Plain layers accept the `noise` argument and ignore it. Plain layers are
    built and initialised exactly as RLlib's `MLPHeadConfig` builds its heads,
    so with `noisy=False` the network equals RLlib's default DQN network.
    """

    def __init__(
        self,
        input_dim: int,
        hidden_dims: Sequence[int],
        output_dim: int,
        *,
        activation: Optional[str] = "relu",
        noisy: bool = False,
        sigma0: float = 0.5,
        kernel_initializer=None,
        kernel_initializer_kwargs: Optional[dict] = None,
        bias_initializer=None,
        bias_initializer_kwargs: Optional[dict] = None,
    ):
        super().__init__()
        self.noisy = noisy
        activation_cls = get_activation_fn(activation, framework="torch")
        weight_init = get_initializer_fn(kernel_initializer, framework="torch")
        bias_init = get_initializer_fn(bias_initializer, framework="torch")
        dims = [int(input_dim), *map(int, hidden_dims), int(output_dim)]
        self.layers = nn.ModuleList()
        for fan_in, fan_out in zip(dims[:-1], dims[1:]):
            if noisy:
                layer = NoisyLinear(fan_in, fan_out, sigma0)
            else:
                layer = nn.Linear(fan_in, fan_out)
                if weight_init:
                    weight_init(layer.weight, **(kernel_initializer_kwargs or {}))
                if bias_init:
                    bias_init(layer.bias, **(bias_initializer_kwargs or {}))
            self.layers.append(layer)
        self.activation = activation_cls() if activation_cls is not None else None

    def noisy_layers(self) -> List[NoisyLinear]:
        return [layer for layer in self.layers if isinstance(layer, NoisyLinear)]

    def forward(self, x: torch.Tensor, noise: bool = True) -> torch.Tensor:
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x, noise) if self.noisy else layer(x)
            if i < last and self.activation is not None:
                x = self.activation(x)
        return x
