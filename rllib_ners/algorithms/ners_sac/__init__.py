"""NERS-SAC: RLlib's SAC with the Neural Experience Replay Sampler, and SAC's
RLModule with the critics of the SAC paper (MLPs on `[s, a]`)."""

from rllib_ners.algorithms.ners_sac.ners_sac import NERSSAC, NERSSACConfig
from rllib_ners.algorithms.ners_sac.sac_catalog import SACConcatCriticCatalog
from rllib_ners.algorithms.ners_sac.torch.sac_torch_rl_module import (
    SACTorchRLModule,
)

__all__ = ["NERSSAC", "NERSSACConfig", "SACConcatCriticCatalog", "SACTorchRLModule"]
