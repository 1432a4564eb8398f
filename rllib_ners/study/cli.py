"""`rllib-ners study`: run a study of replay methods, and report it.

    rllib-ners study list                                   # tasks and arms
    rllib-ners study run --tasks cartpole --arms uniform per ners \\
        --seeds 100 101 102 --jobs 2 --results-dir results/my_study
    rllib-ners study status --results-dir results/my_study  # while it runs
    rllib-ners study report --results-dir results/my_study

`run` trains every (task, arm, seed) that has no CSV yet, `--jobs` at a time
in child processes (one torch thread each), seed by seed: stop it and run the
same command again to resume. `report` computes the rliable report from the
CSVs alone; `status` says how far a study is and what it has cost, from the
results folder alone (drivers may be running on it). `--declarations FILE.py`
adds your own tasks and arms (see `rllib_ners.study.load_declarations`).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from rllib_ners.study import claims
from rllib_ners.study.declarations import (
    ARMS,
    DEFAULT_SEEDS,
    STUDY_ARMS,
    SUITE,
    TASKS,
    load_declarations,
)
from rllib_ners.study.report import DEFAULT_TITLE, write_report


def _check_names(given: Sequence[str], known: Dict, option: str) -> List[str]:
    unknown = [name for name in given if name not in known]
    if unknown:
        raise SystemExit(
            f"{option}: unknown {', '.join(map(repr, unknown))}; choose from "
            f"{', '.join(sorted(known))}"
        )
    return list(given)


def _add_declarations(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--declarations",
        type=Path,
        action="append",
        default=[],
        metavar="FILE.py",
        help="a Python file declaring more tasks and arms (TASKS = [Task(...)], "
        "ARMS = [Arm(...)]); may be given several times",
    )


_RESULTS_DIR = "the study's folder: one CSV per finished run, the report beside"


def build_parser(prog: str = "rllib-ners study") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Sample-efficiency studies of replay methods: runs and report.",
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="{run,status,report,list}"
    )
    _add_run_command(commands)
    _add_status_command(commands)
    _add_report_command(commands)
    listing = commands.add_parser(
        "list",
        help="the declared tasks and arms",
        description="Print the declared tasks (env, algorithm, budget, evaluation "
        "points) and arms (replay method and its settings) that `study run` takes.",
    )
    _add_declarations(listing)
    # One run, in a child process of `run` (not for users: no help entry).
    one = commands.add_parser("run-one")
    one.add_argument("task")
    one.add_argument("arm")
    one.add_argument("seed", type=int)
    one.add_argument("--results-dir", type=Path, required=True)
    one.add_argument("--budget", type=int)
    _add_declarations(one)
    return parser


def _add_run_command(commands) -> None:
    run = commands.add_parser(
        "run",
        help="train the runs that have no CSV yet (resumable)",
        description="Train every (task, arm, seed) run that has no CSV in "
        "--results-dir yet, --jobs at a time, each in its own process with one "
        "torch thread; a finished run writes its CSV, so running the same command "
        "again resumes where the last one stopped.",
    )
    run.add_argument(
        "--tasks",
        nargs="+",
        default=list(SUITE),
        help=f"task names (default: {' '.join(SUITE)}; `study list` shows all)",
    )
    run.add_argument(
        "--arms",
        nargs="+",
        default=list(STUDY_ARMS),
        help=f"arm names (default: {' '.join(STUDY_ARMS)})",
    )
    run.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        default=list(DEFAULT_SEEDS),
        help="seeds (default 100-104; keep 0-9 for tuning)",
    )
    run.add_argument("--jobs", type=int, default=1, help="runs at once")
    run.add_argument("--results-dir", type=Path, required=True, help=_RESULTS_DIR)
    run.add_argument(
        "--budget",
        type=int,
        help="override every task's budget (and evaluate only at it): for smoke "
        "runs and cost measurements only, in a --results-dir of their own",
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="check every (task, arm) config and print the runs to do, then stop",
    )
    _add_declarations(run)


def _add_status_command(commands) -> None:
    status = commands.add_parser(
        "status",
        help="finished, training and to-do runs, and the CPU hours used and left",
        description="Count the finished, training and to-do runs in "
        "--results-dir and estimate the CPU hours used and left from the "
        "finished runs' own timings.",
    )
    status.add_argument("--results-dir", type=Path, required=True, help=_RESULTS_DIR)
    status.add_argument(
        "--tasks",
        nargs="+",
        help="task names (default: the tasks with finished runs in the folder)",
    )
    status.add_argument(
        "--arms",
        nargs="+",
        help="arm names (default: per task, the arms with finished runs on tasks "
        "of its algorithm)",
    )
    status.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        default=list(DEFAULT_SEEDS),
        help="seeds (default 100-104)",
    )
    _add_declarations(status)


def _add_report_command(commands) -> None:
    report = commands.add_parser(
        "report",
        help="write report.md and report.png from the CSVs alone",
        description="Write report.md and report.png into --results-dir from its "
        "CSVs alone: per task and arm the IQM of the normalised score with "
        "seeded bootstrap intervals (rliable), and the pairwise comparisons; the "
        "same CSVs always give the same report.",
    )
    report.add_argument("--results-dir", type=Path, required=True, help=_RESULTS_DIR)
    report.add_argument(
        "--also",
        type=Path,
        nargs="+",
        default=[],
        help="more folders of finished runs to include (e.g. a study's own, next "
        "to a side study's); the report is written to --results-dir",
    )
    report.add_argument("--arms", nargs="+", help="report only these arms")
    report.add_argument("--tasks", nargs="+", help="report only these tasks")
    report.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        help="report only these seeds, the plan being these seeds of every task "
        "and arm (e.g. an interim report on a staged study's first seeds; "
        "default: every finished run, the plan being seeds 100-104)",
    )
    report.add_argument(
        "--title",
        default=DEFAULT_TITLE,
        help="the report's heading (default: %(default)r)",
    )
    report.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="processes for the bootstraps (default: one per CPU); the report is "
        "the same for any number",
    )
    _add_declarations(report)


def main(argv: Optional[Sequence[str]] = None, prog: str = "rllib-ners study") -> int:
    args = build_parser(prog).parse_args(argv)
    for path in args.declarations:
        load_declarations(path)
    if args.command == "list":
        return _list()
    if args.command == "report":
        return _report(args, argv)
    if args.command == "status":
        return _status(args)
    if getattr(args, "budget", None) is not None and args.budget < 1:
        raise SystemExit(f"--budget must be positive, got --budget {args.budget}")
    results_dir = args.results_dir.resolve()
    if args.command == "run-one":
        return _run_one(args, results_dir)
    return _run(args, results_dir)


def _run_one(args, results_dir: Path) -> int:
    """`run-one TASK ARM SEED`: trains the run unless another process holds
    its claim or has finished it."""
    from rllib_ners.study import runs

    _check_names([args.task], TASKS, "task")
    _check_names([args.arm], ARMS, "arm")
    task = runs.with_budget(TASKS[args.task], args.budget)
    runs.check_task_available(task)
    csv = runs.csv_path(results_dir, task.name, args.arm, args.seed)
    try:
        with claims.RunClaim(csv):
            if csv.exists():  # finished by the holder before us
                print(f"not started: {csv} exists", flush=True)
                return 0
            path = runs.run_one(task, ARMS[args.arm], args.seed, results_dir)
    except claims.RunAlreadyClaimed as held:
        print(f"not started: {held}", flush=True)
        return claims.ALREADY_RUNNING
    print(f"wrote {path}")
    return 0


def _run(args, results_dir: Path) -> int:
    """`run`: checks every (task, arm) config, then trains the runs without a
    CSV in child processes (or, with --dry-run, lists them)."""
    from rllib_ners.study import runs

    _check_jobs(args.jobs)
    from rllib_ners.utils.rng import MAX_SEED  # (in here: see rllib_ners.study)

    bad_seeds = [seed for seed in args.seeds if not 0 <= seed <= MAX_SEED]
    if bad_seeds:
        raise SystemExit(
            f"--seeds must be in [0, {MAX_SEED}] (numpy's and Ray's seeds), got "
            f"{' '.join(map(str, bad_seeds))}"
        )
    arms = _check_names(args.arms, ARMS, "--arms")
    tasks = _check_names(args.tasks, TASKS, "--tasks")
    tuning = sorted(s for s in args.seeds if 0 <= s <= 9)
    if tuning:
        print(f"note: seeds {tuning} are tuning seeds, not for reporting", flush=True)
    for name in tasks:
        runs.check_task_available(TASKS[name])
    todo, done = runs.plan_runs(arms, tasks, args.seeds, results_dir)
    # Every (task, arm) config is built and validated here, dry run or not.
    runs.check_configs(
        [
            (runs.with_budget(TASKS[task], args.budget), ARMS[arm], seed)
            for task, arm, seed in todo
        ]
    )
    elsewhere = {
        run: holder
        for run in todo
        if (holder := claims.holder(runs.csv_path(results_dir, *run)))
    }
    _print_plan(len(done), todo, elsewhere, args.jobs, results_dir)
    if args.dry_run:
        for run in todo:
            task, arm, seed = run
            note = f" ({elsewhere[run]} is training it)" if run in elsewhere else ""
            print(f"  {task} {arm} seed{seed}{note}")
        return 0
    outcome = runs.run_study(
        todo,
        results_dir,
        args.jobs,
        results_dir / runs.LOG_DIR_NAME,
        args.budget,
        [path.resolve() for path in args.declarations],
    )
    print(
        f"study finished: {outcome.done} runs done, {outcome.failed} failed, "
        f"{outcome.skipped} skipped (finished or being trained by another process)"
    )
    return 1 if outcome.failed else 0


def _print_plan(num_done: int, todo, elsewhere, jobs: int, results_dir) -> None:
    """What `run` will do: the runs finished, to run and trained elsewhere."""
    print(
        f"{num_done} runs finished already (skipped), {len(todo)} to run"
        + (f" ({len(elsewhere)} being trained by other processes)" if elsewhere else "")
        + f", {jobs} at a time; results in {results_dir}",
        flush=True,
    )
    if not claims.CLAIMS_SUPPORTED:
        print(
            "note: no fcntl on this system: runs are not claimed, so run one "
            "`study run` per results folder at a time",
            flush=True,
        )


def _report(args, argv) -> int:
    for option, given, known in (
        ("--arms", args.arms, ARMS),
        ("--tasks", args.tasks, TASKS),
    ):
        unknown = sorted(set(given or ()) - set(known))
        if unknown:
            raise SystemExit(f"{option}: unknown {unknown}; known: {sorted(known)}")
    for folder in [args.results_dir, *args.also]:
        if not folder.is_dir():
            raise SystemExit(f"no such results folder: {folder}")
    title = args.title.strip()
    if not title or "\n" in title:
        raise SystemExit(f"--title must be one non-empty line, got {args.title!r}")
    _check_jobs(args.jobs)
    given = _without_jobs(list(sys.argv[1:] if argv is None else argv))
    write_report(
        args.results_dir,
        also=args.also,
        arms=args.arms,
        tasks=args.tasks,
        seeds=args.seeds,
        # Quoted so that the command printed in the report can be pasted back.
        command=shlex.join(["rllib-ners", "study", *given]),
        title=title,
        jobs=args.jobs,
    )
    return 0


def _check_jobs(jobs: int) -> None:
    """`--jobs` of `run` (runs at once) and `report` (bootstrap processes)."""
    if jobs < 1:
        raise SystemExit(f"--jobs must be at least 1, got --jobs {jobs}")


def _without_jobs(argv: List[str]) -> List[str]:
    """The command line less `--jobs N`: the report quotes its command, and the
    number of processes changes nothing in it."""
    kept, skip_value = [], False
    for arg in argv:
        if skip_value:
            skip_value = False
        elif arg == "--jobs":
            skip_value = True
        elif not arg.startswith("--jobs="):
            kept.append(arg)
    return kept


def _status(args) -> int:
    from rllib_ners.study import status

    if not args.results_dir.is_dir():
        raise SystemExit(f"no such results folder: {args.results_dir}")
    for option, given, known in (
        ("--tasks", args.tasks, TASKS),
        ("--arms", args.arms, ARMS),
    ):
        if given is not None:
            _check_names(given, known, option)
    cells = status.planned_cells(args.results_dir, args.tasks, args.arms)
    if not cells:
        raise SystemExit(
            f"{args.results_dir} has no finished runs to read the study's tasks and "
            "arms from: give them with --tasks and --arms"
        )
    print(
        status.render_status(status.study_status(args.results_dir, cells, args.seeds))
    )
    return 0


def _list() -> int:
    print("tasks:")
    for task in TASKS.values():
        print(
            f"  {task.name:24s} {task.env:28s} {task.algo:4s} budget {task.budget:>7} "
            f"eval {task.eval_episodes} every {task.eval_every}"
        )
    print("arms:")
    for arm in ARMS.values():
        print(f"  {arm.name:24s} {arm.description}")
    return 0
