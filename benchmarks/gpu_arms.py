"""What `benchmarks/gpu.py`'s arms add to `peers.py`'s: an arm name's device
and switches (`on_device`), floors whose updates run on the GPU, and how an
arm's Learner made its updates with `cuda_graph_updates` (`HostFramesArm`, an
RLlibArm, lives with it in `peers.py`)."""

from __future__ import annotations

from typing import Tuple

from baselines import FloorArm


def synchronize() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def on_device(config, name: str):
    """`config` as a `gpu.py` arm's name asks (`<replay>-<device>[-graph]
    [-act]`): the Learner on the GPU (`-gpu`) or the CPU (`-cpu`), updates
    replayed from CUDA graphs, acting on the Learner's device. A `peers.py`
    arm's name (no device) leaves it as it is."""
    device = name.split("-")[1] if "-" in name else None
    if device not in ("cpu", "gpu"):
        return config
    config = config.training(
        cuda_graph_updates="-graph" in name,
        act_on_learner_device=name.endswith("-act"),
    )
    return config.learners(num_gpus_per_learner=1 if device == "gpu" else 0)


class DeviceFloorArm(FloorArm):
    """A floor whose update runs asynchronously on the GPU: each chunk waits for
    its last kernel, so the chunk's time holds all of its work."""

    def run(self, steps: int) -> Tuple[int, int]:
        counts = super().run(steps)
        synchronize()
        return counts


def graph_captured(update):
    """`update` captured once in a CUDA graph (after warm-up passes on a side
    stream, as torch.cuda.graphs requires); returns the graph's replay."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            update()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        update()
    return graph.replay


def graph_status(arm) -> str:
    """How an arm's Learner made its updates with `cuda_graph_updates`: its
    captures and replays, or why it updated eagerly; "" for other arms."""
    algo = getattr(arm, "algo", None)
    if algo is None or not algo.config.cuda_graph_updates:
        return ""
    from rllib_ners.algorithms.common.learner.cuda_graph_updates import (
        cuda_graph_update_blocker,
    )
    from rllib_ners.seam.algorithm import local_learner_of

    learner = local_learner_of(algo.learner_group)
    if learner.update_graphs is None:
        return f"no CUDA graphs: {cuda_graph_update_blocker(learner)}"
    graphs = learner.update_graphs
    status = (
        f"CUDA graphs: {graphs.num_captures} captured, {graphs.num_replays} replays"
    )
    if graphs.disabled_because is not None:
        status += f"; then eager: {graphs.disabled_because}"
    return status
