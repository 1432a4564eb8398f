"""RLlib's SAC update (continuous actions) with one backward pass.

RLlib 2.60's `SACTorchLearner` runs the module's `forward_train` (the policy on
`s` and on `s'`, both critics on `(s, a)`, both critics on `(s, a~pi(s))` with
their weights frozen, the target critics on `(s', a'~pi(s'))`), computes the
critic, twin-critic, policy and temperature losses, then for each of its four
optimizers zeroes the gradients and calls `backward(retain_graph=True)` on that
optimizer's loss: four walks of the autograd graph, with the policy pass on
`s'` recorded for autograd although nothing flows back through it.

`LeanSACUpdateMixin._update()` computes the same forward outputs (the same
calls in the same order, so the same random draws), the same losses
(RLlib's `compute_loss_for_module`, unchanged), and then one `backward()` of
their sum. Each parameter receives the gradient of exactly one of the four
losses (critic targets, `alpha` in the policy loss and `log pi` in the
temperature loss are detached; the critics are frozen in the policy loss), so
the summed backward gives every parameter RLlib's gradient (tested against
`SACTorchLearner` on the same batch and weights). The policy pass on `s'` runs
under `no_grad`. Gradient clipping and the optimizer steps are RLlib's.

With several Learners the gradients are averaged across them in one
all-reduce (what DDP does for the RLModule, and `NERSSACTorchLearner` for the
temperature). Configs it cannot serve (Discrete actions, torch-compiled
updates, mixed precision, torch LR schedulers) take RLlib's update; the Learner
says why once in an INFO log line.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional, Tuple

import gymnasium as gym
import torch
import torch.distributed as dist
from ray.rllib.algorithms.sac.default_sac_rl_module import DefaultSACRLModule
from ray.rllib.algorithms.sac.sac_learner import (
    ACTION_DIST_INPUTS_NEXT,
    QF_PREDS,
    QF_TARGET_NEXT,
    QF_TWIN_PREDS,
)
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchSquashedGaussian
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.core.models.base import ENCODER_OUT
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import ALL_MODULES

from rllib_ners.rl_modules.sac.torch.sac_torch_rl_module import SACTorchRLModule
from rllib_ners.utils.torch_ops import (
    plain_encoder_head_layers,
    run_plain_mlp,
    squashed_gaussian_draw_and_logp,
)

logger = logging.getLogger(__name__)


class LeanSACUpdateMixin:
    """For `SACTorchLearner` subclasses (list it before SACTorchLearner)."""

    _lean_update_blocker: Optional[str] = None
    _lean_update_logged = False

    def lean_update_blocker(self) -> Optional[str]:
        """Why this Learner takes RLlib's update, or None for the lean one."""
        if self.config.torch_compile_learner:
            return "the update is torch-compiled"
        if self._grad_scalers is not None:
            return "gradients are scaled (mixed precision)"
        if self._lr_scheduler_classes is not None:
            return "torch LR schedulers are set"
        for module_id in self.module.keys():
            module = self.module[module_id].unwrapped()
            if not isinstance(module, DefaultSACRLModule):
                return f"module {module_id!r} is not an RLlib SAC module"
            if not isinstance(module.action_space, gym.spaces.Box):
                return f"module {module_id!r} has no Box actions"
        return None

    @override(TorchLearner)
    def build(self) -> None:
        super().build()
        self._lean_update_blocker = self.lean_update_blocker()
        self._sac_networks_by_module = {}

    @override(TorchLearner)
    def _update(self, batch: Dict[str, Any]) -> Tuple[Any, Any, Any]:
        if self._lean_update_blocker is not None:
            if not self._lean_update_logged:
                logger.info(
                    "%s updates with RLlib's SAC update: %s.",
                    type(self).__name__,
                    self._lean_update_blocker,
                )
                self._lean_update_logged = True
            return super()._update(batch)
        fwd_out = {
            module_id: self._lean_forward_train(module_id, module_batch)
            for module_id, module_batch in batch.items()
        }
        loss_per_module = self.compute_losses(fwd_out=fwd_out, batch=batch)
        # RLlib's compute_gradients() pops the four losses kept for its four
        # backward passes; the summed loss below replaces them.
        self._temp_losses.clear()
        for param in self._params.values():  # zero_grad(set_to_none=True)
            param.grad = None
        total = sum(
            loss
            for module_id, loss in loss_per_module.items()
            if module_id != ALL_MODULES
        )
        total.backward()
        gradients = {pid: param.grad for pid, param in self._params.items()}
        self._average_gradients_over_learners(gradients)
        self.apply_gradients(self.postprocess_gradients(gradients))
        return fwd_out, loss_per_module, {}

    def _lean_forward_train(self, module_id, batch: Dict[str, Any]) -> Dict[str, Any]:
        """`DefaultSACTorchRLModule._forward_train_continuous`, the policy pass on
        `s'` without autograd (its outputs are detached there)."""
        module = self.module[module_id].unwrapped()
        nets = self._sac_networks(module)
        obs, next_obs = batch[Columns.OBS], batch[Columns.NEXT_OBS]
        output = {}
        pi_logits = nets.policy(obs)
        with torch.no_grad():
            pi_logits_next = nets.policy(next_obs)
        actions = batch[Columns.ACTIONS]
        output[QF_PREDS] = nets.q(module.qf_encoder, module.qf, obs, actions)
        if module.twin_q:
            output[QF_TWIN_PREDS] = nets.q(
                module.qf_twin_encoder, module.qf_twin, obs, actions
            )
        output[Columns.ACTION_DIST_INPUTS] = pi_logits
        output[ACTION_DIST_INPUTS_NEXT] = pi_logits_next
        # The same draws in the same order as RLlib's: s first, then s'.
        actions, output["logp_resampled"] = nets.draw(pi_logits, reparameterized=True)
        actions_next, logp_next = nets.draw(pi_logits_next, reparameterized=False)
        output["logp_next_resampled"] = logp_next.detach()
        critic_params = nets.critic_parameters
        for param in critic_params:
            param.requires_grad = False
        try:
            output["q_curr"] = nets.min_q(nets.critics, obs, actions)
        finally:
            for param in critic_params:
                param.requires_grad = True
        with torch.no_grad():
            output[QF_TARGET_NEXT] = nets.min_q(
                nets.target_critics, next_obs, actions_next.detach()
            )
        return output

    def _sac_networks(self, module) -> _SACNetworks:
        networks = self._sac_networks_by_module.get(id(module))
        if networks is None:
            networks = self._sac_networks_by_module[id(module)] = _SACNetworks(module)
        return networks

    def _average_gradients_over_learners(self, gradients) -> None:
        """With several Learners: every gradient averaged over them (the
        RLModule's, as DDP would, and the temperature's), one all-reduce."""
        if not (
            self.distributed
            and dist.is_available()
            and dist.is_initialized()
            and dist.get_world_size() > 1
        ):
            return
        grads = [grad for grad in gradients.values() if grad is not None]
        if not grads:
            return
        flat = torch.cat([grad.reshape(-1) for grad in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat /= dist.get_world_size()
        offset = 0
        for grad in grads:
            size = grad.numel()
            grad.copy_(flat[offset : offset + size].view_as(grad))
            offset += size


class _SACNetworks:
    """A SAC module's policy and critic passes. Plain MLP encoders and heads
    run their layers directly (`run_plain_mlp`: the same ops without the
    module-call overhead); anything else goes through the module's own calls."""

    def __init__(self, module):
        self.module = module
        encoder, head = module.pi_encoder, module.pi
        self._policy_layers = plain_encoder_head_layers(encoder, head)
        self._concat_critics = isinstance(module, SACTorchRLModule)
        self._critic_layers = {}
        self._lean_draws = module.get_train_action_dist_cls() is TorchSquashedGaussian
        # (encoder, head) of each critic and of each target critic, in the order
        # RLlib's `compute_q_values` and `forward_target` run them.
        self.critics = [(module.qf_encoder, module.qf)]
        self.target_critics = [(module.target_qf_encoder, module.target_qf)]
        if module.twin_q:
            self.critics.append((module.qf_twin_encoder, module.qf_twin))
            self.target_critics.append(
                (module.target_qf_twin_encoder, module.target_qf_twin)
            )
        self.critic_parameters = [
            param for pair in self.critics for net in pair for param in net.parameters()
        ]

    def draw(self, logits: torch.Tensor, *, reparameterized: bool):
        """`dist_class.from_logits(logits).rsample_and_logp()` (reparameterized)
        or `.sample_and_logp()`: for RLlib's squashed Gaussian without its
        distribution objects (`squashed_gaussian_draw_and_logp`, the same
        draws, values and gradients)."""
        if self._lean_draws:
            return squashed_gaussian_draw_and_logp(
                logits, reparameterized=reparameterized
            )
        dist = self.module.get_train_action_dist_cls().from_logits(logits)
        return dist.rsample_and_logp() if reparameterized else dist.sample_and_logp()

    def min_q(self, critics, obs: torch.Tensor, actions: torch.Tensor):
        """`compute_q_values` (online critics) or `forward_target` (target
        critics): the first critic's Q, then the element-wise min with the twin's."""
        (encoder, head), *twin = critics
        q = self.q(encoder, head, obs, actions)
        for encoder, head in twin:
            q = torch.min(q, self.q(encoder, head, obs, actions))
        return q

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        """The policy head's output (the action distribution's inputs)."""
        if self._policy_layers is not None:
            return run_plain_mlp(self._policy_layers, obs)
        module = self.module
        return module.pi(module.pi_encoder({Columns.OBS: obs})[ENCODER_OUT])

    def q(self, encoder, head, obs: torch.Tensor, actions: torch.Tensor):
        """One critic's Q(s, a), as `_qf_forward_train_helper` computes it."""
        key = id(encoder)
        layers = self._critic_layers.get(key, False)
        if layers is False:
            layers = None
            if self._concat_critics:
                layers = plain_encoder_head_layers(encoder, head)
            self._critic_layers[key] = layers
        if layers is None:
            return self.module._qf_forward_train_helper(
                {Columns.OBS: obs, Columns.ACTIONS: actions}, encoder, head
            )
        return run_plain_mlp(layers, torch.cat([obs, actions], dim=-1)).squeeze(-1)
