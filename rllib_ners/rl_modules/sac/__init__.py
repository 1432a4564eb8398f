"""SAC's RLModule with the critics of the SAC paper (MLPs on `[s, a]`). See
`torch/sac_torch_rl_module.py`."""

from rllib_ners.rl_modules.sac.sac_catalog import SACConcatCriticCatalog
from rllib_ners.rl_modules.sac.torch.sac_torch_rl_module import SACTorchRLModule

__all__ = ["SACConcatCriticCatalog", "SACTorchRLModule"]
