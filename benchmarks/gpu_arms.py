"""The arms of `benchmarks/gpu.py`'s sac and atari suites: `peers.py`'s, with
the Learner (or the floor's update) on the first CUDA device for `-gpu` arms."""

from __future__ import annotations

from typing import Dict, List, Tuple

import baselines
from baselines import FloorArm, SB3Arm
from harness import Arm
from peers import RLlibArm


def synchronize() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


# ------------------------------------------------------------------ arms
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


def _on_learner_device(config, device: str):
    return config.learners(num_gpus_per_learner=1 if device == "gpu" else 0)


def sac_arms(names: List[str], steps: int) -> Dict[str, Arm]:
    import gymnasium as gym

    from rllib_ners.algorithms.ners_sac.presets import sac_config

    env = gym.make(baselines.SAC_ENV)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    arms: Dict[str, Arm] = {}
    for name in names:
        kind, device = name.split("-", 2)[:2]
        if kind == "sb3":
            torch_device = "cuda" if device == "gpu" else "cpu"
            arms[name] = SB3Arm(
                lambda d=torch_device: baselines.sb3_sac(d),
                baselines.SAC_LEARNING_STARTS,
                baselines.SAC_BATCH,
            )
        elif kind == "floor":
            update = baselines.sac_floor_update(
                obs_dim,
                act_dim,
                device="cuda",
                capturable=name.endswith("graph"),
            )
            if name.endswith("graph"):
                try:
                    update = graph_captured(update)
                except Exception as error:  # report it; the other arms still run
                    print(f"{name} left out: graph capture failed: {error!r}")
                    continue
            arms[name] = DeviceFloorArm(
                lambda: gym.make(baselines.SAC_ENV), update, every=1
            )
        else:
            config = sac_config(
                baselines.SAC_ENV,
                replay=kind,
                learning_starts=baselines.SAC_LEARNING_STARTS,
            )
            config = config.training(
                cuda_graph_updates="-graph" in name,
                act_on_learner_device=name.endswith("-act"),
            )
            arms[name] = RLlibArm(
                _on_learner_device(config, device), steps, baselines.SAC_BATCH
            )
    return arms


def atari_arms(names: List[str], steps: int) -> Dict[str, Arm]:
    from rllib_ners.algorithms.rainbow.presets import atari_data_efficient_rainbow
    from rllib_ners.env.atari import make_atari_env

    arms: Dict[str, Arm] = {}
    for name in names:
        kind, device = name.split("-")[:2]
        if kind == "floor":
            config = atari_data_efficient_rainbow(baselines.ATARI_GAME, replay="per")
            arms[name] = DeviceFloorArm(
                lambda: make_atari_env({"game": baselines.ATARI_GAME}),
                baselines.atari_floor_update(_on_learner_device(config, device)),
                every=1,
            )
        else:
            config = atari_data_efficient_rainbow(
                baselines.ATARI_GAME,
                replay=kind,
                learning_starts=baselines.ATARI_LEARNING_STARTS,
            ).training(
                cuda_graph_updates="-graph" in name,
                act_on_learner_device=name.endswith("-act"),
            )
            arm_class = HostFramesArm if name.endswith("-hostframes") else RLlibArm
            arms[name] = arm_class(
                _on_learner_device(config, device), steps, baselines.ATARI_BATCH
            )
    return arms


class HostFramesArm(RLlibArm):
    """The algorithm without the GPU copy of its buffer's frames: sampled
    frame stacks built on the host and copied to the Learner, as before
    `device_frames`."""

    def build(self):
        algo = super().build()
        algo.local_replay_buffer.device_frames = None
        return algo


BUILDERS = {"sac": sac_arms, "atari": atari_arms}
