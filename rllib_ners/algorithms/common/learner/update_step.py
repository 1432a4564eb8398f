"""TorchLearner's update step with the modules kept in training mode.

RLlib's `TorchLearner._update` runs `module.forward_train(batch)`, whose
`train()` call walks every submodule at every update (for a small network
about as long as the forward pass). `update_in_training_mode` makes the same
step (off-policyness metrics, forward pass, losses, gradients, clipping,
optimizer steps) with each module switched to training mode once. A Learner
that is one of several (DDP) or whose update is torch-compiled takes RLlib's
step (`rllib_update_needed`).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from rllib_ners.seam.learner import (
    log_off_policyness,
    scales_gradients,
    uses_torch_lr_schedulers,
)
from rllib_ners.seam.rl_module import training_pass


def rllib_update_needed(learner) -> Optional[str]:
    """Why `learner` must take TorchLearner's own update step, or None."""
    if learner.distributed:
        return "it is one of several Learners (DDP wraps the forward pass)"
    if learner.config.torch_compile_learner:
        return "its update is torch-compiled"
    return None


def plain_gradient_step_blocker(learner) -> Optional[str]:
    """Why `learner`'s gradient step is not the plain one this package's own
    update paths make (a torch-compiled update, scaled gradients, torch LR
    schedulers), or None."""
    if learner.config.torch_compile_learner:
        return "the update is torch-compiled"
    if scales_gradients(learner):
        return "gradients are scaled (mixed precision)"
    if uses_torch_lr_schedulers(learner):
        return "torch LR schedulers are set"
    return None


def update_in_training_mode(learner, batch: Dict[str, Any]) -> Tuple[Any, Any, Any]:
    """`TorchLearner._update(batch)` for a single, uncompiled Learner: the same
    ops, with each module put into training mode only if it is not."""
    log_off_policyness(learner, batch)
    fwd_out = {}
    for module_id, module_batch in batch.items():
        module = learner.module[module_id]
        if not module.training:
            module.train()
        fwd_out[module_id] = training_pass(module, module_batch)
    loss_per_module = learner.compute_losses(fwd_out=fwd_out, batch=batch)
    gradients = learner.compute_gradients(loss_per_module)
    learner.apply_gradients(learner.postprocess_gradients(gradients))
    return fwd_out, loss_per_module, {}
