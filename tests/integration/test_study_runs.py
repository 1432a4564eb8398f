"""A study run regenerates: the same task, arm and seed write the same CSV.

The report's numbers are only reproducible if the runs are: the same seed must
give the same training and the same evaluations at the same env steps, whatever
the machine's load. Each test runs `rllib_ners.study.runs.run_one` twice on a
shrunken Pendulum SAC task (a warm-up, a few hundred updates, two evaluations)
and compares the CSVs, the timing columns aside.
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


def _tiny_pendulum():
    """Pendulum's study task on a budget of 1600 env steps: 1000 of warm-up
    (random actions), then rounds of 4 steps and 4 updates; a row every 200
    steps, an evaluation of one 200-step episode every 800."""
    task = decl.TASKS["pendulum"]
    return dataclasses.replace(
        task,
        name="tiny_pendulum",
        budget=1600,
        eval_every=800,
        eval_episodes=1,
        log_every=200,
    )


@pytest.mark.parametrize("arm_name", ["per", "ners"])
def test_a_run_writes_the_same_csv_twice(arm_name, tmp_path, one_torch_thread):
    task, arm = _tiny_pendulum(), decl.ARMS[arm_name]
    first = runs.run_one(task, arm, 100, tmp_path / "first")
    second = runs.run_one(task, arm, 100, tmp_path / "second")
    rows = _rows_without_timing(first)
    assert [int(row["env_steps"]) for row in rows] == list(range(200, 1601, 200))
    assert [row["eval_step"] for row in rows if row["eval_step"]] == ["800", "1600"]
    assert rows == _rows_without_timing(second)
