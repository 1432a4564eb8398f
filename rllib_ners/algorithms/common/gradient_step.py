"""The gradient step of this package's torch Learners: RLlib's, with fewer passes.

`FusedGradientStep` gives a `TorchLearner` subclass RLlib's gradient step
(`compute_gradients`, the clipping in `postprocess_gradients`,
`apply_gradients`) with the same results and less per-tensor work:

* gradients cleared by setting them to None and one `backward()` of the summed
  loss (`gradients_of`), without `zero_grad`'s profiler record per optimizer;
* clipping by global norm with multi-tensor kernels (`clip_gradients_foreach`:
  RLlib's formula, the same values bit for bit);
* one fused nan/inf check of all gradients (`all_finite`) instead of RLlib's
  `torch.isfinite(grad).all()` per tensor (a host sync each); all finite ->
  the optimizers step directly (`step_optimizers`: fused Adams in one kernel
  call); anything else -> RLlib's own `apply_gradients`, with its exact
  nan/inf handling.

Mixed precision and torch LR schedulers take RLlib's step unchanged.
"""

from __future__ import annotations

from typing import Any, Dict, Sequence

import numpy as np
import torch
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.annotations import override
from ray.rllib.utils.torch_utils import clip_gradients
from ray.rllib.utils.typing import ParamDict

from rllib_ners.seam.learner import (
    ClipGradientsHook,
    learner_optimizers,
    learner_parameters,
    scales_gradients,
    uses_torch_lr_schedulers,
)
from rllib_ners.seam.torch_internals import foreach_mul_, foreach_norms, has_non_finite
from rllib_ners.utils.torch_ops import step_optimizers

# RLlib's `clip_gradients`: the epsilon added to the total norm before it
# divides the clip, and the values non-finite norms are mapped to.
CLIP_NORM_EPSILON = 1e-6
NONFINITE_NORM_STANDIN = 10e8


def gradients_of(loss: torch.Tensor, parameters: Dict[Any, torch.Tensor]) -> ParamDict:
    """`zero_grad(set_to_none=True)` on `parameters`, `loss.backward()`, and
    their gradients under the same keys."""
    for param in parameters.values():
        param.grad = None
    loss.backward()
    return {key: param.grad for key, param in parameters.items()}


def clip_gradients_foreach(
    gradients_dict: ParamDict, *, grad_clip=None, grad_clip_by: str = "value"
):
    """RLlib's `clip_gradients`, with multi-tensor kernels for
    `grad_clip_by="global_norm"` (the same per-tensor norms, total norm,
    coefficient and products; tested equal bit for bit).

    With a finite float32 total norm the coefficient is RLlib's float32
    arithmetic done on the host, and a coefficient of 1 skips the products
    (x * 1.0 is x). Otherwise RLlib's tensor ops run. Returns the total norm.
    """
    grads = [grad.detach() for grad in gradients_dict.values() if grad is not None]
    if grad_clip is None or grad_clip_by != "global_norm" or not grads:
        return clip_gradients(
            gradients_dict, grad_clip=grad_clip, grad_clip_by=grad_clip_by
        )
    norms = torch.stack(foreach_norms(grads))
    if norms.dtype == torch.float32:  # the host arithmetic below is float32's
        total_norm = torch.norm(norms, 2.0)
        total = np.float32(total_norm.item())
        if np.isfinite(total):
            clip = np.float32(grad_clip)
            # RLlib: grad_clip / clamp(total + eps, min=grad_clip), the division
            # as torch's float32 reciprocal times the clip.
            bound = max(total + np.float32(CLIP_NORM_EPSILON), clip)
            coeff = (np.float32(1.0) / bound) * clip
            if coeff < 1.0:
                foreach_mul_(grads, float(coeff))
            return total_norm
    norms = norms.nan_to_num(
        neginf=-NONFINITE_NORM_STANDIN, posinf=NONFINITE_NORM_STANDIN
    )
    total_norm = torch.norm(norms, 2.0).nan_to_num(
        neginf=-NONFINITE_NORM_STANDIN, posinf=NONFINITE_NORM_STANDIN
    )
    clip_coeff = grad_clip / torch.clamp(total_norm + CLIP_NORM_EPSILON, min=grad_clip)
    foreach_mul_(grads, torch.clamp(clip_coeff, max=1.0))
    return total_norm


def all_finite(tensors: Sequence[torch.Tensor]) -> bool:
    """Whether no tensor holds a nan or inf: one fused pass where torch has the
    kernel for the tensors' device and dtype, else their total norm (finite
    exactly when they are, short of an overflow)."""
    non_finite = has_non_finite(tensors)
    if non_finite is not None:
        return not non_finite
    return bool(torch.isfinite(torch.nn.utils.get_total_norm(tensors, foreach=True)))


class FusedGradientStep(ClipGradientsHook):
    """For `TorchLearner` subclasses (list it before the TorchLearner class):
    RLlib's gradient step with fewer passes (see the module docstring)."""

    clip_gradients = staticmethod(clip_gradients_foreach)

    @override(TorchLearner)
    def compute_gradients(self, loss_per_module, **kwargs) -> ParamDict:
        if scales_gradients(self):
            return super().compute_gradients(loss_per_module, **kwargs)
        total_loss = sum(loss_per_module.values())
        if isinstance(total_loss, int) or total_loss.grad_fn is None:
            return {}  # no losses, or every parameter frozen (as RLlib)
        return gradients_of(total_loss, learner_parameters(self))

    @override(TorchLearner)
    def apply_gradients(self, gradients_dict: ParamDict) -> None:
        grads = [grad for grad in gradients_dict.values() if grad is not None]
        if (
            not grads
            or len(grads) != len(gradients_dict)
            or scales_gradients(self)
            or uses_torch_lr_schedulers(self)
            or not all_finite(grads)
        ):
            return super().apply_gradients(gradients_dict)
        parameters = learner_parameters(self)
        for pid, grad in gradients_dict.items():
            parameters[pid].grad = grad
        step_optimizers(learner_optimizers(self))
