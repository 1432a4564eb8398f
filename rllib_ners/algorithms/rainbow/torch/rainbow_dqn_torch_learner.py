"""`DQNTorchLearner` whose Adam optimiser honours `config.adam_epsilon`, and
which serves the ReLo and LaBER replay samplers.

RLlib 2.60's `TorchLearner.configure_optimizers_for_module` builds
`torch.optim.Adam(params)` with torch's default eps=1e-8 and ignores DQN's
`adam_epsilon`; Rainbow uses 1.5e-4 (Hessel et al. 2018; data-efficient Rainbow).
The loss is RLlib's own (double Q, n-step, C51 projection, PER weights); with
scalar Q-values its statistics are computed once per iteration (see
`compute_loss_for_module`).

Replay methods (`replay_buffer_config["sampler"]`):

- `"relo"` (reducible loss, Sujit et al. 2023): the ordinary update plus one
  no-grad pass of the target network on s_t; the Learner logs, per item,
  `[|delta|, l(Q(s,a), y), l(Q_target(s,a), y), position]`
  (`pack_relo_feedback`) where it logs TD errors otherwise. l is the update's
  own per-item loss before the IS weights (Huber / squared error; C51: the
  cross-entropy -sum m log p). The loss and gradients are PER's.
- `"laber"` (large batch experience replay, Lahire et al. 2022): the Learner
  gets m*B rows and `_update` runs `laber_dqn_update` (scoring pass, the
  sub-sample of B rows, the gradient step on them; see `laber_dqn_update.py`).
  The sub-sampler's generator is part of the Learner's state
  (`LABER_GENERATOR_STATE`).
"""

from __future__ import annotations

from typing import Any, Dict

import torch
from ray.rllib.algorithms.dqn.dqn import DQNConfig
from ray.rllib.algorithms.dqn.dqn_learner import (
    ATOMS,
    QF_LOGITS,
    QF_PREDS,
    QF_PROBS,
    DQNLearner,
)
from ray.rllib.algorithms.dqn.torch.dqn_torch_learner import DQNTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import TD_ERROR_KEY
from ray.rllib.utils.typing import ModuleID, TensorType

from rllib_ners.algorithms.common.learner.fast_torch_learner import FastTorchLearner
from rllib_ners.algorithms.common.learner.replay_methods import (
    large_batch_subsampler,
    pack_relo_feedback,
    uses_laber_replay,
    uses_relo_replay,
)
from rllib_ners.algorithms.common.learner.target_updates import DQNTargetUpdates
from rllib_ners.algorithms.common.learner.update_step import (
    rllib_update_needed,
    update_in_training_mode,
)
from rllib_ners.algorithms.rainbow.torch.dqn_losses import (
    c51_item_losses,
    c51_statistics,
    c51_target_distribution,
    q_statistics,
    scalar_loss_function,
    scalar_td_target,
    selected_logits,
    selected_q,
)
from rllib_ners.algorithms.rainbow.torch.laber_dqn_update import (
    laber_dqn_update,
)
from rllib_ners.replay_buffers.feedback import (
    LABER_SURROGATES,
    RELO_LOSSES,
    TD_ERRORS,
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
    when the saved one would have (`DQNTargetUpdates`). With ReLo or LaBER
    replay it computes what their samplers need (see the module docstring).
    """

    # The replay feedback it sends: TD errors, ReLo's losses or LaBER's
    # surrogates (the buffer's sampler must take one; checked when it is built).
    replay_feedback_layouts = (TD_ERRORS, RELO_LOSSES, LABER_SURROGATES)
    # Whether losses log ReLo's rows (set in `build` from the config).
    relo = False

    @override(DQNTorchLearner)
    def build(self) -> None:
        keep_freed_tensor_memory()
        super().build()
        self.target_updates = DQNTargetUpdates(self)
        if uses_relo_replay(self.config) or uses_laber_replay(self.config):
            self._check_stateless_modules()
        self.relo = uses_relo_replay(self.config)
        if uses_laber_replay(self.config):
            # Its gradient pass runs outside RLlib's `forward_train`: DDP
            # (several Learners) would not average its gradients, and a
            # torch-compiled update is RLlib's own.
            reason = rllib_update_needed(self)
            if reason is not None:
                raise ValueError(
                    f"replay_buffer_config['sampler']='laber' needs this package's "
                    f"own update of {type(self).__name__}, but {reason}; set "
                    f"config.learners(num_learners=0 or 1) and "
                    f"config.framework(torch_compile_learner=False)."
                )
            self.laber = large_batch_subsampler(self)

    def _check_stateless_modules(self) -> None:
        """ReLo and LaBER run the Q-network on single transitions; RLlib's
        recurrent DQN path (state, loss mask) has no such pass."""
        for module_id, module in self.module.items():
            if module.unwrapped().is_stateful():
                raise ValueError(
                    f"replay_buffer_config['sampler']="
                    f"{self.config.replay_buffer_config['sampler']!r} needs a "
                    f"stateless Q-network; module {module_id!r} is recurrent. Set "
                    f"model_config use_lstm=False or use another sampler."
                )

    @override(TorchLearner)
    def _update(self, batch: Dict[str, Any]):
        if self.laber is not None:
            return laber_dqn_update(self, batch, self.laber)
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
        Q, mean TD error) computed only for the update the iteration reports.
        C51 takes RLlib's own loss, or with ReLo replay its port
        `_distributional_q_loss` (which keeps the projected target m ReLo
        needs); the port runs only there, so every other C51 run stays
        RLlib's bit for bit."""
        if Columns.LOSS_MASK in batch or (config.num_atoms > 1 and not self.relo):
            return super().compute_loss_for_module(
                module_id=module_id, config=config, batch=batch, fwd_out=fwd_out
            )
        if config.num_atoms > 1:
            return self._distributional_q_loss(module_id, config, batch, fwd_out)
        return self._scalar_q_loss(module_id, config, batch, fwd_out)

    def _scalar_q_loss(self, module_id, config, batch, fwd_out) -> TensorType:
        # `DQNTorchLearner.compute_loss_for_module` with `num_atoms == 1`, line
        # by line (the loss, TD errors and statistics are tested equal).
        q_selected = selected_q(fwd_out[QF_PREDS], batch[Columns.ACTIONS])
        q_selected_target = scalar_td_target(config, batch, fwd_out)
        loss_fn = scalar_loss_function(config)
        td_error = torch.abs(q_selected - q_selected_target)
        item_losses = loss_fn(q_selected, q_selected_target, reduction="none")
        total_loss = torch.mean(batch["weights"] * item_losses)

        if self.relo:
            with torch.no_grad():
                target_q = self._relo_target_pass(module_id, batch)[QF_PREDS]
                target_losses = loss_fn(
                    selected_q(target_q, batch[Columns.ACTIONS]),
                    q_selected_target,
                    reduction="none",
                )
            self._log_relo_feedback(
                module_id, batch, td_error, item_losses, target_losses
            )
        else:
            self.metrics.log_value(
                (module_id, TD_ERROR_KEY), td_error, reduce="item_series"
            )
        self.log_statistics(module_id, q_statistics(total_loss, q_selected, td_error))
        return total_loss

    def _distributional_q_loss(self, module_id, config, batch, fwd_out) -> TensorType:
        """`DQNTorchLearner.compute_loss_for_module` with `num_atoms > 1` and
        no loss mask, line by line (loss, TD errors, gradients and statistics
        tested equal): the mean over items of w_i CE(logits(s_i, a_i), m_i),
        with the per-item cross-entropy as the TD error."""
        q_selected = selected_q(fwd_out[QF_PREDS], batch[Columns.ACTIONS])
        q_logits_selected = selected_logits(
            fwd_out[QF_LOGITS], batch[Columns.ACTIONS], config.num_atoms
        )
        target_distribution = c51_target_distribution(config, batch, fwd_out)
        td_error = c51_item_losses(q_logits_selected, target_distribution)
        total_loss = torch.mean(batch["weights"] * td_error)

        if self.relo:
            with torch.no_grad():
                target_logits = self._relo_target_pass(module_id, batch)[QF_LOGITS]
                target_losses = c51_item_losses(
                    selected_logits(
                        target_logits, batch[Columns.ACTIONS], config.num_atoms
                    ),
                    target_distribution,
                )
            # C51's TD error is its loss: column 0 is what PER would read.
            self._log_relo_feedback(module_id, batch, td_error, td_error, target_losses)
        else:
            self.metrics.log_value(
                (module_id, TD_ERROR_KEY), td_error, reduce="item_series"
            )
        self.log_statistics(
            module_id,
            {
                **q_statistics(total_loss, q_selected, td_error),
                **c51_statistics(fwd_out[QF_PROBS], fwd_out[ATOMS]),
            },
        )
        return total_loss

    # ------------------------------------------------------------------ ReLo
    def _relo_target_pass(self, module_id, batch) -> Dict[str, TensorType]:
        """The target network on s_t (call under `no_grad`), ReLo's one extra
        pass. A separate call rather than one on [s_{t+n}; s_t] inside the
        module's training pass: the module's pass stays as it is, so the TD
        target y (and with it the loss and gradients) equals PER's bit for bit.
        It uses the noise sample the update's target pass on s_{t+n} used: the
        module draws target noise once per update, in its training pass, and
        nothing redraws it before this call (the authors' Rainbow agent also
        runs both target passes on one `reset_noise()`)."""
        module = self.module[module_id].unwrapped()
        return module.forward_target({Columns.OBS: batch[Columns.OBS]})

    def _log_relo_feedback(
        self, module_id, batch, td_error, online_losses, target_losses
    ) -> None:
        """Logs ReLo's rows `[|delta|, online loss, target loss, position]`
        under RLlib's TD-error key, where PER's TD errors go. Both losses are
        the per-item loss before the importance weights (the ReLo sampler's
        priority is their difference)."""
        self.metrics.log_value(
            (module_id, TD_ERROR_KEY),
            pack_relo_feedback(td_error, online_losses, target_losses, batch),
            reduce="item_series",
        )
