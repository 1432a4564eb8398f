"""`rllib-ners study status`: where a study stands, read from its folder alone
(`rllib_ners.study.status`)."""

from __future__ import annotations

import os

import pytest

from rllib_ners.study import claims, cli, runs, status


def _finished(results_dir, task, arm, seed, cpu_time_s):
    runs.write_csv_atomic(
        runs.csv_path(results_dir, task, arm, seed),
        [
            {
                "arm": arm,
                "task": task,
                "seed": seed,
                "iteration": 1,
                "env_steps": 1000,
                "wall_time_s": 2 * cpu_time_s,
                "cpu_time_s": cpu_time_s,
            }
        ],
    )


def _log(results_dir, task, arm, seed, steps, written_at):
    path = runs.log_path(results_dir / runs.LOG_DIR_NAME, task, arm, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["A.L.E: Arcade Learning Environment", "[Powered by Stella]"]
    lines += [
        f"[{task} {arm} seed{seed}] it {i} steps {s} train 1.5 eval  wall {i}.00s"
        for i, s in enumerate(steps, 1)
    ]
    path.write_text("\n".join(lines + ["some warning from a library"]) + "\n")
    os.utime(path, (written_at, written_at))
    return path


def test_progress_is_the_last_progress_line_of_the_log(tmp_path):
    now = 1_000_000.0
    path = _log(tmp_path, "cartpole", "per", 101, [1000, 2000, 12000], now - 90)
    assert status.read_log_progress(path, now) == status.LogProgress(12000, 90.0)
    path.write_text("A.L.E: Arcade Learning Environment\n")
    assert status.read_log_progress(path, now) is None
    assert status.read_log_progress(tmp_path / "missing.log", now) is None


@pytest.mark.skipif(not claims.CLAIMS_SUPPORTED, reason="no fcntl: no claims")
def test_counts_cpu_used_and_the_estimate_of_cpu_left(tmp_path):
    now = 1_000_000.0
    budget = 50_000  # cartpole's
    _finished(tmp_path, "cartpole", "uniform", 100, 100.0)
    _finished(tmp_path, "cartpole", "uniform", 101, 300.0)
    _finished(tmp_path, "cartpole", "uniform", 103, 110.0)
    _finished(tmp_path, "cartpole", "per", 100, 50.0)
    # Training now: claimed, its log at 20% of the budget.
    _log(tmp_path, "cartpole", "per", 101, [5000, 10000], now - 30)
    # Stopped part-way (a log, no claim): it starts again from scratch.
    _log(tmp_path, "cartpole", "uniform", 102, [5000], now - 7200)
    claim = runs.csv_path(tmp_path, "cartpole", "per", 101)
    cells = [("cartpole", "uniform"), ("cartpole", "per"), ("acrobot", "uniform")]
    with claims.RunClaim(claim):
        study = status.study_status(tmp_path, cells, [100, 101, 102, 103], now)
    state = {(r.task, r.arm, r.seed): r.state for r in study.runs}
    assert state == {
        ("cartpole", "uniform", 100): "finished",
        ("cartpole", "uniform", 101): "finished",
        ("cartpole", "uniform", 102): "to do",
        ("cartpole", "uniform", 103): "finished",
        ("cartpole", "per", 100): "finished",
        ("cartpole", "per", 101): "training",
        ("cartpole", "per", 102): "to do",
        ("cartpole", "per", 103): "to do",
        ("acrobot", "uniform", 100): "to do",
        ("acrobot", "uniform", 101): "to do",
        ("acrobot", "uniform", 102): "to do",
        ("acrobot", "uniform", 103): "to do",
    }
    assert study.cpu_used_s == 560.0
    # uniform 102 at uniform's median (110, though its log got to 5000 steps);
    # per 101 at per's median for the 80% of its budget left; per 102, 103 whole.
    assert study.cpu_left_s == pytest.approx(
        110.0 + 50.0 * (1 - 10000 / budget) + 100.0
    )
    assert study.unpriced == 4  # acrobot: no finished run to price it

    text = status.render_status(study)
    assert "4 of 12 runs finished, 1 training, 7 to do" in text
    assert "0.2 used by the finished runs, about 0.1 left (and 4 runs" in text
    lines = text.splitlines()
    assert any(
        line.split() == ["cartpole", "uniform", "3", "0", "1", "1.8"] for line in lines
    )
    assert any(
        line.split() == ["cartpole", "per", "1", "1", "2", "0.8"] for line in lines
    )
    assert any(
        line.split() == ["acrobot", "uniform", "0", "0", "4", "-"] for line in lines
    )
    training = lines.index("training now:")
    assert lines[training + 1] == (
        f"  cartpole per seed101: 10000 of {budget} env steps (log written 30 s ago); "
        f"pid {os.getpid()} on {os.uname().nodename}"
    )
    assert (
        "  cartpole uniform seed102: log at 5000 of 50000 env steps, written 2.0 h ago"
        in lines
    )


def test_a_claim_left_by_a_killed_run_does_not_count_as_training(tmp_path):
    _finished(tmp_path, "cartpole", "uniform", 100, 100.0)
    csv = runs.csv_path(tmp_path, "cartpole", "uniform", 101)
    claims.claim_path(csv).write_text("pid 1 on gone\n")  # nobody holds it
    study = status.study_status(tmp_path, [("cartpole", "uniform")], [100, 101])
    assert [r.state for r in study.runs] == ["finished", "to do"]
    assert study.cpu_left_s == 100.0


def test_the_planned_cells_take_each_algorithms_arms_from_the_finished_runs(tmp_path):
    _finished(tmp_path, "hopper_100k", "uniform", 100, 10.0)
    _finished(tmp_path, "hopper_100k", "ners_reference", 100, 10.0)
    _finished(tmp_path, "walker2d_100k", "ners", 100, 10.0)
    _finished(tmp_path, "ms_pacman_100k", "per", 100, 10.0)
    _finished(tmp_path, "alien_100k", "uniform", 100, 10.0)
    _finished(tmp_path, "undeclared_task", "uniform", 100, 10.0)
    sac_arms = ["uniform", "ners_reference", "ners"]  # declaration order
    assert status.planned_cells(tmp_path) == [
        *[("hopper_100k", arm) for arm in sac_arms],
        *[("walker2d_100k", arm) for arm in sac_arms],
        ("ms_pacman_100k", "uniform"),
        ("ms_pacman_100k", "per"),
        ("alien_100k", "uniform"),
        ("alien_100k", "per"),
    ]
    assert status.planned_cells(tmp_path, tasks=["qbert_100k"]) == [
        ("qbert_100k", "uniform"),
        ("qbert_100k", "per"),
    ]
    # Given arms are taken on every task, as `study run` takes them.
    assert status.planned_cells(tmp_path, ["cartpole"], ["ners"]) == [
        ("cartpole", "ners")
    ]


def test_the_status_command(tmp_path, capsys):
    _finished(tmp_path, "cartpole", "uniform", 100, 120.0)
    assert cli.main(["status", "--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"{tmp_path} (seeds 100 101 102 103 104): 1 of 5 runs finished" in out
    assert "about 0.1 left" in out  # four runs at 120 s


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--results-dir", "{tmp}/missing"], "no such results folder"),
        (["--results-dir", "{tmp}"], "give them with --tasks and --arms"),
        (["--results-dir", "{tmp}", "--arms", "nope"], "--arms: unknown 'nope'"),
        (["--results-dir", "{tmp}", "--tasks", "nope"], "--tasks: unknown 'nope'"),
    ],
)
def test_bad_status_options_name_the_option(argv, message, tmp_path):
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in argv]
    with pytest.raises(SystemExit, match=message):
        cli.main(["status", *argv])
