"""SAC's squashed Gaussian with the SAC paper's greedy action.

RLlib 2.60's `TorchSquashedGaussian.to_deterministic()` is the Gaussian's
pre-tanh mean, which the EnvRunner then clips to the action bounds. The SAC
paper, Stable-Baselines3 and CleanRL act greedily with the squashed mean,
`tanh(mean)` scaled to the bounds: another policy (for bounds [-1, 1], a
pre-tanh mean of 0.9 acts as 0.72, not 0.9; 1.5 as 0.91, not 1.0).
`TorchSquashedMeanGaussian` is RLlib's distribution with that greedy action;
sampling and log-probabilities are RLlib's.
"""

from __future__ import annotations

from ray.rllib.core.distribution.distribution import Distribution
from ray.rllib.core.distribution.torch.torch_distribution import (
    TorchDeterministic,
    TorchSquashedGaussian,
)
from ray.rllib.utils.annotations import override

from rllib_ners.utils.action_sampling import squash


class TorchSquashedMeanGaussian(TorchSquashedGaussian):
    """`TorchSquashedGaussian` whose deterministic action is the squashed mean."""

    @override(TorchSquashedGaussian)
    def to_deterministic(self) -> Distribution:
        return TorchDeterministic(loc=squash(self.loc, self.low, self.high))
