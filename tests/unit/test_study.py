"""The study harness (`rllib_ners.study`, `rllib-ners study`) and its report,
without running a study: the declarations build valid configs, finished runs
are skipped, CSVs appear only whole, a user's declarations join the built-in
ones, and the report's rliable numbers are right on cases whose answer is
known and regenerate byte for byte from the CSVs."""

from __future__ import annotations

import argparse
import csv
import functools
import re

import numpy as np
import pytest

from rllib_ners.study import cli, runs
from rllib_ners.study import declarations as decl

pytest.importorskip("rliable")
from rllib_ners.study import report, results, statistics  # noqa: E402

REPS = 200  # bootstrap samples: the tests check point estimates and bounds only


def test_plan_is_seed_major_and_skips_finished_runs(tmp_path):
    """A run whose CSV exists is not run again; the rest run seed by seed, every
    task and arm of a seed before the next seed."""
    runs.write_csv_atomic(runs.csv_path(tmp_path, "cartpole", "per", 100), [{}])
    todo, done = runs.plan_runs(
        ["uniform", "per"], ["cartpole", "acrobot"], [100, 101], tmp_path
    )
    assert done == [("cartpole", "per", 100)]
    assert todo == [
        ("cartpole", "uniform", 100),
        ("acrobot", "uniform", 100),
        ("acrobot", "per", 100),
        ("cartpole", "uniform", 101),
        ("cartpole", "per", 101),
        ("acrobot", "uniform", 101),
        ("acrobot", "per", 101),
    ]


def test_csv_is_written_whole_with_every_column(tmp_path):
    path = runs.csv_path(tmp_path, "cartpole", "per", 3)
    runs.write_csv_atomic(path, [{"arm": "per", "task": "cartpole", "seed": 3}])
    assert path == tmp_path / "cartpole" / "per" / "seed3.csv"
    assert sorted(p.name for p in path.parent.iterdir()) == ["seed3.csv"]
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == runs.CSV_COLUMNS
    assert rows[0]["arm"] == "per" and rows[0]["eval_return_mean"] == ""


def test_task_declarations_are_consistent():
    assert set(decl.SUITE) <= set(decl.TASKS)
    assert {decl.TASKS[name].algo for name in decl.SUITE} == {"dqn"}
    assert {task.algo for task in decl.TASKS.values()} == {"dqn", "sac", "td3"}
    for task in decl.TASKS.values():
        assert task.budget % task.eval_every == 0, task.name
        assert task.eval_every % task.log_every == 0, task.name
        assert task.max_return > task.random_return, task.name
        assert task.anchor_note, task.name


@pytest.mark.parametrize("task_name", list(decl.TASKS))
def test_every_arm_builds_a_valid_config(task_name):
    """Every (task, arm) config passes `validate()`, the task's agent settings
    are the same for every arm, and only the replay differs."""
    task = decl.TASKS[task_name]
    if task.requires:
        pytest.importorskip(task.requires)
    runs.register_envs()
    configs = {}
    for arm in decl.ARMS.values():
        config = runs.build_config(task, arm, seed=100)
        if task.algo == "td3" and arm.name == "ners_module":
            # TD3's actor has no encoder for NERS to read.
            with pytest.raises(ValueError, match="encoder='module'"):
                config.validate()
            continue
        config.validate()
        configs[arm.name] = config
        # Atari tasks train on this package's preprocessed env.
        assert config.env == ("rllib_ners.atari" if task.eval_env else task.env)
        assert config.seed == 100
        assert config.num_env_runners == 0
        assert config.replay_buffer_config["capacity"] == task.capacity
        # Iterations (and so evaluations) fall on env steps, never on time.
        assert not config.min_time_s_per_iteration, (task_name, arm.name)
        assert config.min_sample_timesteps_per_iteration == task.log_every
    alphas = {name: c.replay_buffer_config["alpha"] for name, c in configs.items()}
    expected_alphas = {
        "uniform": 0.0,
        "per": task.per_alpha,
        "ners_reference": 0.5,
        "ners": task.per_alpha,
        "ners_module": task.per_alpha,
        "lap": 0.4,
        "relo": 0.5,
        "laber": 0.0,
    }
    if task.algo == "td3":
        del expected_alphas["ners_module"]
    assert alphas == expected_alphas
    # LAP: priority max(|delta|, 1)^0.4, no importance weights, Huber loss.
    lap = configs["lap"]
    assert lap.replay_buffer_config["min_priority"] == 1.0
    assert lap.replay_buffer_config["beta"] == 0.0
    assert lap.replay_buffer_config.get("beta_final") is None
    if task.algo == "dqn":
        assert lap.td_error_loss_fn == "huber"
    else:
        assert lap.critic_loss == "huber"
    assert configs["per"].replay_buffer_config["beta_final"] == 1.0
    assert configs["uniform"].replay_buffer_config["type"] == decl.FAST_BUFFER
    assert configs["ners"].replay_buffer_config["type"] == decl.NERS_BUFFER
    assert configs["ners_reference"].ners_config["replay_reward_mode"] == "eval_return"
    if task.algo == "sac":
        from rllib_ners import NERSSACConfig

        assert all(isinstance(c, NERSSACConfig) for c in configs.values())
        assert not configs["per"].uses_ners_replay
        assert configs["ners"].uses_ners_replay
        shared = (
            "actor_lr",
            "critic_lr",
            "alpha_lr",
            "tau",
            "training_intensity",
            "model_config",
        )
    elif task.algo == "td3":
        from rllib_ners import TD3Config

        assert all(isinstance(c, TD3Config) for c in configs.values())
        assert not configs["per"].uses_ners_replay
        assert configs["ners"].uses_ners_replay
        assert configs["per"].critic_loss == "mse"
        shared = (
            "actor_lr",
            "critic_lr",
            "tau",
            "policy_delay",
            "target_noise",
            "target_noise_clip",
            "exploration_noise",
            "random_timesteps",
            "training_intensity",
            "model_config",
        )
    else:
        shared = ("lr", "epsilon", "target_network_update_freq")
    shared += (
        "n_step",
        "train_batch_size_per_learner",
        "gamma",
        "num_steps_sampled_before_learning_starts",
        "rollout_fragment_length",
    )
    for key in shared:
        values = {repr(getattr(c, key)) for c in configs.values()}
        assert len(values) == 1, (task_name, key, values)


def test_the_ners_arm_writes_its_settings_out():
    """The `ners` arm's settings are an explicit dict in the declaration, so a
    change of the `.ners()` defaults cannot silently change the arm; and they
    are today's defaults (docs/ners.md calls the arm "the recommended variant"),
    so changing a default means deciding what happens to the arm's runs."""
    from rllib_ners import NERSSettings

    written = decl.ARMS["ners"].ners_settings
    shaping = (
        "encoder",
        "objective",
        "parameterization",
        "max_log_correction",
        "baseline",
        "baseline_decay",
        "linear_skip",
        "linear_skip_lr",
        "lr",
        "train_size",
        "train_draw",
        "normalizer_size",
        "feature_normalization",
        "replay_reward_mode",
        "min_episodes_per_update",
    )
    assert set(shaping) <= set(written)
    defaults = NERSSettings()
    for key in shaping:
        assert written[key] == getattr(defaults, key), key
    assert decl.ARMS["ners_reference"].reference


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--arms", "lapx"], "--arms: unknown 'lapx'"),
        (["--tasks", "pong"], "--tasks: unknown 'pong'"),
        (["--jobs", "0"], "--jobs must be at least 1"),
        (["--seeds", "100", "-3"], r"--seeds must be in \[0, 4294967295\].*got -3"),
        (["--budget", "0"], "--budget must be positive"),
    ],
)
def test_bad_options_name_the_option(argv, message, tmp_path):
    with pytest.raises(SystemExit, match=message):
        cli.main(["run", "--results-dir", str(tmp_path), *argv])


# --- the report -------------------------------------------------------------


def _write_run(results_dir, task_name, arm, seed, eval_returns):
    """A finished run's CSV on the task's real evaluation schedule."""
    task = decl.TASKS[task_name]
    steps = list(range(task.eval_every, task.budget + 1, task.eval_every))
    assert len(eval_returns) == len(steps)
    rows = []
    for i, (step, ret) in enumerate(zip(steps, eval_returns)):
        rows.append(
            {
                "arm": arm,
                "task": task_name,
                "seed": seed,
                "iteration": i + 1,
                "env_steps": step,
                "eval_env_steps": 0,
                "wall_time_s": step / 100,
                "study_eval_time_s": 0,
                "cpu_time_s": step / 200,
                "study_eval_cpu_s": 0,
                "train_return_mean": ret,
                "eval_step": step,
                "eval_return_mean": ret,
                "eval_episodes": 10,
            }
        )
    runs.write_csv_atomic(runs.csv_path(results_dir, task_name, arm, seed), rows)


def _fixture(results_dir):
    """cartpole and acrobot; `per` and `same` have identical runs, `better`
    beats every `per` run, `slow` uses more CPU per env step."""
    for task_name in ("cartpole", "acrobot"):
        task = decl.TASKS[task_name]
        n = task.budget // task.eval_every
        lo, hi = task.random_return, task.max_return
        for seed in (100, 101, 102, 103):
            level = lo + (hi - lo) * (0.2 + 0.1 * (seed - 100))  # 0.2 .. 0.5
            curve = np.linspace(lo, level, n)
            _write_run(results_dir, task_name, "per", seed, curve)
            _write_run(results_dir, task_name, "same", seed, curve)
            _write_run(results_dir, task_name, "better", seed, curve + 0.5 * (hi - lo))


def test_report_numbers_on_known_cases(tmp_path):
    _fixture(tmp_path)
    runs, notes = results.load_runs(tmp_path)
    assert not notes and len(runs) == 24
    result = statistics.compute(runs, reps=REPS)
    assert result["groups"] == {"all tasks": ["cartpole", "acrobot"]}
    assert result["baselines"] == ["per"]  # no uniform runs here
    per = {kind: result["poi"][kind]["per"] for kind in ("final", "auc")}
    for scope in ("cartpole", "acrobot", "all tasks"):
        # Identical arms: probability of improvement exactly 0.5; an arm whose
        # every run beats every PER run: 1.
        assert per["final"][scope]["same"][0] == 0.5
        assert per["final"][scope]["better"][0] == 1.0
        assert per["auc"][scope]["better"][0] == 1.0
    # Final normalised scores of per: 0.2, 0.3, 0.4, 0.5 -> IQM = mean of the
    # middle two = 0.35, inside its interval; `better` is 0.5 higher.
    point, low, high, n_runs = result["iqm"]["final"]["cartpole"]["per"]
    assert point == pytest.approx(0.35) and low <= point <= high and n_runs == 4
    assert result["iqm"]["final"]["cartpole"]["better"][0] == pytest.approx(0.85)
    assert result["iqm"]["final"]["all tasks"]["per"][0] == pytest.approx(0.35)
    # AUC: the mean of a straight line from 0 to the final score.
    assert result["iqm"]["auc"]["acrobot"]["per"][0] == pytest.approx(0.175)
    # Same CPU time per step for every arm: throughput ratio 1.
    assert result["throughput"]["cartpole"]["better"][1]["per"] == pytest.approx(1.0)
    assert result["throughput"]["cartpole"]["per"][0] == pytest.approx(200.0)
    # Compute in all: 3 arms x 4 seeds per task, each run budget / 200 CPU
    # seconds and budget / 100 wall seconds.
    budgets = decl.TASKS["cartpole"].budget + decl.TASKS["acrobot"].budget
    cost = result["compute"]["all tasks"]
    assert cost["cpu_hours"] == pytest.approx(12 * budgets / 200 / 3600)
    assert cost["wall_hours"] == pytest.approx(12 * budgets / 100 / 3600)
    assert cost["runs_without_cpu_time"] == 0
    assert (
        f"The runs took {12 * budgets / 200 / 3600:.1f} CPU hours, "
        f"{12 * budgets / 100 / 3600:.1f} hours of wall time of their processes."
    ) in report.render_markdown(result, [], expected_runs=24)


def test_compute_counts_runs_without_cpu_time_apart(tmp_path):
    _fixture(tmp_path)
    path = runs.csv_path(tmp_path, "cartpole", "better", 101)
    rows = list(csv.DictReader(path.open()))
    for row in rows:  # a CSV from before CPU time was recorded
        row["cpu_time_s"] = ""
    runs.write_csv_atomic(path, rows)
    result = statistics.compute(results.load_runs(tmp_path)[0], reps=REPS)
    budgets = decl.TASKS["cartpole"].budget + decl.TASKS["acrobot"].budget
    without = decl.TASKS["cartpole"].budget  # the run left without CPU time
    cost = result["compute"]["all tasks"]
    assert cost["runs_without_cpu_time"] == 1
    assert cost["cpu_hours"] == pytest.approx((12 * budgets - without) / 200 / 3600)
    assert cost["wall_hours"] == pytest.approx(12 * budgets / 100 / 3600)
    text = report.render_markdown(result, [], expected_runs=24)
    assert "of their processes; 1 run(s) recorded no CPU time." in text


def test_which_arm_beats_which(tmp_path):
    """`better` beats `per` and `same` (every run above theirs); `same` and `per`
    are identical, so neither beats the other; only `better` is unbeaten. The
    pair (better, same) has no baseline in it and is bootstrapped on its own."""
    _fixture(tmp_path)
    result = statistics.compute(results.load_runs(tmp_path)[0], reps=REPS)
    for kind in ("final", "auc"):
        for scope in ("cartpole", "acrobot", "all tasks"):
            wins = {(x, y): est for x, y, est in result["wins"][kind][scope]}
            assert set(wins) == {("better", "per"), ("better", "same")}
            assert wins[("better", "same")] == (1.0, 1.0, 1.0)
            assert result["unbeaten"][kind][scope] == ["better"]
    text = report.render_markdown(result, [], expected_runs=24)
    assert (
        "| all tasks | final | better beats per: 1.00 [1.00, 1.00]; "
        "better beats same: 1.00 [1.00, 1.00] | better |"
    ) in text


def test_beats_needs_the_probability_and_the_interval_above_one_half():
    assert statistics.beats((0.6, 0.51, 0.7))
    assert not statistics.beats((0.59, 0.55, 0.7))  # point below 0.6
    assert not statistics.beats((0.8, 0.5, 0.95))  # interval reaches 0.5
    # The reverse of a pair bootstrapped one way only: P(Y > X) = 1 - P(X > Y),
    # its interval mirrored; a pair bootstrapped both ways keeps both.
    x, y = np.array([[1.0], [2.0]]), np.array([[0.0], [3.0]])
    pairs = statistics.pairwise_improvement(
        {"x": x, "y": y}, {("x", "y"): (0.4, 0.3, 0.49)}, reps=REPS
    )
    assert pairs[("y", "x")] == pytest.approx((0.6, 0.51, 0.7))
    assert statistics.beats(pairs[("y", "x")])
    both = {("x", "y"): (0.4, 0.3, 0.49), ("y", "x"): (0.55, 0.45, 0.8)}
    assert statistics.pairwise_improvement({"x": x, "y": y}, both, reps=REPS) == both


def test_the_bootstrapped_metrics_equal_rliables_bit_for_bit():
    # The report bootstraps its own numpy forms of rliable's IQM and
    # probability of improvement; they must give rliable's values exactly
    # (ties, equal arms, one run, uneven run counts included).
    from rliable import metrics

    rng = np.random.default_rng(7)
    for _ in range(300):
        runs_x, runs_y, tasks = rng.integers(1, 8, size=3)
        if rng.random() < 0.5:  # coarse scores: many ties
            x = rng.integers(0, 4, (runs_x, tasks)) / 4.0
            y = rng.integers(0, 4, (runs_y, tasks)) / 4.0
        else:
            x, y = rng.normal(size=(runs_x, tasks)), rng.normal(size=(runs_y, tasks))
        if rng.random() < 0.1:
            y = x.copy()  # rliable's equal-arms case: 0.5 without a test
        assert statistics._poi(x, y)[0] == metrics.probability_of_improvement(x, y)
        assert statistics._iqm(x)[0] == metrics.aggregate_iqm(x)
    x = np.array([[0.0, 1.0], [1.0, 1.0], [2.0, 0.0]])
    y = np.array([[1.0, 0.0], [1.0, 2.0]])
    # Of the 6 pairs of runs, task 0: x > y in 2, ties in 2; task 1: x > y in
    # 2, ties in 1.
    assert statistics._poi(x, y)[0] == pytest.approx((3 / 6 + 2.5 / 6) / 2)


def test_throughput_shows_the_median_and_the_spread_of_the_runs(tmp_path):
    """Runs of one arm at different CPU costs: the table shows their median
    and [lowest-highest]; runs at one cost show no spread."""
    _fixture(tmp_path)
    path = runs.csv_path(tmp_path, "cartpole", "better", 101)
    rows = list(csv.DictReader(path.open()))
    for row in rows:  # this run took twice the CPU time: half the rate
        row["cpu_time_s"] = float(row["cpu_time_s"]) * 2
    runs.write_csv_atomic(path, rows)
    result = statistics.compute(results.load_runs(tmp_path)[0], reps=REPS)
    median, ratios, spread = result["throughput"]["cartpole"]["better"]
    assert median == pytest.approx(200.0) and spread == pytest.approx((100.0, 200.0))
    assert result["throughput"]["cartpole"]["per"][2] == pytest.approx((200.0, 200.0))
    text = report.render_markdown(result, [], expected_runs=24)
    assert "| better | 200 [100-200] (1.00x PER) | 200 (1.00x PER) |" in text
    assert "| per | 200 (1.00x PER) | 200 (1.00x PER) |" in text


def test_report_regenerates_from_csvs_alone(tmp_path):
    _fixture(tmp_path)
    path = report.write_report(tmp_path, reps=REPS)
    text = path.read_text()
    # 3 arms x 2 tasks x 4 of 5 seeds; the default heading.
    assert text.startswith("# Sample-efficiency study (PARTIAL)\n")
    assert "24 finished runs of the 30 planned" in text
    assert "| same |" in text and "0.50 [" in text
    png = tmp_path / "report.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The bootstrap is seeded: the same CSVs give the same report, byte for byte.
    again = tmp_path / "again"
    again.mkdir()
    for csv_file in tmp_path.glob("*/*/seed*.csv"):
        target = again / csv_file.relative_to(tmp_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(csv_file.read_bytes())
    assert report.write_report(again, reps=REPS).read_bytes() == path.read_bytes()


def test_a_report_on_some_seeds_is_the_report_of_those_runs_alone(tmp_path):
    """An interim report on a staged study's first seeds (`--seeds`)."""
    study, alone = tmp_path / "study", tmp_path / "alone"
    _fixture(study)
    for csv_file in study.glob("*/*/seed10[01].csv"):
        target = alone / csv_file.relative_to(study)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(csv_file.read_bytes())
    text = report.write_report(study, seeds=[100, 101], reps=REPS).read_text()
    lines = text.splitlines()
    # 3 arms x 2 tasks x 2 seeds, which are the plan: not partial.
    assert lines[0] == "# Sample-efficiency study"
    assert lines[2] == (
        "12 finished runs on seeds 100, 101 only (12 finished runs of other "
        "seeds left out)."
    )
    expected = report.write_report(alone, reps=REPS).read_text().splitlines()
    assert expected[2] == "12 finished runs of the 30 planned: the numbers will move."
    assert lines[3:] == expected[3:]  # every number the same
    # Seeds with runs still to come: partial, against those seeds' plan.
    text = report.write_report(study, seeds=[100, 101, 104], reps=REPS).read_text()
    assert text.startswith("# Sample-efficiency study (PARTIAL)\n")
    assert (
        "12 finished runs on seeds 100, 101, 104 only (12 finished runs of other "
        "seeds left out) of the 18 planned: the numbers will move."
    ) in text
    with pytest.raises(SystemExit, match="for the given arms/tasks/seeds"):
        report.write_report(study, seeds=[7], reps=REPS)


def test_report_lists_the_cpu_model_of_each_run(tmp_path):
    _fixture(tmp_path)
    text = report.write_report(tmp_path, reps=REPS).read_text()
    assert "## Machines" not in text  # no machines.csv: no section
    rows = ["task,arm,seed,cpu,recorded_from"]
    for seed in (100, 101):
        rows.append(f"cartpole,per,{seed},AMD EPYC,a note")
    rows.append("cartpole,per,102,Intel(R) Xeon(R) Processor,/proc/cpuinfo at commit")
    rows.append("acrobot,better,100,Intel(R) Xeon(R) Processor,/proc/cpuinfo at commit")
    rows.append("acrobot,better,100,AMD EPYC,a later duplicate row is ignored")
    rows.append("cartpole,per,999,AMD EPYC,a run that is not in the report")
    (tmp_path / results.MACHINES_FILE).write_text("\n".join(rows) + "\n")
    path = report.write_report(tmp_path, reps=REPS)
    text = path.read_text()
    section = text[text.index("## Machines") : text.index("![study]")]
    assert "2 CPU model(s) ran these runs (machines.csv), 20 run(s) without" in section
    assert (
        "| cartpole | per | AMD EPYC (2), Intel(R) Xeon(R) Processor (1), "
        "not recorded (1) |" in section
    )
    assert (
        "| acrobot | better | Intel(R) Xeon(R) Processor (1), not recorded (3) |"
        in (section)
    )
    assert "| cartpole | same | not recorded (4) |" in section
    # The same CSVs and machines.csv give the same report, byte for byte.
    again = tmp_path / "again"
    for source in [*tmp_path.glob("*/*/seed*.csv"), tmp_path / results.MACHINES_FILE]:
        target = again / source.relative_to(tmp_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read_bytes())
    assert report.write_report(again, reps=REPS).read_bytes() == path.read_bytes()


def test_report_leaves_out_runs_of_another_schedule(tmp_path):
    _fixture(tmp_path)
    path = runs.csv_path(tmp_path, "cartpole", "per", 104)
    runs.write_csv_atomic(
        path,
        [
            {
                "arm": "per",
                "task": "cartpole",
                "seed": 104,
                "env_steps": 1000,
                "wall_time_s": 1,
                "eval_step": 1000,
                "eval_return_mean": 10,
            }
        ],
    )
    loaded, notes = results.load_runs(tmp_path)
    assert len(loaded) == 24
    assert len(notes) == 1 and "seed104.csv" in notes[0]


def test_a_single_run_shows_its_score_without_an_interval(tmp_path):
    """A partial study: an arm with one run on a task reports that run's score
    and no interval, and is left out of the probability of improvement."""
    task = decl.TASKS["cartpole"]
    n = task.budget // task.eval_every
    for seed in (100, 101):
        _write_run(tmp_path, "cartpole", "per", seed, np.full(n, 261.1))
    _write_run(tmp_path, "cartpole", "uniform", 100, np.full(n, 500.0))
    result = statistics.compute(results.load_runs(tmp_path)[0], reps=REPS)
    point, low, high, n_runs = result["iqm"]["final"]["cartpole"]["uniform"]
    assert (point, n_runs) == (1.0, 1) and np.isnan(low) and np.isnan(high)
    assert report._fmt((point, low, high)) == "1.00 [no CI]"
    assert "uniform" not in result["poi"]["final"]["per"].get("cartpole", {})
    assert "uniform" not in result["iqm"]["final"].get("all tasks", {})


def test_domains_are_aggregated_apart_and_compared_with_uniform_and_per(tmp_path):
    """A study with SAC and DQN tasks: each algorithm's tasks are aggregated on
    their own as well as together; an arm run on one domain only (the paper's
    sampler on MuJoCo) is aggregated there and not over all tasks; every arm is
    compared with uniform and with PER, and its cost shown relative to both."""
    for task_name in ("pendulum", "cartpole"):
        task = decl.TASKS[task_name]
        n = task.budget // task.eval_every
        lo, hi = task.random_return, task.max_return
        for seed in (100, 101, 102):
            base = np.linspace(lo, lo + 0.3 * (hi - lo), n)
            _write_run(tmp_path, task_name, "uniform", seed, base)
            _write_run(tmp_path, task_name, "per", seed, base)
            _write_run(tmp_path, task_name, "ners", seed, base + 0.4 * (hi - lo))
            if task_name == "pendulum":
                _write_run(tmp_path, task_name, "ners_reference", seed, base)
    result = statistics.compute(results.load_runs(tmp_path)[0], reps=REPS)
    assert result["groups"] == {
        "all tasks": ["cartpole", "pendulum"],
        "all dqn tasks": ["cartpole"],
        "all sac tasks": ["pendulum"],
    }
    assert result["baselines"] == ["uniform", "per"]
    final = result["iqm"]["final"]
    assert "ners_reference" in final["all sac tasks"]
    assert "ners_reference" not in final["all tasks"]
    for baseline in ("uniform", "per"):
        table = result["poi"]["final"][baseline]
        assert table["all tasks"]["ners"][0] == 1.0
        assert table["all sac tasks"]["ners_reference"][0] == 0.5
    ratios = result["throughput"]["pendulum"]["ners"][1]
    assert set(ratios) == {"uniform", "per"}
    text = report.render_markdown(result, [], expected_runs=99)
    assert "Probability of improvement over uniform, final score" in text
    assert "Probability of improvement over PER, auc score" in text
    assert "(1.00x uniform, 1.00x PER)" in text
    assert results.planned_runs(results.load_runs(tmp_path)[0]) == (4 + 3) * 5
    # The paper's sampler is also compared with ours (the plan's rule 2): its
    # every run is below every `ners` run, so P(ners_reference > ners) = 0.
    assert result["poi_compared"] == {
        "uniform": ["per", "ners_reference", "ners"],
        "per": ["uniform", "ners_reference", "ners"],
        "ners": ["ners_reference"],
    }
    over_ners = result["poi"]["final"]["ners"]
    assert over_ners["pendulum"]["ners_reference"][0] == 0.0
    assert over_ners["all sac tasks"]["ners_reference"][0] == 0.0
    assert "all tasks" not in over_ners and "cartpole" not in over_ners
    table = text.split("Probability of improvement over ners, final score:")[1]
    table = table.split("\n\n")[1].splitlines()
    assert [row.split(" | ")[0] for row in table[2:]] == ["| ners_reference"]
    assert "(the other NERS arms also over ners)" in text
    # Which arm beats which, per domain: `ners` beats every other arm, the
    # paper's sampler included (pairs no table compares, e.g. ners over
    # ners_reference, are the complement of the one that is).
    for scope, others in (
        ("all sac tasks", {"uniform", "per", "ners_reference"}),
        ("all dqn tasks", {"uniform", "per"}),
    ):
        wins = {(x, y) for x, y, _ in result["wins"]["final"][scope]}
        assert wins == {("ners", other) for other in others}
        assert result["unbeaten"]["final"][scope] == ["ners"]
    # The compute line sums each domain's runs: budget / 200 CPU s per run.
    sac = 4 * 3 * decl.TASKS["pendulum"].budget / 200 / 3600
    dqn = 3 * 3 * decl.TASKS["cartpole"].budget / 200 / 3600
    assert (
        f"The runs took {sac + dqn:.1f} CPU hours (all dqn tasks {dqn:.1f}, "
        f"all sac tasks {sac:.1f})"
    ) in text


def test_the_ners_module_arm_differs_from_ners_only_in_the_encoder():
    ners, module = decl.ARMS["ners"], decl.ARMS["ners_module"]
    assert module.ners_settings == {**ners.ners_settings, "encoder": "module"}
    assert (module.algo, module.alpha, module.reference) == (
        ners.algo,
        ners.alpha,
        ners.reference,
    )
    # The study's default arms stay the four it reports.
    run_args = cli.build_parser().parse_args(["run", "--results-dir", "x"])
    assert run_args.arms == list(decl.STUDY_ARMS)
    assert "ners_module" not in decl.STUDY_ARMS


@pytest.mark.parametrize(
    "arms, compared_with",
    [(("lap", "ners_module"), None), (("ners", "ners_module"), "ners")],
)
def test_a_study_without_uniform_or_per_is_reported_in_whole_sentences(
    tmp_path, monkeypatch, arms, compared_with
):
    """A study of other arms (your own, or NERS variants) has no uniform or PER
    baseline: the report says what it compares, never "over ," or "relative to"
    with nothing after it, and the figure leaves out a comparison it lacks."""
    task = decl.TASKS["cartpole"]
    n = task.budget // task.eval_every
    lo, hi = task.random_return, task.max_return
    for seed in (100, 101, 102):
        curve = np.linspace(lo, lo + (0.2 + 0.1 * (seed - 100)) * (hi - lo), n)
        _write_run(tmp_path, "cartpole", arms[0], seed, curve)
        _write_run(tmp_path, "cartpole", arms[1], seed, curve + 0.3 * (hi - lo))
    panel_titles = []
    real_panel = report._plot_summary_panel

    def recording_panel(ax, result, kind, baseline, colors):
        panel_titles.append((kind, baseline))
        real_panel(ax, result, kind, baseline, colors)

    monkeypatch.setattr(report, "_plot_summary_panel", recording_panel)
    text = report.write_report(tmp_path, reps=REPS).read_text()
    assert not re.search(r"\b(relative to|over|and to|and over) *[,.(\n]", text)
    assert "## Throughput: env steps per CPU second (median over runs)\n" in text
    if compared_with is None:
        assert "probabilit" not in text.split("\n\n")[1]  # the header paragraph
        assert "Probability of improvement over" not in text
        assert panel_titles == [("final", None), ("auc", None)]
    else:
        assert (
            "IQM with 95% stratified-bootstrap intervals and probabilities of "
            "improvement of the other NERS arms over ners, from rliable" in text
        )
        assert "Probability of improvement over ners, final score:" in text
        assert panel_titles[2] == (None, "ners")
    # Every pair is still compared: the better arm beats the other.
    assert f"{arms[1]} beats {arms[0]}: 1.00 [1.00, 1.00]" in text


def test_a_side_study_is_reported_with_the_studys_own_runs(tmp_path, monkeypatch):
    """`--also` joins another folder's runs; `--arms` and `--tasks` keep only
    the named ones; the report says which command produced it."""
    # The text is checked, not the statistics: fewer bootstrap samples will do.
    monkeypatch.setattr(
        cli, "write_report", functools.partial(cli.write_report, reps=REPS)
    )
    study, side = tmp_path / "study", tmp_path / "side"
    _fixture(study)
    task = decl.TASKS["acrobot"]
    n = task.budget // task.eval_every
    for seed in (100, 101, 102):
        _write_run(side, "acrobot", "uniform", seed, np.full(n, task.max_return))
    argv = [
        "--results-dir",
        str(side),
        "--also",
        str(study),
        "--arms",
        "per",
        "uniform",
        "--tasks",
        "acrobot",
        "--title",
        "Acrobot side study",
    ]
    assert cli.main(["report", *argv]) == 0
    text = (side / "report.md").read_text()
    assert text.startswith("# Acrobot side study (PARTIAL)\n")
    assert "--title 'Acrobot side study'`" in text  # the command, pasteable
    # Only acrobot, only per (4 runs) and uniform (3 runs): 7 of 2 x 1 x 5.
    assert "7 finished runs of the 10 planned" in text
    assert "| acrobot |" in text and "| cartpole |" not in text
    assert "| same |" not in text and "| better |" not in text
    assert "`rllib-ners study report --results-dir" in text
    # uniform's every run scores 1, above every PER run: P(improvement) = 1.
    assert "| uniform | 1.00 [" in text
    assert (side / "report.png").exists()
    assert not (study / "report.md").exists()


def test_a_run_in_two_folders_is_an_error(tmp_path):
    _fixture(tmp_path / "a")
    _fixture(tmp_path / "b")
    with pytest.raises(SystemExit, match="in two of the folders"):
        report.write_report(tmp_path / "a", also=[tmp_path / "b"], reps=REPS)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--arms", "nope"], "--arms: unknown"),
        (["--tasks", "pong"], "--tasks: unknown"),
        (["--also", "/nonexistent/folder"], "no such results folder"),
        (["--title", "  "], "--title must be one non-empty line"),
        (["--title", "two\nlines"], "--title must be one non-empty line"),
        (["--jobs", "0"], "--jobs must be at least 1"),
    ],
)
def test_bad_report_options_name_the_option(argv, message, tmp_path):
    with pytest.raises(SystemExit, match=message):
        cli.main(["report", "--results-dir", str(tmp_path), *argv])


def test_the_report_is_the_same_computed_in_several_processes(tmp_path):
    """Each bootstrap seeds its own RNG, so the scopes' statistics computed in
    spawned processes are the single process's, byte for byte in the report."""
    one, two = tmp_path / "one", tmp_path / "two"
    _fixture(one)
    _fixture(two)
    runs_one = results.load_runs(one)[0]
    alone = statistics.compute(runs_one, reps=REPS)
    pooled = statistics.compute(runs_one, reps=REPS, jobs=2)
    for key in ("iqm", "poi", "wins", "unbeaten"):
        assert pooled[key] == alone[key], key
    # Six scopes were bootstrapped (3 per score kind), each with intervals.
    assert sum(len(scopes) for scopes in alone["wins"].values()) == 6
    first = report.write_report(one, reps=REPS).read_bytes()
    assert report.write_report(two, reps=REPS, jobs=2).read_bytes() == first


def test_the_report_quotes_its_command_without_jobs(tmp_path, monkeypatch):
    """`--jobs` changes nothing in the report, so the command the report quotes
    leaves it out: the same report for any number of processes."""
    calls = []
    monkeypatch.setattr(cli, "write_report", lambda *a, **kw: calls.append(kw))
    for jobs in (["--jobs", "3"], ["--jobs=3"]):
        argv = ["report", "--results-dir", str(tmp_path), *jobs, "--seeds", "100"]
        assert cli.main(argv) == 0
    assert len(calls) == 2
    for kw in calls:
        assert kw["jobs"] == 3
        assert kw["command"] == (
            f"rllib-ners study report --results-dir {tmp_path} --seeds 100"
        )


# --- your own tasks and arms ------------------------------------------------

USER_DECLARATIONS = """
from rllib_ners.study import Arm, Task


def my_agent(config):
    return config.training(lr=1e-3, train_batch_size_per_learner=16)


TASKS = [
    Task(
        name="my_cartpole",
        env="CartPole-v1",
        budget=2000,
        eval_every=1000,
        eval_episodes=2,
        eval_max_steps=100,
        log_every=500,
        random_return=22.2,
        max_return=500.0,
        anchor_note="random play; the episode cap",
        agent=my_agent,
        capacity=2000,
    )
]
ARMS = [Arm("per_03", "rainbow", alpha=0.3, description="PER with alpha 0.3")]
"""


@pytest.fixture
def user_declarations(tmp_path, monkeypatch):
    path = tmp_path / "my_study.py"
    path.write_text(USER_DECLARATIONS)
    monkeypatch.setattr(decl, "TASKS", dict(decl.TASKS))
    monkeypatch.setattr(decl, "ARMS", dict(decl.ARMS))
    monkeypatch.setattr(cli, "TASKS", decl.TASKS)
    monkeypatch.setattr(cli, "ARMS", decl.ARMS)
    return path


def test_a_users_task_and_arm_join_the_built_in_ones(user_declarations, capsys):
    assert cli.main(["list", "--declarations", str(user_declarations)]) == 0
    listed = capsys.readouterr().out
    assert "my_cartpole" in listed and "per_03" in listed and "cartpole" in listed
    task, arm = decl.TASKS["my_cartpole"], decl.ARMS["per_03"]
    config = runs.build_config(task, arm, seed=7)
    config.validate()
    assert config.lr == 1e-3 and config.train_batch_size_per_learner == 16
    assert config.replay_buffer_config["alpha"] == 0.3
    assert config.replay_buffer_config["capacity"] == 2000


def test_a_dry_run_plans_a_users_study_and_children_get_its_file(
    user_declarations, tmp_path, capsys
):
    argv = [
        "run",
        "--tasks",
        "my_cartpole",
        "--arms",
        "per_03",
        "uniform",
        "--seeds",
        "100",
        "101",
        "--results-dir",
        str(tmp_path / "results"),
        "--declarations",
        str(user_declarations),
        "--dry-run",
    ]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "0 runs finished already (skipped), 4 to run" in out
    assert "my_cartpole per_03 seed101" in out
    command = runs._child_command(
        "my_cartpole", "per_03", 100, tmp_path, None, [user_declarations]
    )
    assert command[1:4] == ["-m", "rllib_ners.study", "run-one"]
    assert command[-2:] == ["--declarations", str(user_declarations)]


def test_declarations_that_clash_or_hold_the_wrong_type_are_refused(
    user_declarations, tmp_path
):
    clash = tmp_path / "clash.py"
    clash.write_text(USER_DECLARATIONS.replace('"my_cartpole"', '"cartpole"'))
    with pytest.raises(SystemExit, match="'cartpole' is declared already"):
        decl.load_declarations(clash)
    wrong = tmp_path / "wrong.py"
    wrong.write_text("TASKS = ['cartpole']")
    with pytest.raises(SystemExit, match="TASKS must hold Task objects"):
        decl.load_declarations(wrong)
    with pytest.raises(SystemExit, match="no such file"):
        decl.load_declarations(tmp_path / "missing.py")


def test_rllib_ners_study_is_the_study_cli(capsys):
    from rllib_ners.cli import main

    assert main(["study", "list"]) == 0
    assert "hopper_100k" in capsys.readouterr().out
    assert main(["study", "run", "--results-dir", "x", "--arms", "nope"]) == 2
    assert "rllib-ners study: error: --arms: unknown 'nope'" in capsys.readouterr().err


def _user_task(**changes):
    """The user's task of USER_DECLARATIONS, with `changes`."""
    fields = {
        "name": "my_cartpole",
        "env": "CartPole-v1",
        "budget": 2000,
        "eval_every": 1000,
        "eval_episodes": 2,
        "eval_max_steps": 100,
        "log_every": 500,
        "random_return": 22.2,
        "max_return": 500.0,
        "anchor_note": "random play; the episode cap",
        "agent": lambda config: config,
        "capacity": 2000,
    }
    fields.update(changes)
    return decl.Task(**fields)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"name": "my/cartpole"}, "task name 'my/cartpole': use letters"),
        ({"env": ""}, "`env` must be a gymnasium id"),
        ({"budget": 2500}, r"`budget` \(2500\) must be a multiple of `eval_every`"),
        ({"eval_every": 0}, "`eval_every` must be a positive int, got 0"),
        ({"eval_episodes": 2.0}, "`eval_episodes` must be a positive int"),
        ({"log_every": True}, "`log_every` must be a positive int, got True"),
        ({"capacity": -1}, "`capacity` must be a positive int"),
        ({"max_return": 10.0}, r"`max_return` \(10.0\) must be above"),
        ({"random_return": float("nan")}, "must be finite numbers"),
        ({"agent": "my_agent"}, "`agent` must be a function"),
        ({"eval_env": 3}, "`eval_env` must be None or a function"),
        ({"per_alpha": -0.1}, "`per_alpha` must be >= 0"),
        ({"beta": 1.5}, r"`beta` must be in \[0, 1\]"),
        ({"algo": "ppo"}, "`algo` must be one of 'dqn', 'sac', 'td3', got 'ppo'"),
    ],
)
def test_a_task_with_a_wrong_field_is_refused_naming_it(changes, message):
    _user_task()  # the unchanged declaration is fine
    with pytest.raises(decl.DeclarationError, match=message):
        _user_task(**changes)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"name": "", "algo": "rainbow"}, "arm name '': use letters"),
        ({"name": "a", "algo": "dqn"}, "`algo` must be one of 'rainbow', 'ners'"),
        ({"name": "a", "algo": "rainbow", "alpha": -1}, "`alpha` must be None"),
        ({"name": "a", "algo": "ners", "ners_settings": ["lr"]}, "must be a dict"),
        ({"name": "a", "algo": "rainbow", "reference": True}, "need algo='ners'"),
        ({"name": "a", "algo": "rainbow", "ners_settings": {"lr": 1e-3}}, "need algo="),
    ],
)
def test_an_arm_with_a_wrong_field_is_refused_naming_it(fields, message):
    with pytest.raises(decl.DeclarationError, match=message):
        decl.Arm(**fields)


def test_a_declarations_file_with_a_wrong_field_names_the_file_and_field(tmp_path):
    path = tmp_path / "bad_budget.py"
    path.write_text(USER_DECLARATIONS.replace("budget=2000", "budget=2500"))
    with pytest.raises(
        SystemExit, match=r"bad_budget.py: task 'my_cartpole': `budget`"
    ):
        decl.load_declarations(path)


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["run", "dry-run"])
def test_a_config_rllib_refuses_stops_the_study_before_any_run(
    user_declarations, tmp_path, monkeypatch, dry_run
):
    """A setting RLlib's `validate()` refuses, in the user's agent function,
    ends `study run` (and its dry run) with the task and arm named, before a
    child process starts."""
    bad = tmp_path / "bad_agent.py"
    bad.write_text(
        USER_DECLARATIONS.replace(
            "train_batch_size_per_learner=16",
            "train_batch_size_per_learner=16, n_step=0",
        )
    )
    monkeypatch.setattr(runs, "run_study", lambda *a, **k: pytest.fail("a run started"))
    argv = ["run", "--tasks", "my_cartpole", "--arms", "uniform", "per_03"]
    argv += ["--seeds", "100", "--results-dir", str(tmp_path / "results")]
    with pytest.raises(
        SystemExit,
        match="task 'my_cartpole' with arm 'uniform' does not build a valid "
        "config: ValueError: `n_step` must be an integer >= 1",
    ):
        cli.main([*argv, "--declarations", str(bad), *dry_run])


def test_every_study_command_says_what_it_does():
    """`rllib-ners study CMD --help` opens with a description of CMD, and
    --results-dir says what the folder holds (the hidden run-one aside)."""
    from rllib_ners.study.cli import build_parser

    commands = next(
        action
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    for name, parser in commands.choices.items():
        if name == "run-one":
            continue
        assert parser.description, name
        help_text = parser.format_help()
        if "--results-dir" in help_text:
            assert "one CSV per finished run" in help_text, name
