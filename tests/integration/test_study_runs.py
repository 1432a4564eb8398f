"""A study run regenerates: the same task, arm and seed write the same CSV.

The report's numbers are only reproducible if the runs are: the same seed must
give the same training and the same evaluations at the same env steps, whatever
the machine's load. Each test runs `rllib_ners.study.runs.run_one` twice on a
shrunken task (SAC on Pendulum, Rainbow/NERS-DQN on CartPole: a warm-up, a few
hundred updates, two evaluations) and compares the CSVs, the timing columns
aside.
"""

from __future__ import annotations

import csv
import dataclasses

import pytest

from rllib_ners.study import declarations as decl
from rllib_ners.study import runs

TIMING_COLUMNS = {"wall_time_s", "study_eval_time_s", "cpu_time_s", "study_eval_cpu_s"}


def _rows_without_timing(path):
    with open(path, newline="") as f:
        return [
            {key: value for key, value in row.items() if key not in TIMING_COLUMNS}
            for row in csv.DictReader(f)
        ]


# Both tasks' agents start learning after 1000 env steps.
WARM_UP = 1000


def _shrunken(task_name):
    """The study task on a budget of the warm-up + 600 env steps: a row every
    200 steps, an evaluation of one (at most 200-step) episode at the middle and
    at the end."""
    budget = WARM_UP + 600
    return dataclasses.replace(
        decl.TASKS[task_name],
        name=f"tiny_{task_name}",
        budget=budget,
        eval_every=budget // 2,
        eval_episodes=1,
        eval_max_steps=200,
        log_every=200,
    )


@pytest.mark.parametrize(
    "task_name, arm_name",
    [
        ("pendulum", "per"),
        ("pendulum", "ners"),
        ("cartpole", "per"),
        ("cartpole", "ners"),
    ],
)
def test_a_run_writes_the_same_csv_twice(
    task_name, arm_name, tmp_path, one_torch_thread
):
    task, arm = _shrunken(task_name), decl.ARMS[arm_name]
    first = runs.run_one(task, arm, 100, tmp_path / "first")
    second = runs.run_one(task, arm, 100, tmp_path / "second")
    rows = _rows_without_timing(first)
    steps = list(range(200, task.budget + 1, 200))
    assert [int(row["env_steps"]) for row in rows] == steps
    evals = [int(row["eval_step"]) for row in rows if row["eval_step"]]
    assert evals == [task.budget // 2, task.budget]
    assert rows == _rows_without_timing(second)
