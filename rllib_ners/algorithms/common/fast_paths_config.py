"""The fast training paths' settings on this package's replay configs.

`RainbowDQNConfig` (so `NERSDQNConfig`) and `NERSSACConfig` default to:

* `env_runner_cls=FastSingleAgentEnvRunner` (`rllib_ners.env.fast_env_runner`):
  RLlib's EnvRunner with a sampling loop that skips the connector pipelines
  where the default pipelines describe the config; switch back with
  `config.env_runners(env_runner_cls=SingleAgentEnvRunner)`. Multi-agent configs
  get RLlib's default EnvRunner;
* `fast_training_loop=True` (`rllib_ners.algorithms.common.replay_loop`): one
  loop per training iteration, numpy columns to the Learners, metrics reduced
  once per iteration, weights shared between a local Learner and a local
  EnvRunner. `config.training(fast_training_loop=False)` runs RLlib's own
  training step instead (the same algorithm, RLlib's bookkeeping).

Both are exact: the same actions, episodes and updates for the same seeds
(tested). Configs a fast path cannot serve fall back by themselves and say why
in one INFO log line.
"""

from __future__ import annotations

import logging

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.utils.annotations import override

from rllib_ners.seam.config import raise_config_error

logger = logging.getLogger(__name__)


class FastPathsConfigMixin:
    """`fast_training_loop` and the fast EnvRunner default (list it before the
    AlgorithmConfig class)."""

    def _init_fast_paths(self) -> None:
        from rllib_ners.env.fast_env_runner import FastSingleAgentEnvRunner

        self.env_runner_cls = FastSingleAgentEnvRunner
        self.fast_training_loop = True

    @override(AlgorithmConfig)
    def training(self, *, fast_training_loop=NotProvided, **kwargs):
        """`AlgorithmConfig.training()`, plus:

        Args:
            fast_training_loop: Whether to run this package's training loop (one
                loop per iteration, metrics reduced once per iteration, no
                weight copies between a local Learner and a local EnvRunner;
                default True) or RLlib's own training step (False).
        """
        super().training(**kwargs)
        if fast_training_loop is not NotProvided:
            self.fast_training_loop = fast_training_loop
        return self

    def _validate_fast_paths(self) -> None:
        from rllib_ners.env.fast_env_runner import FastSingleAgentEnvRunner

        if not isinstance(self.fast_training_loop, bool):
            raise_config_error(
                self,
                f"fast_training_loop must be True or False, got "
                f"{self.fast_training_loop!r}; set config.training("
                f"fast_training_loop=True).",
            )
        if self.is_multi_agent and self.env_runner_cls is FastSingleAgentEnvRunner:
            # The single-agent default does not apply; RLlib picks its own.
            logger.info(
                "Multi-agent config: RLlib's MultiAgentEnvRunner samples instead of "
                "FastSingleAgentEnvRunner."
            )
            self.env_runner_cls = None
