"""Averaging over the Learners of one torch process group (several Learners).

DDP averages the RLModule's gradients during `backward()`; what DDP does not
see (SAC's temperature, the NERS scorer, the one-backward SAC update's
gradients) is averaged here, the same way: summed over the Learners, divided
by their number.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.distributed as dist


def learners_share_process_group(learner) -> bool:
    """Whether `learner` is one of several Learners in a torch process group."""
    return (
        learner.distributed
        and dist.is_available()
        and dist.is_initialized()
        and dist.get_world_size() > 1
    )


def average_over_learners(tensors: Sequence[torch.Tensor]) -> None:
    """Replaces each tensor by its mean over the Learners of the process
    group, in place, with one all-reduce of all of them."""
    tensors = [tensor for tensor in tensors if tensor is not None]
    if not tensors:
        return
    flat = torch.cat([tensor.reshape(-1) for tensor in tensors])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat /= dist.get_world_size()
    offset = 0
    for tensor in tensors:
        size = tensor.numel()
        tensor.copy_(flat[offset : offset + size].view_as(tensor))
        offset += size


def sum_over_learners(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` summed over the Learners of the process group, in place."""
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor
