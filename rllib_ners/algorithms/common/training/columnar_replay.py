"""Replayed transitions as the train batch RLlib's DQN and SAC Learners take.

RLlib 2.60's DQN training step (which SAC inherits: `class SAC(DQN)`) samples
one `SingleAgentEpisode` per replayed transition and turns them back into a
batch through the learner connector pipeline, several milliseconds per update.
`replay_train_batch()` builds that batch from the numpy columns of one of this
package's buffers (`sample_batch()`) directly (tested equal, for DQN and for
SAC); `replay_loop.ReplayLoopMixin` feeds it to the Learners.
"""

from __future__ import annotations

from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from rllib_ners.replay_buffers.fast_multi_agent_episode_buffer import (
    FastMultiAgentPrioritizedEpisodeReplayBuffer,
)


def replay_train_batch(buffer, columns) -> MultiAgentBatch:
    """The train batch RLlib's DQN and SAC learner connectors would build from
    the sampled transitions: the same columns (names, dtypes, values), plus the
    buffer's per-item columns (`buffer_index`, and for NERS `ts`,
    `sample_position` and the encoding-cache keys).

    With the multi-agent buffer `columns` are per module (its `sample_batch()`)
    and so is the batch; its env steps are the items of all modules, as
    RLlib counts the sampled 1-step episodes.
    """
    if isinstance(buffer, FastMultiAgentPrioritizedEpisodeReplayBuffer):
        batches = {
            module_id: SampleBatch(
                _learner_columns(buffer.module_buffer(module_id), module_columns)
            )
            for module_id, module_columns in columns.items()
        }
        env_steps = sum(len(c["obs"]) for c in columns.values())
        return MultiAgentBatch(batches, env_steps=env_steps)
    return MultiAgentBatch(
        {DEFAULT_MODULE_ID: SampleBatch(_learner_columns(buffer, columns))},
        env_steps=len(columns["obs"]),
    )


def _learner_columns(buffer, columns) -> dict:
    return {
        Columns.OBS: columns["obs"],
        Columns.NEXT_OBS: columns["new_obs"],
        Columns.ACTIONS: columns["actions"],
        Columns.REWARDS: columns["rewards"],
        Columns.TERMINATEDS: columns["terminateds"],
        Columns.TRUNCATEDS: columns["truncateds"],
        "weights": columns["weights"],
        "n_step": columns["n_step"],
        **buffer.item_columns(columns),
    }
