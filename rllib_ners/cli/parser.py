"""`build_parser()`: the `rllib-ners` argument parser."""

from __future__ import annotations

import argparse

from rllib_ners.cli.common import PROG, RETURN_KEY, STEPS_KEY, CLIError
from rllib_ners.utils.rng import MAX_SEED

# Tune's own console output levels (`--verbose`); 0 prints only our progress lines.
TUNE_VERBOSITY = (0, 1, 2, 3)


def int_in_range(low: int, high=None, hint: str = ""):
    """An argparse type: an int in [low, high] (no upper bound for None); out of
    range, argparse names the flag, the range and `hint`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"in [{low}, {high}]"
            raise argparse.ArgumentTypeError(
                f"must be an integer {bound}, got {value}"
                + (f" ({hint})" if hint else "")
            )
        return value

    return parse


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


class _ArgumentParser(argparse.ArgumentParser):
    """Raises CLIError (one line, exit code 2) instead of printing usage and exiting."""

    def error(self, message):  # noqa: D102
        raise CLIError(f"{message} (see `{self.prog} --help`)", code=2)


def build_parser() -> argparse.ArgumentParser:
    """The `rllib-ners` argument parser (subcommands train, resume, evaluate, ...)."""
    from rllib_ners import __version__

    parser = _ArgumentParser(
        prog=PROG,
        description="Train, resume, evaluate and plot RLlib 2.60 runs of rllib_ners "
        "(NERS-DQN, NERS-SAC, RainbowDQN, ACER, TD3, DDPG, and RLlib's own "
        "algorithms with the fast replay buffer), and run studies of replay methods.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    ray_options = _ray_options()
    _add_train(sub, ray_options)
    _add_resume(sub, ray_options)
    _add_evaluate(sub, ray_options)
    _add_plot(sub)
    sub.add_parser(
        "examples",
        help="list the tuned examples",
        description="List the tuned examples (tuned_examples/**/*.py and *.yaml).",
    )
    sub.add_parser(
        "study",
        add_help=False,
        help="run and report a study of replay methods (`study --help`)",
    )
    return parser


def _ray_options() -> argparse.ArgumentParser:
    """The Ray flags of the commands that start or join Ray (a parent parser)."""
    ray_options = _ArgumentParser(add_help=False)
    group = ray_options.add_argument_group("Ray")
    group.add_argument(
        "--ray-address",
        help="join an existing Ray cluster (e.g. 'auto' or 'HOST:6379') instead of "
        "starting a local one",
    )
    group.add_argument(
        "--num-cpus",
        type=int_in_range(1),
        help="CPUs of the local Ray instance this command starts (default: all)",
    )
    return ray_options


def _add_train(sub, ray_options: argparse.ArgumentParser) -> None:
    train = sub.add_parser(
        "train",
        parents=[ray_options],
        help="run a tuned example file or an algorithm on an env with Ray Tune",
        description="Run a tuned example (`train file PATH`: a .py, or an old-style\n"
        "rllib-train .yaml) or `--algo ALGO --env ENV` through Ray Tune. Flags of\n"
        "a Python example's own argument parser go after `--`.",
        epilog="examples:\n"
        f"  {PROG} train file tuned_examples/ners_dqn/cartpole_ners_dqn.py "
        "--num-env-runners 0\n"
        f"  {PROG} train --algo NERS-DQN --env CartPole-v1 --stop-timesteps 20000 "
        "--config '{\"lr\": 0.0005}'\n"
        f"  {PROG} train file tuned_examples/dqn/cartpole_dqn_fast_per.py "
        "--seed 0 1 2 -- --replay uniform",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_train_source(train)
    _add_train_stop(train)
    _add_train_resources(train)
    _add_train_run_options(train)


def _add_train_source(train: argparse.ArgumentParser) -> None:
    """What trains: a tuned example file, or an algorithm on an env."""
    train.add_argument(
        "what", nargs="?", metavar="file", help="the word `file`, then the PATH"
    )
    train.add_argument(
        "path",
        nargs="?",
        metavar="PATH",
        help="tuned example (.py or .yaml); a path relative to tuned_examples/ works",
    )
    train.add_argument(
        "--algo", help="algorithm name registered with Tune, e.g. NERS-DQN"
    )
    train.add_argument("--env", help="environment id (gymnasium or tune-registered)")
    train.add_argument(
        "--config", metavar="JSON", help="config overrides as a JSON object"
    )


def _add_train_stop(train: argparse.ArgumentParser) -> None:
    train.add_argument(
        "--stop", metavar="JSON", help="stopping criteria as a JSON object"
    )
    train.add_argument("--stop-reward", type=float, help=f"stop at this {RETURN_KEY}")
    train.add_argument(
        "--stop-timesteps", type=int_in_range(1), help=f"stop at this {STEPS_KEY}"
    )
    train.add_argument(
        "--stop-iters", type=int_in_range(1), help="stop after this many iterations"
    )


def _add_train_resources(train: argparse.ArgumentParser) -> None:
    """EnvRunners, Learners, GPUs and seeds."""
    train.add_argument(
        "--num-env-runners",
        type=int_in_range(0, hint="0 samples in the driver"),
        help="remote EnvRunners (0: sample in the driver's local EnvRunner)",
    )
    train.add_argument(
        "--num-learners",
        type=int_in_range(0, hint="0 learns in the driver"),
        help="remote Learners (0: learn in the driver's local Learner)",
    )
    train.add_argument(
        "--num-gpus-per-learner",
        type=_non_negative_float,
        help="GPUs of each Learner (0: CPU)",
    )
    train.add_argument(
        "--seed",
        type=int_in_range(0, MAX_SEED),
        nargs="+",
        help="random seed; several seeds run one trial each (a grid search)",
    )


def _add_train_run_options(train: argparse.ArgumentParser) -> None:
    """Where the run goes, its checkpoints, failures and console output."""
    train.add_argument(
        "--storage-path", help="where run directories go (default: ~/ray_results)"
    )
    train.add_argument("--name", help="run directory name (default: <example>_<time>)")
    train.add_argument(
        "--checkpoint-freq",
        type=int_in_range(0),
        default=0,
        help="checkpoint every N iterations (0: never)",
    )
    train.add_argument(
        "--checkpoint-at-end",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="checkpoint the final state, which `rllib-ners evaluate` takes "
        "(default: on, as the tuned examples do)",
    )
    train.add_argument(
        "--max-failures",
        type=int_in_range(-1),
        default=0,
        help="times Tune restarts a failed trial from its last checkpoint, "
        "from the start without one (add --checkpoint-freq N; -1: without limit)",
    )
    train.add_argument(
        "--resume", metavar="RUN_DIR", help="continue an interrupted run instead"
    )
    train.add_argument(
        "--verbose",
        type=int,
        default=0,
        choices=TUNE_VERBOSITY,
        help="Tune's own console output (0: only rllib-ners progress lines)",
    )


def _add_resume(sub, ray_options: argparse.ArgumentParser) -> None:
    resume = sub.add_parser(
        "resume",
        parents=[ray_options],
        help="continue an interrupted or failed run",
        description="Continue an interrupted or failed Tune run: unfinished trials go "
        "on, errored ones resume from their latest checkpoint.",
    )
    resume.add_argument("run_dir", help="the run directory train printed")
    resume.add_argument("--verbose", type=int, default=0, choices=TUNE_VERBOSITY)


def _add_evaluate(sub, ray_options: argparse.ArgumentParser) -> None:
    evaluate = sub.add_parser(
        "evaluate",
        parents=[ray_options],
        help="run greedy episodes with a checkpoint",
        description="Restore an algorithm from a checkpoint (or the latest checkpoint "
        "of a run or trial directory) and run greedy (explore=False) episodes.",
    )
    evaluate.add_argument("checkpoint", help="checkpoint, trial or run directory")
    evaluate.add_argument("--episodes", type=int, default=10)
    evaluate.add_argument(
        "--render",
        choices=("rgb_array", "human"),
        help="render the episodes (rgb_array needs --video)",
    )
    evaluate.add_argument(
        "--video", metavar="FILE", help="write the rendered episodes (.mp4 or .gif)"
    )
    evaluate.add_argument(
        "--seed", type=int_in_range(0, MAX_SEED), help="seed of the evaluation env"
    )


def _add_plot(sub) -> None:
    plot = sub.add_parser(
        "plot",
        help="learning curves of one or more runs",
        description="Plot mean episode return against env steps, one curve per "
        "replay method (NERS, PER, uniform, LAP, PAL, ReLo, LaBER, RLlib PER), "
        "with a band across seeds.",
    )
    plot.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    plot.add_argument("-o", "--output", default="curves.png", help="image file")
    plot.add_argument("--band", choices=("minmax", "std", "none"), default="minmax")
    plot.add_argument(
        "--label-by",
        choices=("replay", "run"),
        default="replay",
        help="one curve per replay method (default) or per run directory",
    )
    plot.add_argument("--title")
