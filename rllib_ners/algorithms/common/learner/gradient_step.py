"""The gradient step of this package's torch Learners: RLlib's, with fewer passes.

`FastTorchLearner` (`fast_torch_learner`) gives this package's Learners RLlib's
gradient step (`compute_gradients`, the clipping in `postprocess_gradients`,
`apply_gradients`) with the same results and less per-tensor work, from the
functions here:

* gradients cleared by setting them to None and one `backward()` of the summed
  loss (`gradients_of`), without `zero_grad`'s profiler record per optimizer;
* clipping by global norm with multi-tensor kernels (`clip_gradients_foreach`:
  RLlib's formula, the same values bit for bit);
* one fused nan/inf check of all gradients (`all_finite`) instead of RLlib's
  `torch.isfinite(grad).all()` per tensor (a host sync each); all finite ->
  the optimizers step directly (`step_optimizers`: fused Adams in one kernel
  call); anything else -> RLlib's own `apply_gradients`, with its exact
  nan/inf handling.

On a GPU each value read on the host (`.item()`, `bool(tensor)`) waits for
every kernel queued before it, so the host stops feeding the device. There
the step reads nothing: the clip coefficient is RLlib's tensor formula, and
instead of checking the gradients the step applies what RLlib does to
non-finite ones, `nan_to_num` in place (a no-op on finite values), and counts
the updates that had any under `NUM_NON_FINITE_GRADIENT_UPDATES`, read with
the other metrics once per iteration (`gradient_step_without_host_reads`).
The values equal RLlib's step within float tolerance (the GPU's own
arithmetic); RLlib warns in its log at each such update instead.

Mixed precision and torch LR schedulers take RLlib's step unchanged.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import numpy as np
import torch
from ray.rllib.core import ALL_MODULES
from ray.rllib.utils.torch_utils import clip_gradients
from ray.rllib.utils.typing import ParamDict

from rllib_ners.seam.torch_internals import (
    foreach_mul_,
    foreach_norms,
    has_non_finite,
    non_finite_flag,
)

# RLlib's `clip_gradients`: the epsilon added to the total norm before it
# divides the clip, and the values non-finite norms are mapped to.
CLIP_NORM_EPSILON = 1e-6
NONFINITE_NORM_STANDIN = 10e8
# Learner metric under ALL_MODULES, on Learners that step without host reads:
# the updates of the iteration whose gradients held a nan or inf (set to
# finite values as RLlib does).
NUM_NON_FINITE_GRADIENT_UPDATES = "num_non_finite_gradient_updates"


def reads_on_host(tensors: Sequence[torch.Tensor]) -> bool:
    """Whether the gradient step may read `tensors`' values on the host
    without stalling a device: they live in host memory."""
    return tensors[0].device.type == "cpu"


def gradients_of(loss: torch.Tensor, parameters: Dict[Any, torch.Tensor]) -> ParamDict:
    """`zero_grad(set_to_none=True)` on `parameters`, `loss.backward()`, and
    their gradients under the same keys."""
    for param in parameters.values():
        param.grad = None
    loss.backward()
    return {key: param.grad for key, param in parameters.items()}


def clip_gradients_foreach(
    gradients_dict: ParamDict,
    *,
    grad_clip=None,
    grad_clip_by: str = "value",
    host_reads: Optional[bool] = None,
):
    """RLlib's `clip_gradients`, with multi-tensor kernels for
    `grad_clip_by="global_norm"` (the same per-tensor norms, total norm,
    coefficient and products; tested equal bit for bit).

    With `host_reads` (default: for CPU tensors, `reads_on_host`) and a
    finite float32 total norm the coefficient is RLlib's float32 arithmetic
    done on the host, and a coefficient of 1 skips the products (x * 1.0 is
    x). Otherwise RLlib's tensor ops run, with no host read. Returns the
    total norm.
    """
    grads = [grad.detach() for grad in gradients_dict.values() if grad is not None]
    if grad_clip is None or grad_clip_by != "global_norm" or not grads:
        return clip_gradients(
            gradients_dict, grad_clip=grad_clip, grad_clip_by=grad_clip_by
        )
    norms = torch.stack(foreach_norms(grads))
    if host_reads is None:
        host_reads = reads_on_host(grads)
    if host_reads and norms.dtype == torch.float32:  # float32 arithmetic below
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


def gradient_step_without_host_reads(
    grads: Sequence[torch.Tensor], *, skip_nan_gradients: bool
) -> Optional[torch.Tensor]:
    """What RLlib's `apply_gradients` does to `grads` before the optimizers
    step, with no value read on the host: nan -> 0 and +-inf -> the dtype's
    largest finite values, in place (unless `skip_nan_gradients`, RLlib's
    `torch_skip_nan_gradients`, with which RLlib steps on them as they are).
    Returns a 0/1 tensor on their device, 1 where any held a nan or inf (None
    where torch has no fused check for their device and dtype)."""
    found = non_finite_flag(grads)
    if not skip_nan_gradients:
        for grad in grads:
            torch.nan_to_num(grad, out=grad)
    return found


def learner_reads_on_host(learner, grads: Sequence[torch.Tensor]) -> bool:
    """The Learner's `host_reads` setting, or by default whether its
    gradients are in host memory (`reads_on_host`)."""
    if learner.host_reads is not None:
        return learner.host_reads
    return not grads or reads_on_host(grads)


def finite_gradients_without_host_reads(
    learner, grads: Sequence[torch.Tensor], *, skip_nan_gradients: bool
) -> None:
    """`gradient_step_without_host_reads` on a Learner's gradients, counting
    the updates that had nan/inf under `NUM_NON_FINITE_GRADIENT_UPDATES`."""
    found = gradient_step_without_host_reads(
        grads, skip_nan_gradients=skip_nan_gradients
    )
    if found is not None:
        learner.metrics.log_value(
            (ALL_MODULES, NUM_NON_FINITE_GRADIENT_UPDATES), found, reduce="sum"
        )
