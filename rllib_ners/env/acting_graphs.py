"""The fast EnvRunner's exploration pass replayed from a CUDA graph.

With `act_on_learner_device=True` the local EnvRunner's module acts on the
Learner's GPU with the Learner's own parameters. Eagerly, every env step then
launches the pass's few dozen small kernels from Python (data-efficient
Rainbow: the noise draw, two convolutions, four noisy layers, the
distributional head): on the lent H200 that was slower than acting on the CPU
with a mirror of the weights (147.8 against 174.6 env steps/s,
docs/benchmarks/gpu_atari_2026-11-28_1.txt). With `cuda_graph_updates=True`
as well, `ActingGraph` replays the pass (the module's exploration forward pass
and the draw of the actions) from a captured CUDA graph: one launch per env
step, through `rllib_ners.utils.update_graphs.UpdateGraphs` (a few eager
passes, then the capture; the observations copied into the graph's static
input; the outputs the graph's own tensors, which the EnvRunner copies to the
host at once).

A graph bakes in every Python-side decision the pass made, so a module says
which decisions its exploration makes from the timestep `t` through
`exploration_graph_key(t)`: a key per decision (one graph each; TD3's random
actions before `random_timesteps`, its policy's after), or None where the pass
cannot be captured (epsilon-greedy exploration, whose epsilon the host
computes from `t` every step: that step runs eagerly). A module without the
method acts eagerly (`acting_graph_blocker`).

The graph reads the module's tensors where they were at its capture. The
Learner's optimizers update the shared parameters in place, so the pass sees
every update; where a parameter or buffer was replaced (its memory moved), the
graphs are dropped and the pass runs eagerly from then on, said once in the
log (the tensors' places are the graphs' `UpdateGraphs` fingerprint). Random
draws come from the default CUDA generator's current offset, as eager ones do:
the replayed pass equals the eager one within the GPU's float tolerance (the
`gpu` suite compares them); on the CPU `EagerStandInGraph` runs the same
schedule for tests.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any, Callable, Dict, Hashable, Optional

import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns

from rllib_ners.env.sampling_steps import actions_from_module_output
from rllib_ners.seam.rl_module import exploration_pass
from rllib_ners.utils.update_graphs import CudaUpdateGraph, UpdateGraphs

logger = logging.getLogger(__name__)

# Eager passes of each graph key before its capture (state made on first use,
# such as cuDNN's workspaces, must exist by then).
WARMUP_PASSES = 3


def acting_graph_blocker(module) -> Optional[str]:
    """Why `module`'s exploration pass cannot be replayed from a graph, or None."""
    if not isinstance(module, torch.nn.Module):
        return "the RLModule is not a torch module"
    if not callable(getattr(module, "exploration_graph_key", None)):
        return (
            f"{type(module).__name__} does not say which of its exploration's "
            f"decisions depend on the timestep (no exploration_graph_key(t) method)"
        )
    return None


class ActingGraph:
    """`explore(obs, t)`: the module's exploration pass and action draw, made
    eagerly or replayed from a captured graph (see the module docstring).

    `make_graph`: `CudaUpdateGraph` (the default) or, for tests without CUDA,
    `EagerStandInGraph`."""

    def __init__(self, module, *, make_graph: Callable[[], Any] = CudaUpdateGraph):
        reason = acting_graph_blocker(module)
        if reason is not None:
            raise ValueError(f"ActingGraph cannot serve this module: {reason}.")
        self.module = module
        # What `UpdateGraphs` records a pass's logged metrics through; acting
        # logs none.
        self.metrics = None
        self.graphs = UpdateGraphs(
            # Where the module's tensors are: a graph reads them there.
            fingerprint=self._tensor_places,
            fingerprint_change=(
                "a parameter or buffer of the module was replaced since the "
                "capture (the graph would read its old memory)"
            ),
            warmup_updates=WARMUP_PASSES,
            make_graph=make_graph,
            name=f"{type(module).__name__} acting",
            noun="acting pass",
            plural="acting passes",
        )
        self._said_eager = False

    def explore(self, obs: torch.Tensor, t: Optional[int]) -> Dict[str, Any]:
        """What `exploration_pass` and then `actions_from_module_output` give
        for `obs` at timestep `t`; replayed tensors stay valid until the next
        call."""
        key: Optional[Hashable] = self.module.exploration_graph_key(t)
        if key is None:
            if not self._said_eager:
                self._said_eager = True
                logger.info(
                    "%s: exploration passes at timestep %s run eagerly: the "
                    "module decides on the host from the timestep (e.g. "
                    "epsilon-greedy exploration).",
                    self.graphs.name,
                    t,
                )
            return self._pass(obs, t)
        return self.graphs.run(
            key,
            {DEFAULT_MODULE_ID: {Columns.OBS: obs}},
            lambda inputs: self._pass(inputs[DEFAULT_MODULE_ID][Columns.OBS], t),
            self,
        )

    @property
    def num_replays(self) -> int:
        return self.graphs.num_replays

    def _pass(self, obs: torch.Tensor, t: Optional[int]) -> Dict[str, Any]:
        out = exploration_pass(self.module, {Columns.OBS: obs}, t=t)
        return actions_from_module_output(self.module, out, explore=True)

    def _tensor_places(self) -> tuple:
        tensors = itertools.chain(self.module.parameters(), self.module.buffers())
        return tuple(tensor.data_ptr() for tensor in tensors)
