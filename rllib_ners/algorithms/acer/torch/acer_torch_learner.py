"""ACER's torch Learner: Retrace critic, truncated-IS actor, trust region, NERS.

Per update, on a batch of sequences (columns in `acer_learner.py`):

  1. under no_grad: `pi`, `Q` and `V = sum_a pi Q` at every step and at the
     bootstrap observation; the behaviour policy `mu` from the stored logits;
     `rho = pi / mu`; Retrace targets `Q_ret` (`retrace_torch.py`);
  2. actor: ACER's truncated importance-sampling policy gradient with bias
     correction plus an entropy bonus; with `use_trust_region` the gradient
     w.r.t. the policy's probabilities is projected per step so that the
     linearised KL to the average policy grows by at most `trust_region_delta`;
  3. critic: `0.5 (Q_ret - Q(s, a))^2`, weighted by `q_loss_coeff`;
  4. every step's terms are weighted by its sequence's importance-sampling
     weight and averaged over the real (unpadded) steps.

Replayed batches from the NERS buffer (they carry `sample_position`) are also
scored: the sequence starts' features `[s_0, a_0, r_0, s_1, delta_0, q_0, t_0]`
with `delta_0 = |Q_ret(s_0, a_0) - Q(s_0, a_0)|` (the TD error's magnitude, as
in NERS-DQN) and `q_0 = V(s_0)` go through the NERS scorer, and rows
`[sigma, delta, q, position]` are reported under RLlib's TD-error key for the
buffer's `update_priorities()`. Replayed batches from a prioritised non-NERS
buffer report `delta_0` there (PER on sequence starts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.core.rl_module.apis import TARGET_NETWORK_ACTION_DIST_INPUTS
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import TD_ERROR_KEY
from ray.rllib.utils.typing import ModuleID, TensorType

from rllib_ners.algorithms.acer.acer_learner import (
    ENTROPY_KEY,
    KL_AVERAGE_POLICY_KEY,
    MEAN_RHO_KEY,
    POLICY_LOSS_KEY,
    Q_LOSS_KEY,
    Q_RET_MEAN_KEY,
    SEQUENCE_START_TS,
    SEQUENCE_WEIGHTS,
    TRUNCATED_FRACTION_KEY,
    TRUST_REGION_ACTIVE_KEY,
    ACERLearner,
)
from rllib_ners.algorithms.acer.default_acer_rl_module import QF_PREDS
from rllib_ners.algorithms.acer.torch.retrace_torch import (
    acer_policy_objective,
    importance_weights,
    kl_gradient_wrt_probs,
    retrace_q_targets,
    trust_region_step,
)
from rllib_ners.algorithms.common.learner.fast_torch_learner import FastTorchLearner
from rllib_ners.algorithms.common.learner.update_step import (
    rllib_update_needed,
    update_in_training_mode,
)
from rllib_ners.algorithms.ners.torch.torch_ners_sampler import (
    TorchNERSSampler,
    uses_ners_replay,
)
from rllib_ners.replay_buffers.feedback import NERS_SCORES, TD_ERRORS
from rllib_ners.replay_buffers.ners_episode_buffer import (
    DELTA,
    SAMPLE_POSITION,
    TARGET_Q,
)
from rllib_ners.utils.malloc import keep_freed_tensor_memory
from rllib_ners.utils.optimizer_steps import make_adam

# Probabilities are clamped to this before a log where they may reach 0.
MIN_PROBABILITY = 1e-12


@dataclass
class _Sequences:
    """One batch of sequences as the loss reads it: the module's outputs at
    the `T` steps, the taken actions, the real-step mask and the per-step
    importance weights (the sequence's weight on its real steps)."""

    logits_all: torch.Tensor  # [B, T + 1, A], the bootstrap step last
    q_all: torch.Tensor  # [B, T + 1, A]
    logits: torch.Tensor  # [B, T, A]
    q_values: torch.Tensor  # [B, T, A]
    log_pi: torch.Tensor
    pi: torch.Tensor
    actions: torch.Tensor  # [B, T]
    mask: torch.Tensor  # [B, T] bool
    step_weights: torch.Tensor  # [B, T]
    num_steps: torch.Tensor  # real steps, at least 1

    @classmethod
    def of(cls, batch: Dict[str, Any], fwd_out: Dict[str, Any]) -> _Sequences:
        logits_all = fwd_out[Columns.ACTION_DIST_INPUTS]
        q_all = fwd_out[QF_PREDS]
        logits = logits_all[:, :-1]
        mask = batch[Columns.LOSS_MASK].bool()
        log_pi = torch.log_softmax(logits, dim=-1)
        return cls(
            logits_all=logits_all,
            q_all=q_all,
            logits=logits,
            q_values=q_all[:, :-1],
            log_pi=log_pi,
            pi=log_pi.exp(),
            actions=batch[Columns.ACTIONS].long(),
            mask=mask,
            step_weights=batch[SEQUENCE_WEIGHTS].float().unsqueeze(-1) * mask,
            num_steps=mask.sum().clamp(min=1),
        )

    def real_mean(self, values: torch.Tensor) -> torch.Tensor:
        """The mean of per-step `values` over the real steps."""
        return (values * self.mask.float()).sum() / self.num_steps


@dataclass
class _RetraceTerms:
    """What the actor and critic losses need, computed without gradients."""

    values: torch.Tensor  # V(s_t) = sum_a pi Q, [B, T]
    weights: Dict[str, torch.Tensor]  # `importance_weights`' terms
    q_ret: torch.Tensor  # Retrace targets, [B, T]


@dataclass
class _TrustRegion:
    """The trust-region step's results, for its metrics."""

    pi_average: torch.Tensor
    active: torch.Tensor  # [B, T] bool: the constraint bound


class ACERTorchLearner(FastTorchLearner, ACERLearner, TorchLearner):
    """See the module docstring. Its update is `update_in_training_mode` (or
    RLlib's for several Learners or a compiled update), with metrics deferred
    and the fused gradient step (`FastTorchLearner`), as
    `RainbowDQNTorchLearner`'s."""

    # The replay feedback it sends: TD errors, or with NERS scores NERS's
    # rows (the buffer's sampler must take one; checked when it is built).
    replay_feedback_layouts = (TD_ERRORS, NERS_SCORES)

    @override(TorchLearner)
    def build(self) -> None:
        keep_freed_tensor_memory()
        super().build()
        if uses_ners_replay(self.config):
            # Sequence replay scores sequence starts without the encoding-cache
            # keys.
            self.ners = TorchNERSSampler(self, batches_carry_encoding_keys=False)

    @override(TorchLearner)
    def _update(self, batch: Dict[str, Any]):
        if rllib_update_needed(self):
            return super()._update(batch)
        return update_in_training_mode(self, batch)

    @override(TorchLearner)
    def configure_optimizers_for_module(self, module_id: ModuleID, config=None) -> None:
        # RLlib's default Adam, fused into one kernel per step (`make_adam`); the
        # average policy network has no gradients and is not optimised.
        params = self.get_parameters(self.module[module_id])
        self.register_optimizer(
            module_id=module_id,
            optimizer=make_adam(params),
            params=params,
            lr_or_lr_schedule=config.lr,
        )

    @override(TorchLearner)
    def compute_loss_for_module(
        self,
        *,
        module_id: ModuleID,
        config: Any,
        batch: Dict[str, Any],
        fwd_out: Dict[str, TensorType],
    ) -> TensorType:
        # Rows for the buffer exist only for this update's replayed batch.
        self.metrics.delete(module_id, TD_ERROR_KEY, key_error=False)
        seq = _Sequences.of(batch, fwd_out)
        with torch.no_grad():
            terms = _retrace_terms(seq, batch, config)
        policy_loss, trust_region = self._policy_loss(
            module_id, seq, terms, batch, config
        )
        q_taken = seq.q_values.gather(-1, seq.actions.unsqueeze(-1)).squeeze(-1)
        td = terms.q_ret - q_taken
        q_loss = 0.5 * (seq.step_weights * td.pow(2)).sum() / seq.num_steps
        total_loss = policy_loss + config.q_loss_coeff * q_loss
        self._log_acer_metrics(
            module_id, seq, terms, policy_loss, q_loss, trust_region, config
        )
        if SAMPLE_POSITION in batch:
            self._report_replay_rows(module_id, batch, td.detach().abs(), terms.values)
        return total_loss

    def _policy_loss(self, module_id, seq: _Sequences, terms, batch, config):
        """ACER's actor loss: the truncated importance-sampling policy gradient
        with bias correction and an entropy bonus, or (`use_trust_region`) its
        gradient w.r.t. the probabilities projected per step so that the
        linearised KL to the average policy grows by at most
        `trust_region_delta`. Returns the loss and the trust region's terms."""

        def weighted_objective(log_probs: torch.Tensor) -> torch.Tensor:
            """Per-step ACER objective plus entropy bonus, IS-weighted, `[B, T]`."""
            objective = acer_policy_objective(
                log_pi=log_probs,
                pi=seq.pi,
                actions=seq.actions,
                q_ret=terms.q_ret,
                q_values=seq.q_values,
                values=terms.values,
                truncated=terms.weights["truncated"],
                correction=terms.weights["correction"],
            )
            entropy = -(seq.pi * log_probs).sum(-1)
            return seq.step_weights * (objective + config.entropy_coeff * entropy)

        if not config.use_trust_region:
            return -weighted_objective(seq.log_pi).sum() / seq.num_steps, None
        # g: the objective's gradient w.r.t. the probabilities phi = pi, per
        # step (summed, not averaged: the constraint is per step, eq. 12).
        (g,) = torch.autograd.grad(
            weighted_objective(torch.log(seq.pi.clamp(min=MIN_PROBABILITY))).sum(),
            seq.pi,
            retain_graph=True,
        )
        with torch.no_grad():
            average_logits = (
                self.module[module_id]
                .unwrapped()
                .forward_target({Columns.OBS: batch[Columns.OBS][:, :-1]})[
                    TARGET_NETWORK_ACTION_DIST_INPUTS
                ]
            )
            pi_average = torch.softmax(average_logits, dim=-1)
            k = kl_gradient_wrt_probs(pi_average, seq.pi)
            z = trust_region_step(g, k, config.trust_region_delta)
            active = ((k * g).sum(-1) > config.trust_region_delta) & seq.mask
        # A surrogate whose gradient w.r.t. pi is z / num_steps.
        policy_loss = -(z * seq.pi).sum() / seq.num_steps
        return policy_loss, _TrustRegion(pi_average=pi_average, active=active)

    def _log_acer_metrics(
        self,
        module_id,
        seq: _Sequences,
        terms: _RetraceTerms,
        policy_loss,
        q_loss,
        trust_region: Optional[_TrustRegion],
        config,
    ) -> None:
        with torch.no_grad():
            rho_taken = terms.weights["rho_taken"]
            metrics = {
                POLICY_LOSS_KEY: policy_loss,
                Q_LOSS_KEY: q_loss,
                ENTROPY_KEY: seq.real_mean(-(seq.pi * seq.log_pi).sum(-1)),
                MEAN_RHO_KEY: seq.real_mean(rho_taken),
                TRUNCATED_FRACTION_KEY: seq.real_mean(
                    (rho_taken > config.truncation_c).float()
                ),
                Q_RET_MEAN_KEY: seq.real_mean(terms.q_ret),
            }
            if trust_region is not None:
                pi_average = trust_region.pi_average
                kl = (
                    pi_average
                    * (pi_average.clamp(min=MIN_PROBABILITY).log() - seq.log_pi)
                ).sum(-1)
                metrics[KL_AVERAGE_POLICY_KEY] = seq.real_mean(kl)
                metrics[TRUST_REGION_ACTIVE_KEY] = (
                    trust_region.active.float().sum() / seq.num_steps
                )
        self.metrics.log_dict(
            {key: value.detach() for key, value in metrics.items()},
            key=module_id,
            window=1,
        )

    def _report_replay_rows(
        self,
        module_id: ModuleID,
        batch: Dict[str, Any],
        delta: torch.Tensor,
        values: torch.Tensor,
    ) -> None:
        """Per sequence start, the replay feedback: NERS's (`TorchNERSSampler.
        send_feedback`), or for a prioritised non-NERS buffer the plain
        `delta` under RLlib's TD-error key."""
        delta_0, value_0 = delta[:, 0], values[:, 0]
        if self.ners is None:
            self.metrics.log_value(
                (module_id, TD_ERROR_KEY), delta_0, reduce="item_series"
            )
            return
        obs = batch[Columns.OBS]
        scores = self.ners.score(
            {
                "obs": obs[:, 0],
                "new_obs": obs[:, 1],
                "actions": batch[Columns.ACTIONS][:, 0],
                "rewards": batch[Columns.REWARDS][:, 0],
                DELTA: delta_0,
                TARGET_Q: value_0,
                "ts": batch[SEQUENCE_START_TS],
            }
        )
        self.ners.send_feedback(module_id, batch, scores, delta_0, value_0)


def _retrace_terms(seq: _Sequences, batch: Dict[str, Any], config) -> _RetraceTerms:
    """`V = sum_a pi Q` at every step and at the bootstrap observation, the
    behaviour policy `mu` from the stored logits, `rho = pi / mu` and its
    truncated and correction terms, and the Retrace targets `Q_ret`."""
    mu = torch.softmax(batch[Columns.ACTION_DIST_INPUTS].float(), dim=-1)
    values = (seq.pi * seq.q_values).sum(-1)
    bootstrap_pi = torch.softmax(seq.logits_all[:, -1], dim=-1)
    bootstrap_values = (bootstrap_pi * seq.q_all[:, -1]).sum(-1)
    weights = importance_weights(seq.pi, mu, seq.actions, config.truncation_c)
    q_taken = seq.q_values.gather(-1, seq.actions.unsqueeze(-1)).squeeze(-1)
    q_ret = retrace_q_targets(
        rewards=batch[Columns.REWARDS].float(),
        q_taken=q_taken,
        values=values,
        rho_taken=weights["rho_taken"],
        bootstrap_values=bootstrap_values,
        terminateds=batch[Columns.TERMINATEDS],
        mask=seq.mask,
        gamma=config.gamma,
        c=config.retrace_c,
    )
    return _RetraceTerms(values=values, weights=weights, q_ret=q_ret)
