"""The NERS sampler in our replay training loop: its update after every round,
its diagnostics in every iteration's result.

For the algorithms on `ReplayLoopMixin` (NERS-DQN, NERS-SAC, TD3): with the
NERS buffer (`config.uses_ners_replay`) the sampler's update
(`NERSSamplerUpdate`) runs after each round of sampling and updates, as it
would after RLlib's training step, and `result["ners"]` carries its
diagnostics; with another buffer both do nothing.
"""

from __future__ import annotations

from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.utils.annotations import override

from rllib_ners.algorithms.common.training.replay_loop import ReplayLoopMixin
from rllib_ners.algorithms.ners.sampler_update import NERSSamplerUpdate


class NERSSamplerRoundsMixin(ReplayLoopMixin):
    """`ReplayLoopMixin` with the NERS sampler's update after every round (see
    the module docstring)."""

    @override(Algorithm)
    def setup(self, config: AlgorithmConfig) -> None:
        super().setup(config)
        if self.config.uses_ners_replay:
            self.ners_sampler_update = NERSSamplerUpdate.from_config(self.config)

    @override(ReplayLoopMixin)
    def _after_round(self) -> None:
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
