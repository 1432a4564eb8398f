"""A run in progress is claimed, so drivers sharing a results folder never
train it twice (`rllib_ners.study.claims`)."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys

import pytest

from rllib_ners.study import claims, cli, runs

pytestmark = pytest.mark.skipif(
    not claims.CLAIMS_SUPPORTED, reason="no fcntl: runs are not claimed here"
)

HOLD = (
    "import sys, time\n"
    "from rllib_ners.study.claims import RunClaim\n"
    "RunClaim(sys.argv[1]).__enter__()\n"
    "print('held', flush=True)\n"
    "time.sleep(120)\n"
)


@pytest.fixture
def held_claim(tmp_path):
    """A live process holding the claim of cartpole uniform seed 100; yields the
    run's CSV path and the process."""
    csv = runs.csv_path(tmp_path, "cartpole", "uniform", 100)
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(csv)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "held"
    yield csv, proc
    proc.kill()
    proc.wait()


def test_a_claim_is_held_while_its_process_lives_and_dropped_when_it_is_killed(
    held_claim,
):
    csv, proc = held_claim
    assert claims.holder(csv) == f"pid {proc.pid} on {os.uname().nodename}"
    with pytest.raises(claims.RunAlreadyClaimed, match=f"pid {proc.pid}"):
        with claims.RunClaim(csv):
            pytest.fail("claimed a run another process holds")
    # Killed mid-run: its file stays behind, but nobody holds it.
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert claims.claim_path(csv).exists() and claims.holder(csv) is None
    with claims.RunClaim(csv):
        assert claims.holder(csv) == f"pid {os.getpid()} on {os.uname().nodename}"
    # A run that ends removes its claim.
    assert not claims.claim_path(csv).exists() and claims.holder(csv) is None


def test_run_one_does_not_start_a_run_another_process_trains_or_finished(
    held_claim, monkeypatch, capsys
):
    csv, _ = held_claim
    monkeypatch.setattr(runs, "run_one", lambda *a: pytest.fail("a run started"))
    argv = [
        "run-one",
        "cartpole",
        "uniform",
        "100",
        "--results-dir",
        str(csv.parents[2]),
    ]
    assert cli.main(argv) == claims.ALREADY_RUNNING
    assert "is training this run" in capsys.readouterr().out
    # Finished by another process: nothing to do.
    other = runs.csv_path(csv.parents[2], "cartpole", "per", 100)
    runs.write_csv_atomic(other, [{"arm": "per"}])
    argv[2] = "per"
    assert cli.main(argv) == 0
    assert f"not started: {other} exists" in capsys.readouterr().out


def test_the_driver_skips_runs_other_processes_train_or_finished(
    held_claim, monkeypatch, capsys
):
    """Four runs planned: one is being trained by another process (its log is
    left alone), one was finished by another since the plan, one is claimed by
    another just before its child starts (the child exits ALREADY_RUNNING), one
    trains here."""
    csv, proc = held_claim
    results_dir = csv.parents[2]
    log_dir = results_dir / "logs"
    log_dir.mkdir()
    running_log = log_dir / "cartpole_uniform_seed100.log"
    running_log.write_text("the other process's progress\n")
    runs.write_csv_atomic(runs.csv_path(results_dir, "cartpole", "per", 100), [{}])
    started = []

    def child(task, arm, seed, *rest):
        started.append((task, arm, seed))
        status = claims.ALREADY_RUNNING if arm == "ners" else 0
        return [sys.executable, "-c", f"raise SystemExit({status})"]

    monkeypatch.setattr(runs, "_child_command", child)
    todo = [
        ("cartpole", "uniform", 100),
        ("cartpole", "per", 100),
        ("cartpole", "ners", 100),
        ("cartpole", "ners_reference", 100),
    ]
    outcome = runs.run_study(todo, results_dir, 2, log_dir)
    assert started == [("cartpole", "ners", 100), ("cartpole", "ners_reference", 100)]
    assert outcome == runs.StudyOutcome(done=1, failed=0, skipped=3)
    out = capsys.readouterr().out
    assert f"skip cartpole uniform seed100: pid {proc.pid} on" in out
    assert "skip cartpole per seed100: another process finished it" in out
    assert "skipped (another process claimed it first) cartpole ners seed100" in out
    assert running_log.read_text() == "the other process's progress\n"


def test_a_filesystem_without_flock_trains_unclaimed_and_says_so(
    tmp_path, monkeypatch, capsys
):
    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(claims.fcntl, "flock", no_locks)
    csv = runs.csv_path(tmp_path, "cartpole", "uniform", 100)
    with claims.RunClaim(csv):
        assert claims.holder(csv) is None
    assert not claims.claim_path(csv).exists()
    assert "cannot lock it (No locks available), so this run trains unclaimed" in (
        capsys.readouterr().out
    )
