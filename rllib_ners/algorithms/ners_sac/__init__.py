"""NERS-SAC: RLlib's SAC with the Neural Experience Replay Sampler."""

from rllib_ners.algorithms.ners_sac.ners_sac import NERSSAC, NERSSACConfig

__all__ = ["NERSSAC", "NERSSACConfig"]
