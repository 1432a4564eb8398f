"""RLlib's `Learner` / `TorchLearner`: internals an update step reads or calls.

RLlib's `Learner.update()` wraps each gradient step in per-update bookkeeping
(a `TrainingData`, a batch iterator, a dozen metric calls and a full
`MetricsLogger.reduce()`); this package's Learners make the same gradient
step and do that bookkeeping once per iteration. To do so they read the
Learner's parameter and optimizer maps, advance its weights' sequence number
and log what `update()` logs, through the functions here. Each is pinned by
`tests/rllib_contract/test_seam_learner.py`.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List

import torch

__all__ = [
    "advance_weights_seq_no",
    "check_learner_built",
    "count_trained_env_steps",
    "learner_optimizers",
    "learner_parameters",
    "log_off_policyness",
    "log_steps_trained",
    "losses_per_optimizer",
    "scales_gradients",
    "use_clip_function",
    "uses_torch_lr_schedulers",
    "weights_seq_no",
]


def learner_parameters(learner) -> Dict[Any, torch.nn.Parameter]:
    """Every parameter the Learner's optimizers step, by RLlib's parameter
    reference (the keys of the gradient dicts RLlib passes around)."""
    return learner._params


def learner_optimizers(learner) -> List[torch.optim.Optimizer]:
    """The Learner's registered optimizers in the order `apply_gradients`
    steps them (module by module, each module's in registration order)."""
    return [
        learner.get_optimizer(module_id, optimizer_name)
        for module_id, optimizer_names in learner._module_optimizers.items()
        for optimizer_name in optimizer_names
    ]


def losses_per_optimizer(learner) -> Dict[Any, torch.Tensor]:
    """The losses a SAC Learner's `compute_loss_for_module` keeps for its
    per-optimizer backward passes, by `(module_id, loss key)`; RLlib's
    `SACTorchLearner.compute_gradients` pops them."""
    return learner._temp_losses


def scales_gradients(learner) -> bool:
    """Whether the Learner scales losses and gradients (mixed precision)."""
    return learner._grad_scalers is not None


def uses_torch_lr_schedulers(learner) -> bool:
    """Whether the Learner steps torch LR schedulers after each optimizer."""
    return learner._lr_scheduler_classes is not None


def check_learner_built(learner) -> None:
    """Raises as `Learner.update()` does if `build()` was not called."""
    learner._check_is_built()


def weights_seq_no(learner) -> int:
    """How many updates the Learner's weights have seen (RLlib's seq no, sent
    with the weights to the EnvRunners)."""
    return learner._weights_seq_no


def advance_weights_seq_no(learner) -> None:
    """What `Learner.update()` does before each gradient step."""
    learner._weights_seq_no += 1


def log_off_policyness(learner, batch: Dict[str, Any]) -> None:
    """Logs how many updates old the batch's sampling weights are, as
    `TorchLearner`'s update step does before its forward pass."""
    learner._compute_off_policyness(batch)


def log_steps_trained(learner, batch) -> None:
    """Logs the module and env steps `batch` (a `MultiAgentBatch`) trained on,
    under RLlib's keys, as `Learner.update()` does per update."""
    learner._log_steps_trained_metrics(batch)


def count_trained_env_steps(learner, num_env_steps: int) -> None:
    """Adds `num_env_steps` to Ray's Prometheus counters of trained steps (all
    modules), which `Learner.update()` increments per update."""
    learner._metrics_all_modules_num_env_steps_trained.inc(value=num_env_steps)
    learner._metrics_all_modules_num_module_steps_trained.inc(value=num_env_steps)


def use_clip_function(learner, clip_function: Callable) -> None:
    """RLlib then clips each optimizer's gradients with
    `clip_function(gradients_dict, grad_clip=..., grad_clip_by=...)` instead of
    `ray.rllib.utils.torch_utils.clip_gradients`. RLlib picks the function
    through its private `_get_clip_function()`, which the Learner instance
    now answers."""
    learner._get_clip_function = lambda: clip_function
