"""What the study's arms and the replay methods cost, side by side in one process.

`rllib-ners study report` gives each arm's throughput from its runs' CPU time,
which spreads by tens of percent between runs made hours apart on a shared
machine: more than the arms differ. Here every arm of a study task is the
study's own config (`rllib_ners.study.runs.build_config`, tuning seed 0, one
torch thread, no EnvRunner actors) in this one process, trained (untimed) to
each point of its run in `--at` (env steps; the NERS arms' costs change along
a run); there the arms take turns (`harness.measure`) training chunks of
`--steps` env steps. Printed per task and point: `harness.rates_table` with
the ratios to uniform and the NERS sampler's own parts (scoring, REINFORCE).
An arm's cost is everything its `train()` does (`ners_reference`'s
replay-reward episodes included), not the study's greedy evaluations.

That is `--suite study` (the default). `--suite updates` times the replay
methods on configs of their own, the arms taking turns the same way:

updates  (`--algorithm td3|sac`) what one replayed update costs per replay
    method on Hopper-v5 (`td3_config` / `mujoco_sac`, one update of 256 per
    env step): every arm's buffer holds the same transitions at its learning
    start (checked, and printed); then each round every arm trains `--updates`
    env steps, and the table gives the median µs per update of the training
    loop's replay sample, Learner update and priority update, and their sum's
    ratio to PER's. Arms per / lap / pal (LAP's loss on uniform replay) /
    uniform / relo / laber (the presets' `replay="relo"`, `"laber"`) /
    per-foreach (PER with the targets' Polyak update as per-tensor
    multi-tensor ops: `PolyakTargets.flat_on_cpu = False` during its turns).

How to run
----------
    pip install torch==2.13.0 -e ".[study,mujoco,atari,bench]"
    python benchmarks/study_costs.py --tasks hopper_100k --at 10000 50000
    python benchmarks/study_costs.py --tasks ms_pacman_100k --arms per ners ners_module
    python benchmarks/study_costs.py --tasks hopper_100k ms_pacman_100k alien_100k \
        qbert_100k --arms uniform per relo laber --at 10000 30000 --rounds 5
    python benchmarks/study_costs.py --suite updates --algorithm sac --rounds 7
"""

from __future__ import annotations

import argparse
import os
from typing import Dict, List, Sequence

from harness import (
    cpu_model,
    header,
    loop_sections_into,
    measure,
    rates_table,
    ratio,
    ray_in_this_process,
    rounds_line,
    take_turns,
    time_sampler_parts,
)
from peers import RLlibArm

# The arms the studies run per agent: SAC and the DQN family in the
# paper-settings study (results/ners_paper_settings/PLAN.md), TD3 in the TD3/LAP
# study (results/td3_lap/PLAN.md).
DEFAULT_ARMS = {
    "sac": ("uniform", "per", "ners", "ners_reference"),
    "dqn": ("uniform", "per", "ners"),
    "td3": ("uniform", "per", "lap", "ners"),
}
TUNING_SEED = 0
SUITES = ("study", "updates")


# ------------------------------------------------------ --suite study
class StudyArm(RLlibArm):
    """One study arm on one task; a chunk is one `train()` of `steps` env steps."""

    def __init__(self, task, arm, steps: int):
        from rllib_ners.study.runs import build_config

        config = build_config(task, arm, TUNING_SEED)
        super().__init__(config, steps, config.train_batch_size_per_learner)
        self.sampler_times: Dict[str, List[float]] = {}
        self.measured_from = 0

    def build(self):
        algo = super().build()
        self.sampler_times = time_sampler_parts(algo)
        return algo

    def train_to(self, env_steps: int) -> None:
        """Trains (untimed) until the run has sampled `env_steps` env steps, then
        restarts the sampler parts' tallies: they cover the next rounds only."""
        super().train_to(env_steps)
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

    def sampler_parts(name: str) -> str:
        arm = arms[name]
        measured = max(arm.counts[0] - arm.measured_from, 1)
        parts = ", ".join(
            f"{1e3 * seconds / measured:.2f}"
            for calls, seconds in arm.sampler_times.values()
        )
        return parts or "-"

    column = "sampler ms per env step (scoring, REINFORCE)"
    return rates_table(median, {reference: reference}, extra=(column, sampler_parts))


def study_suite(args) -> None:
    from rllib_ners.study.declarations import TASKS
    from rllib_ners.study.runs import check_task_available, register_envs

    register_envs()
    machine = f"{cpu_model()}, {os.cpu_count()} cores, 1 torch thread"
    with ray_in_this_process(address="local"):
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
                    what = f"{task_name} at {point} env steps"
                    print("\n" + rounds_line(what, args, machine, load_before))
                    # A blank line before the table, so the output pastes into a
                    # Markdown page as a table rather than as text.
                    print("\n" + "\n".join(table(median, arms, reference)), flush=True)
            finally:
                for arm in arms.values():
                    arm.close()


# ---------------------------------------------------- --suite updates
UPDATES_ENV = "Hopper-v5"
UPDATES_LEARNING_STARTS = 2000
UPDATE_ARMS = ("per", "lap", "pal", "uniform", "relo", "laber", "per-foreach")
# Arms that are another arm's algorithm with one switch flipped.
VARIANT_OF = {"per-foreach": "per"}


def updates_arm(algorithm: str, replay: str, updates: int):
    """The arm's algorithm, trained up to its learning start (random actions,
    no update yet); each later `train()` makes `updates` replayed updates."""
    replay = VARIANT_OF.get(replay, replay)
    if algorithm == "td3":
        from rllib_ners.algorithms.td3.presets import td3_config as preset
    else:
        from rllib_ners.algorithms.ners_sac.presets import mujoco_sac as preset
    config = preset(UPDATES_ENV, replay=replay, learning_starts=UPDATES_LEARNING_STARTS)
    arm = RLlibArm(config, updates, config.train_batch_size_per_learner)
    arm.train_to(UPDATES_LEARNING_STARTS)  # random steps, stored
    return arm.algo


def same_transitions(algos) -> bool:
    """Whether every arm's buffer stored the same observations, actions and
    rewards (before any replayed update)."""
    import numpy as np

    first = algos[0].local_replay_buffer.storage
    for algo in algos[1:]:
        storage = algo.local_replay_buffer.storage
        for name in ("obs", "actions", "rewards"):
            if not np.array_equal(getattr(storage, name), getattr(first, name)):
                return False
    return True


def timed_updates(algo, arm: str) -> Dict[str, float]:
    """One iteration; seconds per replayed update in each replay section of
    the training loop, and their sum."""
    from ray.rllib.utils.metrics import (
        LEARNER_UPDATE_TIMER,
        REPLAY_BUFFER_SAMPLE_TIMER,
        REPLAY_BUFFER_UPDATE_PRIOS_TIMER,
    )

    from rllib_ners.algorithms.common.learner.target_updates import PolyakTargets

    keys = {
        "sample": REPLAY_BUFFER_SAMPLE_TIMER,
        "update": LEARNER_UPDATE_TIMER,
        "priorities": REPLAY_BUFFER_UPDATE_PRIOS_TIMER,
    }
    sections: Dict[str, List[float]] = {}
    PolyakTargets.flat_on_cpu = arm != "per-foreach"
    try:
        with loop_sections_into(algo, sections):
            algo.train()
    finally:
        PolyakTargets.flat_on_cpu = True
    updates = max(sections.get(LEARNER_UPDATE_TIMER, [1])[0], 1)
    seconds = {
        part: sections.get(key, [0, 0.0])[1] / updates for part, key in keys.items()
    }
    seconds["total"] = sum(seconds.values())
    return seconds


def updates_suite(args) -> None:
    names = args.arms
    load_before = os.getloadavg()[0]
    algos = {}
    with ray_in_this_process():
        try:
            for name in names:
                print(f"building {name}", flush=True)
                algos[name] = updates_arm(args.algorithm, name, args.updates)
            same_data = same_transitions(list(algos.values()))
            for name in names:
                timed_updates(algos[name], name)  # warm-up
            median = take_turns(
                names, args.rounds, lambda n: timed_updates(algos[n], n)
            )
        finally:
            for algo in algos.values():
                algo.stop()
    reference = median.get("per", median[names[0]])["total"]
    print("\n" + header())
    print(
        f"{args.algorithm} {UPDATES_ENV}: median of {args.rounds} rounds x "
        f"{args.updates} replayed updates of 256 per arm, every buffer holding the "
        f"same {UPDATES_LEARNING_STARTS} env steps at its learning start; "
        f"1 torch thread; load average before {load_before:.2f}, after "
        f"{os.getloadavg()[0]:.2f}"
    )
    print(f"the same transitions in every arm's buffer: {'yes' if same_data else 'NO'}")
    print(
        "| arm | µs per update | sample | Learner update | priorities | vs PER (time) |"
    )
    print("|---|---|---|---|---|---|")
    for name in names:
        m = median[name]
        print(
            f"| {name} | {1e6 * m['total']:,.0f} | {1e6 * m['sample']:,.0f} | "
            f"{1e6 * m['update']:,.0f} | {1e6 * m['priorities']:,.0f} | "
            f"{ratio(m['total'], reference)} |"
        )


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
    arms = args.arms or list(UPDATE_ARMS)
    unknown = sorted(set(arms) - set(UPDATE_ARMS))
    if unknown:
        parser.error(f"--arms: {unknown} not arms of --suite updates: {UPDATE_ARMS}")
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
        + "); updates: the suite's arms (default: all)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="study, updates")
    parser.add_argument(
        "--steps", type=int, default=1000, help="study: env steps per chunk"
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
    updates = parser.add_argument_group("--suite updates")
    updates.add_argument("--algorithm", choices=("sac", "td3"), default="td3")
    updates.add_argument("--updates", type=int, default=200, help="per arm and round")
    args = parser.parse_args(argv)
    for path in args.declarations:
        load_declarations(path)
    args.arms = suite_arms(parser, args)
    if args.at != sorted(args.at) or min(args.at) < 1:
        parser.error(f"--at takes ascending positive env steps, got {args.at}")
    if args.rounds < 1 or args.steps < 1 or args.updates < 1:
        parser.error("--rounds, --steps and --updates must be at least 1")

    {"study": study_suite, "updates": updates_suite}[args.suite](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
