"""`DQNTorchLearner` whose Adam optimiser honours `config.adam_epsilon`.

RLlib 2.60's `TorchLearner.configure_optimizers_for_module` builds
`torch.optim.Adam(params)` with torch's default eps=1e-8 and ignores DQN's
`adam_epsilon`; Rainbow uses 1.5e-4 (Hessel et al. 2018; data-efficient Rainbow).
The loss is RLlib's own (double Q, n-step, C51 projection, PER weights); with
scalar Q-values its statistics are computed once per iteration (see
`compute_loss_for_module`).
"""

from __future__ import annotations

from typing import Any, Dict

import torch
from ray.rllib.algorithms.dqn.dqn import DQNConfig
from ray.rllib.algorithms.dqn.dqn_learner import (
    QF_LOSS_KEY,
    QF_MAX_KEY,
    QF_MEAN_KEY,
    QF_MIN_KEY,
    QF_NEXT_PREDS,
    QF_PREDS,
    QF_TARGET_NEXT_PREDS,
    TD_ERROR_MEAN_KEY,
    DQNLearner,
)
from ray.rllib.algorithms.dqn.torch.dqn_torch_learner import DQNTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import TD_ERROR_KEY
from ray.rllib.utils.typing import ModuleID, TensorType
from torch.nn import functional as F

from rllib_ners.algorithms.common.learner.fast_torch_learner import FastTorchLearner
from rllib_ners.algorithms.common.learner.target_updates import DQNTargetUpdates
from rllib_ners.algorithms.common.learner.update_step import (
    rllib_update_needed,
    update_in_training_mode,
)
from rllib_ners.utils.malloc import keep_freed_tensor_memory
from rllib_ners.utils.optimizer_steps import make_adam

DEFAULT_ADAM_EPSILON = 1e-8


class RainbowDQNTorchLearner(FastTorchLearner, DQNTorchLearner):
    """RLlib's DQN learner with `Adam(eps=config.adam_epsilon)`.

    Its update is RLlib's: the package's (`update_in_training_mode`, the
    forward pass without a mode switch per update) or, for several Learners
    or a compiled update, RLlib's own `_update`; `FastTorchLearner` defers its
    metrics to once per iteration and makes its gradient step with fused
    kernels. The target networks are updated with multi-tensor ops, and
    checkpoints hold when they were last synced, so a restored run syncs them
    when the saved one would have (`DQNTargetUpdates`).
    """

    @override(DQNTorchLearner)
    def build(self) -> None:
        keep_freed_tensor_memory()
        super().build()
        self.target_updates = DQNTargetUpdates(self)

    @override(TorchLearner)
    def _update(self, batch: Dict[str, Any]):
        if rllib_update_needed(self):
            return super()._update(batch)
        return update_in_training_mode(self, batch)

    @override(DQNLearner)
    def after_gradient_based_update(self, *, timesteps: Dict[str, Any]) -> None:
        # TorchLearner's step (learning-rate schedules), then DQNLearner's
        # target-network update as multi-tensor Polyak steps.
        TorchLearner.after_gradient_based_update(self, timesteps=timesteps)
        self.target_updates.after_update(timesteps)

    @override(TorchLearner)
    def get_state(self, components=None, *, not_components=None, **kwargs):
        state = super().get_state(components, not_components=not_components, **kwargs)
        self.target_updates.add_state(state, components, not_components)
        return state

    @override(TorchLearner)
    def set_state(self, state: Dict[str, Any]) -> None:
        super().set_state(state)
        self.target_updates.set_state(state)

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

    @override(DQNTorchLearner)
    def compute_loss_for_module(
        self,
        *,
        module_id: ModuleID,
        config: DQNConfig,
        batch: Dict[str, Any],
        fwd_out: Dict[str, TensorType],
    ) -> TensorType:
        """RLlib's DQN loss. Scalar Q-values (one atom) without a loss mask take
        `_scalar_q_loss`: RLlib's ops in RLlib's order, without building a loss
        module per update, and with the window-1 statistics (mean, max and min
        Q, mean TD error) computed only for the update the iteration reports."""
        if config.num_atoms > 1 or Columns.LOSS_MASK in batch:
            return super().compute_loss_for_module(
                module_id=module_id, config=config, batch=batch, fwd_out=fwd_out
            )
        return self._scalar_q_loss(module_id, config, batch, fwd_out)

    def _scalar_q_loss(self, module_id, config, batch, fwd_out) -> TensorType:
        # `DQNTorchLearner.compute_loss_for_module` with `num_atoms == 1`, line
        # by line (the loss, TD errors and statistics are tested equal).
        q_curr = fwd_out[QF_PREDS]
        q_target_next = fwd_out[QF_TARGET_NEXT_PREDS]
        actions = batch[Columns.ACTIONS]
        q_selected = torch.nan_to_num(
            torch.gather(q_curr, dim=-1, index=actions.view(*actions.shape, 1).long()),
            neginf=0.0,
        ).squeeze(dim=-1)
        greedy_source = fwd_out[QF_NEXT_PREDS] if config.double_q else q_target_next
        q_next_best_idx = torch.argmax(greedy_source, dim=-1).unsqueeze(dim=-1).long()
        q_next_best = torch.nan_to_num(
            torch.gather(q_target_next, dim=-1, index=q_next_best_idx), neginf=0.0
        ).squeeze()
        q_next_best_masked = (1.0 - batch[Columns.TERMINATEDS].float()) * q_next_best
        discount = config.gamma ** batch["n_step"]
        q_selected_target = (
            batch[Columns.REWARDS] + discount * q_next_best_masked
        ).detach()
        loss_fn = F.huber_loss if config.td_error_loss_fn == "huber" else F.mse_loss
        td_error = torch.abs(q_selected - q_selected_target)
        total_loss = torch.mean(
            batch["weights"] * loss_fn(q_selected, q_selected_target, reduction="none")
        )

        self.metrics.log_value(
            (module_id, TD_ERROR_KEY), td_error, reduce="item_series"
        )
        # Detached: kept until the iteration's flush, these would keep the
        # update's autograd graph alive into the next updates.
        q_stats, td_error = q_selected.detach(), td_error.detach()
        loss_value = total_loss.detach()
        statistics = {
            QF_LOSS_KEY: lambda: loss_value,
            QF_MEAN_KEY: lambda: torch.mean(q_stats),
            QF_MAX_KEY: lambda: torch.max(q_stats),
            QF_MIN_KEY: lambda: torch.min(q_stats),
            TD_ERROR_MEAN_KEY: lambda: torch.mean(td_error),
        }
        self.log_statistics(module_id, statistics)
        return total_loss
