"""TD3 and DDPG on RLlib's new API stack, with our replay buffers and NERS."""

from rllib_ners.algorithms.td3.td3 import DDPG, TD3, DDPGConfig, TD3Config

__all__ = ["DDPG", "DDPGConfig", "TD3", "TD3Config"]
