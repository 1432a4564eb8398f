"""What the study's arms and the replay methods cost, side by side in one process.

`rllib-ners study report` gives each arm's throughput from its runs' CPU time,
which spreads by tens of percent between runs made hours apart on a shared
machine: more than the arms differ. This measures the arms of a study task as
`peers.py` measures the peers: every arm is the study's own config
(`rllib_ners.study.runs.build_config`, tuning seed 0, one torch thread, no
EnvRunner actors) in this one process, trained to a point of its run (`--at`,
env steps), then the arms take turns (`harness.measure`), each training chunks
of `--steps` env steps. With several `--at` points every arm trains on
(untimed) and the rounds repeat there: the NERS arms' costs change along a run.
Printed per task and point: env steps per second (wall clock) and per CPU
second, updates per second, the ratios to uniform, and for the NERS arms the
sampler's own parts (scoring, REINFORCE). An arm's cost is everything its
`train()` does (`ners_reference`'s replay-reward episodes included), not the
study's greedy evaluations.

That is `--suite study` (the default). Two more suites time the replay methods
on configs of their own, the arms taking turns the same way:

iterations  (`--task cartpole|ms_pacman`) every arm trains `--steps` env steps,
    one training iteration each in turn; per arm env steps per second and per
    CPU second over the iterations after learning began, as ratios to PER,
    and for NERS with its own image encoder the share of scored observations
    whose encoding came from the Learner's encoding cache (it falls as the
    buffer fills: `--learning-starts 50000` measures with a half-full 100k
    buffer). cartpole: RLlib's CartPole DQN example (the settings of
    `tuned_examples/dqn/cartpole_dqn_fast_per.py`); arms ners, per, uniform,
    rllib-per (RLlib's own prioritised buffer) and rainbow-per
    (`RainbowDQNConfig` with our PER buffer, which replays through the same
    columnar path as NERS-DQN: ners / rainbow-per is the sampler's cost alone).
    ms_pacman: data-efficient Rainbow (one update of 32 per env step); arms
    ners, per, uniform and ners-module (NERS with `encoder="module"`: the
    agent's CNN features, no CNN of its own).
updates  (`--algorithm td3|sac`) what one replayed update costs per replay
    method on Hopper-v5 (`td3_config` / `mujoco_sac`, one update of 256 per
    env step): every arm's buffer holds the same transitions at its learning
    start (checked, and printed); then each round every arm trains `--updates`
    env steps, and the table gives the median µs per update of the training
    loop's replay sample, Learner update and priority update, and their sum's
    ratio to PER's. Arms per / lap / pal (LAP's loss on uniform replay) /
    uniform / per-foreach (PER with the targets' Polyak update as per-tensor
    multi-tensor ops: `PolyakTargets.flat_on_cpu = False` during its turns).

How to run
----------
    pip install torch==2.13.0 -e ".[study,mujoco,atari,bench]"
    python benchmarks/study_costs.py --tasks hopper_100k --at 10000 50000
    python benchmarks/study_costs.py --tasks ms_pacman_100k --rounds 3
    python benchmarks/study_costs.py --suite iterations --task cartpole --steps 10000
    python benchmarks/study_costs.py --suite iterations --task ms_pacman \
        --steps 4000 --arms ners ners-module per
    python benchmarks/study_costs.py --suite updates --algorithm sac --rounds 7
"""

from __future__ import annotations

import argparse
import os
from typing import Dict, List, Sequence

from harness import (
    cpu_model,
    measure,
    ratio,
    time_sampler_parts,
)
from peers import RLlibArm
from replay_suites import TASK_ARMS, UPDATE_ARMS, iterations_suite, updates_suite

# The arms the studies run per agent: SAC and the DQN family in the
# paper-settings study (results/ners_paper_settings/PLAN.md), TD3 in the TD3/LAP
# study (results/td3_lap/PLAN.md).
DEFAULT_ARMS = {
    "sac": ("uniform", "per", "ners", "ners_reference"),
    "dqn": ("uniform", "per", "ners"),
    "td3": ("uniform", "per", "lap", "ners"),
}
TUNING_SEED = 0
SUITES = ("study", "iterations", "updates")


# ------------------------------------------------------ --suite study
class StudyArm(RLlibArm):
    """One study arm on one task; a chunk is one `train()` of `steps` env steps."""

    def __init__(self, task, arm, steps: int):
        from rllib_ners.study.runs import build_config

        config = build_config(task, arm, TUNING_SEED)
        super().__init__(config, steps, config.train_batch_size_per_learner)
        self.sampler_times: Dict[str, List[float]] = {}
        self.measured_from = 0

    def train_to(self, env_steps: int) -> None:
        """Trains (untimed) until the run has sampled `env_steps` env steps, then
        restarts the sampler parts' tallies: they cover the next rounds only."""
        if self.algo is None:
            self.algo = self.config.build_algo()
            self.sampler_times = time_sampler_parts(self.algo)
        while self.counts[0] < env_steps:
            self._read(self.algo.train())
        for tally in self.sampler_times.values():
            tally[:] = [0, 0.0]
        self.measured_from = self.counts[0]


def build_arms(task, arm_names: Sequence[str], steps: int) -> Dict[str, StudyArm]:
    from rllib_ners.study.declarations import ARMS

    return {name: StudyArm(task, ARMS[name], steps) for name in arm_names}


def measure_at(
    arms: Dict[str, StudyArm], point: int, rounds: int, steps: int
) -> Dict[str, dict]:
    """Every arm trained to `point` env steps, then `rounds` rounds of one
    `steps`-step chunk per arm: the medians of each arm's rates."""
    for name, arm in arms.items():
        print(f"training {name} to {point} env steps", flush=True)
        arm.train_to(point)
    return measure(arms, rounds, steps)


def table(
    median: Dict[str, dict], arms: Dict[str, StudyArm], reference: str
) -> List[str]:
    """The markdown rows for one task and point; ratios are to `reference`."""
    ref = median[reference]
    header = [
        "arm",
        "env steps/s",
        "env steps / CPU s",
        "updates/s",
        f"vs {reference} (wall)",
        f"vs {reference} (CPU)",
        "sampler ms per env step (scoring, REINFORCE)",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, rate in median.items():
        arm = arms[name]
        measured = max(arm.counts[0] - arm.measured_from, 1)
        parts = ", ".join(
            f"{1e3 * seconds / measured:.2f}"
            for calls, seconds in arm.sampler_times.values()
        )
        lines.append(
            "| "
            + " | ".join(
                [
                    name,
                    f"{rate['wall']:.1f}",
                    f"{rate['cpu']:.1f}",
                    f"{rate['updates']:.1f}",
                    ratio(rate["wall"], ref["wall"]),
                    ratio(rate["cpu"], ref["cpu"]),
                    parts or "-",
                ]
            )
            + " |"
        )
    return lines


def study_suite(args) -> None:
    import ray

    from rllib_ners.study.declarations import TASKS
    from rllib_ners.study.runs import check_task_available, register_envs

    register_envs()
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        for task_name in args.tasks:
            task = TASKS[task_name]
            check_task_available(task)
            arm_names = list(args.arms or DEFAULT_ARMS[task.algo])
            reference = "uniform" if "uniform" in arm_names else arm_names[0]
            arms = build_arms(task, arm_names, args.steps)
            try:
                for point in args.at:
                    load_before = os.getloadavg()[0]
                    median = measure_at(arms, point, args.rounds, args.steps)
                    print(
                        f"\n{task_name} at {point} env steps: median of "
                        f"{args.rounds} rounds x {args.steps} env steps per arm; "
                        f"{cpu_model()}, {os.cpu_count()} cores, 1 torch thread; "
                        f"load average before {load_before:.2f}, after "
                        f"{os.getloadavg()[0]:.2f}"
                    )
                    print("\n".join(table(median, arms, reference)), flush=True)
            finally:
                for arm in arms.values():
                    arm.close()
    finally:
        ray.shutdown()


# ---------------------------------------------------------------- main
def suite_arms(parser, args) -> List[str]:
    """The arms of the chosen suite (checked), or its default arms."""
    if args.suite == "study":
        from rllib_ners.study.declarations import ARMS, TASKS

        unknown = [name for name in args.tasks if name not in TASKS]
        unknown += [name for name in args.arms or () if name not in ARMS]
        if unknown:
            parser.error(
                f"unknown tasks or arms: {', '.join(unknown)} (`rllib-ners study list`)"
            )
        return args.arms
    known = TASK_ARMS[args.task] if args.suite == "iterations" else UPDATE_ARMS
    arms = args.arms or list(known)
    unknown = sorted(set(arms) - set(known))
    if unknown:
        parser.error(f"--arms: {unknown} not arms of --suite {args.suite}: {known}")
    if args.suite == "iterations" and "per" not in arms:
        parser.error("--arms must include 'per' (the ratios are against it)")
    return arms


def main(argv=None) -> int:
    from rllib_ners.study.declarations import load_declarations

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", choices=SUITES, default="study")
    parser.add_argument(
        "--arms",
        nargs="+",
        help="study: study arms (default: the studies' arms for the task's agent: "
        + "; ".join(f"{k}: {' '.join(v)}" for k, v in DEFAULT_ARMS.items())
        + "); iterations, updates: the suite's arms (default: all)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="study, updates")
    parser.add_argument(
        "--steps",
        type=int,
        help="study: env steps per chunk (default 1000); iterations: env steps "
        "per arm (default 10000)",
    )
    study = parser.add_argument_group("--suite study")
    study.add_argument("--tasks", nargs="+", default=["hopper_100k"])
    study.add_argument(
        "--at",
        nargs="+",
        type=int,
        default=[10_000],
        help="env steps of the run at which to measure (ascending)",
    )
    study.add_argument(
        "--declarations",
        type=str,
        action="append",
        default=[],
        metavar="FILE.py",
        help="a Python file declaring more tasks and arms (as `rllib-ners study`)",
    )
    iterations = parser.add_argument_group("--suite iterations")
    iterations.add_argument("--task", choices=sorted(TASK_ARMS), default="cartpole")
    iterations.add_argument("--seed", type=int, default=0)
    iterations.add_argument("--capacity", type=int, default=100_000, help="ms_pacman")
    iterations.add_argument(
        "--learning-starts",
        type=int,
        default=1600,
        help="ms_pacman: env steps stored before learning (and measuring) starts; "
        "e.g. 50000 measures with a half-full 100k buffer, as later in a 100k run",
    )
    updates = parser.add_argument_group("--suite updates")
    updates.add_argument("--algorithm", choices=("sac", "td3"), default="td3")
    updates.add_argument("--updates", type=int, default=200, help="per arm and round")
    args = parser.parse_args(argv)
    for path in args.declarations:
        load_declarations(path)
    args.arms = suite_arms(parser, args)
    args.steps = args.steps or (10_000 if args.suite == "iterations" else 1000)
    if args.at != sorted(args.at) or min(args.at) < 1:
        parser.error(f"--at takes ascending positive env steps, got {args.at}")
    if args.rounds < 1 or args.steps < 1 or args.updates < 1:
        parser.error("--rounds, --steps and --updates must be at least 1")

    import torch

    from rllib_ners.utils.log_noise import silence_known_noise

    silence_known_noise()
    torch.set_num_threads(1)
    {"study": study_suite, "iterations": iterations_suite, "updates": updates_suite}[
        args.suite
    ](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
