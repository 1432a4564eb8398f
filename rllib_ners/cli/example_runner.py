"""`run_example(config, args)`: how the tuned examples in `tuned_examples/` run.

It stands in for RLlib's `run_rllib_example_script_experiment`: the scripts keep
`add_rllib_example_script_args` and its flags, but a run prints what a person reads,
the `rllib-ners train` progress line per iteration and a closing summary (return
reached, env steps, wall time, where the results and the checkpoint are, the
commands to plot and evaluate), instead of Tune's status tables and config dumps::

    if __name__ == "__main__":
        run_example(config, args)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from rllib_ners.cli.common import (
    ITERS_KEY,
    RETURN_KEY,
    STEPS_KEY,
    CLIError,
    one_line,
    remove_if_empty,
    result_metric,
)
from rllib_ners.cli.parser import int_in_range
from rllib_ners.cli.progress import (
    finite_number,
    format_duration,
    format_outcome,
    format_progress,
    progress_point,
    return_criterion,
    unknown_stop_keys_note,
)
from rllib_ners.cli.session import (
    TuneJob,
    check_resources,
    fit_job,
    print_next_steps,
    report_results,
    sigterm_as_sigint,
)
from rllib_ners.utils.log_noise import silence_known_noise
from rllib_ners.utils.rng import MAX_SEED

# Without `--num-gpus-per-learner` the Learner goes where it trained faster as
# measured, where the cluster has a GPU. On an H100/H200 machine with 16 cores,
# with a GPU Learner: NERS-DQN on CartPole 250-300 env steps/s (a 2-core CPU:
# 680-750), SAC on Hopper with our PER 45.5 (its CPU Learner: 66.9): one small
# update per env step leaves the GPU idle while the host waits on kernel
# launches and copies, so these stay on the CPU. Data-efficient Rainbow on
# MsPacman with our PER: 53.6 env steps/s with the GPU Learner, 33.8 with the
# CPU one (docs/benchmarks/gpu_atari_2026-11-27_1.txt): the DQN family on
# Atari frames takes the GPU. RLlib's example runner always picks the GPU.
CPU_LEARNER_BY_DEFAULT = (
    "Learner on the CPU although the cluster has a GPU: with one small update "
    "per env step it trains faster there; pass --num-gpus-per-learner=1 to use "
    "the GPU."
)
GPU_LEARNER_BY_DEFAULT = (
    "Learner on the GPU: on Atari frames the convolutions train faster there "
    "(data-efficient Rainbow 1.59x the CPU Learner's env steps/s on an H200 "
    "machine); pass --num-gpus-per-learner=0 to keep it on the CPU."
)


def learner_trains_faster_on_a_gpu(config) -> bool:
    """Whether `config`'s Learner trained faster on a GPU than on the CPU, as
    measured (see above): a DQN-family config on this package's Atari env."""
    from ray.rllib.algorithms.dqn import DQNConfig

    from rllib_ners.env import ATARI_ENV_NAME

    return isinstance(config, DQNConfig) and config.env == ATARI_ENV_NAME


def add_overlap_sampling_args(parser: argparse.ArgumentParser) -> None:
    """`--overlap-sampling`, `--weights-sync-interval` and
    `--rollout-fragment-length`, for the tuned examples whose remote
    EnvRunners may sample while the Learner updates
    (`overlap_sampling_settings(args)` turns the first two into `.training()`
    kwargs; `run_example` applies the fragment length)."""
    parser.add_argument(
        "--overlap-sampling",
        action="store_true",
        help="remote EnvRunners sample while the Learner updates "
        "(config.training(overlap_sampling=True))",
    )
    parser.add_argument(
        "--weights-sync-interval",
        type=int,
        default=1,
        help="with --overlap-sampling: the fewest Learner updates between weight "
        "syncs to the EnvRunners (config.training(weights_sync_interval=K))",
    )
    parser.add_argument(
        "--rollout-fragment-length",
        type=int,
        default=None,
        help="env steps per sub-env in each sample() request (default: the "
        "example's; config.env_runners(rollout_fragment_length=L)). Each request "
        "costs the driver a fixed overhead: with --overlap-sampling and many "
        "EnvRunners, 8 with --num-envs-per-env-runner=4 makes requests of 32 env "
        "steps (docs/scaling.md)",
    )


def overlap_sampling_settings(args: argparse.Namespace) -> Dict[str, Any]:
    """The `.training()` kwargs of `add_overlap_sampling_args`' flags."""
    return {
        "overlap_sampling": args.overlap_sampling,
        "weights_sync_interval": args.weights_sync_interval,
    }


def add_seed_arg(parser: argparse.ArgumentParser) -> None:
    """`--seed`, as `rllib-ners train` takes it: an integer in [0, 2**32 - 1]
    (numpy's seed range), refused by argparse otherwise."""
    parser.add_argument(
        "--seed",
        type=int_in_range(0, MAX_SEED),
        default=None,
        help="seeds envs, nets and this package's replay buffers",
    )


def add_torch_threads_arg(parser: argparse.ArgumentParser, default: int) -> None:
    """`--torch-threads`: the Algorithm process's torch threads (>= 1)."""
    parser.add_argument(
        "--torch-threads",
        type=int_in_range(1),
        default=default,
        help="torch threads of the Algorithm's process (acting and learning "
        "alternate there with --num-env-runners=0, so it may use every core)",
    )


def add_gpu_learner_args(parser: argparse.ArgumentParser) -> None:
    """`--cuda-graph-updates` and `--act-on-learner-device`, for the tuned
    examples whose Learner may run on a GPU (`gpu_learner_settings(args)`
    turns them into `.training()` kwargs). Both opt-in, as in the config."""
    parser.add_argument(
        "--cuda-graph-updates",
        action="store_true",
        help="a Learner on a GPU replays its updates from captured CUDA graphs, "
        "one launch each (config.training(cuda_graph_updates=True)); a Learner "
        "it cannot serve updates eagerly and says why",
    )
    parser.add_argument(
        "--act-on-learner-device",
        action="store_true",
        help="with --num-env-runners=0 and a GPU Learner: the local EnvRunner acts "
        "on the GPU with the Learner's own weights, with --cuda-graph-updates "
        "from a captured graph too (config.training(act_on_learner_device=True))",
    )


def gpu_learner_settings(args: argparse.Namespace) -> Dict[str, Any]:
    """The `.training()` kwargs of `add_gpu_learner_args`' flags."""
    return {
        "cuda_graph_updates": args.cuda_graph_updates,
        "act_on_learner_device": args.act_on_learner_device,
    }


def run_example(
    config,
    args: Optional[argparse.Namespace] = None,
    *,
    stop: Optional[Dict[str, Any]] = None,
    success_metric: Optional[Dict[str, float]] = None,
):
    """Trains `config` the way a tuned example's command line asks.

    Args:
        config: the example's AlgorithmConfig. The flags change it as RLlib's
            runner does: `--env` (if the config has none), `--num-env-runners`,
            `--num-envs-per-env-runner`, `--num-learners`, `--num-gpus-per-learner`
            (default: where it trained faster as measured, the CPU but for the
            DQN family on Atari: see `learner_trains_faster_on_a_gpu`),
            `--num-cpus-per-learner`, `--evaluation-*` (with
            `--evaluation-interval`), `--log-level`, `--output`. RLlib's flags
            that would change nothing here (`--algo`, `--num-agents`,
            `--old-api-stack`, aggregator actors, Tune's flags with `--no-tune`,
            ...) are refused, naming the flag.
        args: the parsed `add_rllib_example_script_args()` flags (parsed from
            `sys.argv` if None).
        stop: stop criteria, result key -> value (None values are dropped).
            Default: `--stop-reward` on `env_runners/episode_return_mean`,
            `--stop-timesteps` on `num_env_steps_sampled_lifetime`, `--stop-iters`.
        success_metric: the {result key: value} that `--as-test` needs some
            iteration to reach. Default: the mean-return criterion of `stop`, else
            `--stop-reward` on `env_runners/episode_return_mean`.

    By default the run goes through Ray Tune: results and checkpoints land in
    `~/ray_results/<script name>_<time>/` (a run `rllib-ners resume` can continue),
    with a checkpoint at the end always (`--checkpoint-freq N` adds more) and
    `--num-samples`, `--max-concurrent-trials` and `--wandb-key` honoured. With
    `--no-tune` the algorithm trains in this process with the same progress lines
    and is checkpointed at the end into its log directory.

    Ray's, Tune's and RLlib's console output (status tables, config dumps, worker
    logs, start-up notes) stays off; `--verbose N` or `--log-level LEVEL` on the
    command line turn it back on. Errors are never hidden: a failing trial prints
    its error.

    Returns:
        The Tune ResultGrid, or the last result dict with `--no-tune`. If a trial
        fails, or `--as-test` is given and the success metric was not reached, it
        prints one `<script>: error: ...` line to stderr and exits with code 1.
    """
    if args is None:
        from ray.rllib.examples.utils import add_rllib_example_script_args

        args = add_rllib_example_script_args().parse_args()
    prog = Path(sys.argv[0]).name or "run_example"
    try:
        return _run_example(config, args, stop, success_metric)
    except CLIError as error:
        print(f"{prog}: error: {one_line(error)}", file=sys.stderr, flush=True)
        raise SystemExit(error.code) from None


def _flag_given(flag: str) -> bool:
    """Whether `flag` is on the command line (not just the parser's default),
    spelt out or abbreviated as argparse takes it (`--verb 3`: the parser
    accepted the prefix, so it was unique; a prefix that is a flag of its own,
    `--evaluation-duration` of `--evaluation-duration-unit`, is that flag)."""
    for arg in sys.argv[1:]:
        name = arg.split("=", 1)[0]
        if name == flag:
            return True
        if (
            name.startswith("--")
            and len(name) > 2
            and flag.startswith(name)
            and name not in _CHECKED_FLAGS
        ):
            return True
    return False


def _run_example(config, args, stop, success_metric):
    import ray

    if getattr(args, "enable_new_api_stack", False):
        raise CLIError("--enable-new-api-stack is gone: the new stack is the default")
    if getattr(args, "local_mode", False):
        raise CLIError("--local-mode is no longer supported by Ray")
    _check_example_numbers(args)
    _refuse_unused_example_flags(args)
    as_test = bool(args.as_test or getattr(args, "as_release_test", False))
    loud = _flag_given("--verbose") or getattr(args, "log_level", None) is not None
    if not loud:
        silence_known_noise()
    if stop is None:
        stop = {
            RETURN_KEY: args.stop_reward,
            STEPS_KEY: args.stop_timesteps,
            ITERS_KEY: args.stop_iters,
        }
    elif ITERS_KEY not in stop and _flag_given("--stop-iters"):
        # An example with stop criteria of its own still stops at --stop-iters.
        stop = {**stop, ITERS_KEY: args.stop_iters}
    stop = {key: value for key, value in stop.items() if value is not None}
    if success_metric:
        success = next(iter(success_metric.items()))
    else:
        success = return_criterion(stop) or (RETURN_KEY, args.stop_reward)

    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(
            num_cpus=args.num_cpus or None,
            include_dashboard=False,
            log_to_driver=loud,
            logging_level=logging.INFO if loud else logging.WARNING,
        )
    try:
        with sigterm_as_sigint():  # after ray.init(): see sigterm_as_sigint
            _apply_example_args(config, args)
            _validate_with_the_flags(config)
            if args.no_tune:
                check_resources(config, args)  # (Tune's path checks in fit_job)
                results, best = _train_in_process(config, stop, success[0])
            else:
                results, best = _train_with_tune(config, args, stop, success[0], loud)
    finally:
        if started_ray:
            ray.shutdown()
    if as_test:
        key, target = success
        if best is None or best < float(target):
            reached = "nothing" if best is None else f"{best:.2f} at best"
            raise CLIError(
                f"--as-test failed: {key} reached {reached}, below the required "
                f"{float(target):g}"
            )
        print(f"--as-test passed: {key} reached {best:.2f} >= {float(target):g}")
    return results


# The example flags with a lower bound (RLlib's parser takes any int), checked
# before Ray starts: out of range, a run fails deep inside a trial or hangs.
_EXAMPLE_FLAG_MINIMA = {
    "num_samples": 1,
    "max_concurrent_trials": 1,
    "evaluation_num_env_runners": 0,
    "evaluation_duration": 1,
    "num_env_runners": 0,
    "num_envs_per_env_runner": 1,
    "rollout_fragment_length": 1,
    "num_learners": 0,
    "num_gpus_per_learner": 0,
    "num_cpus_per_learner": 0,
    "num_cpus": 0,
    "stop_iters": 1,
    "stop_timesteps": 1,
    "checkpoint_freq": 0,
}


# Flags of RLlib's example parser that a tuned example here does not use:
# each example builds its own algorithm and its agents.
_UNUSED_EXAMPLE_FLAGS = {
    "--algo": "the example builds its own algorithm; run another example, or "
    "`rllib-ners train --algo ALGO --env ENV`",
    "--num-agents": "the example sets its own agents",
    "--tune-max-report-freq": "Tune reports every training iteration here",
    "--num-aggregator-actors-per-learner": "this package's algorithms use no "
    "aggregator actors (each would hold a CPU idle)",
    "--old-api-stack": "this package's algorithms run on RLlib's new API stack only",
    "--as-release-test": "no release-test JSON is written here; use --as-test",
}

# Flags that act only beside another one, with that one in words.
_EVALUATION_FLAGS = (
    "--evaluation-num-env-runners",
    "--evaluation-duration",
    "--evaluation-duration-unit",
    "--evaluation-parallel-to-training",
)
_TUNE_FLAGS = (
    "--num-samples",
    "--max-concurrent-trials",
    "--checkpoint-freq",
    "--wandb-key",
    "--wandb-project",
    "--wandb-run-name",
)
# Every flag `_flag_given` is asked about.
_CHECKED_FLAGS = frozenset(
    [*_UNUSED_EXAMPLE_FLAGS, *_EVALUATION_FLAGS, *_TUNE_FLAGS]
    + ["--verbose", "--stop-iters"]
)


def _refuse_unused_example_flags(args) -> None:
    """A flag RLlib's example parser takes but these examples would ignore is
    refused before Ray starts, instead of changing nothing unseen."""
    for flag, why in _UNUSED_EXAMPLE_FLAGS.items():
        if _flag_given(flag):
            raise CLIError(f"{flag}: not used by this example: {why}", 2)
    if not (getattr(args, "evaluation_interval", 0) or 0) > 0:
        for flag in filter(_flag_given, _EVALUATION_FLAGS):
            raise CLIError(
                f"{flag}: evaluation runs only with --evaluation-interval=N "
                "(N > 0 training iterations between evaluations); add it",
                2,
            )
    if getattr(args, "no_tune", False):
        for flag in filter(_flag_given, _TUNE_FLAGS):
            raise CLIError(
                f"{flag}: Tune's, and --no-tune trains without Tune (one "
                "trial, a checkpoint at the end); drop one of the two",
                2,
            )
    if _flag_given("--wandb-project") or _flag_given("--wandb-run-name"):
        if not getattr(args, "wandb_key", None):
            raise CLIError(
                "--wandb-project and --wandb-run-name log to Weights & Biases "
                "only with --wandb-key KEY; add it",
                2,
            )
    framework = getattr(args, "framework", "torch")
    if framework not in (None, "torch"):
        raise CLIError(
            f"--framework={framework}: this package's algorithms are PyTorch "
            "only; leave the flag out (torch is the default)",
            2,
        )


def _validate_with_the_flags(config) -> None:
    """The config's `validate()` once the flags are applied: a setting a flag
    made invalid ends in one error line naming it, not a traceback."""
    try:
        config.validate()
    except ValueError as error:
        # RLlib's config errors add a line on skipping validation: not a fix.
        first_line = (str(error).strip().splitlines() or [""])[0]
        raise CLIError(
            f"the config with these flags is invalid: {one_line(first_line)}"
        ) from None


def _check_example_numbers(args) -> None:
    for dest, minimum in _EXAMPLE_FLAG_MINIMA.items():
        value = getattr(args, dest, None)
        if isinstance(value, str):  # --evaluation-duration=auto
            continue
        if value is not None and not value >= minimum:
            flag = "--" + dest.replace("_", "-")
            raise CLIError(f"{flag}={value}: must be >= {minimum}", 2)
    stop_reward = getattr(args, "stop_reward", None)
    if stop_reward is not None and finite_number(stop_reward) is None:
        # No return reaches nan, and --as-test would then pass on nothing.
        raise CLIError(f"--stop-reward={stop_reward}: must be a finite number", 2)


def _apply_example_args(config, args) -> None:
    """Changes `config` from the example flags the way RLlib's runner does."""
    import ray

    config.framework(args.framework)
    if args.env is not None and config.env is None:
        config.environment(args.env)
    elif args.env is not None and args.env != config.env:
        raise CLIError(
            f"--env={args.env}: this example sets its own env ({config.env}), so "
            "the flag would change nothing; train that env with `rllib-ners train "
            f"--algo ALGO --env {args.env}` or an example for it (`rllib-ners "
            "examples`)",
            2,
        )
    if args.num_env_runners is not None:
        config.env_runners(num_env_runners=args.num_env_runners)
    if args.num_envs_per_env_runner is not None:
        config.env_runners(num_envs_per_env_runner=args.num_envs_per_env_runner)
    if getattr(args, "rollout_fragment_length", None) is not None:
        config.env_runners(rollout_fragment_length=args.rollout_fragment_length)
    if config.enable_rl_module_and_learner:
        if args.num_gpus is not None and args.num_gpus > 0:
            raise CLIError(
                "--num-gpus is for the old API stack; use --num-gpus-per-learner=1 "
                "and --num-learners=N"
            )
        config.resources(num_gpus=0)
        if args.num_learners is not None:
            config.learners(num_learners=args.num_learners)
        if args.num_aggregator_actors_per_learner is not None:
            config.learners(
                num_aggregator_actors_per_learner=args.num_aggregator_actors_per_learner
            )
        gpus_available = ray.cluster_resources().get("GPU", 0)
        learners = (config.num_learners or 0) or 1  # num_learners=0: a local one
        if args.num_gpus_per_learner is None:
            on_gpu = bool(gpus_available >= learners) and (
                learner_trains_faster_on_a_gpu(config)
            )
            config.learners(num_gpus_per_learner=1 if on_gpu else 0)
            if gpus_available:
                message = GPU_LEARNER_BY_DEFAULT if on_gpu else CPU_LEARNER_BY_DEFAULT
                print(message, flush=True)
        elif gpus_available < args.num_gpus_per_learner * learners:
            raise CLIError(
                f"--num-gpus-per-learner={args.num_gpus_per_learner} with {learners} "
                f"learner(s) needs more GPUs than the cluster has ({gpus_available})"
            )
        else:
            config.learners(num_gpus_per_learner=args.num_gpus_per_learner)
        if args.num_cpus_per_learner is not None:
            config.learners(num_cpus_per_learner=args.num_cpus_per_learner)
    elif args.num_gpus is not None:
        config.resources(num_gpus=args.num_gpus)
    if args.evaluation_interval > 0:
        config.evaluation(
            evaluation_num_env_runners=args.evaluation_num_env_runners,
            evaluation_interval=args.evaluation_interval,
            evaluation_duration=args.evaluation_duration,
            evaluation_duration_unit=args.evaluation_duration_unit,
            evaluation_parallel_to_training=args.evaluation_parallel_to_training,
        )
    if args.log_level is not None:
        config.debugging(log_level=args.log_level)
    if args.output is not None:
        config.offline_data(output=args.output)


def _stop_reached(result: Dict[str, Any], stop: Dict[str, Any]) -> bool:
    for key, threshold in stop.items():
        value = finite_number(result_metric(result, key))
        if value is not None and value >= float(threshold):
            return True
    return False


def _best(best: Optional[float], value: Any) -> Optional[float]:
    value = finite_number(value)
    if value is None:
        return best
    return value if best is None else max(best, value)


def _train_in_process(config, stop, success_key) -> Tuple[Dict[str, Any], Any]:
    """`--no-tune`: trains in this process until a stop criterion is met, writing
    `result.json` (one result per line, what `rllib-ners plot` reads) and a final
    checkpoint into `~/ray_results/<script name>_<time>/`. Torch gets the threads a
    Tune trial would (`num_cpus_for_main_process`)."""
    from ray.tune.utils.util import SafeFallbackEncoder

    started = time.time()
    run_dir = Path("~/ray_results").expanduser().resolve() / (
        f"{_script().stem or config.algo_class.__name__}_"
        f"{time.strftime('%Y-%m-%d_%H-%M-%S')}"
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    if config.framework_str == "torch":
        import torch

        # The threads Ray gives a Tune trial (its CPUs); torch's default of every
        # core is many times slower on a busy machine.
        torch.set_num_threads(max(1, int(config.num_cpus_for_main_process or 1)))
    algo = config.build_algo()
    # As Tune writes it: `rllib-ners plot` labels the run by its replay buffer.
    (run_dir / "params.json").write_text(
        json.dumps(algo.config.to_dict(), cls=SafeFallbackEncoder)
    )
    print(f"Run directory: {run_dir}", flush=True)
    print("Stop at: " + ", ".join(f"{k} >= {v}" for k, v in stop.items()), flush=True)
    result: Dict[str, Any] = {}
    previous, best = None, None
    try:
        with open(run_dir / "result.json", "w") as results_file:
            while True:
                result = algo.train()
                results_file.write(json.dumps(result, cls=SafeFallbackEncoder) + "\n")
                results_file.flush()
                if previous is None:
                    note = unknown_stop_keys_note(result, stop)
                    if note:
                        print(note, flush=True)
                print(format_progress(result, previous, stop), flush=True)
                previous = progress_point(result)
                best = _best(best, result_metric(result, success_key))
                if _stop_reached(result, stop):
                    break
        checkpoint = run_dir / f"checkpoint_{int(result.get(ITERS_KEY) or 0):06d}"
        algo.save_to_path(str(checkpoint))
    finally:
        algo.stop()
        remove_if_empty(getattr(algo, "logdir", None))
    print(f"done, {format_outcome(result, stop)}", flush=True)
    print(f"  checkpoint: {checkpoint}", flush=True)
    print(f"Wall time: {format_duration(time.time() - started)}", flush=True)
    print(f"Run directory: {run_dir}", flush=True)
    print_next_steps(run_dir, checkpoint)
    return result, best


def _script() -> Path:
    return Path(sys.argv[0]).resolve()


def _train_with_tune(config, args, stop, success_key, loud):
    """Runs the example through Tune, like `rllib-ners train file SCRIPT`."""
    from ray import tune

    script = _script()
    job = TuneJob(
        script.stem or config.algo_class.__name__,
        config.algo_class,
        config,
        stop,
        source=script if script.is_file() else None,
        script_args=sys.argv[1:],
    )
    options = argparse.Namespace(
        storage_path=None,
        name=None,
        seed=None,
        verbose=args.verbose if loud else 0,
        max_failures=0,
        checkpoint_freq=args.checkpoint_freq,
        checkpoint_at_end=True,  # `rllib-ners evaluate` needs one
    )
    callbacks = []
    if getattr(args, "wandb_key", None) or "WANDB_API_KEY" in os.environ:
        from ray.air.integrations.wandb import WANDB_ENV_VAR, WandbLoggerCallback

        project = args.wandb_project or f"{config.algo_class.__name__}-{config.env}"
        callbacks.append(
            WandbLoggerCallback(
                api_key=args.wandb_key or os.environ[WANDB_ENV_VAR],
                project=project,
                upload_checkpoints=True,
                **({"name": args.wandb_run_name} if args.wandb_run_name else {}),
            )
        )
    started = time.time()
    results, run_dir = fit_job(
        job,
        options,
        tune_config=tune.TuneConfig(
            num_samples=args.num_samples,
            max_concurrent_trials=args.max_concurrent_trials,
        ),
        callbacks=callbacks,
    )
    report_results(results, run_dir, stop, started)
    best = None
    for result in results:
        frame = result.metrics_dataframe
        if frame is not None and success_key in frame.columns:
            best = _best(best, frame[success_key].max())
        best = _best(best, result_metric(result.metrics or {}, success_key))
    return results, best
