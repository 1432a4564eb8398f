"""Replay buffers: the vectorised prioritized episode buffers (single- and
multi-agent) and the NERS buffer, built from parts that hold no Ray.

The buffers (RLlib's buffer API: episodes in and out, counters, metrics,
state):

* `fast_prioritized_episode_buffer`: `FastPrioritizedEpisodeReplayBuffer`,
  the drop-in for RLlib's `PrioritizedEpisodeReplayBuffer` (alpha 0: uniform;
  LAP with `min_priority=1`);
* `ners_episode_buffer`: `NERSEpisodeReplayBuffer`, the fast buffer with the
  NERS sampler, and what the scorer's training draws from the storage;
* `fast_multi_agent_episode_buffer`: one fast buffer per module;
  `agent_episodes`: which multi-agent episode a stored agent episode is of;
* `ring_replay_buffer`: `RingReplayBuffer`, their base: the parts below and
  the mechanics on them (and why RLlib's base class is kept);
* `rllib_compat`: `with_replay_buffer`, our buffer for a stock SAC config;
* `rllib_states`: RLlib's buffer states in and out;
* `buffer_metrics`: what the buffers count between reports, in RLlib's terms.

The parts (numpy only):

* `ring_storage`: the ring arrays and eviction; `writer`: adding episode
  chunks; `episode_adapter`: RLlib episodes in and out;
* the replay methods, as samplers (`replay_sampler`: the contract they keep):
  `priority_sampler`: uniform, PER and LAP, by priority from TD errors, with
  importance weights and the beta schedule, on `sum_tree`'s sum and min trees;
  `ners_score_sampler`: NERS, by the scorer's scores, with `ners_slot_memory`,
  its per-slot delta, q, replay counts, I_all; `relo_sampler`: ReLo, PER by
  the reducible loss; `laber_sampler`: LaBER's uniform large batch;
  `sampler_choice`: the `"sampler"` setting, which of them a buffer builds;
* `feedback`: what a Learner sends back about a sample's items
  (`ReplayFeedback`) and how it is packed on the way (`FeedbackLayout`);
* `n_step`, `sequences`, `frame_stack`: what a sample reads from the ring;
  `device_frames`: stored frames mirrored on a local GPU Learner's device;
* `bookkeeping`: the sample awaiting priorities, step counts;
  `buffer_state`: the checkpoint as one flat dict; `buffer_settings`: setting
  checks; `buffer_names`: the names the parts share;
* `packed_fragments`: episode fragments as joined numpy columns, what remote
  EnvRunners ship.
"""

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
