"""Rainbow DQN: RLlib's DQN with a Rainbow RLModule and an Adam-eps-aware learner."""

from rllib_ners.algorithms.rainbow.rainbow_dqn import RainbowDQN, RainbowDQNConfig

__all__ = ["RainbowDQN", "RainbowDQNConfig"]
