"""TD3's torch Learner: the paper's update, with our replay's priorities.

Per update, on one batch (Fujimoto et al. 2018, Algorithm 1):

  1. critics: the target `y = r + gamma^n (1 - d) min_k Q'_k(s', a')`, with
     `a' = clip(pi'(s') + clip(eps, -c, c), -1, 1)` and `eps ~ N(0, sigma^2)`
     (`critic_targets`, no gradients); each critic's error `delta_k = Q_k(s, a)
     - y`; the loss `critic_loss` (the paper's squared error weighted by the
     importance weights, LAP's Huber loss, or PAL's); one step of the critics'
     Adam;
  2. every `policy_delay` updates: the actor's loss `-mean Q_1(s, pi(s))`
     with the critics just stepped (their weights frozen for this pass), one
     step of the actor's Adam, then every target network moves by Polyak
     averaging (`tau`).

The priority of each replayed transition is `max_k |delta_k|` (one critic:
`|delta_1|`), as LAP's and PER's TD3 (Fujimoto, Meger & Precup 2020)
prioritise; with the NERS buffer, `[score, delta, q, position]` rows built
from it and `y` replace it. The gradient steps are plain: gradients of each
phase's loss averaged over several Learners, clipped as RLlib clips
(`grad_clip`), nan/inf set to zero as RLlib does, the fused Adam kernels run
directly (`step_optimizers`).

Two replay methods add work to the update, each only when the buffer's
sampler asks for it (every other replay's update is unchanged):

* **ReLo** (`sampler="relo"`; Sujit et al. 2023): the update above, and with
  no gradients the target critics on the batch's own `(s, a)` against the
  same `y` (the same smoothing-noise draw). Each item's online loss is the
  mean over the critics of `l(Q_k(s, a) - y)`, its target loss the same with
  the target critics; `l` is this Learner's per-item critic loss before the
  importance weights (`critic_item_loss`: "mse" `delta^2`, "huber" LAP's
  Huber). The paper has no TD3 agent: this is its SAC agent's form (the mean
  over the twin critics, the target critics on `(s, a)`). The buffer turns
  `online - target` into priorities; the loss and gradients are PER's.
* **LaBER** (`sampler="laber"`; Lahire et al. 2022): the batch holds `m * B`
  uniformly drawn items. With no gradients: the smoothed target action, `y`
  and each critic's `Q_k(s, a)` on all of them, and each critic's surrogate
  priority `s_k`, the norm of its per-item loss's gradient w.r.t. `Q_k`
  ("mse": `|delta_k|`, "huber": `min(|delta_k|, 1)`; the factor 2 of
  `delta^2` does not change the draw). Each critic draws its own `B` rows
  with replacement, `P(i) = s_k,i / sum s_k`, with LaBER-mean weights, and
  steps on `mean(w_k * l(Q_k - y))` over its rows, `y` reused from the large
  batch (the authors' TD3 and SAC code: two critics, two independent
  mini-batches). The delayed actor steps on `B` rows drawn uniformly from the
  large batch, unweighted, as the authors' code. The draws come from a
  seeded generator that is part of the Learner's state
  (`LABER_GENERATOR_STATE`), so a restored Learner draws the same rows.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Dict, List, Tuple

import torch
from ray.rllib.algorithms.sac.sac_learner import (
    QF_LOSS_KEY,
    QF_MAX_KEY,
    QF_MEAN_KEY,
    QF_MIN_KEY,
    TD_ERROR_MEAN_KEY,
)
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import POLICY_LOSS_KEY
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.core.rl_module.apis import TargetNetworkAPI
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import TD_ERROR_KEY
from ray.rllib.utils.typing import ModuleID, TensorType

from rllib_ners.algorithms.common.learner.distributed import (
    average_over_learners,
    learners_share_process_group,
)
from rllib_ners.algorithms.common.learner.fast_torch_learner import FastTorchLearner
from rllib_ners.algorithms.common.learner.gradient_step import (
    all_finite,
    clip_gradients_foreach,
    finite_gradients_without_host_reads,
    gradients_of,
    learner_reads_on_host,
)
from rllib_ners.algorithms.common.learner.lap_losses import huber, pal, pal_normaliser
from rllib_ners.algorithms.common.learner.replay_methods import (
    LargeBatchSubsampler,
    large_batch_subsampler,
    pack_laber_feedback,
    pack_relo_feedback,
    surrogate_for_loss,
    uses_laber_replay,
    uses_relo_replay,
)
from rllib_ners.algorithms.common.learner.target_updates import PolyakTargets
from rllib_ners.algorithms.ners.torch.torch_ners_sampler import (
    TorchNERSSampler,
    uses_ners_replay,
)
from rllib_ners.algorithms.td3.default_td3_rl_module import QF_PREDS, QF_TWIN_PREDS
from rllib_ners.algorithms.td3.td3 import OWN_OPTIMIZER_STEPS
from rllib_ners.replay_buffers.feedback import (
    LABER_SURROGATES,
    NERS_SCORES,
    RELO_LOSSES,
    TD_ERRORS,
)
from rllib_ners.seam.checkpoints import includes_component
from rllib_ners.seam.learner import scales_gradients, uses_torch_lr_schedulers
from rllib_ners.seam.rl_module import training_pass
from rllib_ners.utils.malloc import keep_freed_tensor_memory
from rllib_ners.utils.optimizer_steps import make_adam, step_optimizers

logger = logging.getLogger(__name__)

# The bounds of TD3's normalised actions.
ACTION_LOW, ACTION_HIGH = -1.0, 1.0
CRITIC_OPTIMIZER, ACTOR_OPTIMIZER = "critic", "actor"
# Learner state entry: each module's number of updates (the policy delay's
# phase, so that a restored Learner updates its actor when the original would).
TD3_UPDATE_COUNT_STATE = "td3_update_counts"
# Learner metric: how many actor (and target) updates a module has made.
NUM_ACTOR_UPDATES = "num_actor_updates_lifetime"


def smoothed_target_actions(
    module, next_obs: torch.Tensor, *, noise: float, noise_clip: float
) -> torch.Tensor:
    """`clip(pi'(s') + clip(eps, -c, c), -1, 1)`, `eps ~ N(0, noise^2)`: TD3's
    target policy smoothing (no noise: the target actor's action)."""
    actions = module.actions(next_obs, target=True)
    if noise > 0:
        eps = (torch.randn_like(actions) * noise).clamp(-noise_clip, noise_clip)
        actions = (actions + eps).clamp(ACTION_LOW, ACTION_HIGH)
    return actions


def critic_targets(module, batch: Dict[str, Any], config) -> torch.Tensor:
    """`y = r + gamma^n (1 - terminated) min_k Q'_k(s', a')` (one critic:
    `Q'_1`), without gradients."""
    return critic_targets_and_taken_q(module, batch, config, taken=False)[0]


def critic_targets_and_taken_q(
    module, batch: Dict[str, Any], config, *, taken: bool
) -> Tuple[torch.Tensor, List[torch.Tensor]]:
    """`critic_targets`' `y`, and with `taken` each target critic's
    `Q'_k(s, a)` on the batch's own `(s, a)` (ReLo's target losses; else an
    empty list), without gradients. With `taken` each target critic runs once
    on the rows `[(s', a'); (s, a)]`: one call where two would cost more, the
    same smoothing-noise draw, and on the CPU the same `y` to the bit."""
    with torch.no_grad():
        next_obs = batch[Columns.NEXT_OBS]
        next_actions = smoothed_target_actions(
            module,
            next_obs,
            noise=config.target_noise,
            noise_clip=config.target_noise_clip,
        )
        rows = next_obs.shape[0]
        critic_obs, critic_actions = next_obs, next_actions
        if taken:
            critic_obs = torch.cat([next_obs, batch[Columns.OBS]])
            critic_actions = torch.cat([next_actions, batch[Columns.ACTIONS]])
        q_next, q_taken = None, []
        for critic in module.critics(target=True):
            q_rows = module.q_values(critic, critic_obs, critic_actions)
            if taken:
                q_taken.append(q_rows[rows:])
                q_rows = q_rows[:rows]
            q_next = q_rows if q_next is None else torch.min(q_next, q_rows)
        not_done = 1.0 - batch[Columns.TERMINATEDS].float()
        discount = config.gamma ** batch["n_step"]
        return batch[Columns.REWARDS] + discount * not_done * q_next, q_taken


def critic_loss(
    errors: List[torch.Tensor], weights: torch.Tensor, kind: str, pal_alpha: float
) -> torch.Tensor:
    """The critics' summed loss on their errors `delta_k = Q_k(s, a) - y`:

    * "mse": `sum_k mean(w * delta_k^2)` (the TD3 paper's, importance-weighted);
    * "huber": `sum_k mean(w * huber(delta_k))` (LAP; its `w` is 1);
    * "pal": `sum_k mean(w * pal(delta_k)) / mean(max(max_k |delta_k|, 1)^alpha)`,
      the normaliser without gradients (PAL, on uniform replay).
    """
    if kind == "mse":
        return sum(torch.mean(weights * error.pow(2)) for error in errors)
    if kind == "huber":
        return sum(torch.mean(weights * huber(error)) for error in errors)
    loss = sum(torch.mean(weights * pal(error, pal_alpha)) for error in errors)
    return loss / pal_normaliser(priority_errors(errors), pal_alpha)


def priority_errors(errors: List[torch.Tensor]) -> torch.Tensor:
    """`max_k |delta_k|`: the TD error a transition is prioritised by."""
    priority = errors[0].abs()
    for error in errors[1:]:
        priority = torch.max(priority, error.abs())
    return priority


# The critic losses that have a per-item loss (ReLo) and a per-item gradient
# (LaBER). PAL's loss is divided by a batch normaliser and is defined for
# uniform replay: neither method applies to it.
PER_ITEM_CRITIC_LOSSES = ("mse", "huber")


def critic_item_loss(errors: torch.Tensor, kind: str) -> torch.Tensor:
    """One critic's loss per item before importance weights: "mse" `delta^2`
    (the TD3 paper's `F.mse_loss`, no 1/2, as `critic_loss`), "huber" LAP's
    Huber loss."""
    if kind == "mse":
        return errors.pow(2)
    if kind == "huber":
        return huber(errors)
    raise ValueError(f"critic_loss={kind!r} has no per-item loss")


def relo_item_losses(errors: List[torch.Tensor], kind: str) -> torch.Tensor:
    """ReLo's per-item loss: the mean over the critics of `critic_item_loss`
    (the mean, as ReLo's SAC code averages its twin critics' losses; the
    training loss sums them, which would only double ReLo)."""
    return torch.stack([critic_item_loss(error, kind) for error in errors]).mean(0)


class TD3TorchLearner(FastTorchLearner, TorchLearner):
    """TD3's update (see the module docstring), with metrics deferred to once
    per iteration and CUDA-graph replay (`FastTorchLearner`; TD3 makes its own
    gradient steps), holding the NERS sampler as `self.ners` when the replay
    buffer is the NERS buffer and LaBER's sub-sampler as `self.laber` when its
    sampler is LaBER's."""

    # The replay feedback it sends: TD errors, NERS's rows, ReLo's losses or
    # LaBER's surrogates (the buffer's sampler must take one; checked when it
    # is built).
    replay_feedback_layouts = (TD_ERRORS, NERS_SCORES, RELO_LOSSES, LABER_SURROGATES)
    # Whether the buffer's sampler is ReLo's (the update then logs ReLo rows).
    relo_replay = False

    @override(TorchLearner)
    def build(self) -> None:
        keep_freed_tensor_memory()
        super().build()
        self.module.foreach_module(
            lambda module_id, module: (
                module.make_target_networks()
                if isinstance(module, TargetNetworkAPI)
                else None
            )
        )
        if scales_gradients(self) or uses_torch_lr_schedulers(self):
            # TD3Config.validate() refuses them first; a config built with
            # validation switched off reaches this.
            raise ValueError(OWN_OPTIMIZER_STEPS)
        self.update_counts: Dict[ModuleID, int] = dict.fromkeys(self.module.keys(), 0)
        self.polyak_targets: Dict[ModuleID, PolyakTargets] = {}
        if uses_ners_replay(self.config):
            self.ners = TorchNERSSampler(self)
        self.relo_replay = uses_relo_replay(self.config)
        if self.relo_replay or uses_laber_replay(self.config):
            self._check_per_item_critic_losses()
        if uses_laber_replay(self.config):
            self.laber = large_batch_subsampler(self)

    def _check_per_item_critic_losses(self) -> None:
        """ReLo and LaBER need a per-item critic loss (`PER_ITEM_CRITIC_LOSSES`)."""
        for module_id in self.module.keys():
            kind = self.config.get_config_for_module(module_id).critic_loss
            if kind not in PER_ITEM_CRITIC_LOSSES:
                method = "ReLo" if self.relo_replay else "LaBER"
                raise ValueError(
                    f"{method} replay needs a per-item critic loss, but "
                    f"critic_loss={kind!r} (PAL's loss for uniform replay, divided "
                    f"by a batch normaliser); use config.training(critic_loss="
                    f"'mse') (the TD3 paper's) or 'huber'."
                )

    @classmethod
    @override(TorchLearner)
    def rl_module_required_apis(cls) -> list:
        return [TargetNetworkAPI]

    @override(TorchLearner)
    def configure_optimizers_for_module(self, module_id: ModuleID, config=None) -> None:
        """Adam for the critics (both, one optimizer) and for the actor."""
        module = self.module[module_id]
        critics = [module.qf] + ([module.qf_twin] if module.twin_q else [])
        for name, nets, lr in (
            (CRITIC_OPTIMIZER, critics, config.critic_lr),
            (ACTOR_OPTIMIZER, [module.pi], config.actor_lr),
        ):
            params = [param for net in nets for param in self.get_parameters(net)]
            self.register_optimizer(
                module_id=module_id,
                optimizer_name=name,
                optimizer=make_adam(params),
                params=params,
                lr_or_lr_schedule=lr,
            )

    @override(TorchLearner)
    def _update(self, batch: Dict[str, Any]):
        return self._update_modules(batch, self._actor_phases(batch))

    @override(FastTorchLearner)
    def graph_update_parts(self, batch: Dict[str, Any]):
        # Which modules step their actors this update is decided on the host:
        # one graph per choice.
        actor_phases = self._actor_phases(batch)
        return actor_phases, functools.partial(
            self._update_modules, actor_phases=actor_phases
        )

    def _actor_phases(self, batch: Dict[str, Any]) -> Tuple[bool, ...]:
        """Counts this update for each module of `batch`; per module, whether
        it is one of the updates that step the actor (every `policy_delay`)."""
        phases = []
        for module_id in batch:
            self.update_counts[module_id] += 1
            delay = self.config.get_config_for_module(module_id).policy_delay
            phases.append(self.update_counts[module_id] % delay == 0)
        return tuple(phases)

    def _update_modules(self, batch: Dict[str, Any], actor_phases: Tuple[bool, ...]):
        """The tensor work of one update: each module's critic step, and its
        actor and target step where `actor_phases` says."""
        fwd_out, loss_per_module = {}, {}
        for (module_id, module_batch), actor_phase in zip(batch.items(), actor_phases):
            module = self.module[module_id].unwrapped()
            config = self.config.get_config_for_module(module_id)
            if self.laber is not None:
                fwd_out[module_id], loss_per_module[module_id] = self._laber_update(
                    module_id, module, module_batch, config, actor_phase
                )
                continue
            fwd_out[module_id] = training_pass(module, module_batch)
            loss = self.compute_loss_for_module(
                module_id=module_id,
                config=config,
                batch=module_batch,
                fwd_out=fwd_out[module_id],
            )
            self._gradient_step(module_id, CRITIC_OPTIMIZER, loss, config)
            loss_per_module[module_id] = loss
            if actor_phase:
                self._update_actor_and_targets(module_id, module, module_batch, config)
        return fwd_out, loss_per_module, {}

    @override(TorchLearner)
    def compute_loss_for_module(
        self,
        *,
        module_id: ModuleID,
        config: Any,
        batch: Dict[str, Any],
        fwd_out: Dict[str, TensorType],
    ) -> TensorType:
        """The critics' loss; logs the priority rows and its statistics."""
        module = self.module[module_id].unwrapped()
        if self.relo_replay:
            target, target_q_taken = critic_targets_and_taken_q(
                module, batch, config, taken=True
            )
        else:
            target = critic_targets(module, batch, config)
        errors = [fwd_out[QF_PREDS] - target]
        if module.twin_q:
            errors.append(fwd_out[QF_TWIN_PREDS] - target)
        loss = critic_loss(
            errors, batch["weights"], config.critic_loss, config.pal_alpha
        )
        with torch.no_grad():
            delta = priority_errors(errors)
            if self.ners is not None:
                # [score, delta, q, position] rows replace the plain TD errors.
                self.ners.report_scores(module_id, batch, delta, target)
            elif self.relo_replay:
                kind = config.critic_loss
                online_losses = relo_item_losses(errors, kind)
                target_losses = relo_item_losses(
                    [q - target for q in target_q_taken], kind
                )
                self.metrics.log_value(
                    (module_id, TD_ERROR_KEY),
                    pack_relo_feedback(delta, online_losses, target_losses, batch),
                    reduce="item_series",
                )
            else:
                self.metrics.log_value(
                    (module_id, TD_ERROR_KEY), delta, reduce="item_series"
                )
        self._log_critic_statistics(module_id, loss, fwd_out[QF_PREDS], delta)
        return loss

    def _log_critic_statistics(self, module_id, loss, q_preds, delta) -> None:
        """The critics' window-1 statistics: loss, Q max/mean/min, mean TD
        error, computed only for the update the iteration reports."""
        # Detached: kept until the iteration's flush, these would keep the
        # update's autograd graph alive into the next updates.
        q_preds, loss_value = q_preds.detach(), loss.detach()
        self.log_statistics(
            module_id,
            {
                QF_LOSS_KEY: lambda: loss_value,
                QF_MAX_KEY: lambda: torch.max(q_preds),
                QF_MEAN_KEY: lambda: torch.mean(q_preds),
                QF_MIN_KEY: lambda: torch.min(q_preds),
                TD_ERROR_MEAN_KEY: lambda: torch.mean(delta),
            },
        )

    def _laber_update(self, module_id, module, batch, config, actor_phase):
        """One LaBER update of one module on its large batch (see the module
        docstring): the scoring pass, each critic's draw and step, the
        delayed actor's step on uniform rows; logs the surrogates (mean over
        the critics) with how often each row was drawn. Returns the scoring
        pass's Q values and the critics' loss."""
        obs, actions = batch[Columns.OBS], batch[Columns.ACTIONS]
        rows = obs.shape[0]
        num = self.laber.minibatch_size(rows)
        critics = module.critics()
        with torch.no_grad():
            target = critic_targets(module, batch, config)
            q_large = [module.q_values(critic, obs, actions) for critic in critics]
            errors = [q - target for q in q_large]
            surrogate = surrogate_for_loss(config.critic_loss)
            surrogates = [surrogate(error) for error in errors]
        draws = [self.laber.draw(scores, num) for scores in surrogates]
        loss = sum(
            torch.mean(
                weights
                * critic_item_loss(
                    module.q_values(critic, obs[rows_k], actions[rows_k])
                    - target[rows_k],
                    config.critic_loss,
                )
            )
            for critic, (rows_k, weights) in zip(critics, draws)
        )
        self._gradient_step(module_id, CRITIC_OPTIMIZER, loss, config)
        index_sets = [rows_k for rows_k, _ in draws]
        if actor_phase:
            actor_rows = self.laber.uniform(rows, num, obs.device)
            index_sets.append(actor_rows)
            self._update_actor_and_targets(
                module_id, module, {Columns.OBS: obs[actor_rows]}, config
            )
        with torch.no_grad():
            times_drawn = LargeBatchSubsampler.times_drawn(index_sets, rows)
            self.metrics.log_value(
                (module_id, TD_ERROR_KEY),
                pack_laber_feedback(
                    torch.stack(surrogates).mean(0), times_drawn, batch
                ),
                reduce="item_series",
            )
            delta = priority_errors(errors)
        self._log_critic_statistics(module_id, loss, q_large[0], delta)
        fwd_out = {QF_PREDS: q_large[0]}
        if module.twin_q:
            fwd_out[QF_TWIN_PREDS] = q_large[1]
        return fwd_out, loss

    def _update_actor_and_targets(self, module_id, module, batch, config) -> None:
        """The delayed part of TD3's update: the actor's step on
        `-mean Q_1(s, pi(s))` (the critics frozen), then the Polyak update of
        every target network."""
        critic_params = list(module.qf.parameters())
        if module.twin_q:
            critic_params += list(module.qf_twin.parameters())
        for param in critic_params:
            param.requires_grad = False
        try:
            obs = batch[Columns.OBS]
            actor_loss = -module.q_values(module.qf, obs, module.actions(obs)).mean()
            self._gradient_step(module_id, ACTOR_OPTIMIZER, actor_loss, config)
        finally:
            for param in critic_params:
                param.requires_grad = True
        targets = self.polyak_targets.get(module_id)
        if targets is None:
            targets = PolyakTargets(module.get_target_network_pairs())
            self.polyak_targets[module_id] = targets
        targets.update(config.tau)
        actor_loss = actor_loss.detach()
        self.log_statistics(module_id, {POLICY_LOSS_KEY: lambda: actor_loss})
        self.metrics.log_value((module_id, NUM_ACTOR_UPDATES), 1, reduce="lifetime_sum")

    def _gradient_step(
        self, module_id: ModuleID, optimizer_name: str, loss: torch.Tensor, config
    ) -> None:
        """One step of one optimizer on `loss`: its parameters' gradients
        (averaged over several Learners), clipped and their global norm logged
        as RLlib's `postprocess_gradients` does (`grad_clip`, `grad_clip_by`,
        `log_gradients`), nan/inf set to zero as RLlib's `apply_gradients` does
        (unless `torch_skip_nan_gradients`), then the optimizer's step."""
        optimizer = self.get_optimizer(module_id, optimizer_name)
        parameters = {
            self.get_param_ref(param): param
            for group in optimizer.param_groups
            for param in group["params"]
        }
        gradients = gradients_of(loss, parameters)
        grads = [grad for grad in gradients.values() if grad is not None]
        if learners_share_process_group(self):
            average_over_learners(grads)
        host_reads = learner_reads_on_host(self, grads)
        norm = None
        if config.grad_clip is not None:
            clip_norm = clip_gradients_foreach(
                gradients,
                grad_clip=config.grad_clip,
                grad_clip_by=config.grad_clip_by,
                host_reads=host_reads,
            )
            if config.grad_clip_by == "global_norm":
                norm = clip_norm  # before clipping, as RLlib logs it
        if norm is None and config.log_gradients and grads:
            # RLlib logs the (clipped) gradients' global norm on request.
            norm = torch.nn.utils.get_total_norm(grads, foreach=True)
        if norm is not None:
            self.metrics.log_value(
                (module_id, f"gradients_{optimizer_name}_global_norm"),
                norm,
                window=1,
            )
        skip_nan_gradients = config.torch_skip_nan_gradients
        if grads and not host_reads:
            finite_gradients_without_host_reads(
                self, grads, skip_nan_gradients=skip_nan_gradients
            )
        elif grads and not skip_nan_gradients and not all_finite(grads):
            logger.warning(
                "Gradients of %s's %s contain nan/inf values; setting them to zero "
                "(as RLlib's apply_gradients does by default).",
                module_id,
                optimizer_name,
            )
            for param in parameters.values():
                if param.grad is not None:
                    param.grad = torch.nan_to_num(param.grad)
        step_optimizers([optimizer])

    @override(TorchLearner)
    def get_state(self, components=None, *, not_components=None, **kwargs):
        state = super().get_state(components, not_components=not_components, **kwargs)
        if includes_component(self, TD3_UPDATE_COUNT_STATE, components, not_components):
            state[TD3_UPDATE_COUNT_STATE] = dict(self.update_counts)
        return state

    @override(TorchLearner)
    def set_state(self, state: Dict[str, Any]) -> None:
        super().set_state(state)
        self.update_counts.update(state.get(TD3_UPDATE_COUNT_STATE, {}))
