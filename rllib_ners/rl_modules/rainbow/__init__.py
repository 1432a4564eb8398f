"""Rainbow DQN RLModule: dueling, C51 and noisy streams, MLP / Nature / data-efficient
CNN encoders. See `torch/rainbow_torch_rl_module.py`."""

from rllib_ners.rl_modules.rainbow.noisy_linear import NoisyLinear
from rllib_ners.rl_modules.rainbow.rainbow_catalog import (
    CNN_ENCODER_KEY,
    RainbowCatalog,
)
from rllib_ners.rl_modules.rainbow.torch.rainbow_torch_rl_module import (
    RainbowTorchRLModule,
)

__all__ = ["CNN_ENCODER_KEY", "NoisyLinear", "RainbowCatalog", "RainbowTorchRLModule"]
