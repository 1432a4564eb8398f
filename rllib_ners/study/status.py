"""Where a study stands: `rllib-ners study status --results-dir DIR`.

Read from the results folder alone, while drivers may be running on it: the
finished runs (their CSVs), the runs training now (their claims, `claims`) with
the env steps their logs have reached, the runs still to do, the CPU time the
finished runs took and an estimate of the CPU time left.

The estimate prices every run still to do at the median CPU time of the finished
runs of its task and arm (of its task, over all arms, where the arm has none
yet), and a run in progress at the share of its budget its log has not reached.
It is an estimate from this folder's own runs: runs made on another machine or
beside other work cost differently.
"""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from rllib_ners.study import claims, runs
from rllib_ners.study.declarations import TASKS, in_declaration_order
from rllib_ners.study.results import arms_by_algorithm, read_run

# A progress line of `runs.run_one`: "[task arm seedK] it 3 steps 3000 train ...".
_PROGRESS = re.compile(rb"\] it \d+ steps (\d+) ")
# Bytes read from the end of a log for its last progress line.
_LOG_TAIL_BYTES = 64 * 1024

RunKey = Tuple[str, str, int]  # (task, arm, seed)


@dataclasses.dataclass
class LogProgress:
    """The last progress line of a run's log."""

    env_steps: int
    written_s_ago: float


@dataclasses.dataclass
class RunStatus:
    task: str
    arm: str
    seed: int
    # "finished", "training" (a live process holds its claim) or "to do".
    state: str
    cpu_time_s: Optional[float] = None  # a finished run's, from its CSV
    holder: Optional[str] = None  # "pid 123 on host" while training
    progress: Optional[LogProgress] = None  # from its log, if it has one


@dataclasses.dataclass
class StudyStatus:
    results_dir: Path
    seeds: List[int]
    runs: List[RunStatus]
    # Estimated CPU seconds of every run not finished, and the runs that have
    # no estimate (no finished run of their task yet).
    cpu_left_s: float
    unpriced: int

    def count(self, state: str) -> int:
        return sum(run.state == state for run in self.runs)

    @property
    def cpu_used_s(self) -> float:
        return sum(run.cpu_time_s or 0.0 for run in self.runs)


def read_log_progress(path: Path, now: Optional[float] = None) -> Optional[LogProgress]:
    """The env steps of the last progress line of the log at `path` and how long
    ago the log was written; None without a log or a progress line."""
    try:
        with open(path, "rb") as log:
            log.seek(0, 2)
            size = log.tell()
            log.seek(max(0, size - _LOG_TAIL_BYTES))
            tail = log.read()
        written = path.stat().st_mtime
    except FileNotFoundError:
        return None
    steps = _PROGRESS.findall(tail)
    if not steps:
        return None
    now = time.time() if now is None else now
    return LogProgress(int(steps[-1]), max(0.0, now - written))


def planned_cells(
    results_dir: Path,
    tasks: Optional[Sequence[str]] = None,
    arms: Optional[Sequence[str]] = None,
) -> List[Tuple[str, str]]:
    """The (task, arm) pairs of a folder's study. Given tasks and arms, every
    pair of them, as `study run` takes them. Otherwise read from the finished
    runs: the declared tasks that have any (or the given ones), each with the
    arms that have finished runs on a task of its algorithm (a study runs one
    arm set per algorithm: no SAC-only arm on Atari), or the given arms."""
    found = {
        (path.parent.parent.name, path.parent.name)
        for path in Path(results_dir).glob("*/*/seed*.csv")
        if path.parent.parent.name in TASKS
    }
    if tasks is None:
        tasks = [task for task in TASKS if any(task == t for t, _ in found)]
    if arms is not None:
        return [(task, arm) for task in tasks for arm in arms]
    arms_by_algo = arms_by_algorithm(found)
    return [
        (task, arm)
        for task in tasks
        for arm in in_declaration_order(arms_by_algo[TASKS[task].algo])
    ]


def study_status(
    results_dir: Path,
    cells: Sequence[Tuple[str, str]],
    seeds: Sequence[int],
    now: Optional[float] = None,
) -> StudyStatus:
    """The state of every (task, arm) in `cells` on every seed."""
    results_dir = Path(results_dir)
    log_dir = results_dir / runs.LOG_DIR_NAME
    statuses: List[RunStatus] = []
    for seed in seeds:
        for task, arm in cells:
            csv = runs.csv_path(results_dir, task, arm, seed)
            if csv.exists():
                run = read_run(csv)
                statuses.append(
                    RunStatus(task, arm, seed, "finished", cpu_time_s=run.cpu_time_s)
                )
                continue
            holder = claims.holder(csv)
            statuses.append(
                RunStatus(
                    task,
                    arm,
                    seed,
                    "training" if holder else "to do",
                    holder=holder,
                    progress=read_log_progress(
                        runs.log_path(log_dir, task, arm, seed), now
                    ),
                )
            )
    cpu_left_s, unpriced = _estimate_cpu_left(statuses)
    return StudyStatus(results_dir, list(seeds), statuses, cpu_left_s, unpriced)


def _estimate_cpu_left(statuses: Sequence[RunStatus]) -> Tuple[float, int]:
    by_cell: Dict[Tuple[str, str], List[float]] = {}
    by_task: Dict[str, List[float]] = {}
    for run in statuses:
        if run.state == "finished" and run.cpu_time_s is not None:
            by_cell.setdefault((run.task, run.arm), []).append(run.cpu_time_s)
            by_task.setdefault(run.task, []).append(run.cpu_time_s)
    left, unpriced = 0.0, 0
    for run in statuses:
        if run.state == "finished":
            continue
        costs = by_cell.get((run.task, run.arm)) or by_task.get(run.task)
        if not costs:
            unpriced += 1
            continue
        share_left = 1.0
        if run.state == "training" and run.progress is not None:
            budget = TASKS[run.task].budget
            share_left = max(0.0, 1.0 - run.progress.env_steps / budget)
        left += float(np.median(costs)) * share_left
    return left, unpriced


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def render_status(status: StudyStatus) -> str:
    """The status as text: totals, a line per (task, arm), the runs in progress
    and the logs of runs that stopped part-way."""
    total = len(status.runs)
    lines = [
        f"{status.results_dir} (seeds {' '.join(map(str, status.seeds))}): "
        f"{status.count('finished')} of {total} runs finished, "
        f"{status.count('training')} training, {status.count('to do')} to do",
        f"CPU hours: {status.cpu_used_s / 3600:.1f} used by the finished runs, "
        f"about {status.cpu_left_s / 3600:.1f} left"
        + (
            f" (and {status.unpriced} runs with no finished run of their task "
            "to price them)"
            if status.unpriced
            else ""
        ),
        "",
        f"{'task':24s} {'arm':16s} {'finished':>8s} {'training':>8s} "
        f"{'to do':>5s} {'CPU min per run':>15s}",
    ]
    cells = list(dict.fromkeys((run.task, run.arm) for run in status.runs))
    for task, arm in cells:
        cell = [run for run in status.runs if (run.task, run.arm) == (task, arm)]
        cpu = [run.cpu_time_s for run in cell if run.cpu_time_s is not None]
        counts = {
            state: sum(run.state == state for run in cell)
            for state in ("finished", "training", "to do")
        }
        lines.append(
            f"{task:24s} {arm:16s} {counts['finished']:>8d} {counts['training']:>8d} "
            f"{counts['to do']:>5d} "
            f"{(f'{np.median(cpu) / 60:.1f}' if cpu else '-'):>15s}"
        )
    training = [run for run in status.runs if run.state == "training"]
    if training:
        lines += ["", "training now:"]
        for run in training:
            where = (
                f"{run.progress.env_steps} of {TASKS[run.task].budget} env steps "
                f"(log written {_ago(run.progress.written_s_ago)})"
                if run.progress
                else "no progress logged yet"
            )
            lines.append(
                f"  {run.task} {run.arm} seed{run.seed}: {where}; {run.holder}"
            )
    stopped = [run for run in status.runs if run.state == "to do" and run.progress]
    if stopped:
        lines += [
            "",
            "to do, with a log from an earlier start (a run stopped part-way "
            "starts again from scratch; a driver without run claims may still "
            "be training it):",
        ]
        for run in stopped:
            lines.append(
                f"  {run.task} {run.arm} seed{run.seed}: log at "
                f"{run.progress.env_steps} of {TASKS[run.task].budget} env steps, "
                f"written {_ago(run.progress.written_s_ago)}"
            )
    return "\n".join(lines)
