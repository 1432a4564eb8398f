"""DQN's training step with the columnar fast path, for RLlib's DQN family.

RLlib 2.60's DQN training step (which SAC inherits: `class SAC(DQN)`) samples
one `SingleAgentEpisode` per replayed transition and turns them back into a
batch through the learner connector pipeline, several milliseconds per update.
With one of this package's buffers, `ColumnarReplayMixin` hands the Learners
numpy columns straight from the buffer (`sample_batch()`): the batch RLlib's
connectors would build (tested, for DQN and for SAC), plus the buffer's
per-item columns. Configs the columns cannot serve (a custom learner connector,
a stateful RLModule, multi-agent, RLlib's own buffers) keep RLlib's step.

Used by `RainbowDQN` (so NERS-DQN) and `NERSSAC`.
"""

from __future__ import annotations

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.algorithms.dqn.dqn import DQN, calculate_rr_weights
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    REPLAY_BUFFER_RESULTS,
    REPLAY_BUFFER_SAMPLE_TIMER,
    REPLAY_BUFFER_UPDATE_PRIOS_TIMER,
    TIMERS,
)

from rllib_ners.algorithms.common.replay_checkpoint import pop_priority_rows
from rllib_ners.algorithms.common.training_ops import (
    sample_into_buffer,
    sync_env_runner_weights,
)


class ColumnarReplayMixin:
    """DQN's `training_step` on numpy columns (list it before the DQN class)."""

    _columnar_replay = False

    @override(DQN)
    def setup(self, config: AlgorithmConfig) -> None:
        super().setup(config)
        self._columnar_replay = self._can_replay_columns()

    def _can_replay_columns(self) -> bool:
        from rllib_ners.replay_buffers.fast_prioritized_episode_buffer import (
            FastPrioritizedEpisodeReplayBuffer,
        )

        config = self.config
        if config.is_multi_agent or config._learner_connector is not None:
            return False
        if not isinstance(self.local_replay_buffer, FastPrioritizedEpisodeReplayBuffer):
            return False
        spec = config.get_rl_module_spec()
        return not spec.model_config.get("use_lstm", False)

    @override(DQN)
    def training_step(self) -> None:
        if not self._columnar_replay:
            return super().training_step()
        store_weight, sample_and_train_weight = calculate_rr_weights(self.config)
        buffer = self.local_replay_buffer
        for _ in range(store_weight):
            sample_into_buffer(self, buffer)

        sampled = self.metrics.peek(
            (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0
        )
        if sampled < self.config.num_steps_sampled_before_learning_starts:
            return
        for _ in range(sample_and_train_weight):
            with self.metrics.log_time((TIMERS, REPLAY_BUFFER_SAMPLE_TIMER)):
                columns = buffer.sample_batch(
                    self.config.total_train_batch_size,
                    n_step=self.config.n_step,
                    gamma=self.config.gamma,
                    beta=self.config.replay_buffer_config.get("beta"),
                )
            with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
                learner_results = self.learner_group.update(
                    batch=replay_train_batch(buffer, columns),
                    timesteps={
                        NUM_ENV_STEPS_SAMPLED_LIFETIME: sampled,
                        NUM_AGENT_STEPS_SAMPLED_LIFETIME: self.metrics.peek(
                            (ENV_RUNNER_RESULTS, NUM_AGENT_STEPS_SAMPLED_LIFETIME),
                            default={},
                        ),
                    },
                )
                rows = pop_priority_rows(learner_results)
                self.metrics.aggregate(learner_results, key=LEARNER_RESULTS)
            with self.metrics.log_time((TIMERS, REPLAY_BUFFER_UPDATE_PRIOS_TIMER)):
                if rows is not None:
                    buffer.update_priorities(rows)
        # The buffer's metrics are snapshots and lifetime counters: reading them
        # once per step reports what DQN's read after every update would.
        self.metrics.aggregate([buffer.get_metrics()], key=REPLAY_BUFFER_RESULTS)
        sync_env_runner_weights(self, learner_results)


def replay_train_batch(buffer, columns) -> MultiAgentBatch:
    """The train batch RLlib's DQN and SAC learner connectors would build from
    the sampled transitions: the same columns (names, dtypes, values), plus the
    buffer's per-item columns (`buffer_index`, and for NERS `ts`,
    `sample_position` and the encoding-cache keys)."""
    batch = {
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
    return MultiAgentBatch(
        {DEFAULT_MODULE_ID: SampleBatch(batch)}, env_steps=len(columns["obs"])
    )
