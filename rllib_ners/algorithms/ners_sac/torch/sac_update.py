"""RLlib's SAC update (continuous actions) with one backward pass.

RLlib 2.60's `SACTorchLearner` runs the module's `forward_train` (the policy on
`s` and on `s'`, both critics on `(s, a)`, both critics on `(s, a~pi(s))` with
their weights frozen, the target critics on `(s', a'~pi(s'))`), computes the
critic, twin-critic, policy and temperature losses, then for each of its four
optimizers zeroes the gradients and calls `backward(retain_graph=True)` on that
optimizer's loss: four walks of the autograd graph, with the policy pass on
`s'` recorded for autograd although nothing flows back through it.

`one_backward_sac_update` computes the same forward outputs (the same calls
in the same order, so the same random draws; `sac_forward_train`), the same
losses (the Learner's `compute_loss_for_module`), and then one `backward()`
of their sum. Each parameter receives the gradient of exactly one of the four
losses (critic targets, `alpha` in the policy loss and `log pi` in the
temperature loss are detached; the critics are frozen in the policy loss), so
the summed backward gives every parameter RLlib's gradient (tested against
`SACTorchLearner` on the same batch and weights:
`tests/integration/test_sac_update.py`). The policy pass on `s'` runs under
`no_grad`. Gradient clipping and the optimizer steps are the Learner's.

With several Learners the gradients are averaged across them in one
all-reduce (what DDP does for the RLModule, here for the temperature too).
Configs it cannot serve (Discrete actions, torch-compiled updates, mixed
precision, torch LR schedulers, modules other than RLlib's SAC modules) take
RLlib's own update (`sac_update_blocker` says why).

ReLo replay (`target_on_taken_actions=True`) adds one output, each target
critic's Q on the batch's own `(s, a)` (`Q_TARGET_CURR`, no gradients), from
the same call per target critic as the target pass on `(s', a')`: the rows
`[s'; s]` concatenated, then split. One call instead of two (a third less
time for small critics on the CPU, the same for 256 x 256); on the CPU each
row's result is the separate call's bit for bit, so the ReLo update's TD
target, losses and gradients are PER's exactly
(`tests/integration/test_sac_relo_laber.py`); on a GPU the BLAS library may
pick another kernel for twice the rows, so there they agree to float
rounding. Without ReLo the pass is as before.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import gymnasium as gym
import torch
from ray.rllib.algorithms.sac.default_sac_rl_module import DefaultSACRLModule
from ray.rllib.algorithms.sac.sac_learner import (
    ACTION_DIST_INPUTS_NEXT,
    QF_PREDS,
    QF_TARGET_NEXT,
    QF_TWIN_PREDS,
)
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchSquashedGaussian
from ray.rllib.core.models.base import ENCODER_OUT
from ray.rllib.utils.metrics import ALL_MODULES

from rllib_ners.algorithms.common.learner.distributed import (
    average_over_learners,
    learners_share_process_group,
)
from rllib_ners.algorithms.common.learner.gradient_step import gradients_of
from rllib_ners.algorithms.common.learner.update_step import plain_gradient_step_blocker
from rllib_ners.algorithms.ners_sac.torch.sac_torch_rl_module import SACTorchRLModule
from rllib_ners.seam.learner import (
    learner_parameters,
    losses_per_optimizer,
)
from rllib_ners.seam.rl_module import sac_critic_pass
from rllib_ners.utils.action_sampling import squashed_gaussian_draw_and_logp
from rllib_ners.utils.mlp_layers import encoder_head_layers_of, run_mlp_layers

# Outputs of RLlib's SAC module that it names without a constant.
LOGP_RESAMPLED = "logp_resampled"
LOGP_NEXT_RESAMPLED = "logp_next_resampled"
Q_CURR = "q_curr"
# ReLo: each target critic's Q(s, a) on the batch's own state and action
# (a list, one tensor per target critic; no gradients).
Q_TARGET_CURR = "q_target_curr"


def sac_update_blocker(learner) -> Optional[str]:
    """Why `learner` cannot take `one_backward_sac_update`, or None."""
    reason = plain_gradient_step_blocker(learner)
    if reason is not None:
        return reason
    for module_id in learner.module.keys():
        module = learner.module[module_id].unwrapped()
        if not isinstance(module, DefaultSACRLModule):
            return f"module {module_id!r} is not an RLlib SAC module"
        if not isinstance(module.action_space, gym.spaces.Box):
            return f"module {module_id!r} has no Box actions"
    return None


def one_backward_sac_update(
    learner,
    batch: Dict[str, Any],
    networks: Dict[int, SACNetworks],
    *,
    target_on_taken_actions: bool = False,
) -> Tuple[Any, Any, Any]:
    """SACTorchLearner's `_update(batch)` with one backward pass (see the
    module docstring). `networks` caches each module's `SACNetworks`;
    `target_on_taken_actions` (ReLo) adds `Q_TARGET_CURR` to the forward
    outputs."""
    fwd_out = {}
    for module_id, module_batch in batch.items():
        nets = sac_networks_of(learner, module_id, networks)
        fwd_out[module_id] = sac_forward_train(
            nets, module_batch, target_on_taken_actions=target_on_taken_actions
        )
    loss_per_module = learner.compute_losses(fwd_out=fwd_out, batch=batch)
    # RLlib's compute_gradients() pops the four losses kept for its four
    # backward passes; the summed loss below replaces them.
    losses_per_optimizer(learner).clear()
    step_on_summed_loss(learner, loss_per_module)
    return fwd_out, loss_per_module, {}


def sac_networks_of(learner, module_id, networks: Dict[int, SACNetworks]):
    """The `SACNetworks` of `learner`'s module `module_id`, cached in
    `networks` by module."""
    module = learner.module[module_id].unwrapped()
    nets = networks.get(id(module))
    if nets is None:
        nets = networks[id(module)] = SACNetworks(module)
    return nets


def step_on_summed_loss(learner, loss_per_module: Dict[Any, Any]) -> None:
    """One `backward()` of the modules' summed losses, the gradients averaged
    over the Learners that share a process group, then the Learner's
    clipping (`postprocess_gradients`) and optimizer steps."""
    total = sum(
        loss for module_id, loss in loss_per_module.items() if module_id != ALL_MODULES
    )
    gradients = gradients_of(total, learner_parameters(learner))
    if learners_share_process_group(learner):
        average_over_learners(list(gradients.values()))
    learner.apply_gradients(learner.postprocess_gradients(gradients))


def sac_forward_train(
    nets: SACNetworks,
    batch: Dict[str, Any],
    *,
    target_on_taken_actions: bool = False,
) -> Dict[str, Any]:
    """`DefaultSACTorchRLModule._forward_train_continuous`, the policy pass on
    `s'` without autograd (its outputs are detached there); with
    `target_on_taken_actions` (ReLo) also each target critic's Q(s, a)
    (`Q_TARGET_CURR`), from the target pass's own calls."""
    obs, next_obs = batch[Columns.OBS], batch[Columns.NEXT_OBS]
    output = {}
    pi_logits = nets.policy(obs)
    with torch.no_grad():
        pi_logits_next = nets.policy(next_obs)
    actions = batch[Columns.ACTIONS]
    output[QF_PREDS] = nets.q(*nets.critics[0], obs, actions)
    if len(nets.critics) > 1:
        output[QF_TWIN_PREDS] = nets.q(*nets.critics[1], obs, actions)
    output[Columns.ACTION_DIST_INPUTS] = pi_logits
    output[ACTION_DIST_INPUTS_NEXT] = pi_logits_next
    # The same draws in the same order as RLlib's: s first, then s'.
    actions, output[LOGP_RESAMPLED] = nets.draw(pi_logits, reparameterized=True)
    actions_next, logp_next = nets.draw(pi_logits_next, reparameterized=False)
    output[LOGP_NEXT_RESAMPLED] = logp_next.detach()
    output[Q_CURR] = frozen_critics_min_q(nets, obs, actions)
    with torch.no_grad():
        if target_on_taken_actions:
            output[QF_TARGET_NEXT], output[Q_TARGET_CURR] = target_q_next_and_taken(
                nets, next_obs, actions_next.detach(), obs, batch[Columns.ACTIONS]
            )
        else:
            output[QF_TARGET_NEXT] = nets.min_q(
                nets.target_critics, next_obs, actions_next.detach()
            )
    return output


def frozen_critics_min_q(nets: SACNetworks, obs: torch.Tensor, actions: torch.Tensor):
    """`min_k Q_k(s, a)` of the online critics with their weights frozen: the
    policy loss's critic term, whose gradient flows into `actions` only."""
    for param in nets.critic_parameters:
        param.requires_grad = False
    try:
        return nets.min_q(nets.critics, obs, actions)
    finally:
        for param in nets.critic_parameters:
            param.requires_grad = True


def target_q_next_and_taken(
    nets: SACNetworks,
    next_obs: torch.Tensor,
    next_actions: torch.Tensor,
    obs: torch.Tensor,
    actions: torch.Tensor,
):
    """`(min_k Qbar_k(s', a'), [Qbar_k(s, a) for each k])`: each target critic
    runs once on the rows `[(s', a'); (s, a)]` (see the module docstring); the
    min over the twins is `min_q`'s, in its order. Call without gradients."""
    rows = next_obs.shape[0]
    both_obs = torch.cat([next_obs, obs])
    both_actions = torch.cat([next_actions, actions])
    per_critic = [
        nets.q(encoder, head, both_obs, both_actions)
        for encoder, head in nets.target_critics
    ]
    q_next = per_critic[0][:rows]
    for q in per_critic[1:]:
        q_next = torch.min(q_next, q[:rows])
    return q_next, [q[rows:] for q in per_critic]


class SACNetworks:
    """A SAC module's policy and critic passes. Plain MLP encoders and heads
    run their layers directly (`run_mlp_layers`: the same ops without the
    module-call overhead); anything else goes through the module's own calls."""

    def __init__(self, module):
        self.module = module
        self._policy_layers = encoder_head_layers_of(module.pi_encoder, module.pi)
        # Our SAC module's critics take `[s, a]` as one input; RLlib's own
        # multi-stream critics go through the module's critic helper.
        self._concat_critics = isinstance(module, SACTorchRLModule)
        self._critic_layers = {}
        self._squashed_gaussian = (
            module.get_train_action_dist_cls() is TorchSquashedGaussian
        )
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
        if self._squashed_gaussian:
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
            return run_mlp_layers(self._policy_layers, obs)
        module = self.module
        return module.pi(module.pi_encoder({Columns.OBS: obs})[ENCODER_OUT])

    def q(self, encoder, head, obs: torch.Tensor, actions: torch.Tensor):
        """One critic's Q(s, a), as the module's critic helper computes it."""
        key = id(encoder)
        layers = self._critic_layers.get(key, False)
        if layers is False:
            layers = None
            if self._concat_critics:
                layers = encoder_head_layers_of(encoder, head)
            self._critic_layers[key] = layers
        if layers is None:
            return sac_critic_pass(self.module, encoder, head, obs, actions)
        return run_mlp_layers(layers, torch.cat([obs, actions], dim=-1)).squeeze(-1)
