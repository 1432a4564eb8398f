"""`rllib-ners train`: a tuned example file or `--algo ALGO --env ENV` via Tune."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Dict, List

from rllib_ners.cli.common import (
    ITERS_KEY,
    RETURN_KEY,
    STEPS_KEY,
    CLIError,
    parse_json_object,
)
from rllib_ners.cli.overrides import (
    apply_config_dict,
    check_env,
    config_from_yaml_experiment,
    fit_our_buffer_into_stock_config,
    load_python_example,
    load_yaml_experiments,
    resolve_algo,
    resolve_example_path,
    stop_criteria,
    validate_config,
)
from rllib_ners.cli.resume import resume_run
from rllib_ners.cli.session import TuneJob, ray_session, run_job, seed_our_buffer


def cmd_train(args: argparse.Namespace) -> int:
    if args.resume:
        if args.what or args.algo:
            raise CLIError("--resume continues a run: give no file and no --algo", 2)
        ignored = _flags_resume_ignores(args)
        if ignored:
            raise CLIError(
                f"--resume continues a run as it was started, so {', '.join(ignored)} "
                "would change nothing: leave them out (to train with other settings, "
                "start a new run)",
                2,
            )
        return resume_run(Path(args.resume), args)
    if args.script_args and args.what != "file":
        raise CLIError("arguments after `--` are for `train file X.py` only", 2)
    jobs = _jobs_to_train(args)
    overrides = parse_json_object(args.config, "--config") if args.config else {}
    for job in jobs:
        _apply_train_flags(job, args, overrides)
    if len(jobs) > 1 and args.name:
        raise CLIError("--name names one run; this file holds several experiments", 2)

    code = 0
    with ray_session(args):
        for job in jobs:
            code = max(code, run_job(job, args))
    return code


# The `train` flags that set up a new run, with their defaults: `--resume`
# restores the run's own settings and takes none of them.
_NEW_RUN_FLAGS = {
    "env": None,
    "config": None,
    "stop": None,
    "stop_reward": None,
    "stop_timesteps": None,
    "stop_iters": None,
    "num_env_runners": None,
    "num_learners": None,
    "num_gpus_per_learner": None,
    "seed": None,
    "storage_path": None,
    "name": None,
    "checkpoint_freq": 0,
    "checkpoint_at_end": True,
    "max_failures": 0,
}


def _flags_resume_ignores(args: argparse.Namespace) -> List[str]:
    """The new-run flags given beside `--resume` (and arguments after `--`)."""
    given = [
        "--" + dest.replace("_", "-")
        for dest, default in _NEW_RUN_FLAGS.items()
        if getattr(args, dest) != default
    ]
    if getattr(args, "script_args", None):
        given.append("arguments after `--`")
    return given


def _jobs_to_train(args: argparse.Namespace) -> List[TuneJob]:
    """The experiments of `train file PATH` or `train --algo ALGO --env ENV`."""
    if args.what is not None:
        if args.what != "file" or not args.path:
            raise CLIError(
                "usage: train file PATH [options] | train --algo ALGO --env ENV "
                "[options] | train --resume RUN_DIR",
                2,
            )
        if args.algo:
            raise CLIError("give either `file PATH` or --algo, not both", 2)
        return _jobs_of_example(resolve_example_path(args.path), args.script_args)
    if args.algo:
        cls = resolve_algo(args.algo)
        if not args.env:
            raise CLIError("--algo needs --env ENV")
        config = cls.get_default_config()
        return [TuneJob(f"{args.algo}_{args.env}", args.algo, config, {})]
    raise CLIError(
        "nothing to train: give `file PATH`, --algo ALGO --env ENV or --resume RUN_DIR",
        2,
    )


def _jobs_of_example(path: Path, script_args: List[str]) -> List[TuneJob]:
    """One job for a Python tuned example (stopping where its own flags say),
    one per experiment of a YAML file."""
    if path.suffix == ".py":
        config, example_args = load_python_example(
            path, script_args, refuse_runner_flags=True
        )
        defaults = {}
        if example_args is not None:
            defaults = {
                RETURN_KEY: getattr(example_args, "stop_reward", None),
                STEPS_KEY: getattr(example_args, "stop_timesteps", None),
                ITERS_KEY: getattr(example_args, "stop_iters", None),
            }
        job = TuneJob(
            path.stem,
            config.algo_class,
            config,
            defaults,
            source=path,
            script_args=script_args,
        )
        return [job]
    if path.suffix in (".yaml", ".yml"):
        if script_args:
            raise CLIError("arguments after `--` are for Python examples only", 2)
        jobs = []
        for name, spec in load_yaml_experiments(path):
            config, stop = config_from_yaml_experiment(name, spec, str(path))
            jobs.append(TuneJob(name, str(spec["run"]), config, stop, source=path))
        return jobs
    raise CLIError(f"{path}: expected a .py or .yaml tuned example")


def _apply_train_flags(
    job: TuneJob, args: argparse.Namespace, overrides: Dict[str, Any]
) -> None:
    """Sets `job`'s env, `--config` overrides, resources, seed and stop from the
    flags, and checks the result."""
    config = job.config
    if args.env:
        config.environment(args.env)
    apply_config_dict(config, overrides, "--config")
    fit_our_buffer_into_stock_config(config)
    if args.num_env_runners is not None:
        config.env_runners(num_env_runners=args.num_env_runners)
    if args.num_learners is not None:
        config.learners(num_learners=args.num_learners)
    if args.num_gpus_per_learner is not None:
        config.learners(num_gpus_per_learner=args.num_gpus_per_learner)
    if args.seed and len(args.seed) == 1:
        config.debugging(seed=args.seed[0])
    check_env(config.env)
    validate_config(config)
    if args.seed and len(args.seed) == 1:
        seed_our_buffer(config, args.seed[0])  # several: `fit_job`, per trial
    job.stop = stop_criteria(args, job.stop)
