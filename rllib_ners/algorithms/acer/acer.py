"""ACER: actor-critic with experience replay, on RLlib's new API stack.

Wang, Bapst, Heess, Mnih, Munos, Kavukcuoglu & de Freitas, "Sample Efficient
Actor-Critic with Experience Replay", ICLR 2017. Discrete actions.

One training step:
  1. the EnvRunners act with the current softmax policy for
     `rollout_fragment_length` (default: `sequence_length`) steps per env and
     store each step's policy logits (`action_dist_inputs`): the behaviour
     policy mu of everything that is later replayed;
  2. the fresh chunks go into the replay buffer;
  3. once `num_steps_sampled_before_learning_starts` steps are stored: one
     on-policy update on the fresh chunks, cut into sequences of at most
     `sequence_length` steps, then `n` off-policy updates on sequences replayed
     from the buffer, `n` = `replay_ratio` (fixed) or drawn from
     Poisson(`replay_ratio`) (as in the paper);
  4. with the NERS buffer, after a step in which enough episodes finished, the
     NERS sampler takes one REINFORCE step (as in NERS-DQN).

The losses (Retrace critic, truncated importance sampling with bias correction,
entropy bonus, optional efficient trust region against the average policy
network) are in `torch/acer_torch_learner.py`, the math in
`torch/retrace_torch.py`.

Replay is of sequences (one row per sequence start, columnar, straight from
`FastPrioritizedEpisodeReplayBuffer.sample_sequences()`): uniform with the
default buffer (`alpha=0`), by priority with `alpha > 0` (PER on sequence
starts, priority `|Q_ret - Q|`) or by learned NERS scores with
`NERSEpisodeReplayBuffer`.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional

import numpy as np
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    REPLAY_BUFFER_RESULTS,
    REPLAY_BUFFER_SAMPLE_TIMER,
    REPLAY_BUFFER_UPDATE_PRIOS_TIMER,
    TIMERS,
)
from ray.util.debug import log_once

from rllib_ners.algorithms.acer.acer_learner import SEQUENCE_START_TS, SEQUENCE_WEIGHTS
from rllib_ners.algorithms.common.config.buffer_config_checks import (
    check_replay_buffer_config,
    our_replay_buffer_config,
)
from rllib_ners.algorithms.common.config.buffer_types import (
    FAST_BUFFER_TYPE,
    is_ners_buffer,
    merged_replay_buffer_config,
    resolve_buffer_class,
)
from rllib_ners.algorithms.common.config.config_checks import (
    check_catalog_model_config,
    check_cnn_encoder_fits_observations,
    check_discrete_actions,
    check_frame_stack_fits_observations,
)
from rllib_ners.algorithms.common.config.rllib_validation import normalize_setting
from rllib_ners.algorithms.common.config.setting_range_checks import (
    SettingRangesMixin,
)
from rllib_ners.algorithms.common.training.replay_state import ReplayStateMixin
from rllib_ners.algorithms.common.training.training_ops import (
    pop_replay_feedback,
    sample_into_buffer,
    sync_env_runner_weights,
)
from rllib_ners.algorithms.ners.ners_config import NERSConfigMixin
from rllib_ners.algorithms.ners.sampler_update import NERSSamplerUpdate
from rllib_ners.replay_buffers.ners_episode_buffer import SAMPLE_POSITION
from rllib_ners.seam.config import custom_learner_connector, raise_config_error

logger = logging.getLogger(__name__)

REPLAY_RATIO_DISTRIBUTIONS = ("poisson", "fixed")
# Metric keys under `result["acer"]`.
ACER_RESULTS = "acer"
NUM_ON_POLICY_UPDATES = "num_on_policy_updates_lifetime"
NUM_OFF_POLICY_UPDATES = "num_off_policy_updates_lifetime"
OFF_POLICY_UPDATES_PER_STEP = "off_policy_updates_per_step"
# Training steps `OFF_POLICY_UPDATES_PER_STEP` is averaged over.
OFF_POLICY_UPDATES_WINDOW = 100
_REPLAY_RNG_STATE = "replay_ratio_rng"


# Our buffers' capacity when `replay_buffer_config` gives none.
_BUFFER_DEFAULT_CAPACITY = 10_000
# Rounds of fresh rollouts the buffer must hold besides a replayed batch.
_FRESH_ROUNDS_IN_BUFFER = 2
# Sequences per Learner of the batch size an error message suggests.
_SUGGESTED_SEQUENCES_PER_BATCH = 16


class ACERConfig(SettingRangesMixin, NERSConfigMixin, AlgorithmConfig):
    """Configuration of `ACER`.

    ```python
    from rllib_ners import ACERConfig

    config = (
        ACERConfig()
        .environment("CartPole-v1")
        .training(lr=5e-4, sequence_length=20, replay_ratio=4.0)
    )
    algo = config.build_algo()
    algo.train()
    ```

    With NERS, replayed sequence starts are drawn by the learned sampler:

    ```python
    config = (
        ACERConfig()
        .environment("CartPole-v1")
        .training(
            replay_buffer_config={
                "type": "rllib_ners.NERSEpisodeReplayBuffer",
                "capacity": 50000,
                "alpha": 0.6,
                "beta": 0.4,
            }
        )
        .ners(objective="log_prob", train_size=256)
    )
    ```
    """

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or ACER)
        # .training()
        self.lr = 5e-4
        self.gamma = 0.99
        self.grad_clip = 40.0
        self.train_batch_size_per_learner = 320
        self.sequence_length = 20
        self.replay_ratio = 4.0
        self.replay_ratio_distribution = "poisson"
        self.truncation_c = 10.0
        self.retrace_c = 1.0
        self.entropy_coeff = 0.01
        self.q_loss_coeff = 0.5
        self.tau = 0.01
        self.use_trust_region = True
        self.trust_region_delta = 1.0
        self.num_steps_sampled_before_learning_starts = 1000
        self.replay_buffer_config = {
            "type": FAST_BUFFER_TYPE,
            "capacity": 50000,
            # Uniform replay: ACER's paper replays uniformly.
            "alpha": 0.0,
            "beta": 0.0,
        }
        # The replay memory is part of our checkpoints (RLlib 2.60 never saves it).
        self.store_buffer_in_checkpoints = True
        # .env_runners(): "auto" acts for `sequence_length` steps per env, with
        # RLlib's EnvRunner minus its per-step connector pipelines (the same
        # episodes; see rllib_ners.env.fast_env_runner).
        self.rollout_fragment_length = "auto"
        from rllib_ners.env.fast_env_runner import FastSingleAgentEnvRunner

        self.env_runner_cls = FastSingleAgentEnvRunner
        # .reporting(): about 1000 env steps per train() call.
        self.min_sample_timesteps_per_iteration = 1000

    @override(AlgorithmConfig)
    def training(
        self,
        *,
        sequence_length: Optional[int] = NotProvided,
        replay_ratio: Optional[float] = NotProvided,
        replay_ratio_distribution: Optional[str] = NotProvided,
        truncation_c: Optional[float] = NotProvided,
        retrace_c: Optional[float] = NotProvided,
        entropy_coeff: Optional[float] = NotProvided,
        q_loss_coeff: Optional[float] = NotProvided,
        tau: Optional[float] = NotProvided,
        use_trust_region: Optional[bool] = NotProvided,
        trust_region_delta: Optional[float] = NotProvided,
        num_steps_sampled_before_learning_starts: Optional[int] = NotProvided,
        replay_buffer_config: Optional[dict] = NotProvided,
        store_buffer_in_checkpoints: Optional[bool] = NotProvided,
        **kwargs,
    ) -> ACERConfig:
        """Sets ACER's training settings (and RLlib's: `lr`, `gamma`, `grad_clip`,
        `train_batch_size_per_learner`, ...).

        Args:
            sequence_length: Steps per replayed sequence (`T`, default 20); also
                the EnvRunners' `rollout_fragment_length` when that is "auto".
                `train_batch_size_per_learner` counts steps, so each off-policy
                update replays `train_batch_size_per_learner // sequence_length`
                sequences per Learner.
            replay_ratio: Off-policy updates per on-policy update (default 4, as
                in the paper's Atari runs; 0 is on-policy ACER).
            replay_ratio_distribution: "poisson" (default: the number of
                off-policy updates per step is drawn from Poisson(replay_ratio),
                as in the paper) or "fixed" (exactly `replay_ratio`, which must
                then be an integer).
            truncation_c: `c` of the truncated importance weight `min(c, rho)`
                in the policy gradient and of the bias correction
                `[1 - c / rho(a)]_+` (default 10, as in the paper).
            retrace_c: Truncation of the Retrace traces, `min(retrace_c, rho)`
                (default 1, as Retrace).
            entropy_coeff: Weight of the policy's entropy bonus (default 0.01).
            q_loss_coeff: Weight of the critic loss `0.5 (Q_ret - Q)^2` (default
                0.5).
            tau: Polyak rate of the average policy network after every update,
                `avg <- tau * current + (1 - tau) * avg` (paper: alpha = 0.99,
                i.e. tau = 0.01).
            use_trust_region: Project each step's policy gradient so that the
                linearised KL to the average policy grows by at most
                `trust_region_delta` (ACER's efficient trust region; default
                True).
            trust_region_delta: `delta` of the trust region (default 1.0, as in
                the paper).
            num_steps_sampled_before_learning_starts: Stored env steps before
                any update (on- or off-policy; default 1000).
            replay_buffer_config: Updates the buffer settings as RLlib's DQN
                and SAC configs do: keys not given keep their values, but a new
                `type` replaces them all (the dropped ones are logged); default:
                the fast buffer, capacity 50000, `alpha=0`. `type` is one of
                this package's buffers:
                `rllib_ners.FastPrioritizedEpisodeReplayBuffer` (with `alpha=0`:
                uniform, the default; `alpha > 0`: prioritised by
                `|Q_ret - Q|` of the sequence start) or
                `rllib_ners.NERSEpisodeReplayBuffer` (NERS; set `.ners(...)`).
            store_buffer_in_checkpoints: Whether checkpoints hold the replay
                buffer (default True).
        """
        super().training(**kwargs)
        if replay_buffer_config is not NotProvided:
            replay_buffer_config = merged_replay_buffer_config(
                self.replay_buffer_config, replay_buffer_config
            )
        for name, value in locals().items():
            if name in ("self", "kwargs", "__class__") or value is NotProvided:
                continue
            setattr(self, name, value)
        return self

    @property
    def replay_sequences_per_learner(self) -> int:
        return self.train_batch_size_per_learner // self.sequence_length

    @override(AlgorithmConfig)
    def get_rollout_fragment_length(self, worker_index: int = 0) -> int:
        if self.rollout_fragment_length == "auto":
            return self.sequence_length
        return self.rollout_fragment_length

    @override(AlgorithmConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from rllib_ners.algorithms.acer.torch.default_acer_torch_rl_module import (
            DefaultACERTorchRLModule,
        )

        return RLModuleSpec(
            module_class=DefaultACERTorchRLModule, model_config=self.model_config
        )

    @override(AlgorithmConfig)
    def get_default_learner_class(self):
        from rllib_ners.algorithms.acer.torch.acer_torch_learner import (
            ACERTorchLearner,
        )

        return ACERTorchLearner

    @override(AlgorithmConfig)
    def validate(self) -> None:
        super().validate()
        if not self.enable_rl_module_and_learner:
            raise_config_error(
                self,
                "ACER runs on RLlib's new API stack only; remove "
                "config.api_stack(enable_rl_module_and_learner=False, ...).",
            )
        if self.framework_str != "torch":
            raise_config_error(
                self,
                f"ACER supports framework 'torch' only, got {self.framework_str!r}. "
                f"Use config.framework('torch').",
            )
        if self.is_multi_agent:
            raise_config_error(
                self,
                "ACER supports single-agent setups only; remove the multi_agent() "
                "policies.",
            )
        if (
            custom_learner_connector(self) is not None
            or not self.add_default_connectors_to_learner_pipeline
        ):
            raise_config_error(
                self,
                "ACER builds its train batches from sequences itself and runs no "
                "learner connector pipeline, so learner_connector and "
                "add_default_connectors_to_learner_pipeline would be ignored; "
                "remove them from config.training(...) and transform what ACER "
                "learns from in an env wrapper.",
            )
        self._validate_acer_numbers()
        self._validate_replay_buffer()
        check_discrete_actions(self, "ACER")
        check_frame_stack_fits_observations(self)
        check_cnn_encoder_fits_observations(self)
        self._check_module_settings()

    def _check_module_settings(self) -> None:
        """ACER's catalog checks of model_config (`use_lstm`, layer norm in
        the heads), here rather than in the Learner's build."""
        from rllib_ners.algorithms.acer.acer_catalog import ACERCatalog
        from rllib_ners.algorithms.acer.default_acer_rl_module import (
            DefaultACERRLModule,
        )

        check_catalog_model_config(
            self, ACERCatalog.check_model_config, DefaultACERRLModule
        )

    def _validate_acer_numbers(self) -> None:
        """ACER's settings beyond their ranges (`SettingRangesMixin`): the batch
        against `sequence_length` and the replay ratio's distribution."""
        batch = self.train_batch_size_per_learner
        if batch < self.sequence_length or batch % self.sequence_length:
            raise_config_error(
                self,
                f"train_batch_size_per_learner={batch} must be a positive multiple of "
                f"sequence_length={self.sequence_length} (each off-policy update "
                f"replays train_batch_size_per_learner // sequence_length "
                f"sequences). Set e.g. config.training(train_batch_size_per_learner="
                f"{_SUGGESTED_SEQUENCES_PER_BATCH * self.sequence_length}).",
            )
        if self.replay_ratio_distribution not in REPLAY_RATIO_DISTRIBUTIONS:
            raise_config_error(
                self,
                f"replay_ratio_distribution={self.replay_ratio_distribution!r} is "
                f"unknown; use one of {REPLAY_RATIO_DISTRIBUTIONS} in "
                f"config.training(replay_ratio_distribution=...).",
            )
        if self.replay_ratio_distribution == "fixed" and float(
            self.replay_ratio
        ) != int(self.replay_ratio):
            raise_config_error(
                self,
                f"replay_ratio_distribution='fixed' runs exactly replay_ratio "
                f"off-policy updates per step, so replay_ratio must be an integer, "
                f"got {self.replay_ratio!r}. Use an integer or "
                f"replay_ratio_distribution='poisson'.",
            )

    def _validate_replay_buffer(self) -> None:
        buffer_config = our_replay_buffer_config(
            self,
            who="ACER",
            example=f"{{'type': '{FAST_BUFFER_TYPE}', 'capacity': 50000}}",
            replays="replays columnar sequences from",
            use=f"'{FAST_BUFFER_TYPE}' (alpha=0: uniform) or "
            f"'rllib_ners.NERSEpisodeReplayBuffer'",
        )
        normalize_setting(self, "replay_buffer_config", buffer_config)
        check_replay_buffer_config(self)
        capacity = buffer_config.get("capacity", _BUFFER_DEFAULT_CAPACITY)
        rollout = self.get_rollout_fragment_length() * self.num_envs_per_env_runner
        rollout *= max(1, self.num_env_runners)
        needed = self.total_train_batch_size + _FRESH_ROUNDS_IN_BUFFER * rollout
        if isinstance(capacity, (int, float)) and capacity < needed:
            raise_config_error(
                self,
                f"replay_buffer_config['capacity']={capacity} is too small for ACER: "
                f"it must hold a replayed batch ({self.total_train_batch_size} steps) "
                f"and two rounds of fresh rollouts ({rollout} steps each). Set it to "
                f"at least {needed}.",
            )
        starts = self.num_steps_sampled_before_learning_starts
        if isinstance(capacity, (int, float)) and starts > capacity:
            # ACER counts the stored steps (`len(buffer)`), which stop at the
            # capacity: no update would ever run.
            raise_config_error(
                self,
                f"num_steps_sampled_before_learning_starts={starts} is never "
                f"reached: ACER starts learning once that many env steps are "
                f"stored, and replay_buffer_config['capacity']={capacity} holds "
                f"fewer. Set it to at most {capacity}, or raise the capacity.",
            )
        self._warn_of_an_unused_replay_method(buffer_config)

    def _warn_of_an_unused_replay_method(self, buffer_config: Dict[str, Any]) -> None:
        """Warns, once, where replay_ratio=0 (on-policy ACER: nothing is
        replayed) meets a replay method, PER or NERS, that would then do
        nothing. A warning, not an error: a sweep over replay_ratio keeps it."""
        if self.replay_ratio != 0:
            return
        if is_ners_buffer(resolve_buffer_class(buffer_config["type"])):
            method = "NERS replay (the NERS buffer)"
        elif buffer_config.get("alpha", 0) > 0:
            method = f"prioritised replay (alpha={buffer_config['alpha']!r})"
        else:
            return
        if log_once(f"acer_on_policy_{method}"):
            logger.warning(
                "ACER with replay_ratio=0 is on-policy: nothing is replayed, so %s "
                "has no effect. Set replay_ratio > 0 (e.g. 4) to replay, or replay "
                "uniformly.",
                method,
            )


class ACER(ReplayStateMixin, Algorithm):
    """ACER (Wang et al., ICLR 2017) for discrete actions: per training step one
    on-policy update on the fresh fragments, then `replay_ratio` off-policy
    updates (fixed, or drawn from a Poisson) on sequences replayed uniformly,
    by priority or by the NERS sampler; Retrace critic, truncated importance
    weights with bias correction, optional trust region."""

    @classmethod
    @override(Algorithm)
    def get_default_config(cls) -> AlgorithmConfig:
        return ACERConfig()

    @override(Algorithm)
    def setup(self, config: AlgorithmConfig) -> None:
        super().setup(config)
        # Draws the number of off-policy updates per step; part of checkpoints.
        self._replay_rng = np.random.default_rng(self.config.seed)
        buffer = self.local_replay_buffer
        self._updates_priorities = self.config.uses_ners_replay or buffer.alpha > 0
        if self.config.uses_ners_replay:
            self.ners_sampler_update = NERSSamplerUpdate.from_config(
                self.config, n_step=1
            )
        self._num_on_policy_updates = 0
        self._num_off_policy_updates = 0

    @override(Algorithm)
    def training_step(self) -> None:
        buffer = self.local_replay_buffer
        episodes = sample_into_buffer(self, buffer)

        if len(buffer) >= self.config.num_steps_sampled_before_learning_starts and (
            sum(len(e) for e in episodes) > 0
        ):
            self._learn(buffer)
        self.metrics.aggregate([buffer.get_metrics()], key=REPLAY_BUFFER_RESULTS)
        if self.ners_sampler_update is not None:
            self.ners_sampler_update.maybe_update(self)

    @override(Algorithm)
    def step(self):
        """One iteration; with the NERS buffer, plus the sampler diagnostics in
        `result["ners"]`."""
        result = super().step()
        if self.ners_sampler_update is not None:
            self.ners_sampler_update.report(self, result)
        return result

    def _learn(self, buffer) -> None:
        T = self.config.sequence_length
        learner_results = [
            self._update(buffer.recent_sequences(T), replayed=False),
        ]
        self._num_on_policy_updates += 1
        num_replays = self._num_replay_updates()
        for _ in range(num_replays):
            with self.metrics.log_time((TIMERS, REPLAY_BUFFER_SAMPLE_TIMER)):
                batch = buffer.sample_sequences(
                    self.config.replay_sequences_per_learner
                    * max(1, self.config.num_learners),
                    T,
                )
            learner_results.append(self._update(batch, replayed=True))
        self._num_off_policy_updates += num_replays
        for results in learner_results:
            self.metrics.aggregate(results, key=LEARNER_RESULTS)
        self.metrics.log_dict(
            {
                NUM_ON_POLICY_UPDATES: self._num_on_policy_updates,
                NUM_OFF_POLICY_UPDATES: self._num_off_policy_updates,
            },
            key=ACER_RESULTS,
            reduce="max",
            window=1,
        )
        self.metrics.log_value(
            (ACER_RESULTS, OFF_POLICY_UPDATES_PER_STEP),
            num_replays,
            window=OFF_POLICY_UPDATES_WINDOW,
        )
        sync_env_runner_weights(self, learner_results[-1])

    def _num_replay_updates(self) -> int:
        ratio = float(self.config.replay_ratio)
        if self.config.replay_ratio_distribution == "fixed":
            return int(ratio)
        return int(self._replay_rng.poisson(ratio))

    def _update(self, sequences: Dict[str, np.ndarray], *, replayed: bool):
        """One Learner update on columnar sequences; returns the Learner results.

        For replayed batches of a prioritising buffer, the rows the Learners
        return (one per sequence start) go to `update_priorities()`.
        """
        with_priorities = replayed and self._updates_priorities
        batch = self._train_batch(sequences, with_positions=with_priorities)
        with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
            results = self.learner_group.update(
                batch=batch,
                timesteps={
                    NUM_ENV_STEPS_SAMPLED_LIFETIME: self.metrics.peek(
                        (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0
                    )
                },
            )
        rows = pop_replay_feedback(results)
        if with_priorities:
            with self.metrics.log_time((TIMERS, REPLAY_BUFFER_UPDATE_PRIOS_TIMER)):
                self.local_replay_buffer.update_priorities(rows)
        return results

    def _train_batch(
        self, sequences: Dict[str, np.ndarray], *, with_positions: bool
    ) -> MultiAgentBatch:
        """The Learners' columnar batch, in whole sequences (rows)."""
        if Columns.ACTION_DIST_INPUTS not in sequences:
            raise ValueError(
                "ACER needs the behaviour policy's `action_dist_inputs` stored with "
                "every step, but the replay buffer holds none: the EnvRunners' "
                "RLModule must return action_dist_inputs when exploring (ACER's "
                "default module does)."
            )
        columns = {
            Columns.OBS: sequences["obs"],
            Columns.ACTIONS: sequences["actions"],
            Columns.REWARDS: sequences["rewards"],
            Columns.TERMINATEDS: sequences["terminateds"],
            Columns.LOSS_MASK: sequences["mask"],
            Columns.ACTION_DIST_INPUTS: sequences[Columns.ACTION_DIST_INPUTS],
            SEQUENCE_WEIGHTS: sequences["weights"],
        }
        if with_positions:
            columns[SEQUENCE_START_TS] = sequences["ts"][:, 0]
            columns[SAMPLE_POSITION] = np.arange(sequences["obs"].shape[0])
        num_learners = max(1, self.config.num_learners)
        padding = -len(columns[Columns.OBS]) % num_learners
        if padding:
            # RLlib shards a batch row-wise between the Learners; every Learner
            # needs a row. Padded rows are copies of row 0 with no real steps.
            columns = {
                key: np.concatenate([value, np.repeat(value[:1], padding, axis=0)])
                for key, value in columns.items()
            }
            columns[Columns.LOSS_MASK][-padding:] = False
            columns[SEQUENCE_WEIGHTS][-padding:] = 0.0
        env_steps = int(sequences["mask"].sum())
        return MultiAgentBatch(
            {DEFAULT_MODULE_ID: SampleBatch(columns)}, env_steps=env_steps
        )

    @override(ReplayStateMixin)
    def _extra_checkpoint_state(self) -> Dict[str, Any]:
        return {
            _REPLAY_RNG_STATE: self._replay_rng.bit_generator.state,
            NUM_ON_POLICY_UPDATES: self._num_on_policy_updates,
            NUM_OFF_POLICY_UPDATES: self._num_off_policy_updates,
        }

    @override(ReplayStateMixin)
    def _set_extra_checkpoint_state(self, state: Dict[str, Any]) -> None:
        self._replay_rng.bit_generator.state = state[_REPLAY_RNG_STATE]
        self._num_on_policy_updates = int(state[NUM_ON_POLICY_UPDATES])
        self._num_off_policy_updates = int(state[NUM_OFF_POLICY_UPDATES])
