"""NERS-DQN: DQN/Rainbow with the Neural Experience Replay Sampler."""

from rllib_ners.algorithms.ners_dqn.ners_dqn import (
    NERSDQN,
    NERSCallback,
    NERSDQNConfig,
    enable_ners,
)

__all__ = ["NERSCallback", "NERSDQN", "NERSDQNConfig", "enable_ners"]
