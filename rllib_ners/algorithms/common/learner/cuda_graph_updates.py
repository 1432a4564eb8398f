"""Learner updates replayed from CUDA graphs (`cuda_graph_updates=True`).

With the setting on, a Learner on a CUDA device makes the gradient updates of
this package's training loop (`FastTorchLearner`) through
`rllib_ners.utils.update_graphs.UpdateGraphs`: a few eager updates, then each
update replayed from a captured CUDA graph (forward pass, losses, backward
pass, clipping, optimizer steps) with one launch instead of a few hundred.
Target-network updates, metrics flushing and priorities stay eager.

The Learner's optimizers become capturable (Adam keeps its step count on the
device, which its fused kernel reads there anyway). The replayed updates equal
the eager ones within the GPU's float tolerance: the same kernels on the same
values, random draws included (a graph draws from the default generator's
current offset as eager code does). Tested with the eager stand-in graph on the
CPU (`tests/integration/test_cuda_graph_updates.py`: the same weights, buffer,
returns and metrics as the eager updates) and on CUDA in the `gpu` suite.

Learners and configs a graph cannot serve update eagerly and say why in one
INFO log line (`cuda_graph_update_blocker`): a Learner not on CUDA, several
Learners (their all-reduce), a torch-compiled update, mixed precision, torch LR
schedulers, the gradient step reading values on the host (`host_reads=True`),
optimizers other than Adam, NERS scoring with image encodings cached at the
user's request (`cache_encodings=True`; the cache's lookups and stores keep
host-side bookkeeping), a batch carrying `weights_seq_no` (the off-policyness
metric reads a host counter). NERS scoring otherwise is captured with the
update: the scorer's forward pass and its running statistics (updated in
place, nothing read on the host); its REINFORCE step stays eager. With
`cache_encodings=None` (the default), a Learner that captures its updates drops
the cache and encodes image observations inside the graph, said once in the
log.
Learning-rate schedules and restored optimizer states are caught before each
replay (`UpdateGraphs` fingerprint), restores by `set_state`.
"""

from __future__ import annotations

import logging
from typing import Hashable, Optional

import torch

from rllib_ners.algorithms.common.learner.distributed import (
    learners_share_process_group,
)
from rllib_ners.algorithms.common.learner.replay_methods import uses_laber_replay
from rllib_ners.algorithms.common.learner.update_step import plain_gradient_step_blocker
from rllib_ners.seam.learner import (
    learner_optimizers,
)
from rllib_ners.utils.update_graphs import CudaUpdateGraph, UpdateGraphs

logger = logging.getLogger(__name__)

CAPTURABLE_OPTIMIZERS = (torch.optim.Adam, torch.optim.AdamW)


def cuda_graph_update_blocker(learner) -> Optional[str]:
    """Why `learner`'s updates cannot be replayed from CUDA graphs, or None."""
    if learner.make_update_graph is CudaUpdateGraph and learner.device.type != "cuda":
        return f"the Learner is on {learner.device}, not a CUDA device"
    if learners_share_process_group(learner) or learner.distributed:
        return "it is one of several Learners (their all-reduce runs outside a graph)"
    reason = plain_gradient_step_blocker(learner)
    if reason is not None:
        return reason
    if learner.host_reads:
        return "host_reads=True: the gradient step reads values on the host"
    if uses_laber_replay(learner.config):
        return (
            "LaBER's sub-sample is drawn on the host between the scoring pass and "
            "the gradient step (a graph would replay the captured draw)"
        )
    ners = learner.ners  # `FastTorchLearner`'s NERS part, or None
    if (
        ners is not None
        and ners.encoding_cache is not None
        and ners.settings.cache_encodings
    ):
        return (
            "the NERS encoding cache looks up and stores encodings with host-side "
            "bookkeeping (cache_encodings=True; None, the default, encodes inside "
            "the captured update)"
        )
    for optimizer in learner_optimizers(learner):
        if type(optimizer) not in CAPTURABLE_OPTIMIZERS:
            return f"optimizer {type(optimizer).__name__} is not Adam or AdamW"
    return None


def make_capturable(optimizers, *, capturable: bool = True) -> None:
    """Sets `capturable` on every param group of the Adams among `optimizers`:
    Adam then keeps its step count on the parameters' device and reads nothing
    on the host in its step (False: back to the default, e.g. for a state
    saved by a Learner that captured its updates)."""
    for optimizer in optimizers:
        if type(optimizer) not in CAPTURABLE_OPTIMIZERS:
            continue
        for group in optimizer.param_groups:
            group["capturable"] = capturable
        if not capturable:
            continue
        for param, state in optimizer.state.items():
            step = state.get("step")
            if torch.is_tensor(step) and step.device != param.device:
                state["step"] = step.to(param.device)


def optimizers_fingerprint(learner) -> Hashable:
    """What a captured update baked in of the Learner's optimizers: their
    state objects and learning rates."""
    return tuple(
        (id(optimizer.state), tuple(group["lr"] for group in optimizer.param_groups))
        for optimizer in learner_optimizers(learner)
    )


def build_update_graphs(learner) -> Optional[UpdateGraphs]:
    """The `UpdateGraphs` that replay `learner`'s updates, where
    `config.cuda_graph_updates` asks for them and the Learner allows
    (`cuda_graph_update_blocker`, else said in one log line); None otherwise.
    Makes the Learner's optimizers capturable; with the NERS image encoding
    cache at its default, drops the cache (said once)."""
    if not getattr(learner.config, "cuda_graph_updates", False):
        return None
    reason = cuda_graph_update_blocker(learner)
    if reason is not None:
        logger.info(
            "%s: cuda_graph_updates=True, but updates run eagerly: %s.",
            type(learner).__name__,
            reason,
        )
        return None
    ners = learner.ners
    if ners is not None and ners.encoding_cache is not None:
        # Its lookups keep host-side bookkeeping that no graph replays; the
        # image encoder's pass runs inside the graph instead (the same
        # encodings within float tolerance).
        ners.encoding_cache = None
        logger.info(
            "%s: cuda_graph_updates=True: NERS scoring encodes each replayed "
            "batch inside the captured update instead of caching image "
            "encodings (config.ners(cache_encodings=True) keeps the cache "
            "and updates eagerly).",
            type(learner).__name__,
        )
    make_capturable(learner_optimizers(learner))
    return UpdateGraphs(
        fingerprint=lambda: optimizers_fingerprint(learner),
        make_graph=learner.make_update_graph,
        name=type(learner).__name__,
    )
