"""`DQNTorchLearner` whose Adam optimiser honours `config.adam_epsilon`.

RLlib 2.60's `TorchLearner.configure_optimizers_for_module` builds
`torch.optim.Adam(params)` with torch's default eps=1e-8 and ignores DQN's
`adam_epsilon`; Rainbow uses 1.5e-4 (Hessel et al. 2018; data-efficient Rainbow).
The loss is RLlib's own (double Q, n-step, C51 projection, PER weights).
"""

from __future__ import annotations

from ray.rllib.algorithms.dqn.torch.dqn_torch_learner import DQNTorchLearner
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.annotations import override
from ray.rllib.utils.typing import ModuleID

from rllib_ners.algorithms.common.fast_torch_learner import (
    FastTargetNetworkMixin,
    FastTorchLearnerMixin,
)
from rllib_ners.utils.torch_ops import make_adam

DEFAULT_ADAM_EPSILON = 1e-8


class RainbowDQNTorchLearner(
    FastTargetNetworkMixin, FastTorchLearnerMixin, DQNTorchLearner
):
    """RLlib's DQN learner with `Adam(eps=config.adam_epsilon)` (and one fused
    nan/inf check of the gradients instead of RLlib's two passes)."""

    @override(TorchLearner)
    def configure_optimizers_for_module(self, module_id: ModuleID, config=None) -> None:
        module = self.module[module_id]
        params = self.get_parameters(module)
        eps = float(getattr(config, "adam_epsilon", DEFAULT_ADAM_EPSILON))
        # The learning rate (fixed or scheduled) is set by the registered scheduler.
        optimizer = make_adam(params, eps=eps)
        self.register_optimizer(
            module_id=module_id,
            optimizer=optimizer,
            params=params,
            lr_or_lr_schedule=config.lr,
        )
