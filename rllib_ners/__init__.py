"""rllib_ners: the Neural Experience Replay Sampler (NERS) for Ray RLlib 2.60."""

from rllib_ners.replay_buffers import FastPrioritizedEpisodeReplayBuffer

__version__ = "0.1.0"

__all__ = ["FastPrioritizedEpisodeReplayBuffer", "__version__"]
