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

from typing import Dict, List, Optional, Sequence

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.base import ENCODER_OUT
from ray.rllib.models.utils import get_activation_fn, get_initializer_fn
from ray.rllib.utils.annotations import override
from torch import nn
from torch.nn import functional as F

from rllib_ners.algorithms.rainbow.noisy_linear import NoisyLinear
from rllib_ners.networks.conv_stack import (  # noqa: F401 - re-exported
    CNN_LAYERS,
    ConvStack,
    cnn_output_dim,
    cnn_output_hw,
)


class RainbowCNNEncoder(ConvStack):
    """A `ConvStack` as an RLlib encoder:
    `forward({obs: [B, H, W, C]}) -> {encoder_out: [B, D]}`."""

    @override(nn.Module)
    def forward(self, batch: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        return {ENCODER_OUT: self.features(batch[Columns.OBS])}


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

    @override(nn.Module)
    def forward(self, x: torch.Tensor, noise: bool = True) -> torch.Tensor:
        # The layers' own forward() (not `__call__`: module hooks are not run),
        # about 3 us per layer less on the acting path's single rows.
        last = len(self.layers) - 1
        activation = self.activation
        for i, layer in enumerate(self.layers):
            x = (
                layer.forward(x, noise)
                if self.noisy
                else F.linear(x, layer.weight, layer.bias)
            )
            if i < last and activation is not None:
                x = activation.forward(x)
        return x
