"""One run of a study and a study of many runs, in child processes.

Every (arm, task, seed) trains one agent for the task's fixed env-step budget
and writes its learning curve to `<results-dir>/<task>/<arm>/seed<k>.csv` when,
and only when, it finishes (a temporary file renamed into place, so a CSV is
always a whole run). A rerun skips the runs whose CSV exists, so a study
resumes after an interruption; a run in progress holds a claim (`claims`) that
keeps other drivers on the same folder from starting it too.

What a CSV row holds (one row per training iteration, `log_every` env steps):
`env_steps` (training env steps, RLlib's `num_env_steps_sampled_lifetime`),
`eval_env_steps` (env steps the arm itself spent on evaluation episodes: the
`ners_reference` arm's replay reward; 0 for the others), `train_return_mean`
(RLlib's smoothed training-episode return: the mean over the last 100 episodes,
played with exploration), `eval_return_mean` (greedy return over
`eval_episodes` episodes of a separate env, on rows where an evaluation ran:
every `eval_every` env steps and at the budget; this is what the report uses),
`wall_time_s` (since the algorithm was built), `study_eval_time_s` (the part of
it spent in the study's own greedy evaluation, which the throughput figures
leave out), the same two as CPU time of the run's process (`cpu_time_s`,
`study_eval_cpu_s`: on a machine shared with other work, CPU time is the
fairer measure of an arm's cost) and, for NERS arms, the sampler diagnostics
`effective_sample_fraction` and `priority_entropy_normalized`.
"""

from __future__ import annotations

import csv
import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from rllib_ners.study import claims
from rllib_ners.study.declarations import (
    FAST_BUFFER,
    NERS_BUFFER,
    Arm,
    Task,
)

CSV_COLUMNS = (
    "arm",
    "task",
    "seed",
    "iteration",
    "env_steps",
    "eval_env_steps",
    "wall_time_s",
    "study_eval_time_s",
    "cpu_time_s",
    "study_eval_cpu_s",
    "train_return_mean",
    "eval_step",
    "eval_return_mean",
    "eval_episodes",
    "effective_sample_fraction",
    "priority_entropy_normalized",
)


def with_budget(task: Task, budget: Optional[int]) -> Task:
    """`task` with another budget, evaluated only at it (smoke runs)."""
    if budget is None:
        return task
    return dataclasses.replace(task, budget=budget, eval_every=budget)


def register_envs() -> None:
    """Registers MinAtar's gymnasium ids (`MinAtar/<Game>-v1`) if minatar is
    installed: `minatar.gym` defines them but registers nothing on import."""
    import gymnasium as gym

    if any(env_id.startswith("MinAtar/") for env_id in gym.registry):
        return
    try:
        import minatar.gym
    except ImportError:
        return
    minatar.gym.register_envs()


def check_task_available(task: Task) -> None:
    if task.requires is None:
        return
    import importlib.util

    if importlib.util.find_spec(task.requires) is None:
        raise SystemExit(
            f"task {task.name!r} needs the `{task.requires}` package: "
            f'pip install -e ".[study]"'
        )


def build_config(task: Task, arm: Arm, seed: int):
    """The AlgorithmConfig of one run: the task's agent with the arm's replay."""
    from rllib_ners import NERSDQNConfig, NERSSACConfig, RainbowDQNConfig
    from rllib_ners.algorithms.ners.presets import ners_reference
    from rllib_ners.algorithms.td3 import TD3Config

    buffer_type = NERS_BUFFER if arm.algo == "ners" else FAST_BUFFER
    if task.algo == "sac":
        config = NERSSACConfig()
    elif task.algo == "td3":
        config = TD3Config()
    else:  # "dqn" (`Task` checks it)
        config = NERSDQNConfig() if arm.algo == "ners" else RainbowDQNConfig()
    config = task.agent(config.environment(task.env))
    alpha = task.per_alpha if arm.alpha is None else arm.alpha
    learning_starts = config.num_steps_sampled_before_learning_starts
    config = (
        config.training(
            replay_buffer_config={
                # The agent's own replay settings (Atari: frame stacking) stay.
                **{
                    key: value
                    for key, value in (config.replay_buffer_config or {}).items()
                    if key == "frame_stack"
                },
                "type": buffer_type,
                "capacity": task.capacity,
                "alpha": alpha,
                **_importance_sampling(task, arm, learning_starts),
                **(
                    {}
                    if arm.min_priority is None
                    else {"min_priority": arm.min_priority}
                ),
                **_sampler_settings(arm, config),
            }
        )
        .env_runners(num_env_runners=0)
        .learners(num_learners=0, num_gpus_per_learner=0)
        # Iterations end on env steps alone: RLlib's SAC also asks for at least
        # 1 s per iteration, which in the fast warm-up made the iteration
        # boundaries, and so the evaluation points, depend on the machine's speed.
        .reporting(
            min_sample_timesteps_per_iteration=task.log_every,
            min_time_s_per_iteration=0,
        )
        .debugging(seed=seed)
    )
    if arm.loss == "huber":
        if task.algo == "dqn":
            config = config.training(td_error_loss_fn="huber")
        else:
            config = config.training(critic_loss="huber")
    if arm.algo == "ners":
        config = config.ners(**(arm.ners_settings or {}))
        if arm.reference:
            config = ners_reference(config)
    return config


def _sampler_settings(arm: Arm, config) -> dict:
    """The arm's replay method (ReLo, LaBER) and its settings; ReLo's priority
    map, unless the arm names one, follows the agent's loss ("exp" for C51)."""
    from rllib_ners.algorithms.common.config.sampler_presets import (
        RELO,
        relo_transform_for,
    )

    if arm.sampler is None:
        return {}
    settings = {"sampler": arm.sampler, **(arm.sampler_settings or {})}
    if arm.sampler == RELO:
        settings.setdefault("relo_transform", relo_transform_for(config))
    return settings


def _importance_sampling(task: Task, arm: Arm, learning_starts: int) -> dict:
    """The buffer's beta: the task's, annealed to 1 over the budget after
    learning starts, or the arm's constant one (LAP: 0, no weights)."""
    if arm.beta is not None:
        # None overrides an annealing the agent's own settings may carry.
        return {"beta": arm.beta, "beta_final": None, "beta_annealing_timesteps": None}
    return {
        "beta": task.beta,
        "beta_final": 1.0,
        "beta_annealing_timesteps": max(1, task.budget - learning_starts),
    }


def check_configs(runs: Sequence[Tuple[Task, Arm, int]]) -> None:
    """Builds and validates the config of every (task, arm) among `runs` (with
    its first seed) before any run starts: a setting RLlib refuses, in a task's
    agent function or an arm's `.ners()` settings, stops the study here with the
    task and arm named, instead of failing in every run's child process."""
    from rllib_ners.utils.log_noise import silence_known_noise

    silence_known_noise()
    register_envs()
    first_seed: Dict[Tuple[str, str], Tuple[Task, Arm, int]] = {}
    for task, arm, seed in runs:
        first_seed.setdefault((task.name, arm.name), (task, arm, seed))
    for task, arm, seed in first_seed.values():
        try:
            build_config(task, arm, seed).validate()
        except Exception as error:
            raise SystemExit(
                f"task {task.name!r} with arm {arm.name!r} does not build a valid "
                f"config: {type(error).__name__}: {error}"
            ) from error


# ---------------------------------------------------------------------------
# One run
# ---------------------------------------------------------------------------


def csv_path(results_dir: Path, task: str, arm: str, seed: int) -> Path:
    return Path(results_dir) / task / arm / f"seed{seed}.csv"


# `study run` writes each run's output to `<results-dir>/logs/`.
LOG_DIR_NAME = "logs"


def log_path(log_dir: Path, task: str, arm: str, seed: int) -> Path:
    return Path(log_dir) / f"{task}_{arm}_seed{seed}.log"


def write_csv_atomic(path: Path, rows: Sequence[dict]) -> None:
    """Writes `rows` to `path` through a temporary file renamed into place, so
    that `path` exists only as a whole run."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({key: row.get(key, "") for key in CSV_COLUMNS})
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def greedy_returns(
    module,
    env_id: str,
    *,
    episodes: int,
    max_steps: int,
    seed: int,
    config=None,
    make_env: Optional[Callable] = None,
    frame_stack: int = 1,
):
    """Returns of `episodes` greedy episodes of a fresh env (`make_env()`, or
    `gym.make(env_id)`). Box actions are mapped to the env's bounds as `config`'s
    EnvRunner does; with `frame_stack > 1` the module sees the last that many
    frames on the last axis, zeros before the episode's first frame (as RLlib's
    frame stacking connector builds them)."""
    import gymnasium as gym
    import numpy as np

    from rllib_ners.env.greedy_action import greedy_action

    env = make_env() if make_env is not None else gym.make(env_id)
    returns = []
    try:
        for episode in range(episodes):
            observation, _ = env.reset(seed=seed + episode)
            frames = None
            if frame_stack > 1:
                frames = [np.zeros_like(observation)] * (frame_stack - 1)
                frames.append(observation)
            total = 0.0
            for _ in range(max_steps):
                model_input = (
                    np.concatenate(frames[-frame_stack:], axis=-1)
                    if frames is not None
                    else observation
                )
                observation, reward, terminated, truncated, _ = env.step(
                    greedy_action(module, model_input, env.action_space, config)
                )
                if frames is not None:
                    frames = frames[1:] + [observation]
                total += float(reward)
                if terminated or truncated:
                    break
            returns.append(total)
    finally:
        env.close()
    return returns


# The greedy evaluations of run seed k play their episodes from env seed
# `EVAL_SEED_PER_RUN_SEED * k + EVAL_SEED_PER_EVALUATION * j` on (the j-th
# evaluation): different envs for every evaluation of every run.
EVAL_SEED_PER_RUN_SEED = 10_000
EVAL_SEED_PER_EVALUATION = 100


def _number(value) -> str:
    if value is None:
        return ""
    value = float(value)
    return "" if value != value else f"{value:.6g}"


def run_one(task: Task, arm: Arm, seed: int, results_dir: Path) -> Path:
    """Trains one (arm, task, seed) for the task's budget; writes its CSV."""
    import ray
    import torch

    from rllib_ners.utils.log_noise import silence_known_noise

    torch.set_num_threads(1)
    silence_known_noise()
    register_envs()
    config = build_config(task, arm, seed)
    started_ray = not ray.is_initialized()
    if started_ray:
        # A private local instance: never join another agent's cluster.
        ray.init(
            address="local",
            num_cpus=1,
            include_dashboard=False,
            log_to_driver=False,
            logging_level="ERROR",
        )
    rows: List[dict] = []
    try:
        algo = config.build_algo()
        torch.set_num_threads(1)
        rows = _train_with_evaluations(algo, task, arm, seed)
        algo.stop()
    finally:
        if started_ray:
            ray.shutdown()
    path = csv_path(results_dir, task.name, arm.name, seed)
    write_csv_atomic(path, rows)
    return path


def _train_with_evaluations(algo, task: Task, arm: Arm, seed: int) -> List[dict]:
    """Trains `algo` to the task's budget: one CSV row per iteration, with the
    study's greedy evaluation on each row that passes a point of the schedule
    (every `eval_every` env steps, and at the budget)."""
    start, cpu_start = time.perf_counter(), time.process_time()
    study_eval_time = study_eval_cpu = 0.0
    next_eval = task.eval_every
    eval_index = 0
    steps = 0
    rows: List[dict] = []
    while steps < task.budget:
        row = _training_row(algo.train(), task, arm, seed, iteration=len(rows) + 1)
        steps = row["env_steps"]
        if steps >= next_eval or steps >= task.budget:
            # The evaluation stands for the schedule point it passed; the last
            # one is at the budget.
            eval_started, eval_cpu_started = time.perf_counter(), time.process_time()
            row.update(
                _evaluation_columns(
                    algo, task, seed, eval_index, min(next_eval, task.budget)
                )
            )
            study_eval_time += time.perf_counter() - eval_started
            study_eval_cpu += time.process_time() - eval_cpu_started
            eval_index += 1
            while next_eval <= steps:
                next_eval += task.eval_every
        row["wall_time_s"] = f"{time.perf_counter() - start:.2f}"
        row["study_eval_time_s"] = f"{study_eval_time:.2f}"
        row["cpu_time_s"] = f"{time.process_time() - cpu_start:.2f}"
        row["study_eval_cpu_s"] = f"{study_eval_cpu:.2f}"
        rows.append(row)
        print(
            f"[{task.name} {arm.name} seed{seed}] it {row['iteration']} steps "
            f"{steps} train {row['train_return_mean']} eval "
            f"{row.get('eval_return_mean', '')} wall {row['wall_time_s']}s",
            flush=True,
        )
    return rows


def _training_row(result: dict, task: Task, arm: Arm, seed: int, *, iteration):
    """The CSV columns one training iteration's `result` fills."""
    from ray.rllib.utils.metrics import (
        ENV_RUNNER_RESULTS,
        EPISODE_RETURN_MEAN,
        NUM_ENV_STEPS_SAMPLED_LIFETIME,
    )

    from rllib_ners.algorithms.ners.ners_learner import NERS_EVAL_ENV_STEPS_KEY
    from rllib_ners.ners.diagnostics import (
        EFFECTIVE_SAMPLE_FRACTION,
        PRIORITY_ENTROPY_NORMALIZED,
    )

    runners = result.get(ENV_RUNNER_RESULTS, {})
    ners = result.get("ners", {})
    return {
        "arm": arm.name,
        "task": task.name,
        "seed": seed,
        "iteration": iteration,
        "env_steps": int(runners.get(NUM_ENV_STEPS_SAMPLED_LIFETIME, 0)),
        "eval_env_steps": int(ners.get(NERS_EVAL_ENV_STEPS_KEY, 0) or 0),
        "train_return_mean": _number(runners.get(EPISODE_RETURN_MEAN)),
        "effective_sample_fraction": _number(ners.get(EFFECTIVE_SAMPLE_FRACTION)),
        "priority_entropy_normalized": _number(ners.get(PRIORITY_ENTROPY_NORMALIZED)),
    }


def _evaluation_columns(algo, task: Task, seed: int, eval_index: int, eval_step):
    """The CSV columns of the study's `eval_index`-th greedy evaluation, which
    stands for env step `eval_step`."""
    import numpy as np

    returns = greedy_returns(
        algo.get_module(),
        task.env,
        episodes=task.eval_episodes,
        max_steps=task.eval_max_steps,
        seed=EVAL_SEED_PER_RUN_SEED * seed + EVAL_SEED_PER_EVALUATION * eval_index,
        config=algo.config,
        make_env=task.eval_env,
        frame_stack=task.eval_frame_stack,
    )
    return {
        "eval_step": eval_step,
        "eval_return_mean": _number(np.mean(returns)),
        "eval_episodes": len(returns),
    }


# ---------------------------------------------------------------------------
# The study
# ---------------------------------------------------------------------------


def plan_runs(
    arms: Sequence[str], tasks: Sequence[str], seeds: Sequence[int], results_dir: Path
) -> Tuple[List[Tuple[str, str, int]], List[Tuple[str, str, int]]]:
    """(to run, already finished) lists of (task, arm, seed), seed-major: every
    task gets a seed of every arm before any task gets the next seed."""
    todo, done = [], []
    for seed in seeds:
        for task in tasks:
            for arm in arms:
                run = (task, arm, seed)
                if csv_path(results_dir, task, arm, seed).exists():
                    done.append(run)
                else:
                    todo.append(run)
    return todo, done


def _child_command(
    task: str,
    arm: str,
    seed: int,
    results_dir: Path,
    budget: Optional[int] = None,
    declarations: Sequence[Path] = (),
) -> List[str]:
    extra = [] if budget is None else ["--budget", str(budget)]
    for path in declarations:
        extra += ["--declarations", str(path)]
    return [
        sys.executable,
        "-m",
        "rllib_ners.study",
        "run-one",
        task,
        arm,
        str(seed),
        "--results-dir",
        str(results_dir),
        *extra,
    ]


# How often `run_study` looks for finished child processes.
POLL_INTERVAL_S = 2.0


@dataclasses.dataclass
class StudyOutcome:
    """What `run_study` did with its runs."""

    done: int = 0
    failed: int = 0
    # Finished or being trained by another process when their turn came.
    skipped: int = 0


def _taken_elsewhere(results_dir: Path, task: str, arm: str, seed: int) -> str:
    """Why another process has this run ("" if none has): its CSV appeared
    since the study was planned, or a live process holds its claim."""
    path = csv_path(results_dir, task, arm, seed)
    if path.exists():
        return "another process finished it"
    holder = claims.holder(path)
    return f"{holder} is training it" if holder else ""


def run_study(
    todo: Sequence[Tuple[str, str, int]],
    results_dir: Path,
    jobs: int,
    log_dir: Path,
    budget: Optional[int] = None,
    declarations: Sequence[Path] = (),
) -> StudyOutcome:
    """Runs `todo` in child processes, `jobs` at a time (one torch thread each).

    A run is skipped when its turn comes if another process has finished it or
    is training it (`claims`), so several drivers can share a results folder."""
    import rllib_ners

    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", RAY_USAGE_STATS_ENABLED="0")
    # The children import this very rllib_ners (a checkout first on the path).
    package_root = str(Path(rllib_ners.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (package_root, env.get("PYTHONPATH", "")) if p
    )
    log_dir.mkdir(parents=True, exist_ok=True)
    pending = list(todo)
    running: Dict[subprocess.Popen, Tuple[Tuple[str, str, int], float, object]] = {}
    outcome = StudyOutcome()
    while pending or running:
        while pending and len(running) < jobs:
            run = pending.pop(0)
            task, arm, seed = run
            why = _taken_elsewhere(results_dir, task, arm, seed)
            if why:
                outcome.skipped += 1
                print(
                    f"{time.strftime('%H:%M:%S')} skip {task} {arm} seed{seed}: {why}",
                    flush=True,
                )
                continue
            # Opened only now: the log of a run another process trains is its.
            log = open(log_path(log_dir, task, arm, seed), "w")
            proc = subprocess.Popen(
                _child_command(task, arm, seed, results_dir, budget, declarations),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
            running[proc] = (run, time.time(), log)
            print(
                f"{time.strftime('%H:%M:%S')} start {task} {arm} seed{seed}", flush=True
            )
        time.sleep(POLL_INTERVAL_S)
        for proc in [p for p in running if p.poll() is not None]:
            (task, arm, seed), t0, log = running.pop(proc)
            log.close()
            if proc.returncode == 0:
                status = "done"
                outcome.done += 1
            elif proc.returncode == claims.ALREADY_RUNNING:
                status = "skipped (another process claimed it first)"
                outcome.skipped += 1
            else:
                status = f"FAILED ({proc.returncode})"
                outcome.failed += 1
            ended = outcome.done + outcome.failed + outcome.skipped
            print(
                f"{time.strftime('%H:%M:%S')} {status} {task} {arm} seed{seed} "
                f"in {time.time() - t0:.0f}s ({ended}/{len(todo)}; "
                f"log {log.name})",
                flush=True,
            )
    return outcome
