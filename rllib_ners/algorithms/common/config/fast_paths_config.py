"""The fast training paths' settings on this package's replay configs.

`RainbowDQNConfig` (so `NERSDQNConfig`), `NERSSACConfig` and `TD3Config` (so
`DDPGConfig`) default to:

* `env_runner_cls=FastSingleAgentEnvRunner` (`rllib_ners.env.fast_env_runner`):
  RLlib's EnvRunner with a sampling loop that skips the connector pipelines
  where the default pipelines describe the config; switch back with
  `config.env_runners(env_runner_cls=SingleAgentEnvRunner)`. Multi-agent configs
  get RLlib's default EnvRunner;
* `fast_training_loop=True` (`rllib_ners.algorithms.common.training.replay_loop`): one
  loop per training iteration, numpy columns to the Learners, metrics reduced
  once per iteration, weights shared between a local Learner and a local
  EnvRunner. `config.training(fast_training_loop=False)` runs RLlib's own
  training step instead (the same algorithm, RLlib's bookkeeping).

Both are exact: the same actions, episodes and updates for the same seeds
(tested). Configs a fast path cannot serve fall back by themselves and say why
in one INFO log line.

Opt-in, with remote EnvRunners: `overlap_sampling=True`
(`rllib_ners.algorithms.common.training.overlapped_sampling`): the EnvRunners keep
sampling while the Learner updates, the replay ratio still held per env step,
each sample's weights at most `max_weights_staleness` updates old, the weights
sent at most every `weights_sync_interval` updates.

Opt-in, for a Learner on a GPU: `cuda_graph_updates=True`
(`rllib_ners.algorithms.common.learner.cuda_graph_updates`): the loop's gradient
updates replayed from captured CUDA graphs, equal to the eager updates within
float tolerance; `act_on_learner_device=True`
(`rllib_ners.algorithms.common.training.weight_sharing`): the local EnvRunner acts on
the GPU with the Learner's own parameters (with both: from captured CUDA
graphs, `rllib_ners.env.acting_graphs`).
"""

from __future__ import annotations

import logging

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.utils.annotations import override

from rllib_ners.algorithms.common.config.buffer_types import (
    replay_buffer_config_update,
)
from rllib_ners.seam.config import raise_config_error
from rllib_ners.utils.mixin_order import PrecedesInBases

logger = logging.getLogger(__name__)


class FastPathsConfigMixin(PrecedesInBases, precedes=AlgorithmConfig):
    """`fast_training_loop` and the fast EnvRunner default, ahead of the RLlib
    config class. It sets itself up: `__init__` sets the defaults
    and `validate()` checks them after the parent config's checks."""

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class)
        from rllib_ners.env.fast_env_runner import FastSingleAgentEnvRunner

        self.env_runner_cls = FastSingleAgentEnvRunner
        self.fast_training_loop = True
        self.overlap_sampling = False
        self.max_weights_staleness = None
        self.weights_sync_interval = 1
        self.cuda_graph_updates = False
        self.act_on_learner_device = False

    @override(AlgorithmConfig)
    def training(
        self,
        *,
        fast_training_loop=NotProvided,
        overlap_sampling=NotProvided,
        max_weights_staleness=NotProvided,
        weights_sync_interval=NotProvided,
        cuda_graph_updates=NotProvided,
        act_on_learner_device=NotProvided,
        **kwargs,
    ):
        """`AlgorithmConfig.training()`, plus:

        Args:
            fast_training_loop: Whether to run this package's training loop (one
                loop per iteration, metrics reduced once per iteration, no
                weight copies between a local Learner and a local EnvRunner;
                default True) or RLlib's own training step (False).
            overlap_sampling: Whether the remote EnvRunners keep sampling while
                the Learner updates (True) instead of sampling, waiting, then
                learning in lockstep as RLlib's DQN does (False, the default).
                Each EnvRunner samples with the weights it last received; the
                updates still follow the replay ratio (`training_intensity`)
                per env step that reaches the buffer. Needs
                `num_env_runners >= 1` and the fast training loop. Runs are not
                reproducible draw for draw (samples arrive in the order the
                EnvRunners finish them).
            max_weights_staleness: With `overlap_sampling`: the most Learner
                updates a sample's weights may lag the Learner's when it reaches
                the buffer; the Learner waits for an older sample before going
                further. None (default): twice the updates one lockstep round
                makes (one fragment from every EnvRunner), or twice
                `weights_sync_interval` where that is more. Reported per
                iteration as `weights_staleness_mean` / `_max`.
            weights_sync_interval: With `overlap_sampling`: the fewest Learner
                updates between two syncs of the weights to the EnvRunners
                (default 1: after every round with updates, as in lockstep).
                Each sync puts the RLModule's weights into Ray's object store
                (28 MB for Rainbow's Nature CNN with noisy layers), which
                bounds a fast Learner fed by many EnvRunners; a larger interval
                (as Ape-X's `max_weight_sync_delay`) syncs less often, each
                sample's staleness counted from the weights it sampled with.
                Reported per iteration as `num_weights_syncs`.
            cuda_graph_updates: Whether a Learner on a CUDA device replays its
                gradient updates (forward pass, losses, backward pass,
                optimizer steps) from captured CUDA graphs, one launch per
                update instead of a few hundred (default False: eager
                updates). Equal to the eager updates within float tolerance.
                Needs the fast training loop; Learners it cannot serve (not on
                CUDA, several Learners, cached NERS image encodings, mixed precision, LR
                schedules, LaBER's sub-sample drawn on the host) update eagerly
                and say why in one log line.
            act_on_learner_device: With `num_env_runners=0` and a local Learner
                on a GPU, whether the local EnvRunner acts on the GPU with the
                Learner's own parameters (True: no weight copies; for
                convolutional modules, whose batch-1 forward pass is several
                times faster there) or on the CPU with a copy refreshed once
                per round with updates (False, the default: for small MLPs,
                which act faster on the CPU). Needs the fast EnvRunner's
                sampling; otherwise the EnvRunner acts on the CPU and says why
                in one log line. Random draws when acting then come from the
                GPU's generator. With `cuda_graph_updates=True` as well, its
                exploration passes replay from captured CUDA graphs too (one
                launch per env step; `rllib_ners.env.acting_graphs`) where the
                module's exploration allows (noisy-net Rainbow, SAC, TD3; not
                epsilon-greedy exploration, whose epsilon the host computes
                every step), said in one log line.
        """
        buffer_update = kwargs.get("replay_buffer_config", NotProvided)
        if isinstance(buffer_update, dict):
            kwargs["replay_buffer_config"] = replay_buffer_config_update(
                self.replay_buffer_config, buffer_update
            )
        super().training(**kwargs)
        if fast_training_loop is not NotProvided:
            self.fast_training_loop = fast_training_loop
        if overlap_sampling is not NotProvided:
            self.overlap_sampling = overlap_sampling
        if max_weights_staleness is not NotProvided:
            self.max_weights_staleness = max_weights_staleness
        if weights_sync_interval is not NotProvided:
            self.weights_sync_interval = weights_sync_interval
        if cuda_graph_updates is not NotProvided:
            self.cuda_graph_updates = cuda_graph_updates
        if act_on_learner_device is not NotProvided:
            self.act_on_learner_device = act_on_learner_device
        return self

    @override(AlgorithmConfig)
    def validate(self) -> None:
        super().validate()
        from rllib_ners.env.fast_env_runner import FastSingleAgentEnvRunner

        if not isinstance(self.fast_training_loop, bool):
            raise_config_error(
                self,
                f"fast_training_loop must be True or False, got "
                f"{self.fast_training_loop!r}; set config.training("
                f"fast_training_loop=True).",
            )
        self._validate_overlap_sampling()
        self._validate_cuda_graph_updates()
        self._validate_act_on_learner_device()
        if self.is_multi_agent and self.env_runner_cls is FastSingleAgentEnvRunner:
            # The single-agent default does not apply; RLlib picks its own.
            logger.info(
                "Multi-agent config: RLlib's MultiAgentEnvRunner samples instead of "
                "FastSingleAgentEnvRunner."
            )
            self.env_runner_cls = None

    def _check_opt_in_flag(self, name: str) -> None:
        """Raises unless the opt-in setting `name` is True or False."""
        value = getattr(self, name)
        if not isinstance(value, bool):
            raise_config_error(
                self,
                f"{name} must be True or False, got {value!r}; set "
                f"config.training({name}=True) or leave it False.",
            )

    def _validate_cuda_graph_updates(self) -> None:
        self._check_opt_in_flag("cuda_graph_updates")
        if self.cuda_graph_updates and not self.fast_training_loop:
            raise_config_error(
                self,
                "cuda_graph_updates=True captures the updates of this package's "
                "training loop, but fast_training_loop is False; set "
                "config.training(fast_training_loop=True) or cuda_graph_updates=False.",
            )

    def _validate_act_on_learner_device(self) -> None:
        self._check_opt_in_flag("act_on_learner_device")
        if self.act_on_learner_device and not self.in_evaluation:
            if self.num_env_runners > 0:
                raise_config_error(
                    self,
                    f"act_on_learner_device=True makes the local EnvRunner act on "
                    f"the local Learner's GPU, but num_env_runners is "
                    f"{self.num_env_runners} (remote EnvRunners act on their own "
                    f"devices); set config.env_runners(num_env_runners=0) or "
                    f"act_on_learner_device=False.",
                )
            if not self.fast_training_loop:
                raise_config_error(
                    self,
                    "act_on_learner_device=True shares the Learner's parameters in "
                    "this package's training loop, but fast_training_loop is "
                    "False; set config.training(fast_training_loop=True) or "
                    "act_on_learner_device=False.",
                )

    def _validate_overlap_sampling(self) -> None:
        self._check_opt_in_flag("overlap_sampling")
        staleness = self.max_weights_staleness
        is_count = isinstance(staleness, int) and not isinstance(staleness, bool)
        if staleness is not None and not (is_count and staleness >= 1):
            raise_config_error(
                self,
                f"max_weights_staleness must be None or an int >= 1 (Learner "
                f"updates), got {staleness!r}; set config.training("
                f"max_weights_staleness=None) for twice one lockstep round's updates.",
            )
        interval = self.weights_sync_interval
        if not (
            isinstance(interval, int)
            and not isinstance(interval, bool)
            and interval >= 1
        ):
            raise_config_error(
                self,
                f"weights_sync_interval must be an int >= 1 (Learner updates), got "
                f"{interval!r}; set config.training(weights_sync_interval=1) to "
                f"sync after every round with updates.",
            )
        if interval > 1 and not self.overlap_sampling and not self.in_evaluation:
            raise_config_error(
                self,
                f"weights_sync_interval={interval} applies to overlapped sampling; "
                f"lockstep sampling syncs the weights after every round, as RLlib's "
                f"DQN does. Set config.training(overlap_sampling=True) or "
                f"weights_sync_interval=1.",
            )
        if (
            staleness is not None
            and not self.overlap_sampling
            and not self.in_evaluation
        ):
            raise_config_error(
                self,
                f"max_weights_staleness={staleness} applies to overlapped sampling; "
                f"lockstep sampling acts with the newest weights in every round. "
                f"Set config.training(overlap_sampling=True) or "
                f"max_weights_staleness=None.",
            )
        if staleness is not None and interval > staleness:
            raise_config_error(
                self,
                f"max_weights_staleness={staleness} must be at least "
                f"weights_sync_interval={interval}: a request's weights may be "
                f"{interval - 1} updates old when it is sent, and the Learner would "
                f"wait for it at nearly every update. Set max_weights_staleness to "
                f"{2 * interval} or more (or None).",
            )
        # The evaluation config (a copy with the evaluation EnvRunners) does
        # not train.
        if not self.overlap_sampling or self.in_evaluation:
            return
        if self.num_env_runners < 1:
            raise_config_error(
                self,
                "overlap_sampling=True needs remote EnvRunners to sample while the "
                "Learner updates, but num_env_runners is 0; set "
                "config.env_runners(num_env_runners=2) (or more), or "
                "config.training(overlap_sampling=False).",
            )
        if not self.fast_training_loop:
            raise_config_error(
                self,
                "overlap_sampling=True runs in this package's training loop, but "
                "fast_training_loop is False; set config.training("
                "fast_training_loop=True) or overlap_sampling=False.",
            )
