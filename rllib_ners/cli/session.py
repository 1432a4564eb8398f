"""The Ray session of a command and the Tune run of a job (with its report)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from rllib_ners.cli.common import (
    INTERRUPTED_EXIT_CODE,
    PROG,
    RUN_INFO_FILE,
    CLIError,
    class_path,
    last_line,
    one_line,
)
from rllib_ners.cli.progress import ProgressCallback, format_duration, format_outcome


@contextmanager
def sigterm_as_sigint() -> Iterator[None]:
    """Within: SIGTERM (`kill`, `timeout`, a job scheduler) stops the command as
    Ctrl-C does. Tune handles SIGINT only (it saves the experiment and returns);
    Ray's own SIGTERM handler on the driver (`sys.exit`) ended the command in
    the middle of Tune's loop, the experiment unsaved and the trial's actors
    left running. Outside Tune's run, SIGINT's handler raises
    KeyboardInterrupt, so the `finally` blocks that shut Ray down run either
    way."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return

    def forward(signum, frame):
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:  # SIG_IGN / SIG_DFL set by someone else: stop as SIGINT's default
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def ray_session(args: argparse.Namespace) -> Iterator[None]:
    """Starts (or joins, with --ray-address) Ray unless it is up; shuts down after
    (on SIGTERM too: `sigterm_as_sigint`)."""
    import ray

    started = False
    if args.ray_address and args.num_cpus is not None:
        raise CLIError(
            "--num-cpus sizes the local Ray instance a command starts; with "
            "--ray-address the cluster's own CPUs count, so drop --num-cpus"
        )
    if not ray.is_initialized():
        try:
            if args.ray_address:
                ray.init(address=args.ray_address)
            else:
                ray.init(num_cpus=args.num_cpus, include_dashboard=False)
        except (ConnectionError, ValueError, RuntimeError) as error:
            target = args.ray_address or "a local Ray instance"
            raise CLIError(
                f"cannot start or join {target}: {one_line(error)}"
            ) from None
        started = True
    try:
        # After ray.init(), which sets a SIGTERM handler of its own (sys.exit).
        with sigterm_as_sigint():
            yield
    finally:
        if started:
            ray.shutdown()


@contextmanager
def tune_output(verbose: int) -> Iterator[None]:
    """At `verbose` 0, Tune's old output engine, which prints nothing (the new one,
    Ray's default, still prints a configuration box and TensorBoard hints)."""
    saved = os.environ.get("RAY_AIR_NEW_OUTPUT")
    if verbose == 0:
        os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("RAY_AIR_NEW_OUTPUT", None)
        else:
            os.environ["RAY_AIR_NEW_OUTPUT"] = saved


def check_resources(config, args: argparse.Namespace) -> None:
    """Refuses a run that Ray cannot place: Tune would wait for the resources
    forever, printing "No available node types can fulfill resource request".
    On a cluster (--ray-address or RAY_ADDRESS) an autoscaler may still add
    them, so there it says so in one line and goes on."""
    import ray

    if config.algo_class is None:
        return
    needed = config.algo_class.default_resource_request(config).required_resources
    available = ray.cluster_resources()
    short = {
        name: (amount, available.get(name, 0.0))
        for name, amount in needed.items()
        if amount > available.get(name, 0.0) + 1e-9
    }
    if not short:
        return
    wanted = ", ".join(f"{amount:g} {name}" for name, (amount, _) in short.items())
    have = ", ".join(
        f"{have:g} {name}" if have else f"no {name}"
        for name, (_, have) in short.items()
    )
    fixes = []
    if "GPU" in short:
        fixes.append("--num-gpus-per-learner 0 learns on the CPU")
    if "CPU" in short:
        fixes.append(
            "lower --num-env-runners or --num-learners (each takes a CPU, as does "
            "the driver), or give Ray more CPUs (--num-cpus)"
        )
    if not fixes:  # a resource of another kind (custom, memory)
        fixes.append("ask for less in the config, or start Ray with more")
    message = f"each trial needs {wanted}, but Ray has {have}: " + "; ".join(fixes)
    if getattr(args, "ray_address", None) or os.environ.get("RAY_ADDRESS"):
        print(f"note: {message} (waiting: the cluster may add nodes)", flush=True)
        return
    raise CLIError(message, 2)


class TuneJob:
    """One Tune experiment to run: trainable, config, stop and what to record."""

    def __init__(self, name, trainable, config, stop, source=None, script_args=()):
        self.name = name
        self.trainable = trainable  # a registered name or an Algorithm class
        self.config = config
        self.stop = stop
        self.source = source
        self.script_args = list(script_args)


def run_job(job: TuneJob, args: argparse.Namespace) -> int:
    """Runs `job` with Tune and prints its summary; the exit code."""
    started = time.time()
    results, run_dir = fit_job(job, args)
    return report_results(results, run_dir, job.stop, started)


def seed_our_buffer(config, seed) -> None:
    """Sets `replay_buffer_config["seed"]` to `seed` where the buffer is one
    of ours. Our buffers draw from a generator of their own, seeded by that
    key; this package's algorithms fill it from `config.seed`, a stock RLlib
    algorithm does not (RLlib's own buffers are unseeded), so `--seed` sets
    it for every config: the buffer draws as the trial's seed says."""
    from rllib_ners.algorithms.common.config.buffer_types import (
        is_fast_buffer,
        resolve_buffer_class,
    )

    buffer_config = config.replay_buffer_config or {}
    if "type" in buffer_config and is_fast_buffer(
        resolve_buffer_class(buffer_config["type"])
    ):
        config.replay_buffer_config = {**buffer_config, "seed": seed}


def fit_job(job: TuneJob, args: argparse.Namespace, *, tune_config=None, callbacks=()):
    """Runs `job` with Tune (progress lines on, Tune's own output at `args.verbose`)
    and returns (ResultGrid, run directory). `args` has the `train` flags
    storage_path, name, seed, verbose, max_failures, checkpoint_freq and
    checkpoint_at_end."""
    from ray import tune

    check_resources(job.config, args)
    storage = Path(args.storage_path or "~/ray_results").expanduser().resolve()
    run_name = args.name or f"{job.name}_{time.strftime('%Y-%m-%d_%H-%M-%S')}"
    run_dir = storage / run_name
    if (run_dir / "tuner.pkl").exists():
        raise CLIError(
            f"run directory {run_dir} exists already: pick another --name or continue "
            f"it with `{PROG} resume {run_dir}`"
        )
    config = job.config
    seeds = args.seed or []
    if len(seeds) > 1:
        config = config.copy(copy_frozen=False).debugging(
            seed=tune.grid_search(list(seeds))
        )
        # Each trial's buffer takes that trial's seed (resolved by Tune).
        seed_our_buffer(config, tune.sample_from(lambda trial: trial["seed"]))
    info = {
        "trainable": job.trainable if isinstance(job.trainable, str) else None,
        "trainable_class": None
        if isinstance(job.trainable, str)
        else class_path(job.trainable),
        "env": config.env if isinstance(config.env, str) else repr(config.env),
        "source": str(job.source) if job.source else None,
        "script_args": job.script_args,
        "stop": job.stop,
        "seeds": list(seeds),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / RUN_INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    print(f"Run directory: {run_dir}", flush=True)
    print(
        "Stop at: " + ", ".join(f"{k} >= {v}" for k, v in job.stop.items()), flush=True
    )
    tuner = tune.Tuner(
        job.trainable,
        param_space=config,
        **({"tune_config": tune_config} if tune_config is not None else {}),
        run_config=tune.RunConfig(
            name=run_name,
            storage_path=str(storage),
            stop=job.stop,
            verbose=args.verbose,
            callbacks=[ProgressCallback(job.stop), *callbacks],
            failure_config=tune.FailureConfig(max_failures=args.max_failures),
            checkpoint_config=tune.CheckpointConfig(
                checkpoint_frequency=args.checkpoint_freq,
                checkpoint_at_end=args.checkpoint_at_end,
            ),
        ),
    )
    with tune_output(args.verbose):
        return tuner.fit(), run_dir


def print_next_steps(run_dir: Path, checkpoint) -> None:
    """The commands that plot a run and evaluate its checkpoint."""
    print(f"Plot it: {PROG} plot {run_dir} -o curves.png", flush=True)
    if checkpoint:
        print(f"Evaluate it: {PROG} evaluate {checkpoint} --episodes 10", flush=True)


def report_results(results, run_dir: Path, stop=None, started=None) -> int:
    """Prints one line per trial (its outcome against `stop`), the wall time since
    `started`, the run directory and the next commands; CLIError if a trial failed
    or was interrupted (exit code 130, as for Ctrl-C)."""
    failed = interrupted = 0
    checkpoint = None
    for result in results:
        metrics = result.metrics or {}
        # Tune marks the last result of a trial it stopped `done`; a trial it
        # left running when the run was interrupted (Ctrl-C) is not.
        if result.error:
            status = "FAILED"
        elif metrics.get("done"):
            status = "done"
        else:
            status, interrupted = "interrupted", interrupted + 1
        trial = Path(result.path).name if result.path else "?"
        print(f"trial {trial}: {status}, {format_outcome(metrics, stop)}", flush=True)
        if result.checkpoint is not None:
            checkpoint = result.checkpoint.path
            print(f"  checkpoint: {checkpoint}", flush=True)
        if result.error:
            failed += 1
            print(f"  error: {last_line(result.error)}", flush=True)
    if started is not None:
        print(f"Wall time: {format_duration(time.time() - started)}", flush=True)
    print(f"Run directory: {run_dir}", flush=True)
    if failed:
        raise CLIError(
            f"{failed} of {len(results)} trial(s) failed (see error.txt in the trial "
            f"directories); after fixing the cause continue with `{PROG} resume "
            f"{run_dir}`"
        )
    if interrupted:
        raise CLIError(
            f"interrupted: {interrupted} of {len(results)} trial(s) stopped before "
            f"their stop criteria; continue with `{PROG} resume {run_dir}`",
            code=INTERRUPTED_EXIT_CODE,
        )
    print_next_steps(run_dir, checkpoint)
    return 0
