"""Our training loop with a GPU Learner against Stable-Baselines3 and the bare math.

The GPU counterpart of `benchmarks/peers.py`, whose arms and rules it reuses:
every arm of a suite does the same work, the arms live in one process and take
turns round by round (the order rotating), each timing one chunk of `--steps`
env steps; printed per arm: env steps/s (wall clock) and per CPU second,
updates/s and ratios, the median over the rounds. Arms whose name ends in
`-gpu` put the Learner (or the update) on the first CUDA device, `-cpu` ones
keep it on the CPU; every process runs torch on one CPU thread.

Suites
------
sac      Hopper-v5 with SAC's usual settings (as `peers.py --suite sac`).
         sb3-gpu / sb3-cpu        Stable-Baselines3 SAC on cuda / on the CPU
         per-gpu / ners-gpu       NERSSACConfig with our PER / the NERS buffer,
                                  a GPU Learner
         per-gpu-graph            per-gpu with `cuda_graph_updates=True`: its
                                  updates replayed from CUDA graphs
         ners-gpu-graph           ners-gpu with `cuda_graph_updates=True`
         per-gpu-graph-act        per-gpu-graph, the EnvRunner acting on the GPU
                                  (`act_on_learner_device=True`), its passes
                                  replayed from a CUDA graph
         per-cpu                  the same PER config, a CPU Learner
         floor-gpu                the bare SAC update on the GPU, eager
         floor-gpu-graph          the same update captured in a CUDA graph
                                  (capturable fused Adam), replayed each step
         (each floor adds bare Hopper steps with random actions)
atari    MsPacman, data-efficient Rainbow (one update of 32 per env step).
         per-gpu / ners-gpu       PER- / NERS-Rainbow, a GPU Learner
         per-gpu-graph            per-gpu with `cuda_graph_updates=True`
         per-gpu-graph-act        per-gpu-graph, the EnvRunner acting on the GPU
                                  (`act_on_learner_device=True`), its passes
                                  replayed from a CUDA graph
         per-gpu-graph-hostframes per-gpu-graph with the frame stacks built on
                                  the host and copied (no `device_frames`)
         uniform-gpu-graph        per-gpu-graph with uniform replay (alpha 0),
                                  whose priority writes wait for the round's
                                  last update (`deferred_priorities`)
         per-cpu                  PER-Rainbow, a CPU Learner
         floor-gpu                the Learner's own update on the GPU on random
                                  batches, plus bare env steps
main     The README's main job (`tuned_examples/ners_dqn/cartpole_ners_dqn.py
         --num-env-runners=0`) as separate processes, one run per arm and round:
         gpu (`--num-gpus-per-learner=1`), default (the example's own choice)
         and hidden (`CUDA_VISIBLE_DEVICES=`: no GPU visible); env steps/s is
         the median of the run's iteration rates once learning has started.
profile  A torch.profiler trace of `--steps` env steps of an arm after
         warm-up: the sac per-gpu and per-gpu-graph arms, and
         atari-per-gpu-graph (the atari suite's per-gpu-graph). Per env step:
         kernel launches, host/device copies, synchronisations and `.item()`
         calls, the GPU's busy time and the host's time waiting in
         synchronisations and copies.
runners  Rainbow with the paper's settings (`atari_rainbow`: Nature CNN, one
         update of 32 per 4 env steps; `--preset der`: data-efficient Rainbow,
         one update of 32 per env step) on MsPacman fed by `--runners` remote
         EnvRunners (default 1 2 4 8 12), for `--arms` per and ners, each
         `lockstep` (RLlib's sample-then-learn) and `overlapped`
         (`overlap_sampling=True`), plus `ceiling`: the same EnvRunners
         sampling into the buffer with no updates. The Learner on the GPU where
         there is one. Per point: env steps/s, updates/s, the Learner's busy
         share of the wall time, the fragments' weight staleness, the weight
         syncs and the driver's ms per env step in each loop section; at the
         end, what bounds each point. `--modes` picks the points,
         `--training-intensity` overrides the preset's replay ratio,
         `--weights-sync-interval K [K ...]` the overlapped points' (one each),
         `--rollout-fragment-length L [L ...]` and `--envs-per-runner E
         [E ...]` the env steps each `sample()` request carries (every point
         once per shape: the driver pays a fixed cost per request).
         Each point is its own algorithm (N EnvRunners each), measured over
         `--steps` env steps after warm-up; `--rounds R` measures each
         EnvRunner count's points R times, the order reversed every other
         round. `benchmarks/runners_plot.py` draws the output.

How to run (on the GPU machine, see `../shared/tools/gpu/README.md`)
--------------------------------------------------------------------
    python benchmarks/gpu.py --suite sac
    python benchmarks/gpu.py --suite atari --rounds 2 --steps 150
    python benchmarks/gpu.py --suite main --steps 6000
    python benchmarks/gpu.py --suite profile --steps 100
    python benchmarks/gpu.py --suite runners --runners 1 2 4 8 12 --steps 4000

Without CUDA the `-gpu` arms are left out (a dry run of the rest on the CPU).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import re
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import peers
from peers import Arm, FloorArm, RLlibArm, SB3Arm

SUITES = {
    "sac": (
        "sb3-gpu",
        "sb3-cpu",
        "per-gpu",
        "per-gpu-graph",
        "ners-gpu",
        "ners-gpu-graph",
        "per-cpu",
        "floor-gpu",
        "floor-gpu-graph",
    ),
    "atari": (
        "per-gpu",
        "per-gpu-graph",
        "per-gpu-graph-act",
        "per-gpu-graph-hostframes",
        "uniform-gpu-graph",
        "ners-gpu",
        "ners-gpu-graph",
        "per-cpu",
        "floor-gpu",
    ),
    "main": ("gpu", "default", "hidden"),
    "profile": ("per-gpu", "per-gpu-graph", "atari-per-gpu-graph"),
    "runners": ("per", "ners"),
}
DEFAULT_STEPS = {
    "sac": 200,
    "atari": 200,
    "main": 6000,
    "profile": 100,
    "runners": 4000,
}
REPO_ROOT = Path(__file__).resolve().parents[1]
MAIN_JOB = REPO_ROOT / "tuned_examples" / "ners_dqn" / "cartpole_ners_dqn.py"
# The main job's progress line: "iter    3 | env steps  3000 | ... | 628.5 steps/s |".
ITERATION_RATE = re.compile(r"^iter\s+(\d+) \|.*?\|\s*([\d.]+) steps/s", re.M)


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _synchronize() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


# ------------------------------------------------------------------ arms
class DeviceFloorArm(FloorArm):
    """A floor whose update runs asynchronously on the GPU: each chunk waits for
    its last kernel, so the chunk's time holds all of its work."""

    def run(self, steps: int) -> Tuple[int, int]:
        counts = super().run(steps)
        _synchronize()
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
    from rllib_ners.algorithms.common.cuda_graph_updates import (
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

    env = gym.make(peers.SAC_ENV)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    arms: Dict[str, Arm] = {}
    for name in names:
        kind, device = name.split("-", 2)[:2]
        if kind == "sb3":
            torch_device = "cuda" if device == "gpu" else "cpu"
            arms[name] = SB3Arm(
                lambda d=torch_device: peers._sb3_sac(d),
                peers.SAC_LEARNING_STARTS,
                peers.SAC_BATCH,
            )
        elif kind == "floor":
            update = peers.sac_floor_update(
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
                lambda: gym.make(peers.SAC_ENV), update, every=1
            )
        else:
            config = sac_config(
                peers.SAC_ENV, replay=kind, learning_starts=peers.SAC_LEARNING_STARTS
            )
            config = config.training(
                cuda_graph_updates="-graph" in name,
                act_on_learner_device=name.endswith("-act"),
            )
            arms[name] = RLlibArm(
                _on_learner_device(config, device), steps, peers.SAC_BATCH
            )
    return arms


def atari_arms(names: List[str], steps: int) -> Dict[str, Arm]:
    from rllib_ners.algorithms.rainbow.presets import atari_data_efficient_rainbow
    from rllib_ners.env.atari import make_atari_env

    arms: Dict[str, Arm] = {}
    for name in names:
        kind, device = name.split("-")[:2]
        if kind == "floor":
            config = atari_data_efficient_rainbow(peers.ATARI_GAME, replay="per")
            arms[name] = DeviceFloorArm(
                lambda: make_atari_env({"game": peers.ATARI_GAME}),
                peers.atari_floor_update(_on_learner_device(config, device)),
                every=1,
            )
        else:
            config = atari_data_efficient_rainbow(
                peers.ATARI_GAME,
                replay=kind,
                learning_starts=peers.ATARI_LEARNING_STARTS,
            ).training(
                cuda_graph_updates="-graph" in name,
                act_on_learner_device=name.endswith("-act"),
            )
            arm_class = HostFramesArm if name.endswith("-hostframes") else RLlibArm
            arms[name] = arm_class(
                _on_learner_device(config, device), steps, peers.ATARI_BATCH
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


# ------------------------------------------------------------- main job
MAIN_ARMS = {
    "gpu": (["--num-gpus-per-learner=1"], {}),
    "default": ([], {}),
    "hidden": ([], {"CUDA_VISIBLE_DEVICES": ""}),
}


def run_main_job(arm: str, steps: int) -> dict:
    """One run of the README's main job; its iteration rates once learning has
    started (from the 3rd iteration), the process's wall and CPU time."""
    flags, env = MAIN_ARMS[arm]
    command = [
        sys.executable,
        str(MAIN_JOB),
        "--num-env-runners=0",
        f"--stop-timesteps={steps}",
        *flags,
    ]
    start = time.perf_counter()
    before = os.times()
    done = subprocess.run(
        command,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    after = os.times()
    wall = time.perf_counter() - start
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise RuntimeError(f"main job ({arm}) failed:\n{output[-3000:]}")
    rates = [float(rate) for it, rate in ITERATION_RATE.findall(output) if int(it) >= 3]
    device_lines = [
        line for line in output.splitlines() if "Learner" in line and "GPU" in line
    ]
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return {
        "rate": statistics.median(rates) if rates else float("nan"),
        "wall": wall,
        "cpu": cpu,
        "note": device_lines[0].strip() if device_lines else "",
    }


def main_job_suite(names: List[str], rounds: int, steps: int) -> None:
    runs: Dict[str, List[dict]] = {name: [] for name in names}
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            run = run_main_job(name, steps)
            runs[name].append(run)
            print(
                f"round {round_index + 1} {name}: {run['rate']:.1f} env steps/s, "
                f"{run['wall']:.1f} s wall",
                flush=True,
            )
    print(
        f"\nmain: the README's main job, {steps} env steps per run, {rounds} "
        f"rounds; {_machine()}"
    )
    print("| arm | env steps/s (iter >= 3) | run wall s | driver CPU s | vs hidden |")
    print("|---|---|---|---|---|")
    hidden = statistics.median(r["rate"] for r in runs.get("hidden", [{"rate": 0}]))
    for name, results in runs.items():
        rate = statistics.median(r["rate"] for r in results)
        wall = statistics.median(r["wall"] for r in results)
        cpu = statistics.median(r["cpu"] for r in results)
        ratio = f"{rate / hidden:.2f}x" if hidden else "-"
        print(f"| {name} | {rate:.1f} | {wall:.1f} | {cpu:.1f} | {ratio} |")
    for name, results in runs.items():
        if results[0]["note"]:
            print(f"{name}: {results[0]['note']}")


# -------------------------------------------------------------- profile
# Runtime API calls that the profiler records on the host, by what they cost.
LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC")
COPIES = ("cudaMemcpyAsync", "cudaMemcpy")
SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
ITEMS = ("aten::_local_scalar_dense",)


def _blocked_ms(events, names) -> float:
    """Host milliseconds spent inside the runtime calls `names`."""
    return sum(e.cpu_time_total for e in events if e.key in names) / 1e3


def profile_suite(name: str, steps: int, out_dir: Path) -> None:
    """Counts what one env step of an arm asks of the GPU: a SAC arm (`name`
    as in --suite sac) or, prefixed "atari-", an --suite atari arm."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    if name.startswith("atari-"):
        label, arm = "data-efficient Rainbow MsPacman", atari_arms([name[6:]], steps)
    else:
        label, arm = "SAC Hopper", sac_arms([name], steps)
    arm = next(iter(arm.values()))
    try:
        arm.warm_up()
        _synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            wall0 = time.perf_counter()
            env_steps, updates = arm.run(steps)
            _synchronize()
            wall = time.perf_counter() - wall0
        status = graph_status(arm)
    finally:
        arm.close()
    events = prof.key_averages()
    counts = {
        group: sum(e.count for e in events if e.key in names)
        for group, names in (
            ("kernel launches", LAUNCHES),
            ("host/device copies", COPIES),
            ("synchronisations", SYNCS),
            (".item() calls", ITEMS),
        )
    }
    device_us = sum(
        getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0))
        for e in events
        if e.device_type == torch.autograd.DeviceType.CUDA
    )
    print(
        f"\nprofile: {label} {name}, {env_steps} env steps, {updates} updates, "
        f"{wall:.2f} s under the profiler; {_machine()}"
    )
    if status:
        print(status)
    print("| per env step | count |")
    print("|---|---|")
    for group, count in counts.items():
        print(f"| {group} | {count / env_steps:.1f} |")
    print(
        f"| GPU busy (kernels) | {device_us / 1e3 / env_steps:.3f} ms of "
        f"{1e3 * wall / env_steps:.1f} ms |"
    )
    # Where the host waits for the GPU: synchronisations, and copies (a copy
    # to pageable host memory waits for the kernels before it).
    print(
        f"| host waiting in synchronisations, copies | "
        f"{_blocked_ms(events, SYNCS) / env_steps:.3f} ms, "
        f"{_blocked_ms(events, COPIES) / env_steps:.3f} ms |"
    )
    # The host's time per section of our training loop (slowed by the profiler,
    # the same for every section): which section the GPU's waits fall in.
    peers.print_loop_sections(name, arm)
    table = events.table(sort_by="self_cpu_time_total", row_limit=40)
    path = out_dir / f"profile_{name.replace('-', '_')}.txt"
    path.write_text(table)
    print(f"top ops by host time: {path}")


# -------------------------------------------------------------- runners
# The ceiling first: it is the bound of the same EnvRunner count's other points.
RUNNER_MODES = ("ceiling", "lockstep", "overlapped")


def _timed_learner_updates(algo) -> List[float]:
    """Wraps the local Learner's `update` with a timer; returns the tally of
    seconds (one float, updated in place)."""
    from rllib_ners.seam.algorithm import local_learner_of

    learner = local_learner_of(algo.learner_group)
    busy = [0.0]
    update = learner.update

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return update(*args, **kwargs)
        finally:
            busy[0] += time.perf_counter() - start

    learner.update = timed
    return busy


# --preset of --suite runners: the Atari config each point builds.
RUNNER_PRESETS = {
    "rainbow": "atari_rainbow",  # one update of 32 per 4 env steps
    "der": "atari_data_efficient_rainbow",  # one update of 32 per env step
}


def runners_point(
    arm: str,
    mode: str,
    num_runners: int,
    steps: int,
    envs_per_runner: int = 1,
    preset: str = "rainbow",
    training_intensity: Optional[float] = None,
    weights_sync_interval: int = 1,
    rollout_fragment_length: Optional[int] = None,
) -> dict:
    """One algorithm with `num_runners` EnvRunners of `envs_per_runner`
    sub-envs each: warmed up past the learning start, then one iteration of
    `steps` env steps timed. `training_intensity`: replayed per sampled env
    step (None: the preset's); `weights_sync_interval`: of overlapped
    points; `rollout_fragment_length`: env steps per sub-env and `sample()`
    request (None: the preset's)."""
    from ray.rllib.utils.metrics import (
        ALL_MODULES,
        ENV_RUNNER_RESULTS,
        LEARNER_RESULTS,
        NUM_ENV_STEPS_SAMPLED_LIFETIME,
        NUM_ENV_STEPS_TRAINED_LIFETIME,
        SYNCH_WORKER_WEIGHTS_TIMER,
    )

    from rllib_ners.algorithms.common.overlapped_sampling import (
        WEIGHTS_STALENESS_MAX,
        WEIGHTS_STALENESS_MEAN,
    )
    from rllib_ners.algorithms.rainbow import presets

    learning_starts = 10**9 if mode == "ceiling" else 1600
    config = (
        getattr(presets, RUNNER_PRESETS[preset])(
            peers.ATARI_GAME,
            replay=arm,
            capacity=100_000,
            learning_starts=learning_starts,
        )
        .env_runners(
            num_env_runners=num_runners, num_envs_per_env_runner=envs_per_runner
        )
        # A GPU Learner replays its updates from CUDA graphs (3.37x the eager
        # updates' rate for data-efficient Rainbow on the H200, 2026-11-28).
        .training(
            overlap_sampling=mode != "lockstep",
            weights_sync_interval=weights_sync_interval if mode != "lockstep" else 1,
            cuda_graph_updates=cuda_available(),
        )
    )
    if training_intensity is not None:
        config = config.training(training_intensity=training_intensity)
    if rollout_fragment_length is not None:
        config = config.env_runners(rollout_fragment_length=rollout_fragment_length)
    if mode == "lockstep":
        # RLlib's lockstep weights count a local EnvRunner beside the remote
        # ones ((N + 1) / N times the ratio): this intensity keeps the preset's
        # updates per env step, as overlapped sampling does.
        config = config.training(
            training_intensity=config.training_intensity
            * num_runners
            / (num_runners + 1)
        )
    config = (
        config.learners(num_gpus_per_learner=1 if cuda_available() else 0)
        .reporting(min_sample_timesteps_per_iteration=steps, min_time_s_per_iteration=0)
        .debugging(seed=0)
    )

    def counts(result):
        sampled = result[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME]
        learners = result.get(LEARNER_RESULTS, {}).get(ALL_MODULES, {})
        return sampled, learners.get(NUM_ENV_STEPS_TRAINED_LIFETIME, 0)

    algo = config.build_algo()
    try:
        result = algo.train()
        while mode != "ceiling" and counts(result)[1] == 0:
            result = algo.train()
        busy = _timed_learner_updates(algo)
        sampled0, trained0 = counts(result)
        sections: Dict[str, List[float]] = {}
        wall0, cpu0 = time.perf_counter(), time.process_time()
        with peers.loop_sections_into(sections):
            result = algo.train()
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        sampled, trained = counts(result)
    finally:
        algo.stop()
    env_steps = sampled - sampled0
    return {
        "env steps/s": env_steps / wall,
        # The driver process's CPU time (all its threads: Ray's too) per env step.
        "driver CPU ms per env step": 1e3 * cpu / max(env_steps, 1),
        "updates/s": (trained - trained0) / peers.ATARI_BATCH / wall,
        "Learner busy": busy[0] / wall,
        "staleness mean/max": (
            f"{result[WEIGHTS_STALENESS_MEAN]:.1f}/{result[WEIGHTS_STALENESS_MAX]:.0f}"
            if WEIGHTS_STALENESS_MEAN in result
            else "-"
        ),
        # Weight syncs to the EnvRunners, and the driver's ms per sync.
        "weight syncs": _calls_and_ms_each(sections.get(SYNCH_WORKER_WEIGHTS_TIMER)),
        # The driver's wall time per env step in each loop section (ms).
        "sections": {
            label: 1e3 * sections.get(key, [0, 0.0])[1] / max(env_steps, 1)
            for key, label in peers.loop_section_labels().items()
        },
    }


def _calls_and_ms_each(tally: Optional[List[float]]) -> str:
    """`[calls, seconds]` of a loop section as "calls (ms each)"."""
    calls, seconds = tally or (0, 0.0)
    return f"{calls} ({1e3 * seconds / max(calls, 1):.1f} ms)"


# What bounds a point (`point_bound`): its env steps/s reach this share of the
# sampling-only ceiling at the same EnvRunner count, or its Learner is busy
# for at least this share of the wall time.
CEILING_SHARE = 0.9
LEARNER_BUSY_SHARE = 0.8
# The driver's loop sections, grouped into what `point_bound` names.
DRIVER_PARTS = {
    "waiting for and receiving fragments": ("sampling",),
    "sending weights": ("weight sync",),
    "the buffer (add, replay sample, priorities)": (
        "buffer add",
        "replay sample",
        "priorities",
    ),
    "the Learner's updates": ("Learner update",),
}


def point_bound(point: dict, ceiling: Optional[float], mode: str) -> str:
    """What bounds a `mode` (lockstep or overlapped) point, in words.

    `ceiling`: the sampling-only env steps/s with the same EnvRunners (None
    where it was not measured). The EnvRunners bound a point that reaches
    `CEILING_SHARE` of it; the Learner one whose updates take
    `LEARNER_BUSY_SHARE` of the wall time. Otherwise the driver's time is
    split among `DRIVER_PARTS`, and the two largest shares of the wall time
    are named (in lockstep, waiting for fragments is the EnvRunners'
    sampling, which the Learner waits for)."""
    rate = point["env steps/s"]
    if ceiling and rate >= CEILING_SHARE * ceiling:
        return f"the EnvRunners ({rate / ceiling:.0%} of the sampling-only ceiling)"
    if point["Learner busy"] >= LEARNER_BUSY_SHARE:
        return f"the Learner (busy {point['Learner busy']:.0%} of the wall time)"
    shares = {
        part: sum(point["sections"].get(label, 0.0) for label in labels) * rate / 1e3
        for part, labels in DRIVER_PARTS.items()
    }
    if mode == "lockstep":
        waiting = next(iter(DRIVER_PARTS))
        shares["the EnvRunners' sampling, waited for in lockstep"] = shares.pop(waiting)
    largest = sorted(shares, key=shares.get, reverse=True)[:2]
    return "the driver's time, mostly " + " and ".join(
        f"{part} ({shares[part]:.0%})" for part in largest
    )


def runners_suite(
    arms: List[str],
    runner_counts: List[int],
    steps: int,
    envs_per_runner: Tuple[int, ...] = (1,),
    preset: str = "rainbow",
    modes: Tuple[str, ...] = RUNNER_MODES,
    training_intensity: Optional[float] = None,
    weights_sync_intervals: Tuple[int, ...] = (1,),
    rounds: int = 1,
    rollout_fragment_lengths: Tuple[Optional[int], ...] = (None,),
) -> None:
    """Every point of the scaling table, printed as it is measured (a timeout
    keeps the rows so far), then what bounds each (`point_bound`). Overlapped
    points run once per `weights_sync_intervals` entry (labelled
    `overlapped-k<K>` where there are several). Every point runs once per
    request shape: each `rollout_fragment_lengths` entry (None: the
    preset's) with each `envs_per_runner` entry, labelled `-f<L>` and `-e<E>`
    where there are several of either. With `rounds` > 1 each EnvRunner
    count's points run that many times, in reverse order every other round;
    `benchmarks/runners_plot.py` takes each point's median and draws the
    table (of one request shape)."""
    updates = "replayed from CUDA graphs" if cuda_available() else "eager (CPU)"
    intensity = (
        "the preset's training_intensity"
        if training_intensity is None
        else f"training_intensity={training_intensity:g}"
    )
    intervals = ", ".join(str(k) for k in weights_sync_intervals)
    envs = ", ".join(str(e) for e in envs_per_runner)
    fragments = ", ".join(
        "the preset's" if length is None else str(length)
        for length in rollout_fragment_lengths
    )
    print(
        f"{RUNNER_PRESETS[preset]}; {intensity}; {envs} sub-env(s) "
        f"per EnvRunner; rollout_fragment_length {fragments}; overlapped: "
        f"weights_sync_interval {intervals}; Learner updates {updates}; "
        f"{rounds} round(s)"
    )
    labels = list(peers.loop_section_labels().values())
    print(
        "| EnvRunners | arm | mode | env steps/s | driver CPU ms per env step | "
        "updates/s | Learner busy | staleness mean/max | weight syncs (ms each) | "
        f"driver ms per env step: {' / '.join(labels)} |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    # (mode, shape, label, arm, weights_sync_interval, fragment length, sub-envs)
    specs = []
    for length, envs in itertools.product(rollout_fragment_lengths, envs_per_runner):
        shape = f"-f{length}" if len(rollout_fragment_lengths) > 1 else ""
        shape += f"-e{envs}" if len(envs_per_runner) > 1 else ""
        for mode in sorted(modes, key=RUNNER_MODES.index):
            for arm in arms[:1] if mode == "ceiling" else arms:
                if mode != "overlapped":
                    specs.append((mode, shape, mode + shape, arm, 1, length, envs))
                    continue
                for interval in weights_sync_intervals:
                    label = mode
                    if len(weights_sync_intervals) > 1:
                        label += f"-k{interval}"
                    label += shape
                    specs.append((mode, shape, label, arm, interval, length, envs))
    # (EnvRunners, mode, shape, arm, label, point)
    points: List[Tuple[int, str, str, str, str, dict]] = []
    for num_runners in runner_counts:
        for round_index in range(rounds):
            for mode, shape, label, arm, interval, length, envs in specs[
                :: -1 if round_index % 2 else 1
            ]:
                point = runners_point(
                    arm,
                    mode,
                    num_runners,
                    steps,
                    envs,
                    preset,
                    training_intensity,
                    interval,
                    length,
                )
                points.append((num_runners, mode, shape, arm, label, point))
                sections = " / ".join(
                    f"{point['sections'][name]:.3f}" for name in labels
                )
                print(
                    f"| {num_runners} | {arm if mode != 'ceiling' else '-'} | "
                    f"{label} | {point['env steps/s']:.1f} | "
                    f"{point['driver CPU ms per env step']:.3f} | "
                    f"{point['updates/s']:.1f} | {point['Learner busy']:.0%} | "
                    f"{point['staleness mean/max']} | {point['weight syncs']} | "
                    f"{sections} |",
                    flush=True,
                )
    # The sampling-only ceiling of each EnvRunner count and request shape.
    ceilings: Dict[Tuple[int, str], List[float]] = {}
    for n, mode, shape, _, _, point in points:
        if mode == "ceiling":
            ceilings.setdefault((n, shape), []).append(point["env steps/s"])
    print("\nWhat bounds each point:")
    for num_runners, mode, shape, arm, label, point in points:
        if mode != "ceiling":
            ceiling = (
                statistics.median(ceilings.get((num_runners, shape), [0.0])) or None
            )
            bound = point_bound(point, ceiling, mode)
            print(f"- {num_runners} EnvRunners, {arm}, {label}: {bound}")


# -------------------------------------------------------------- report
# The arms each suite's ratios are taken against, where they ran.
REFERENCES = ("sb3-gpu", "sb3-cpu", "per-gpu", "per-gpu-graph", "floor-gpu")


def report(suite, median: Dict[str, dict], args, load_before, arms) -> None:
    print(
        f"\n{suite}: median of {args.rounds} rounds x {args.steps} env steps per "
        f"arm; {_machine()}; 1 torch thread; load average before "
        f"{load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}"
    )
    for name, arm in arms.items():
        # On a GPU Learner, "priorities" holds the wait for the update's kernels
        # (its TD errors are read back there).
        peers.print_loop_sections(name, arm)
        steps = getattr(arm, "counts", (0,))[0] - getattr(arm, "measured_from", 0)
        for part, (calls, seconds) in getattr(arm, "sampler_times", {}).items():
            print(
                f"{name}: {part} {int(calls)} calls, "
                f"{1e3 * seconds / max(calls, 1):.2f} ms each, "
                f"{1e3 * seconds / max(steps, 1):.3f} ms per env step"
            )
    references = [ref for ref in REFERENCES if ref in median]
    header = ["arm", "env steps/s", "env steps / CPU s", "updates/s"]
    header += [f"vs {ref}" for ref in references]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, rate in median.items():
        cells = [name, f"{rate['wall']:.1f}", f"{rate['cpu']:.1f}"]
        cells.append(f"{rate['updates']:.1f}")
        cells += [f"{rate['wall'] / median[ref]['wall']:.2f}x" for ref in references]
        print("| " + " | ".join(cells) + " |")


# -------------------------------------------------------------- main
def _machine() -> str:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (
        f"{gpu}; {peers.cpu_model()}, {os.cpu_count()} cores; torch "
        f"{torch.__version__}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", choices=sorted(SUITES), default="sac")
    parser.add_argument("--arms", nargs="+", help="a subset of the suite's arms")
    parser.add_argument(
        "--rounds", type=int, help="rounds of each suite's arms (default 3; runners: 1)"
    )
    parser.add_argument("--steps", type=int, help="env steps per arm and round")
    parser.add_argument(
        "--out", type=Path, default=Path("."), help="folder for the profile's table"
    )
    parser.add_argument(
        "--runners",
        type=int,
        nargs="+",
        default=[1, 2, 4, 8, 12],
        help="EnvRunner counts of --suite runners",
    )
    parser.add_argument(
        "--preset",
        choices=sorted(RUNNER_PRESETS),
        default="rainbow",
        help="the Atari config of --suite runners: rainbow (atari_rainbow, one "
        "update per 4 env steps) or der (atari_data_efficient_rainbow, one "
        "update per env step)",
    )
    parser.add_argument(
        "--envs-per-runner",
        type=int,
        nargs="+",
        default=[1],
        help="sub-envs per EnvRunner in --suite runners (the Nature CNN's "
        "batch-1 forward is half of an EnvRunner's time per step on a CPU: "
        "benchmarks/atari_ingest.py); several: every point once per value",
    )
    parser.add_argument(
        "--rollout-fragment-length",
        type=int,
        nargs="+",
        help="env steps per sub-env in each sample() request of --suite "
        "runners (default: the preset's); several: every point once per value",
    )
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=RUNNER_MODES,
        default=list(RUNNER_MODES),
        help="the points of --suite runners: ceiling (sampling only), lockstep, "
        "overlapped",
    )
    parser.add_argument(
        "--training-intensity",
        type=float,
        help="replayed per sampled env step in --suite runners (default: the "
        "preset's; 1 for the scaling where the Learner is not the bound)",
    )
    parser.add_argument(
        "--weights-sync-interval",
        type=int,
        nargs="+",
        default=[1],
        help="the overlapped points' weights_sync_interval in --suite runners "
        "(the fewest Learner updates between weight syncs to the EnvRunners); "
        "several: one overlapped point per interval",
    )
    args = parser.parse_args(argv)
    if args.training_intensity is not None and args.training_intensity <= 0:
        parser.error(f"--training-intensity must be > 0, got {args.training_intensity}")
    for flag, values in (
        ("--envs-per-runner", args.envs_per_runner),
        ("--rollout-fragment-length", args.rollout_fragment_length or []),
        ("--weights-sync-interval", args.weights_sync_interval),
    ):
        if any(value < 1 for value in values):
            parser.error(f"{flag} takes counts >= 1, got {values}")
    args.steps = args.steps or DEFAULT_STEPS[args.suite]
    if args.suite != "runners":
        args.rounds = args.rounds or 3
    names = args.arms or list(SUITES[args.suite])
    unknown = set(names) - set(SUITES[args.suite])
    if unknown:
        parser.error(f"unknown arms for --suite {args.suite}: {sorted(unknown)}")
    if args.suite == "main":
        main_job_suite(names, args.rounds, args.steps)
        return 0

    import ray
    import torch

    from rllib_ners.cli.quiet import silence_known_noise

    if not cuda_available():
        if args.suite == "profile":
            parser.error("--suite profile needs a CUDA device")
        names = [name for name in names if "gpu" not in name]
        print(f"no CUDA device: only the CPU arms run ({', '.join(names)})")
    if args.suite == "runners":
        # The EnvRunners and the driver each take a logical CPU.
        num_cpus = max(args.runners) + 1
    else:
        num_cpus = 1
    silence_known_noise()
    torch.set_num_threads(1)
    ray.init(
        num_cpus=num_cpus,
        num_gpus=1 if cuda_available() else 0,
        include_dashboard=False,
        log_to_driver=False,
    )
    try:
        if args.suite == "profile":
            for name in names:
                profile_suite(name, args.steps, args.out)
            return 0
        if args.suite == "runners":
            print(f"runners: {args.steps} env steps per point; {_machine()}")
            runners_suite(
                names,
                args.runners,
                args.steps,
                tuple(args.envs_per_runner),
                args.preset,
                tuple(args.modes),
                args.training_intensity,
                tuple(args.weights_sync_interval),
                args.rounds or 1,
                tuple(args.rollout_fragment_length or [None]),
            )
            return 0
        load_before = os.getloadavg()
        arms = BUILDERS[args.suite](names, args.steps)
        try:
            for name, arm in list(arms.items()):
                print(f"warming up {name}", flush=True)
                try:
                    arm.warm_up()
                except Exception:  # report it; the other arms still run
                    print(f"{name} left out: its warm-up failed:", flush=True)
                    traceback.print_exc(limit=-8)
                    del arms[name]
                    with contextlib.suppress(Exception):
                        arm.close()
            if not arms:
                return 1
            median = peers.measure(arms, args.rounds, args.steps)
            graphs = {name: graph_status(arm) for name, arm in arms.items()}
        finally:
            for arm in arms.values():
                arm.close()
    finally:
        ray.shutdown()
    report(args.suite, median, args, load_before, arms)
    for name, status in graphs.items():
        if status:
            print(f"{name}: {status}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
