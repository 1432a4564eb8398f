"""The local EnvRunner acting with the local Learner's weights, without copies.

With `num_env_runners=0` and `num_learners=0` the EnvRunner and the Learner
live in the Algorithm's process, each with its own copy of the RLModule, and
RLlib copies the Learner's weights into the EnvRunner after every training
step: `LearnerGroup.get_state()`, `ray.put()` and `set_state()`, several
milliseconds for a small network. Sharing the parameter tensors makes that
copy unnecessary: the EnvRunner's module then always holds exactly the weights
the copy would have brought (the optimizers update the shared tensors in place,
and nothing acts between an update and the copy that follows it).

Parameters are shared; the few persistent buffers a module may have (e.g. a
constant in RLlib's SAC policy head) are copied after every round with updates,
as RLlib's copy would bring them. A module whose parameters or buffers the
Learner's module lacks keeps RLlib's copy.

A Learner on another device (a GPU) cannot lend its tensors to the EnvRunner,
which acts on the CPU. RLlib's copy then moves every parameter tensor on its
own: one device-to-host copy and one host wait each, after every training
step, which at one update per env step is most of a GPU run's stalls.
`MirroredWeights` keeps the EnvRunner's parameters as views into one flat host
tensor and refreshes it with one transfer: the Learner's parameters
concatenated on their device, copied into it at once. The EnvRunner then acts
with exactly the Learner's current weights, as after RLlib's copy.

With `act_on_learner_device=True` the EnvRunner's module moves to the
Learner's GPU instead and shares its tensors there (`SharedWeights`): no copy
at all, and a convolutional module's batch-1 forward pass runs on the GPU
(RLlib keeps a local EnvRunner on the CPU). Only the fast EnvRunner's sampling
puts the module's inputs on its device; with RLlib's connector pipelines the
EnvRunner keeps acting on the CPU.
"""

from __future__ import annotations

import logging
from typing import List, Optional, Tuple, Union

import torch
from ray.rllib.core import DEFAULT_MODULE_ID

from rllib_ners.env.acting_graphs import ActingGraph, acting_graph_blocker
from rllib_ners.seam.env_runner import set_runner_device, set_runner_weights_seq_no
from rllib_ners.seam.learner import weights_seq_no
from rllib_ners.seam.torch_modules import persistent_buffers

logger = logging.getLogger(__name__)


def local_learner(algo):
    """The Algorithm's Learner when it runs in this process, else None."""
    learner_group = algo.learner_group
    if learner_group is None or learner_group.is_remote:
        return None
    results = learner_group.foreach_learner(lambda learner: learner)
    return next(iter(results)).get()


class SharedWeights:
    """The local EnvRunner's module, acting with the local Learner's parameters.

    `refresh()` does the rest of what RLlib's weight sync does: it copies the
    persistent buffers (`buffer_pairs`: `(acting, learning)` tensors) and sets
    the EnvRunner's weights seq no (stored with every step it samples) to the
    Learner's.
    """

    def __init__(
        self,
        runner,
        learner,
        buffer_pairs: List[Tuple[torch.Tensor, torch.Tensor]],
    ):
        self.runner = runner
        self.learner = learner
        self.buffer_pairs = buffer_pairs

    def refresh(self) -> None:
        with torch.no_grad():
            for acting, learning in self.buffer_pairs:
                acting.copy_(learning)
        set_runner_weights_seq_no(self.runner, weights_seq_no(self.learner))


class MirroredWeights(SharedWeights):
    """The local EnvRunner's module, acting with a copy of the parameters of a
    local Learner on another device, refreshed in one transfer.

    `param_pairs`: `(acting, learning)` parameters of one dtype, the acting
    ones on one device and the learning ones on another. The acting parameters
    become views into one flat tensor (pinned host memory where the Learner is
    on a GPU); `refresh()` concatenates the learning parameters on their
    device and copies them into it in one transfer, then does what
    `SharedWeights.refresh()` does.
    """

    def __init__(
        self,
        runner,
        learner,
        param_pairs: List[Tuple[torch.Tensor, torch.Tensor]],
        buffer_pairs: List[Tuple[torch.Tensor, torch.Tensor]],
    ):
        super().__init__(runner, learner, buffer_pairs)
        self.sources = [learning for _, learning in param_pairs]
        acting_device = param_pairs[0][0].device
        self.flat = torch.empty(
            sum(source.numel() for source in self.sources),
            dtype=self.sources[0].dtype,
            device=acting_device,
            pin_memory=(
                acting_device.type == "cpu" and self.sources[0].device.type == "cuda"
            ),
        )
        offset = 0
        for acting, learning in param_pairs:
            size = learning.numel()
            acting.data = self.flat[offset : offset + size].view_as(acting)
            offset += size

    def refresh(self) -> None:
        with torch.no_grad():
            self.flat.copy_(torch.cat([source.reshape(-1) for source in self.sources]))
        super().refresh()


def share_weights_with_local_env_runner(
    algo, *, mirror: bool = False
) -> Union[SharedWeights, str]:
    """Makes the local EnvRunner's module use the local Learner's parameter
    tensors, or mirror them where the Learner is on another device (with
    `mirror=True` also on the same device: what a GPU Learner's EnvRunner
    gets, testable on the CPU). Returns the `SharedWeights` or
    `MirroredWeights`, or why neither works (RLlib's copy then stays)."""
    if algo.config.num_env_runners > 0:
        return "remote EnvRunners act (they need the weights sent)"
    runner = algo.env_runner_group.local_env_runner if algo.env_runner_group else None
    if runner is None or getattr(runner, "module", None) is None:
        return "there is no local EnvRunner with an RLModule"
    learner = local_learner(algo)
    if learner is None:
        return "the Learner runs in its own process"
    if algo.config.is_multi_agent:
        return "the config is multi-agent"
    acting = runner.module
    learning = learner.module[DEFAULT_MODULE_ID].unwrapped()
    if not isinstance(acting, torch.nn.Module):
        return "the RLModule is not a torch module"
    if getattr(algo.config, "act_on_learner_device", False):
        _act_on_learner_device(
            runner,
            learner,
            graphs=getattr(algo.config, "cuda_graph_updates", False),
        )
    param_pairs = _matching_tensors(
        acting.named_parameters(), dict(learning.named_parameters()), "parameter"
    )
    if isinstance(param_pairs, str):
        return param_pairs
    buffer_pairs = _matching_tensors(
        persistent_buffers(acting), dict(persistent_buffers(learning)), "buffer"
    )
    if isinstance(buffer_pairs, str):
        return buffer_pairs
    if not param_pairs:
        return "the RLModule has no parameters"
    same_device = all(
        acting.device == learning.device for acting, learning in param_pairs
    )
    if same_device and not mirror:
        for param, source in param_pairs:
            param.data = source.data
        weights = SharedWeights(runner, learner, buffer_pairs)
    else:
        why_not = _why_not_mirrored(param_pairs)
        if why_not is not None:
            return why_not
        weights = MirroredWeights(runner, learner, param_pairs, buffer_pairs)
    weights.refresh()
    return weights


def _act_on_learner_device(runner, learner, *, graphs: bool) -> None:
    """Moves the local EnvRunner's module to the Learner's device where its
    sampling loop feeds the module there (else says why, once); with `graphs`
    (`cuda_graph_updates=True`) its exploration passes replay from CUDA graphs
    where the module allows (`rllib_ners.env.acting_graphs`), said in one log
    line either way."""
    device = learner.device
    if device.type == "cpu":
        return  # already where the Learner is
    if not getattr(runner, "uses_fast_sampling", False):
        logger.info(
            "act_on_learner_device=True, but the local EnvRunner acts on the CPU: "
            "it samples through RLlib's connector pipelines, which put the "
            "module's inputs on the CPU (use FastSingleAgentEnvRunner)."
        )
        return
    set_runner_device(runner, device)
    logger.info("The local EnvRunner acts on the Learner's %s.", device)
    if not graphs:
        return
    reason = acting_graph_blocker(runner.module)
    if reason is not None:
        logger.info(
            "cuda_graph_updates=True, but the local EnvRunner's exploration "
            "passes run eagerly: %s.",
            reason,
        )
        return
    runner.acting_graph = ActingGraph(runner.module)
    logger.info(
        "The local EnvRunner's exploration passes replay from CUDA graphs "
        "(cuda_graph_updates=True)."
    )


def _matching_tensors(named_acting, learning_by_name, kind: str):
    """`(acting, learning)` tensor pairs by name, or why they do not match in
    shape and dtype."""
    pairs = []
    for name, tensor in named_acting:
        source = learning_by_name.get(name)
        if source is None:
            return f"the Learner's module has no {kind} {name!r}"
        if source.shape != tensor.shape or source.dtype != tensor.dtype:
            return f"{kind} {name!r} differs in shape or dtype"
        pairs.append((tensor, source))
    return pairs


def _why_not_mirrored(param_pairs) -> Optional[str]:
    """Why `MirroredWeights` cannot serve `param_pairs` (one flat copy needs
    one dtype, one source device and one target device), or None."""
    for side, tensors in (
        ("EnvRunner's", [acting for acting, _ in param_pairs]),
        ("Learner's", [learning for _, learning in param_pairs]),
    ):
        first = tensors[0]
        if any(t.device != first.device or t.dtype != first.dtype for t in tensors):
            return f"the {side} parameters span several devices or dtypes"
    return None
