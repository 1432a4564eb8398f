"""Our training loop with a GPU Learner against Stable-Baselines3 and the bare math.

The GPU counterpart of `benchmarks/peers.py`, whose arms and rules it reuses
(the arms take turns in one process, the medians of `--rounds` chunks of
`--steps` env steps; one torch thread). An arm's name says what it runs:

    <replay>-<device>[-graph][-act | -hostframes]
    replay      per / ners / uniform: NERSSACConfig (sac) or data-efficient
                Rainbow (atari) with our PER buffer, the NERS buffer, or alpha 0
                (whose priority writes wait for the round's last update)
    device      gpu: the Learner on the first CUDA device; cpu: on the CPU
    -graph      `cuda_graph_updates=True`: updates replayed from CUDA graphs
    -act        the EnvRunner acting on the GPU (`act_on_learner_device=True`)
    -hostframes frame stacks built on the host and copied (no `device_frames`)
    sb3-gpu / sb3-cpu          Stable-Baselines3 SAC on cuda / on the CPU
    floor-gpu[-graph]          the bare update on the GPU (SAC's; atari: the
                               Learner's own on random batches), eager or
                               captured in a CUDA graph, plus bare env steps

Suites
------
sac      Hopper-v5 with SAC's usual settings (as `peers.py --suite sac`).
atari    MsPacman, data-efficient Rainbow (one update of 32 per env step).
main     The README's main job (`tuned_examples/ners_dqn/cartpole_ners_dqn.py
         --num-env-runners=0`) as separate processes, one run per arm and round:
         gpu (`--num-gpus-per-learner=1`), default (the example's own choice)
         and hidden (`CUDA_VISIBLE_DEVICES=`); env steps/s is the median of the
         run's iteration rates once learning has started.
profile  A torch.profiler trace of `--steps` env steps of a sac arm, or an atari
         one prefixed `atari-`, after warm-up: per env step its kernel launches,
         host/device copies, synchronisations and `.item()` calls, the GPU's
         busy time and the host's time waiting in synchronisations and copies.
runners  Rainbow on MsPacman fed by `--runners` remote EnvRunners
         (`benchmarks/gpu_runners.py`).

    python benchmarks/gpu.py --suite sac
    python benchmarks/gpu.py --suite atari --rounds 2 --steps 150
    python benchmarks/gpu.py --suite main --steps 6000
    python benchmarks/gpu.py --suite runners --runners 1 2 4 8 12 --steps 4000

Without CUDA the `-gpu` arms are left out (a dry run of the rest on the CPU).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

from baselines import synchronize
from gpu_runners import (
    add_runner_arguments,
    check_runner_arguments,
    cuda_available,
    runners_suite,
)
from harness import (
    chosen_arms,
    cpu_model,
    measure,
    print_arm_parts,
    ray_in_this_process,
    report_rates,
    suite_parser,
    take_turns,
    warmed_up,
)
from peers import BUILDERS, atari_arms, sac_arms

SUITES = {
    "sac": (
        "sb3-gpu sb3-cpu per-gpu per-gpu-graph per-gpu-graph-act ners-gpu "
        "ners-gpu-graph per-cpu floor-gpu floor-gpu-graph"
    ).split(),
    "atari": (
        "per-gpu per-gpu-graph per-gpu-graph-act per-gpu-graph-hostframes "
        "uniform-gpu-graph ners-gpu ners-gpu-graph per-cpu floor-gpu"
    ).split(),
    "main": ["gpu", "default", "hidden"],
    "profile": ["per-gpu", "per-gpu-graph", "atari-per-gpu-graph"],
    "runners": ["per", "ners"],
}
# Env steps per arm and round (main: per run; runners: per point).
DEFAULT_STEPS = {"sac": 200, "atari": 200, "main": 6000, "profile": 100}
DEFAULT_STEPS["runners"] = 4000
REPO_ROOT = Path(__file__).resolve().parents[1]
MAIN_JOB = REPO_ROOT / "tuned_examples" / "ners_dqn" / "cartpole_ners_dqn.py"
# The main job's progress line: "iter    3 | env steps  3000 | ... | 628.5 steps/s |".
ITERATION_RATE = re.compile(r"^iter\s+(\d+) \|.*?\|\s*([\d.]+) steps/s", re.M)


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
    notes: Dict[str, str] = {}  # per arm, its first run's Learner device line

    def one_run(name: str) -> dict:
        run = run_main_job(name, steps)
        notes.setdefault(name, run.pop("note"))
        print(f"{name}: {run['rate']:.1f} env steps/s, {run['wall']:.1f} s wall")
        return run

    median = take_turns(names, rounds, one_run)
    print(
        f"\nmain: the README's main job, {steps} env steps per run, {rounds} "
        f"rounds; {_machine()}"
    )
    print("| arm | env steps/s (iter >= 3) | run wall s | driver CPU s | vs hidden |")
    print("|---|---|---|---|---|")
    hidden = median.get("hidden", {}).get("rate", 0)
    for name, m in median.items():
        ratio = f"{m['rate'] / hidden:.2f}x" if hidden else "-"
        print(
            f"| {name} | {m['rate']:.1f} | {m['wall']:.1f} | {m['cpu']:.1f} | {ratio} |"
        )
    for name, note in notes.items():
        if note:
            print(f"{name}: {note}")


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
        synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            wall0 = time.perf_counter()
            env_steps, updates = arm.run(steps)
            synchronize()
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
    print_arm_parts(name, arm)
    table = events.table(sort_by="self_cpu_time_total", row_limit=40)
    path = out_dir / f"profile_{name.replace('-', '_')}.txt"
    path.write_text(table)
    print(f"top ops by host time: {path}")


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


# The arms each suite's ratios are taken against, where they ran.
REFERENCES = ("sb3-gpu", "sb3-cpu", "per-gpu", "per-gpu-graph", "floor-gpu")


# -------------------------------------------------------------- main
def _machine() -> str:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (
        f"{gpu}; {cpu_model()}, {os.cpu_count()} cores; torch "
        f"{torch.__version__}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


def main(argv=None) -> int:
    parser = suite_parser(
        __doc__,
        SUITES,
        rounds_help="rounds of each suite's arms (default 3; runners: 1)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("."), help="folder for the profile's table"
    )
    add_runner_arguments(parser)
    args = parser.parse_args(argv)
    check_runner_arguments(parser, args)
    args.steps = args.steps or DEFAULT_STEPS[args.suite]
    args.rounds = args.rounds or (1 if args.suite == "runners" else 3)
    names = chosen_arms(parser, args, SUITES)
    if args.suite == "main":
        main_job_suite(names, args.rounds, args.steps)
        return 0
    if not cuda_available():
        if args.suite == "profile":
            parser.error("--suite profile needs a CUDA device")
        names = [name for name in names if "gpu" not in name]
        print(f"no CUDA device: only the CPU arms run ({', '.join(names)})")
    # With --suite runners the EnvRunners and the driver each take a logical CPU.
    num_cpus = max(args.runners) + 1 if args.suite == "runners" else 1
    with ray_in_this_process(num_cpus, num_gpus=1 if cuda_available() else 0):
        if args.suite == "profile":
            for name in names:
                profile_suite(name, args.steps, args.out)
            return 0
        if args.suite == "runners":
            print(f"runners: {args.steps} env steps per point; {_machine()}")
            runners_suite(names, args)
            return 0
        load_before = os.getloadavg()[0]
        arms = BUILDERS[args.suite](names, args.steps)
        with warmed_up(arms, leave_out_failures=True):
            if not arms:
                return 1
            # An arm that fails mid-round (Stable-Baselines3's cuda arm drew NaN
            # actions on 2026-12-04) is reported and left out; the others go on.
            median = measure(arms, args.rounds, args.steps, leave_out_failures=True)
            if not median:
                return 1
            graphs = {name: graph_status(arm) for name, arm in arms.items()}
    # On a GPU Learner, "priorities" holds the wait for the update's kernels
    # (its TD errors are read back there).
    machine = f"{_machine()}; 1 torch thread"
    references = {ref: ref for ref in REFERENCES}
    report_rates(
        args.suite,
        median,
        args,
        machine,
        load_before,
        arms,
        references=references,
        cpu_ratios=False,
    )
    for name, status in graphs.items():
        if status:
            print(f"{name}: {status}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
