"""Rainbow DQN: RLlib's DQN with a Rainbow RLModule (dueling, C51 and noisy
streams; MLP / Nature / data-efficient CNN encoders) and an Adam-eps-aware
learner."""

from rllib_ners.algorithms.rainbow.noisy_linear import NoisyLinear
from rllib_ners.algorithms.rainbow.rainbow_catalog import (
    CNN_ENCODER_KEY,
    RainbowCatalog,
)
from rllib_ners.algorithms.rainbow.rainbow_dqn import RainbowDQN, RainbowDQNConfig
from rllib_ners.algorithms.rainbow.torch.rainbow_torch_rl_module import (
    RainbowTorchRLModule,
)

__all__ = [
    "CNN_ENCODER_KEY",
    "NoisyLinear",
    "RainbowCatalog",
    "RainbowDQN",
    "RainbowDQNConfig",
    "RainbowTorchRLModule",
]
