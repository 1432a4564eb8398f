"""SAC torch learner that scores every training batch with the NERS sampler.

RLlib's SAC loss (twin critics, squashed Gaussian actor, learned temperature) is
left as it is, except that `config.training(critic_loss="mse")` swaps the critics'
Huber loss for the SAC paper's squared error. With the NERS buffer, after the
loss of each update:
  1. fresh `delta_i` and `q_i` come from the forward pass already made for the
     loss (`soft_td_error_and_target`);
  2. the scorer scores the whole batch at once (so each score sees the batch's
     global context) on the Learner's device, without gradients; continuous
     actions enter the features as they are, one vector per transition;
  3. rows `[sigma_i, delta_i, q_i, position_i]` replace the plain TD errors
     under RLlib's TD-error key, which the training step hands to the buffer's
     `update_priorities()`.
With our PER or uniform buffer, RLlib's own TD errors go to the buffer.

Two more replay methods take more than the TD errors (`replay_methods`):
  * ReLo (`replay_buffer_config["sampler"] = "relo"`, Sujit et al., NeurIPS
    2023): the target critics also run on the batch's own `(s, a)`, without
    gradients (in the target pass's calls: `sac_update`), and each item's
    loss under the online critics and under the target critics against the
    update's own soft TD target `y` goes to the buffer with its TD error
    (`pack_relo_feedback`); the loss is the critics' per-item training loss
    before the importance weights, averaged over the twin critics, as the
    authors' `RELOSACAgent` averages its two critics' losses. The update
    itself is PER's (on the CPU bit for bit): ReLo changes the priorities
    only.
  * LaBER (`"sampler": "laber"`, Lahire et al., ICML 2022): the batch is a
    large batch of m*B uniform rows; the update scores all of them, draws
    each critic's B rows in proportion to its surrogate priority and the
    actor's B rows uniformly, and steps on the drawn rows only
    (`laber_sac_update`); the buffer gets the surrogates and how often each
    row was drawn (`pack_laber_feedback`).

Beyond RLlib's SACTorchLearner it also
  * checkpoints the temperature `log(alpha)`: RLlib 2.60 keeps it outside the
    RLModule and saves only its optimiser, so a restored SAC restarted from
    `initial_alpha`;
  * averages the temperature's gradient over several Learners: DDP averages the
    RLModule's gradients only, so RLlib 2.60's Learners drifted apart in alpha;
  * updates with one backward pass instead of four (`one_backward_sac_update`),
    fused Adam optimisers (RLlib's four, same parameters and eps), the shared
    base's speed-ups (`FastTorchLearner`: deferred metrics, CUDA-graph
    replay, the fused gradient step) and multi-tensor target updates
    (`DQNTargetUpdates`).
"""

from __future__ import annotations

import logging
from typing import Any, Dict

import gymnasium as gym
import torch
from ray.rllib.algorithms.dqn.dqn_learner import DQNLearner
from ray.rllib.algorithms.sac.default_sac_rl_module import DefaultSACRLModule
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
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import POLICY_LOSS_KEY
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import ALL_MODULES, TD_ERROR_KEY
from ray.rllib.utils.typing import ModuleID, ParamDict, TensorType
from torch.nn import functional as F

from rllib_ners.algorithms.common.learner.distributed import (
    average_over_learners,
    learners_share_process_group,
)
from rllib_ners.algorithms.common.learner.fast_torch_learner import FastTorchLearner
from rllib_ners.algorithms.common.learner.lap_losses import pal, pal_normaliser
from rllib_ners.algorithms.common.learner.replay_methods import (
    large_batch_subsampler,
    pack_laber_feedback,
    pack_relo_feedback,
    surrogate_for_loss,
    uses_laber_replay,
    uses_relo_replay,
)
from rllib_ners.algorithms.common.learner.target_updates import DQNTargetUpdates
from rllib_ners.algorithms.ners.torch.torch_ners_sampler import (
    TorchNERSSampler,
    uses_ners_replay,
)
from rllib_ners.algorithms.ners_sac.torch.laber_sac_update import (
    critic_prediction_keys,
    laber_sac_update,
    laber_scoring_pass,
    laber_training_pass,
)
from rllib_ners.algorithms.ners_sac.torch.sac_update import (
    LOGP_NEXT_RESAMPLED,
    LOGP_RESAMPLED,
    Q_CURR,
    Q_TARGET_CURR,
    one_backward_sac_update,
    sac_networks_of,
    sac_update_blocker,
)
from rllib_ners.replay_buffers.feedback import (
    LABER_SURROGATES,
    NERS_SCORES,
    RELO_LOSSES,
    TD_ERRORS,
)
from rllib_ners.seam.checkpoints import includes_component
from rllib_ners.seam.learner import losses_per_optimizer
from rllib_ners.utils.malloc import keep_freed_tensor_memory
from rllib_ners.utils.optimizer_steps import make_adam

logger = logging.getLogger(__name__)

# Learner state entry: SAC's temperature log(alpha) per module.
LOG_ALPHA_STATE = "sac_log_alpha"
# RLlib's SAC optimisers: Adam with this eps.
SAC_ADAM_EPSILON = 1e-7
# RLlib's SAC loss keys without a constant.
ALPHA_LOSS_KEY = "alpha_loss"
# RLlib's critic loss: Huber with this threshold.
HUBER_DELTA = 1.0


def soft_td_error_and_target(
    *,
    batch: Dict[str, TensorType],
    fwd_out: Dict[str, TensorType],
    alpha: TensorType,
    gamma: float,
    twin_q: bool,
):
    """`(delta, y)` of SAC's critic loss, exactly as RLlib computes them.

    `y = R + gamma^n (1 - terminated) (min_k Q'_k(s', a') - alpha log pi(a'|s'))`
    with `a' ~ pi(.|s')` (the soft TD target of the loss, `fwd_out`'s sample);
    `delta = mean_k |Q_k(s, a) - y|` over the twin critics, RLlib's own SAC
    priority. The mean, not the min: both critics regress on `y` and both of
    their errors enter the critic loss, so the mean measures what replaying the
    transition teaches; and NERS's "per_residual" priority then starts from
    exactly PER-SAC's priority. Neither carries gradients.
    """
    q_target_next = (
        fwd_out[QF_TARGET_NEXT] - alpha.detach() * fwd_out[LOGP_NEXT_RESAMPLED]
    )
    q_next_masked = (1.0 - batch[Columns.TERMINATEDS].float()) * q_target_next
    target = (
        batch[Columns.REWARDS] + (gamma ** batch["n_step"]) * q_next_masked
    ).detach()
    delta = torch.abs(fwd_out[QF_PREDS] - target)
    if twin_q:
        delta += torch.abs(fwd_out[QF_TWIN_PREDS] - target)
        delta *= 0.5
    return delta, target


def _critic_loss_function(config, td_error: TensorType):
    """The critics' per-item loss `(Q, y) -> loss`: RLlib's Huber loss, the SAC
    paper's squared error (`critic_loss="mse"`) or PAL's (`"pal"`: divided by
    the batch's mean `max(|delta|, 1)^pal_alpha`, `delta` the TD error the
    priorities use)."""
    kind = getattr(config, "critic_loss", "huber")
    if kind == "mse":
        return squared_error
    if kind == "pal":
        alpha = config.pal_alpha
        normaliser = pal_normaliser(td_error, alpha)
        return lambda q, target: pal(q - target, alpha) / normaliser
    return huber_error


def mean_over_critics(values):
    """The element-wise mean of per-critic tensors (one, or the twins')."""
    return sum(values[1:], values[0]) / len(values)


def uses_squared_error(config) -> bool:
    """Whether the critics regress with the SAC paper's squared error
    (`critic_loss="mse"`) instead of RLlib's Huber loss."""
    return getattr(config, "critic_loss", "huber") == "mse"


def squared_error(q: TensorType, target: TensorType) -> TensorType:
    """The SAC paper's per-item critic loss `0.5 (Q - y)^2`."""
    return 0.5 * (q - target) ** 2


def huber_error(q: TensorType, target: TensorType) -> TensorType:
    """RLlib's per-item SAC critic loss."""
    return F.huber_loss(q, target, reduction="none", delta=HUBER_DELTA)


class NERSSACTorchLearner(FastTorchLearner, SACTorchLearner):
    """RLlib's SAC learner, holding the NERS sampler as `self.ners` with the
    NERS buffer (see the module docstring).

    Its update is one of two, chosen once at build: the package's
    (`one_backward_sac_update`) or, where that cannot serve
    (`sac_update_blocker`: discrete actions, a compiled update, mixed
    precision, torch LR schedulers, modules other than RLlib's SAC modules;
    logged once), RLlib's own.
    """

    # The replay feedback it sends: TD errors, with NERS scores NERS's rows,
    # with ReLo ReLo's losses, with LaBER LaBER's surrogates (the buffer's
    # sampler must take one; checked when it is built).
    replay_feedback_layouts = (TD_ERRORS, NERS_SCORES, RELO_LOSSES, LABER_SURROGATES)

    @override(SACTorchLearner)
    def build(self) -> None:
        keep_freed_tensor_memory()
        super().build()
        self.target_updates = DQNTargetUpdates(self)
        self.sac_networks = {}
        self.one_backward_blocker = sac_update_blocker(self)
        if self.one_backward_blocker is not None:
            logger.info(
                "%s updates without the one-backward SAC update: %s.",
                type(self).__name__,
                self.one_backward_blocker,
            )
        if uses_ners_replay(self.config):
            # encoder='module': SAC's policy encoder (its Q encoders take actions).
            self.ners = TorchNERSSampler(self, module_encoder="pi_encoder")
        self.relo_replay = uses_relo_replay(self.config)
        if self.relo_replay:
            self._check_relo_can_serve()
        if uses_laber_replay(self.config):
            self.laber = self._build_laber_subsampler()

    def _check_relo_can_serve(self) -> None:
        """ReLo's target losses need the target critics' Q(s, a) of the
        batch's own action: continuous (Box) actions and RLlib's SAC critics."""
        for module_id in self.module.keys():
            module = self.module[module_id].unwrapped()
            if not isinstance(module, DefaultSACRLModule):
                raise ValueError(
                    f"replay_buffer_config['sampler']='relo' runs the target "
                    f"critics of RLlib's SAC module; module {module_id!r} is a "
                    f"{type(module).__name__}. Use DefaultSACRLModule (or this "
                    f"package's SACTorchRLModule), or 'priority' (PER)."
                )
            if not isinstance(module.action_space, gym.spaces.Box):
                raise ValueError(
                    f"replay_buffer_config['sampler']='relo' serves SAC with "
                    f"continuous (Box) actions; module {module_id!r} has "
                    f"{module.action_space}. Use 'priority' (PER) for it."
                )

    def _build_laber_subsampler(self):
        """LaBER's sub-sampler, after checking that this Learner's own update
        serves the config (LaBER needs an update between the scoring pass and
        the gradient step, which RLlib's update has not)."""
        if self.one_backward_blocker is not None:
            raise ValueError(
                f"replay_buffer_config['sampler']='laber' needs "
                f"{type(self).__name__}'s own SAC update (it scores the m*B rows "
                f"and steps on the drawn ones), but this config takes RLlib's "
                f"update because {self.one_backward_blocker}; RLlib's would train "
                f"on all m*B rows uniformly. Remove that setting (continuous "
                f"actions and RLlib's SAC module, no torch_compile_learner, mixed "
                f"precision or torch LR schedulers), or replay with another "
                f"sampler."
            )
        if getattr(self.config, "critic_loss", "huber") == "pal":
            raise ValueError(
                "replay_buffer_config['sampler']='laber' scores items by the "
                "critic loss's gradient w.r.t. Q, defined here for "
                "critic_loss='mse' and 'huber'; PAL's loss is LAP's. Use "
                "config.training(critic_loss='mse') (the SAC paper's) with LaBER."
            )
        return large_batch_subsampler(self)

    @override(TorchLearner)
    def _update(self, batch: Dict[str, Any]):
        if self.laber is not None:
            return laber_sac_update(self, batch, self.sac_networks, self.laber)
        if self.one_backward_blocker is None:
            return one_backward_sac_update(
                self,
                batch,
                self.sac_networks,
                target_on_taken_actions=self.relo_replay,
            )
        return super()._update(batch)

    @override(DQNLearner)
    def after_gradient_based_update(self, *, timesteps: Dict[str, Any]) -> None:
        # TorchLearner's step (learning-rate schedules), then DQNLearner's
        # target-network update as multi-tensor Polyak steps.
        TorchLearner.after_gradient_based_update(self, timesteps=timesteps)
        self.target_updates.after_update(timesteps)

    @override(SACTorchLearner)
    def configure_optimizers_for_module(self, module_id: ModuleID, config=None) -> None:
        """RLlib's four SAC optimisers (critic, twin critic, policy, temperature:
        the same parameters, eps and learning rates), fused."""
        module = self.module[module_id]
        groups = [("qf", [module.qf_encoder, module.qf], config.critic_lr)]
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
                optimizer=make_adam(params, eps=SAC_ADAM_EPSILON),
                params=params,
                lr_or_lr_schedule=lr,
            )
        temperature = self.curr_log_alpha[module_id]
        self.register_optimizer(
            module_id=module_id,
            optimizer_name="alpha",
            optimizer=make_adam([temperature], eps=SAC_ADAM_EPSILON),
            params=[temperature],
            lr_or_lr_schedule=config.alpha_lr,
        )

    @override(SACTorchLearner)
    def compute_loss_for_module(
        self,
        *,
        module_id: ModuleID,
        config: Any,
        batch: Dict[str, Any],
        fwd_out: Dict[str, TensorType],
    ) -> TensorType:
        if isinstance(self.module[module_id].action_space, gym.spaces.Box):
            return self._continuous_sac_loss(module_id, config, batch, fwd_out)
        return self._discrete_sac_loss(module_id, config, batch, fwd_out)

    def _continuous_sac_loss(self, module_id, config, batch, fwd_out) -> TensorType:
        """`SACTorchLearner._compute_loss_for_module_continuous`: its ops in its
        order, the critics on its Huber loss or (`critic_loss="mse"`) on the SAC
        paper's squared error, without a loss module built per update and with
        the window-1 statistics computed only for the update an iteration
        reports. Tested equal to RLlib's loss, and to RLlib's loss with squared
        errors (`tests/integration/test_sac_update.py`)."""
        log_alpha = self.curr_log_alpha[module_id]
        alpha = torch.exp(log_alpha)
        td_error, target = soft_td_error_and_target(
            batch=batch,
            fwd_out=fwd_out,
            alpha=alpha,
            gamma=config.gamma,
            twin_q=config.twin_q,
        )
        critic_loss_of = _critic_loss_function(config, td_error)
        critic_keys = [(QF_LOSS_KEY, QF_PREDS)]
        if config.twin_q:
            critic_keys.append((QF_TWIN_LOSS_KEY, QF_TWIN_PREDS))
        item_losses = {
            loss_key: critic_loss_of(fwd_out[prediction_key], target)
            for loss_key, prediction_key in critic_keys
        }
        critic_losses = {
            loss_key: torch.mean(batch["weights"] * loss)
            for loss_key, loss in item_losses.items()
        }
        actor_loss, alpha_loss = self._actor_and_temperature_losses(
            module_id, log_alpha, alpha, fwd_out
        )
        # The SAC paper's total, added left to right: actor, temperature, then
        # the critic(s). RLlib adds the temperature after the critic; the sums
        # differ in float rounding only, and the gradients not at all.
        total_loss = sum(critic_losses.values(), actor_loss + alpha_loss)
        feedback = td_error
        if self.relo_replay:
            feedback = self._relo_feedback(
                module_id, batch, fwd_out, td_error, target, critic_loss_of, item_losses
            )
        self.metrics.log_value(
            (module_id, TD_ERROR_KEY), feedback, reduce="item_series"
        )
        self._log_sac_statistics(
            module_id, fwd_out, alpha, actor_loss, alpha_loss, critic_losses, td_error
        )
        # RLlib's own update backs up each optimizer's loss on its own.
        losses = losses_per_optimizer(self)
        losses[(module_id, POLICY_LOSS_KEY)] = actor_loss
        losses[(module_id, ALPHA_LOSS_KEY)] = alpha_loss
        for key, loss in critic_losses.items():
            losses[(module_id, key)] = loss
        if self.ners is not None:
            # [score, delta, q, position] rows replace SAC's plain TD errors.
            with torch.no_grad():
                self.ners.report_scores(module_id, batch, td_error.detach(), target)
        return total_loss

    def _actor_and_temperature_losses(self, module_id, log_alpha, alpha, fwd_out):
        """RLlib's SAC policy loss `mean(alpha log pi(a~|s) - min_k Q_k(s, a~))`
        (alpha and the critics frozen) and temperature loss
        `-mean(log alpha (log pi(a~|s) + target entropy))`, on the rows of
        `fwd_out`'s `LOGP_RESAMPLED` and `Q_CURR`."""
        logp_resampled = fwd_out[LOGP_RESAMPLED]
        actor_loss = torch.mean(alpha.detach() * logp_resampled - fwd_out[Q_CURR])
        alpha_loss = -torch.mean(
            log_alpha * (logp_resampled.detach() + self.target_entropy[module_id])
        )
        return actor_loss, alpha_loss

    def _relo_feedback(
        self, module_id, batch, fwd_out, td_error, target, critic_loss_of, item_losses
    ) -> TensorType:
        """ReLo's rows `[|delta|, online loss, target loss, position]`: per
        item, the critics' training loss `l(Q_k(s, a), y)` (before the
        importance weights) and the same loss of the target critics
        `l(Qbar_k(s, a), y)` against the same `y`, each averaged over the
        twin critics. The target critics' Q(s, a) come from the one-backward
        update's target pass (`Q_TARGET_CURR`), or on RLlib's own update path
        from one call per target critic here."""
        with torch.no_grad():
            target_q = fwd_out.get(Q_TARGET_CURR)
            if target_q is None:
                nets = sac_networks_of(self, module_id, self.sac_networks)
                obs, actions = batch[Columns.OBS], batch[Columns.ACTIONS]
                target_q = [
                    nets.q(*critic, obs, actions) for critic in nets.target_critics
                ]
            online = mean_over_critics([loss.detach() for loss in item_losses.values()])
            target_losses = mean_over_critics(
                [critic_loss_of(q, target) for q in target_q[: len(item_losses)]]
            )
        return pack_relo_feedback(td_error.detach(), online, target_losses, batch)

    def laber_loss_for_module(
        self, *, module_id: ModuleID, config: Any, batch, nets, subsampler
    ):
        """LaBER's SAC losses of one module on its m*B rows (see
        `laber_sac_update`): the scoring pass, `y` and the surrogates on every
        row, the sub-sample, the training pass on the drawn rows, then critic
        k's loss `mean(w_k * l(Q_k(s, a)[idx_k], y[idx_k]))` (LaBER's weights
        replace the batch's importance weights, which are 1 with LaBER's
        buffer) and the ordinary policy and temperature losses on the
        uniformly drawn rows, unweighted. Logs the ordinary path's metrics,
        its TD-error key holding LaBER's feedback rows `[mean_k s_k, times
        drawn, position]`; the window-1 statistics' TD-error mean is the
        large batch's. Returns `(total loss, training pass outputs)`."""
        rows = batch[Columns.OBS].shape[0]
        num = subsampler.minibatch_size(rows)
        log_alpha = self.curr_log_alpha[module_id]
        alpha = torch.exp(log_alpha)
        prediction_keys = critic_prediction_keys(nets)
        scored = laber_scoring_pass(nets, batch)
        with torch.no_grad():
            td_error, target = soft_td_error_and_target(
                batch=batch,
                fwd_out=scored,
                alpha=alpha,
                gamma=config.gamma,
                twin_q=config.twin_q,
            )
            # PAL is refused at build: "mse" or "huber" here.
            surrogate_of = surrogate_for_loss(getattr(config, "critic_loss", "huber"))
            surrogates = [surrogate_of(scored[key] - target) for key in prediction_keys]
        critic_draws = [subsampler.draw(surrogate, num) for surrogate in surrogates]
        critic_rows = [drawn for drawn, _ in critic_draws]
        actor_rows = subsampler.uniform(rows, num, target.device)
        trained = laber_training_pass(nets, batch, critic_rows, actor_rows)
        critic_loss_of = _critic_loss_function(config, td_error)
        loss_keys = (QF_LOSS_KEY, QF_TWIN_LOSS_KEY)
        critic_losses = {
            loss_key: torch.mean(
                weights * critic_loss_of(trained[prediction_key], target[drawn])
            )
            for loss_key, prediction_key, (drawn, weights) in zip(
                loss_keys, prediction_keys, critic_draws
            )
        }
        actor_loss, alpha_loss = self._actor_and_temperature_losses(
            module_id, log_alpha, alpha, trained
        )
        total_loss = sum(critic_losses.values(), actor_loss + alpha_loss)
        times_drawn = subsampler.times_drawn([*critic_rows, actor_rows], rows)
        self.metrics.log_value(
            (module_id, TD_ERROR_KEY),
            pack_laber_feedback(mean_over_critics(surrogates), times_drawn, batch),
            reduce="item_series",
        )
        self._log_sac_statistics(
            module_id, trained, alpha, actor_loss, alpha_loss, critic_losses, td_error
        )
        return total_loss, trained

    def _log_sac_statistics(
        self, module_id, fwd_out, alpha, actor_loss, alpha_loss, critic_losses, td_error
    ) -> None:
        """RLlib's window-1 SAC statistics: its keys and values. Each computes
        from detached tensors: kept until the iteration's flush, a loss would
        keep its update's autograd graph alive into the next updates."""
        q_curr = fwd_out[Q_CURR].detach()
        logp_resampled = fwd_out[LOGP_RESAMPLED].detach()
        target_entropy = self.target_entropy[module_id]
        actor_loss, alpha_loss = actor_loss.detach(), alpha_loss.detach()
        alpha, td_error = alpha.detach(), td_error.detach()
        critic_losses = {key: loss.detach() for key, loss in critic_losses.items()}
        statistics = {
            POLICY_LOSS_KEY: lambda: actor_loss,
            ALPHA_LOSS_KEY: lambda: alpha_loss,
            "alpha_value": lambda: alpha[0],
            "log_alpha_value": lambda: torch.log(alpha)[0],
            "target_entropy": lambda: target_entropy,
            LOGPS_KEY: lambda: torch.mean(logp_resampled),
            QF_MEAN_KEY: lambda: torch.mean(q_curr),
            QF_MAX_KEY: lambda: torch.max(q_curr),
            QF_MIN_KEY: lambda: torch.min(q_curr),
            TD_ERROR_MEAN_KEY: lambda: torch.mean(td_error),
        }
        for key, loss in critic_losses.items():  # qf_loss, and the twin's
            statistics[key] = lambda loss=loss: loss
        self.log_statistics(module_id, statistics)

    def _discrete_sac_loss(self, module_id, config, batch, fwd_out) -> TensorType:
        """RLlib's discrete SAC loss; with `critic_loss="mse"` its critics on
        squared errors, and with the NERS buffer its TD errors scored."""
        loss = super().compute_loss_for_module(
            module_id=module_id, config=config, batch=batch, fwd_out=fwd_out
        )
        if getattr(config, "critic_loss", "huber") == "pal":
            raise ValueError(
                "critic_loss='pal' serves continuous (Box) actions only; use "
                "config.training(critic_loss='huber') or 'mse'."
            )
        if not uses_squared_error(config) and self.ners is None:
            return loss  # RLlib's loss; PER or uniform replay: its TD errors stay
        with torch.no_grad():
            delta, target = soft_td_error_and_target(
                batch=batch,
                fwd_out=fwd_out,
                alpha=torch.exp(self.curr_log_alpha[module_id]),
                gamma=config.gamma,
                twin_q=config.twin_q,
            )
        if uses_squared_error(config):
            loss = self._with_squared_error_critic_losses(
                module_id=module_id,
                config=config,
                fwd_out=fwd_out,
                target=target,
                weights=batch["weights"],
            )
        if self.ners is not None:
            # [score, delta, q, position] rows replace SAC's plain TD errors.
            with torch.no_grad():
                self.ners.report_scores(module_id, batch, delta, target)
        return loss

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
        `mean(w * 0.5 (Q_k(s, a) - y)^2)` replaces RLlib's Huber loss.

        `target` is the soft TD target `y` (no gradients) and `weights` the
        batch's importance weights. RLlib's `compute_loss_for_module` has just
        computed the policy and temperature losses and kept them for its
        per-optimizer backward passes; the critics' entries are replaced there
        too, so every update steps on the squared errors.
        """
        critic_keys = [(QF_LOSS_KEY, QF_PREDS)]
        if config.twin_q:
            critic_keys.append((QF_TWIN_LOSS_KEY, QF_TWIN_PREDS))
        losses = losses_per_optimizer(self)
        total = (
            losses[(module_id, POLICY_LOSS_KEY)] + losses[(module_id, ALPHA_LOSS_KEY)]
        )
        for loss_key, prediction_key in critic_keys:
            critic_loss = torch.mean(
                weights * squared_error(fwd_out[prediction_key], target)
            )
            losses[(module_id, loss_key)] = critic_loss
            self.metrics.log_value((module_id, loss_key), critic_loss, window=1)
            total = total + critic_loss
        return total

    @override(SACTorchLearner)
    def compute_gradients(
        self, loss_per_module: Dict[ModuleID, TensorType], **kwargs
    ) -> ParamDict:
        gradients = super().compute_gradients(loss_per_module, **kwargs)
        if learners_share_process_group(self):
            # DDP averages the RLModule's gradients; the temperature is no module
            # parameter, so each Learner would step it on its own shard's loss.
            average_over_learners(
                [
                    self.curr_log_alpha[module_id].grad
                    for module_id in set(loss_per_module) - {ALL_MODULES}
                ]
            )
        return gradients

    @override(SACTorchLearner)
    def get_state(
        self, components=None, *, not_components=None, **kwargs
    ) -> Dict[str, Any]:
        state = super().get_state(components, not_components=not_components, **kwargs)
        self.target_updates.add_state(state, components, not_components)
        if includes_component(self, LOG_ALPHA_STATE, components, not_components):
            state[LOG_ALPHA_STATE] = {
                module_id: log_alpha.detach().cpu().clone()
                for module_id, log_alpha in self.curr_log_alpha.items()
            }
        return state

    @override(SACTorchLearner)
    def set_state(self, state: Dict[str, Any]) -> None:
        super().set_state(state)
        self.target_updates.set_state(state)
        with torch.no_grad():
            for module_id, value in state.get(LOG_ALPHA_STATE, {}).items():
                # In place: the "alpha" optimiser holds this very tensor.
                log_alpha = self.curr_log_alpha[module_id]
                log_alpha.copy_(torch.as_tensor(value).to(log_alpha.device))
