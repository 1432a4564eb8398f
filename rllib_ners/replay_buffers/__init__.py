"""Replay buffers: the vectorised prioritized episode buffers (single- and
multi-agent) and the NERS buffer."""

from rllib_ners.replay_buffers.fast_multi_agent_episode_buffer import (
    FastMultiAgentPrioritizedEpisodeReplayBuffer,
)
from rllib_ners.replay_buffers.fast_prioritized_episode_buffer import (
    FastPrioritizedEpisodeReplayBuffer,
)
from rllib_ners.replay_buffers.ners_episode_buffer import NERSEpisodeReplayBuffer
from rllib_ners.replay_buffers.rllib_compat import with_replay_buffer

__all__ = [
    "FastMultiAgentPrioritizedEpisodeReplayBuffer",
    "FastPrioritizedEpisodeReplayBuffer",
    "NERSEpisodeReplayBuffer",
    "with_replay_buffer",
]
