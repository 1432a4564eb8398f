"""SAC torch learner that scores every training batch with the NERS sampler.

RLlib's SAC loss (twin critics, squashed Gaussian actor, learned temperature) is
left as it is, except that `config.training(critic_loss="mse")` swaps the critics'
Huber loss for the SAC paper's squared error. With the NERS buffer, after the
loss of each update:
  1. fresh `delta_i` and `q_i` come from the forward pass already made for the
     loss (see `soft_td_error_and_target`);
  2. the scorer scores the whole batch at once (so each score sees the batch's
     global context) on the Learner's device, without gradients; continuous
     actions enter the features as they are, one vector per transition;
  3. rows `[sigma_i, delta_i, q_i, position_i]` replace the plain TD errors
     under RLlib's TD-error key, which the training step hands to the buffer's
     `update_priorities()`.
With our PER or uniform buffer, RLlib's own TD errors go to the buffer.

Beyond RLlib's SACTorchLearner it also
  * checkpoints the temperature `log(alpha)`: RLlib 2.60 keeps it outside the
    RLModule and saves only its optimiser, so a restored SAC restarted from
    `initial_alpha`;
  * averages the temperature's gradient over several Learners: DDP averages the
    RLModule's gradients only, so RLlib 2.60's Learners drifted apart in alpha;
  * updates with one backward pass instead of four (`LeanSACUpdateMixin`), fused
    Adam optimisers (RLlib's four, same parameters and eps), Polyak target
    updates as foreach ops, one fused nan/inf check of the gradients and
    metrics reduced once per iteration (`FastTorchLearnerMixin`).
"""

from __future__ import annotations

from typing import Any, Dict

import gymnasium as gym
import torch
import torch.distributed as dist
from ray.rllib.algorithms.sac.sac_learner import (
    LOGPS_KEY,
    QF_LOSS_KEY,
    QF_MAX_KEY,
    QF_MEAN_KEY,
    QF_MIN_KEY,
    QF_PREDS,
    QF_TARGET_NEXT,
    QF_TWIN_LOSS_KEY,
    QF_TWIN_PREDS,
    TD_ERROR_MEAN_KEY,
)
from ray.rllib.algorithms.sac.torch.sac_torch_learner import SACTorchLearner
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import POLICY_LOSS_KEY
from ray.rllib.core.models.base import ENCODER_OUT
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import ALL_MODULES, TD_ERROR_KEY
from ray.rllib.utils.typing import ModuleID, ParamDict, TensorType
from torch.nn import functional as F

from rllib_ners.algorithms.common.fast_torch_learner import (
    FastTargetNetworkMixin,
    FastTorchLearnerMixin,
)
from rllib_ners.algorithms.common.learner_state import TargetUpdateStateMixin
from rllib_ners.algorithms.ners.torch.ners_torch_learner import NERSTorchLearnerMixin
from rllib_ners.algorithms.ners_sac.torch.lean_sac_update import LeanSACUpdateMixin
from rllib_ners.utils.deferred_metrics import DeferredMetrics
from rllib_ners.utils.torch_ops import make_adam

# Learner state entry: SAC's temperature log(alpha) per module.
LOG_ALPHA_STATE = "sac_log_alpha"


def soft_td_error_and_target(
    *,
    batch: Dict[str, TensorType],
    fwd_out: Dict[str, TensorType],
    alpha: TensorType,
    gamma: float,
    twin_q: bool,
):
    """`(delta, y)` of SAC's continuous critic loss, exactly as RLlib computes them.

    `y = R + gamma^n (1 - terminated) (min_k Q'_k(s', a') - alpha log pi(a'|s'))`
    with `a' ~ pi(.|s')` (the soft TD target of the loss, `fwd_out`'s sample);
    `delta = mean_k |Q_k(s, a) - y|` over the twin critics, RLlib's own SAC
    priority. The mean, not the min: both critics regress on `y` and both of
    their errors enter the critic loss, so the mean measures what replaying the
    transition teaches; and NERS's "per_residual" priority then starts from
    exactly PER-SAC's priority.
    """
    # RLlib's SAC module names this output without a constant.
    q_next = fwd_out[QF_TARGET_NEXT] - alpha * fwd_out["logp_next_resampled"]
    not_done = 1.0 - batch[Columns.TERMINATEDS].float()
    target = batch[Columns.REWARDS] + (gamma ** batch["n_step"]) * not_done * q_next
    delta = (fwd_out[QF_PREDS] - target).abs()
    if twin_q:
        delta = 0.5 * (delta + (fwd_out[QF_TWIN_PREDS] - target).abs())
    return delta, target


def uses_ners_replay(config: Any) -> bool:
    """Whether a config replays from the NERS buffer (`NERSSACConfig` knows)."""
    return bool(getattr(config, "uses_ners_replay", False))


class NERSSACTorchLearner(
    NERSTorchLearnerMixin,
    TargetUpdateStateMixin,
    LeanSACUpdateMixin,
    FastTargetNetworkMixin,
    FastTorchLearnerMixin,
    SACTorchLearner,
):
    """RLlib's SAC learner plus the NERS scorer (see the module docstring)."""

    @override(SACTorchLearner)
    def build(self) -> None:
        super().build()
        if uses_ners_replay(self.config):
            self.build_ners_sampler()

    @override(SACTorchLearner)
    def configure_optimizers_for_module(self, module_id: ModuleID, config=None) -> None:
        """RLlib's four SAC optimisers (critic, twin critic, policy, temperature:
        the same parameters, eps and learning rates), fused."""
        module = self._module[module_id]
        groups = [
            ("qf", [module.qf_encoder, module.qf], config.critic_lr),
        ]
        if config.twin_q:
            groups.append(
                ("qf_twin", [module.qf_twin_encoder, module.qf_twin], config.critic_lr)
            )
        groups.append(("policy", [module.pi_encoder, module.pi], config.actor_lr))
        for name, nets, lr in groups:
            params = [param for net in nets for param in self.get_parameters(net)]
            self.register_optimizer(
                module_id=module_id,
                optimizer_name=name,
                optimizer=make_adam(params, eps=1e-7),
                params=params,
                lr_or_lr_schedule=lr,
            )
        temperature = self.curr_log_alpha[module_id]
        self.register_optimizer(
            module_id=module_id,
            optimizer_name="alpha",
            optimizer=make_adam([temperature], eps=1e-7),
            params=[temperature],
            lr_or_lr_schedule=config.alpha_lr,
        )

    @override(NERSTorchLearnerMixin)
    def _module_encode(self, obs: torch.Tensor) -> torch.Tensor:
        """encoder='module': SAC's policy encoder (its Q encoders take actions)."""
        module = self.module[DEFAULT_MODULE_ID].unwrapped()
        with torch.no_grad():
            return module.pi_encoder({Columns.OBS: obs})[ENCODER_OUT].detach()

    @override(SACTorchLearner)
    def compute_loss_for_module(
        self,
        *,
        module_id: ModuleID,
        config: Any,
        batch: Dict[str, Any],
        fwd_out: Dict[str, TensorType],
    ) -> TensorType:
        if isinstance(self._module[module_id].action_space, gym.spaces.Box):
            return self._continuous_sac_loss(module_id, config, batch, fwd_out)
        loss = super().compute_loss_for_module(
            module_id=module_id, config=config, batch=batch, fwd_out=fwd_out
        )
        squared_error = getattr(config, "critic_loss", "huber") == "mse"
        if not squared_error and self.ners_scorer is None:
            return loss  # RLlib's loss; PER or uniform replay: its TD errors stay
        with torch.no_grad():
            delta, target = soft_td_error_and_target(
                batch=batch,
                fwd_out=fwd_out,
                alpha=torch.exp(self.curr_log_alpha[module_id]),
                gamma=config.gamma,
                twin_q=config.twin_q,
            )
        if squared_error:
            loss = self._with_squared_error_critic_losses(
                module_id=module_id,
                config=config,
                fwd_out=fwd_out,
                target=target,
                weights=batch["weights"],
            )
        if self.ners_scorer is not None:
            # [score, delta, q, position] rows replace SAC's plain TD errors.
            with torch.no_grad():
                self.report_transition_scores(module_id, batch, delta, target)
        return loss

    def _continuous_sac_loss(self, module_id, config, batch, fwd_out) -> TensorType:
        """`SACTorchLearner._compute_loss_for_module_continuous`: its ops in its
        order, the critics on its Huber loss or (`critic_loss="mse"`) on the SAC
        paper's squared error (see `_with_squared_error_critic_losses`), without
        a loss module built per update and with the window-1 statistics computed
        only for the update an iteration reports. Its soft TD target and TD
        errors are the ones the NERS scorer reads (`soft_td_error_and_target`
        computes the same values). Tested equal to RLlib's loss, and to RLlib's
        loss with squared errors."""
        log_alpha = self.curr_log_alpha[module_id]
        alpha = torch.exp(log_alpha)
        q_selected = fwd_out[QF_PREDS]
        q_target_next = (
            fwd_out[QF_TARGET_NEXT] - alpha.detach() * fwd_out["logp_next_resampled"]
        )
        q_next_masked = (1.0 - batch[Columns.TERMINATEDS].float()) * q_target_next
        q_selected_target = (
            batch[Columns.REWARDS] + (config.gamma ** batch["n_step"]) * q_next_masked
        ).detach()
        td_error = torch.abs(q_selected - q_selected_target)
        if config.twin_q:
            q_twin_selected = fwd_out[QF_TWIN_PREDS]
            td_error += torch.abs(q_twin_selected - q_selected_target)
            td_error *= 0.5
        squared_error = getattr(config, "critic_loss", "huber") == "mse"

        def critic_loss_of(q):
            if squared_error:
                errors = 0.5 * (q - q_selected_target) ** 2
            else:
                errors = F.huber_loss(q, q_selected_target, reduction="none", delta=1.0)
            return torch.mean(batch["weights"] * errors)

        critic_loss = critic_loss_of(q_selected)
        if config.twin_q:
            critic_twin_loss = critic_loss_of(q_twin_selected)
        logp_resampled = fwd_out["logp_resampled"]
        actor_loss = torch.mean(alpha.detach() * logp_resampled - fwd_out["q_curr"])
        alpha_loss = -torch.mean(
            log_alpha * (logp_resampled.detach() + self.target_entropy[module_id])
        )
        if squared_error:  # the order `_with_squared_error_critic_losses` sums in
            total_loss = actor_loss + alpha_loss + critic_loss
            if config.twin_q:
                total_loss = total_loss + critic_twin_loss
        else:
            total_loss = actor_loss + critic_loss + alpha_loss
            if config.twin_q:
                total_loss += critic_twin_loss

        metrics = self.metrics
        metrics.log_value((module_id, TD_ERROR_KEY), td_error, reduce="item_series")
        q_curr = fwd_out["q_curr"].detach()
        target_entropy = self.target_entropy[module_id]
        statistics = {
            POLICY_LOSS_KEY: lambda: actor_loss,
            QF_LOSS_KEY: lambda: critic_loss,
            "alpha_loss": lambda: alpha_loss,
            "alpha_value": lambda: alpha[0],
            "log_alpha_value": lambda: torch.log(alpha)[0],
            "target_entropy": lambda: target_entropy,
            LOGPS_KEY: lambda: torch.mean(logp_resampled.detach()),
            QF_MEAN_KEY: lambda: torch.mean(q_curr),
            QF_MAX_KEY: lambda: torch.max(q_curr),
            QF_MIN_KEY: lambda: torch.min(q_curr),
            TD_ERROR_MEAN_KEY: lambda: torch.mean(td_error),
        }
        if config.twin_q:
            statistics[QF_TWIN_LOSS_KEY] = lambda: critic_twin_loss
        # RLlib's key order: its `log_dict` (sorted), then the twin's loss.
        for key in sorted(set(statistics) - {QF_TWIN_LOSS_KEY}) + [QF_TWIN_LOSS_KEY]:
            if key not in statistics:
                continue
            if isinstance(metrics, DeferredMetrics):
                metrics.log_lazy((module_id, key), statistics[key], window=1)
            else:
                metrics.log_value((module_id, key), statistics[key](), window=1)

        # RLlib's own update backs up each optimizer's loss on its own.
        losses = self._temp_losses
        losses[(module_id, POLICY_LOSS_KEY)] = actor_loss
        losses[(module_id, QF_LOSS_KEY)] = critic_loss
        losses[(module_id, "alpha_loss")] = alpha_loss
        if config.twin_q:
            losses[(module_id, QF_TWIN_LOSS_KEY)] = critic_twin_loss
        if self.ners_scorer is not None:
            # [score, delta, q, position] rows replace SAC's plain TD errors.
            with torch.no_grad():
                self.report_transition_scores(
                    module_id, batch, td_error.detach(), q_selected_target
                )
        return total_loss

    def _with_squared_error_critic_losses(
        self,
        *,
        module_id: ModuleID,
        config: Any,
        fwd_out: Dict[str, TensorType],
        target: TensorType,
        weights: TensorType,
    ) -> TensorType:
        """RLlib's SAC loss with the SAC paper's critic losses: each critic's
        `mean(w * 0.5 (Q_k(s, a) - y)^2)` replaces RLlib's Huber loss (delta 1).

        `target` is the soft TD target `y` (no gradients) and `weights` the
        batch's importance weights. RLlib's `compute_loss_for_module` has just
        computed the policy and temperature losses and kept them for its
        per-optimizer backward passes; the critics' entries are replaced there
        too, so RLlib's update and the lean one both step on the squared errors.
        """
        critic_keys = [(QF_LOSS_KEY, QF_PREDS)]
        if config.twin_q:
            critic_keys.append((QF_TWIN_LOSS_KEY, QF_TWIN_PREDS))
        losses = self._temp_losses
        total = losses[(module_id, POLICY_LOSS_KEY)] + losses[(module_id, "alpha_loss")]
        for loss_key, prediction_key in critic_keys:
            squared_error = 0.5 * (fwd_out[prediction_key] - target) ** 2
            critic_loss = torch.mean(weights * squared_error)
            losses[(module_id, loss_key)] = critic_loss
            self.metrics.log_value((module_id, loss_key), critic_loss, window=1)
            total = total + critic_loss
        return total

    @override(SACTorchLearner)
    def compute_gradients(
        self, loss_per_module: Dict[ModuleID, TensorType], **kwargs
    ) -> ParamDict:
        gradients = super().compute_gradients(loss_per_module, **kwargs)
        if self._sampler_is_distributed():  # several Learners in one DDP group
            # DDP averages the RLModule's gradients; the temperature is no module
            # parameter, so each Learner would step it on its own shard's loss.
            world_size = dist.get_world_size()
            for module_id in set(loss_per_module) - {ALL_MODULES}:
                grad = self.curr_log_alpha[module_id].grad
                if grad is not None:
                    dist.all_reduce(grad, op=dist.ReduceOp.SUM)
                    grad /= world_size
        return gradients

    @override(SACTorchLearner)
    def get_state(
        self, components=None, *, not_components=None, **kwargs
    ) -> Dict[str, Any]:
        state = super().get_state(components, not_components=not_components, **kwargs)
        if self._check_component(LOG_ALPHA_STATE, components, not_components):
            state[LOG_ALPHA_STATE] = {
                module_id: log_alpha.detach().cpu().clone()
                for module_id, log_alpha in self.curr_log_alpha.items()
            }
        return state

    @override(SACTorchLearner)
    def set_state(self, state: Dict[str, Any]) -> None:
        super().set_state(state)
        with torch.no_grad():
            for module_id, value in state.get(LOG_ALPHA_STATE, {}).items():
                # In place: the "alpha" optimiser holds this very tensor.
                log_alpha = self.curr_log_alpha[module_id]
                log_alpha.copy_(torch.as_tensor(value).to(log_alpha.device))
