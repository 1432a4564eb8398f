"""The runs a study's results folder holds, read from its CSVs alone.

A run is one finished (arm, task, seed): `<results-dir>/<task>/<arm>/seed<N>.csv`,
one row per training iteration, the last rows carrying the run's greedy
evaluations (`eval_step`, `eval_return_mean`) and its time.

Throughput: env steps per CPU second of a run = training env steps / (CPU time
of the run's process - the CPU time of the study's own greedy evaluation; wall
time where a CSV has no CPU time). CPU time, because the machine is shared with
other work, whose load changes wall time from run to run. The `ners_reference`
arm's own evaluation episodes (its replay reward) are part of its cost and stay
in.

Machines. A results folder may hold a `machines.csv` (columns task, arm, seed,
cpu, recorded_from: one row per run, written by
`results/commit_study_results.sh` when it commits the run). Runs regenerate
bit for bit only on the CPU model that ran them (torch's CPU kernels round
differently on different models), and CPU time compares best between runs of one
model, so the report lists the CPU models of its runs, task by task and arm by
arm; a run without a row counts as "not recorded".
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from rllib_ners.study.declarations import DEFAULT_SEEDS, TASKS, Task

MACHINES_FILE = "machines.csv"
MACHINE_NOT_RECORDED = "not recorded"


class Run:
    """One finished (arm, task, seed): its evaluations and throughput."""

    def __init__(self, arm: str, task: str, seed: int, rows: List[dict]):
        self.arm, self.task, self.seed = arm, task, seed
        evals = [r for r in rows if r.get("eval_step")]
        self.eval_steps = np.array([int(float(r["eval_step"])) for r in evals])
        self.eval_returns = np.array([float(r["eval_return_mean"]) for r in evals])
        last = rows[-1]
        self.env_steps = int(float(last["env_steps"]))
        # The whole run's CPU time, the study's evaluations included (None
        # where the CSV has no CPU time).
        self.cpu_time_s = float(last["cpu_time_s"]) if last.get("cpu_time_s") else None
        if self.cpu_time_s is not None:
            busy = self.cpu_time_s - float(last.get("study_eval_cpu_s") or 0)
        else:
            busy = float(last["wall_time_s"]) - float(
                last.get("study_eval_time_s") or 0
            )
        self.env_steps_per_s = self.env_steps / busy if busy > 0 else float("nan")
        self.wall_time_s = float(last["wall_time_s"])
        self.eval_env_steps = int(float(last.get("eval_env_steps") or 0))
        self.final_diagnostics = {
            key: float(last[key])
            for key in ("effective_sample_fraction", "priority_entropy_normalized")
            if last.get(key)
        }


def read_run(path: Path) -> Run:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path}: no rows")
    first = rows[0]
    return Run(first["arm"], first["task"], int(first["seed"]), rows)


def load_runs(results_dir: Path, tasks: Dict[str, Task] = TASKS):
    """The finished runs under `results_dir` whose evaluations match the task's
    current schedule; and notes on the CSVs left out."""
    runs: List[Run] = []
    notes: List[str] = []
    for path in sorted(Path(results_dir).glob("*/*/seed*.csv")):
        run = read_run(path)
        task = tasks.get(run.task)
        if task is None:
            notes.append(f"{path}: task {run.task!r} is not declared; left out")
            continue
        expected = np.arange(task.eval_every, task.budget + 1, task.eval_every)
        if not np.array_equal(run.eval_steps, expected):
            notes.append(
                f"{path}: evaluations at {run.eval_steps.tolist()} do not match the "
                f"task's schedule (every {task.eval_every} to {task.budget}); left out"
            )
            continue
        runs.append(run)
    return runs, notes


def load_machines(folders: Sequence[Path]) -> Dict[tuple, str]:
    """`(task, arm, seed) -> CPU model` from each folder's `machines.csv` (the
    first row of a run counts; folders without the file add nothing)."""
    machines: Dict[tuple, str] = {}
    for folder in folders:
        path = Path(folder) / MACHINES_FILE
        if not path.is_file():
            continue
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                key = (row["task"], row["arm"], int(row["seed"]))
                machines.setdefault(key, row["cpu"].strip() or MACHINE_NOT_RECORDED)
    return machines


def machine_table(runs: Sequence[Run], machines: Dict[tuple, str]) -> Dict[tuple, dict]:
    """`{(task, arm): {cpu: runs}}` over the runs, or `{}` when no run has a
    recorded machine."""
    if not any((r.task, r.arm, r.seed) in machines for r in runs):
        return {}
    counts: Dict[tuple, Dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for run in runs:
        cpu = machines.get((run.task, run.arm, run.seed), MACHINE_NOT_RECORDED)
        counts[(run.task, run.arm)][cpu] += 1
    return {key: dict(sorted(by_cpu.items())) for key, by_cpu in counts.items()}


def arms_by_algorithm(task_arm_pairs) -> Dict[str, set]:
    """`{algo: arms}`: the arms of the (task, arm) pairs, by their task's
    algorithm. A study runs one arm set per algorithm (no SAC-only arm on
    Atari), so an arm with runs on one task of an algorithm is planned on all."""
    arms: Dict[str, set] = defaultdict(set)
    for task, arm in task_arm_pairs:
        arms[TASKS[task].algo].add(arm)
    return arms


def planned_runs(
    runs: Sequence[Run],
    tasks: Optional[Sequence[str]] = None,
    seeds: Optional[Sequence[int]] = None,
) -> int:
    """The runs a study plans: on each task (the given ones, else those with
    runs), every arm that has runs on a task of the same algorithm, times the
    seeds (the given ones, else the report seeds, `DEFAULT_SEEDS`)."""
    planned = set(tasks) if tasks is not None else {r.task for r in runs}
    arms_by_algo = arms_by_algorithm((run.task, run.arm) for run in runs)
    return sum(
        len(arms_by_algo[TASKS[task].algo]) for task in planned if task in TASKS
    ) * len(DEFAULT_SEEDS if seeds is None else seeds)
