"""RLModules of rllib_ners."""

from rllib_ners.rl_modules.rainbow import (
    NoisyLinear,
    RainbowCatalog,
    RainbowTorchRLModule,
)

__all__ = ["NoisyLinear", "RainbowCatalog", "RainbowTorchRLModule"]
