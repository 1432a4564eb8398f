"""`rllib-ners`: the command line of rllib_ners (RLlib 2.60 ships no `rllib` script).

Subcommands::

    rllib-ners train file <path.py|path.yaml> [--stop-iters N] [...] [-- SCRIPT ARGS]
    rllib-ners train --algo NERS-DQN --env CartPole-v1 --config '{...}' --stop '{...}'
    rllib-ners resume <run dir>            (also: rllib-ners train --resume <run dir>)
    rllib-ners evaluate <checkpoint> --episodes N [--video out.mp4]
    rllib-ners plot <run dir>... -o curves.png
    rllib-ners examples

`train` runs Ray Tune (one experiment directory under `--storage-path`, default
`~/ray_results`), prints one progress line per training iteration (iteration, env
steps, return, steps/s, ETA) and writes `rllib_ners_run.json` into the run
directory, which `resume` reads to pick the trainable again.

Python tuned examples (RLlib's `add_rllib_example_script_args` scripts) are loaded
for their module-level `config` without running their `__main__` block; their own
flags go after `--`. YAML files use the old `rllib train` format::

    experiment-name:
        env: CartPole-v1
        run: NERS-DQN
        stop: {env_runners/episode_return_mean: 450}
        config: {lr: 0.0005, ...}

Errors a user can fix (unknown algorithm or env, bad JSON/YAML, missing files)
print one line, `rllib-ners: error: ...`, and exit non-zero; `main(argv)` returns
the exit code, so the CLI is testable in-process.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import io
import json
import math
import os
import re
import runpy
import sys
import time
import warnings
from contextlib import contextmanager, redirect_stderr
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    EPISODE_RETURN_MEAN,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
)
from ray.tune import Callback

PROG = "rllib-ners"
RUN_INFO_FILE = "rllib_ners_run.json"

RETURN_KEY = f"{ENV_RUNNER_RESULTS}/{EPISODE_RETURN_MEAN}"
STEPS_KEY = NUM_ENV_STEPS_SAMPLED_LIFETIME
ITERS_KEY = "training_iteration"
# Old result names users may still write in --stop or in YAML `stop:`.
_STOP_ALIASES = {
    "episode_reward_mean": RETURN_KEY,
    "episode_return_mean": RETURN_KEY,
    "timesteps_total": STEPS_KEY,
}
YAML_EXPERIMENT_KEYS = ("config", "description", "env", "run", "stop")
# AlgorithmConfig methods a config dict may address as {"method": {kwargs}}.
_CONFIG_METHODS = (
    "api_stack",
    "callbacks",
    "checkpointing",
    "debugging",
    "env_runners",
    "environment",
    "evaluation",
    "experimental",
    "fault_tolerance",
    "learners",
    "multi_agent",
    "ners",
    "offline_data",
    "reporting",
    "resources",
    "rl_module",
    "training",
)
# Read-only config properties and the method call that sets them.
_PROPERTY_ROUTES = {
    "model_config": ("rl_module", "model_config"),
    "learner_class": ("learners", "learner_class"),
}
# Keys `AlgorithmConfig.update_from_dict` treats specially (no same-named attribute).
_UPDATE_FROM_DICT_KEYS = (
    "callbacks_class",
    "env_config",
    "exploration_config",
    "model",
    "multiagent",
    "optimizer",
    "sample_collector",
)


class CLIError(Exception):
    """A problem the user can fix: printed as one line, exit code `code`."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def _one_line(text: Any, limit: int = 500) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)\b(: .+)?$")


def _last_line(text: Any) -> str:
    """The gist of an error text with tracebacks: its last exception line that has
    a message (RLlib re-raises env errors as a bare `RuntimeError` from the cause),
    else the last line."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    exceptions = [line for line in lines if _EXCEPTION_LINE.match(line)]
    with_message = [line for line in exceptions if ": " in line]
    chosen = (with_message or exceptions or lines or [str(text)])[-1]
    return _one_line(chosen)


class _ArgumentParser(argparse.ArgumentParser):
    """Raises CLIError (one line, exit code 2) instead of printing usage and exiting."""

    def error(self, message):  # noqa: D102
        raise CLIError(f"{message} (see `{self.prog} --help`)", code=2)


# --------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    """The `rllib-ners` argument parser (subcommands train, resume, evaluate, ...)."""
    from rllib_ners import __version__

    parser = _ArgumentParser(
        prog=PROG,
        description="Train, resume, evaluate and plot RLlib 2.60 runs of rllib_ners "
        "(NERS-DQN, DQN with the fast PER buffer, and RLlib's own algorithms).",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    ray_opts = _ArgumentParser(add_help=False)
    group = ray_opts.add_argument_group("Ray")
    group.add_argument(
        "--ray-address",
        help="join an existing Ray cluster (e.g. 'auto' or 'HOST:6379') instead of "
        "starting a local one",
    )
    group.add_argument(
        "--num-cpus",
        type=int,
        help="CPUs of the local Ray instance this command starts (default: all)",
    )

    train = sub.add_parser(
        "train",
        parents=[ray_opts],
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
    train.add_argument(
        "--stop", metavar="JSON", help="stopping criteria as a JSON object"
    )
    train.add_argument("--stop-reward", type=float, help=f"stop at this {RETURN_KEY}")
    train.add_argument("--stop-timesteps", type=int, help=f"stop at this {STEPS_KEY}")
    train.add_argument("--stop-iters", type=int, help="stop after this many iterations")
    train.add_argument("--num-env-runners", type=int)
    train.add_argument("--num-learners", type=int)
    train.add_argument("--num-gpus-per-learner", type=float)
    train.add_argument(
        "--seed",
        type=int,
        nargs="+",
        help="random seed; several seeds run one trial each (a grid search)",
    )
    train.add_argument(
        "--storage-path", help="where run directories go (default: ~/ray_results)"
    )
    train.add_argument("--name", help="run directory name (default: <example>_<time>)")
    train.add_argument(
        "--checkpoint-freq",
        type=int,
        default=0,
        help="checkpoint every N iterations (0: never)",
    )
    train.add_argument(
        "--checkpoint-at-end", action="store_true", help="checkpoint the final state"
    )
    train.add_argument(
        "--max-failures",
        type=int,
        default=0,
        help="times Tune restarts a failed trial from its last checkpoint",
    )
    train.add_argument(
        "--resume", metavar="RUN_DIR", help="continue an interrupted run instead"
    )
    train.add_argument(
        "--verbose",
        type=int,
        default=0,
        choices=(0, 1, 2, 3),
        help="Tune's own console output (0: only rllib-ners progress lines)",
    )

    resume = sub.add_parser(
        "resume",
        parents=[ray_opts],
        help="continue an interrupted or failed run",
        description="Continue an interrupted or failed Tune run: unfinished trials go "
        "on, errored ones resume from their latest checkpoint.",
    )
    resume.add_argument("run_dir", help="the run directory train printed")
    resume.add_argument("--verbose", type=int, default=0, choices=(0, 1, 2, 3))

    evaluate = sub.add_parser(
        "evaluate",
        parents=[ray_opts],
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
    evaluate.add_argument("--seed", type=int, help="seed of the evaluation env")

    plot = sub.add_parser(
        "plot",
        help="learning curves of one or more runs",
        description="Plot mean episode return against env steps, one curve per "
        "replay type (NERS, PER, uniform, RLlib PER), with a band across seeds.",
    )
    plot.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    plot.add_argument("-o", "--output", default="curves.png", help="image file")
    plot.add_argument("--band", choices=("minmax", "std", "none"), default="minmax")
    plot.add_argument(
        "--label-by",
        choices=("replay", "run"),
        default="replay",
        help="one curve per replay type (default) or per run directory",
    )
    plot.add_argument("--title")

    sub.add_parser(
        "examples",
        help="list the tuned examples",
        description="List the tuned examples (tuned_examples/**/*.py and *.yaml).",
    )
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs `rllib-ners ARGV` and returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args: List[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1 :]
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exit_:  # --help, --version
            return int(exit_.code or 0)
        args.script_args = script_args
        if args.command is None:
            raise CLIError(
                "missing command: train, resume, evaluate, plot or examples (see "
                f"`{PROG} --help`)",
                code=2,
            )
        if script_args and args.command != "train":
            raise CLIError("arguments after `--` are for `train file X.py` only", 2)
        return _COMMANDS[args.command](args)
    except CLIError as error:
        if error.code == 0:  # a Python example printed its --help
            return 0
        print(f"{PROG}: error: {_one_line(error)}", file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


# ------------------------------------------------------------------ helpers


def _parse_json_object(text: str, flag: str) -> Dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise CLIError(f"{flag} is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise CLIError(f"{flag} must be a JSON object, got {type(value).__name__}")
    return value


def _resolve_algo(name: str) -> type:
    from ray.rllib.algorithms.algorithm import Algorithm
    from ray.tune.registry import get_trainable_cls

    from rllib_ners import register_with_tune

    # Again, not just at import: Tune forgets names after a ray.shutdown().
    register_with_tune()
    try:
        with warnings.catch_warnings():
            # RLlib's lazy registration imports DreamerV3, which builds a gymnasium
            # env at import time and warns about its Box precision.
            warnings.simplefilter("ignore")
            cls = get_trainable_cls(name)
    except Exception:  # TuneError: "Unknown trainable"
        raise CLIError(
            f"unknown algorithm {name!r}: not registered with Ray Tune (try NERS-DQN, "
            "ACER, RainbowDQN, DQN, SAC or PPO)"
        ) from None
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise CLIError(f"{name!r} is a Tune trainable but not an RLlib algorithm")
    return cls


def _check_env(env: Any) -> None:
    """Raises CLIError unless `env` is a gymnasium id or registered with Tune."""
    if env is None:
        raise CLIError("no environment: give --env ENV or set `env` in the config")
    if not isinstance(env, str):
        return  # an env class or creator set in a Python example
    from ray.tune.registry import ENV_CREATOR, _global_registry

    from rllib_ners import register_with_tune

    register_with_tune()  # "rllib_ners.atari", even after a ray.shutdown()
    if _global_registry.contains(ENV_CREATOR, env):
        return
    import gymnasium as gym

    env_id = env
    if ":" in env:
        module, _, env_id = env.partition(":")
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise CLIError(
                f"environment {env!r}: cannot import module {module!r} ({error})"
            ) from None
    elif env.startswith("ALE/") and importlib.util.find_spec("ale_py"):
        importlib.import_module("ale_py")
    try:
        gym.spec(env_id)
    except gym.error.Error as error:
        raise CLIError(
            f"unknown environment id {env!r}: {_one_line(error)} (neither a gymnasium "
            "id nor registered with ray.tune.register_env)"
        ) from None


def _apply_config_dict(config, overrides: Dict[str, Any], source: str) -> None:
    """Applies an old-style config dict to an AlgorithmConfig, checking every key."""
    import inspect

    for key, value in overrides.items():
        if not isinstance(key, str):
            raise CLIError(f"{source}: config keys must be strings, got {key!r}")
        if key in _CONFIG_METHODS and isinstance(value, dict) and hasattr(config, key):
            _call_config_method(config, key, value, source)
            continue
        if key == "ners_config" and isinstance(value, dict) and hasattr(config, "ners"):
            _call_config_method(config, "ners", value, source, shown=key)
            continue
        if key == "replay_buffer_config":
            # Through training(): keeps a dotted `type` string, which RLlib 2.60
            # needs (update_from_dict would turn it into a class object).
            _call_config_method(config, "training", {key: value}, source, shown=key)
            continue
        if key in _PROPERTY_ROUTES:
            method, kwarg = _PROPERTY_ROUTES[key]
            if key == "learner_class" and isinstance(value, str):
                value = _import_class(value)  # a dotted path in JSON or YAML
            _call_config_method(config, method, {kwarg: value}, source, shown=key)
            continue
        attribute = config._translate_special_keys(key, warn_deprecated=False)
        known = attribute in _UPDATE_FROM_DICT_KEYS or (
            hasattr(config, attribute)
            and not inspect.ismethod(getattr(config, attribute))
        )
        if not known:
            raise CLIError(
                f"{source}: unknown config key {key!r} for {type(config).__name__}"
            )
        prop = getattr(type(config), attribute, None)
        if isinstance(prop, property) and prop.fset is None:
            raise CLIError(f"{source}: config key {key!r} is read-only")
        try:
            config.update_from_dict({key: value})
        except Exception as error:
            raise CLIError(
                f"{source}: bad value for {key!r}: {_one_line(error)}"
            ) from None


def _call_config_method(config, method, kwargs, source, shown=None) -> None:
    shown = shown or method
    try:
        getattr(config, method)(**kwargs)
    except TypeError as error:
        match = re.search(r"unexpected keyword argument '([^']+)'", str(error))
        if match:
            raise CLIError(
                f"{source}: unknown config key {shown}.{match.group(1)!r} for "
                f"{type(config).__name__}.{method}()"
            ) from None
        raise CLIError(f"{source}: bad value for {shown!r}: {error}") from None
    except ValueError as error:
        raise CLIError(
            f"{source}: bad value for {shown!r}: {_one_line(error)}"
        ) from None


def _validate_config(config) -> None:
    try:
        config.copy(copy_frozen=False).validate()
    except (ValueError, TypeError, KeyError) as error:
        raise CLIError(f"invalid config: {_one_line(error)}") from None


def _stop_criteria(
    args: argparse.Namespace, defaults: Optional[Dict[str, Any]] = None
) -> Dict[str, Any]:
    stop = {_STOP_ALIASES.get(k, k): v for k, v in (defaults or {}).items()}
    if args.stop:
        given = _parse_json_object(args.stop, "--stop")
        stop.update({_STOP_ALIASES.get(k, k): v for k, v in given.items()})
    if args.stop_reward is not None:
        stop[RETURN_KEY] = args.stop_reward
    if args.stop_timesteps is not None:
        stop[STEPS_KEY] = args.stop_timesteps
    if args.stop_iters is not None:
        stop[ITERS_KEY] = args.stop_iters
    stop = {k: v for k, v in stop.items() if v is not None}
    for key, value in stop.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise CLIError(f"stop criterion {key!r} must be a number, got {value!r}")
    if not stop:
        raise CLIError(
            "no stopping criterion: give --stop-iters, --stop-timesteps, "
            "--stop-reward or --stop '{...}'"
        )
    return stop


def _example_dirs() -> List[Path]:
    """tuned_examples/ next to the package (editable install) and from the CWD up."""
    candidates = [Path(__file__).resolve().parent.parent / "tuned_examples"]
    cwd = Path.cwd().resolve()
    candidates += [d / "tuned_examples" for d in (cwd, *cwd.parents)]
    found: List[Path] = []
    for candidate in candidates:
        if candidate.is_dir() and candidate.resolve() not in found:
            found.append(candidate.resolve())
    return found


def _resolve_example_path(path: str) -> Path:
    given = Path(path).expanduser()
    if given.is_file():
        return given.resolve()
    if not given.is_absolute():
        for directory in _example_dirs():
            for candidate in (directory / given, directory.parent / given):
                if candidate.is_file():
                    return candidate.resolve()
    if given.exists():
        raise CLIError(f"not a file: {path}")
    raise CLIError(f"no such file: {path}")


@contextmanager
def _patched_argv_and_path(argv: List[str], directory: Path) -> Iterator[None]:
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = argv
    sys.path.insert(0, str(directory))
    try:
        yield
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def load_python_example(path: Path, script_args: Sequence[str] = ()):
    """Loads a tuned example's module-level `config` (and its parsed `args`).

    The file runs with `sys.argv = [path, *script_args]` under a module name other
    than `__main__`, so its argparse sees only its own flags and its
    `if __name__ == "__main__"` block (the experiment) does not run.
    """
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    captured = io.StringIO()
    with (
        _patched_argv_and_path([str(path), *script_args], path.parent),
        redirect_stderr(captured),
    ):
        try:
            namespace = runpy.run_path(str(path), run_name="__rllib_ners_example__")
        except SystemExit as exit_:
            if not exit_.code:  # the example printed its own --help
                raise CLIError("", code=0) from None
            reason = _last_line(captured.getvalue()) or f"exit code {exit_.code}"
            raise CLIError(
                f"{path.name}'s own argument parser failed: {reason} (its flags go "
                "after `--`; see `-- --help`)"
            ) from None
        except CLIError:
            raise
        except Exception as error:
            raise CLIError(
                f"cannot load {path}: {type(error).__name__}: {_one_line(error)} (run "
                f"`python {path}` to see the traceback)"
            ) from None
    sys.stderr.write(captured.getvalue())
    config = namespace.get("config")
    if not isinstance(config, AlgorithmConfig):
        configs = [v for v in namespace.values() if isinstance(v, AlgorithmConfig)]
        if len(configs) != 1:
            raise CLIError(
                f"{path} defines no module-level AlgorithmConfig named `config`"
            )
        config = configs[0]
    example_args = namespace.get("args")
    if not isinstance(example_args, argparse.Namespace):
        example_args = None
    return config, example_args


def load_yaml_experiments(path: Path) -> List[Tuple[str, Dict[str, Any]]]:
    """The experiments of an old-style `rllib train` YAML file, checked."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise CLIError(f"{path}: invalid YAML: {_one_line(error)}") from None
    if not isinstance(data, dict) or not data:
        raise CLIError(
            f"{path}: expected a mapping of experiment name -> "
            "{env, run, stop, config}"
        )
    experiments = []
    for name, spec in data.items():
        if name == "description" and isinstance(spec, str):
            continue
        if not isinstance(spec, dict):
            raise CLIError(
                f"{path}: experiment {name!r} must be a mapping with keys "
                + ", ".join(YAML_EXPERIMENT_KEYS)
            )
        for key in spec:
            if key not in YAML_EXPERIMENT_KEYS:
                raise CLIError(
                    f"{path}: experiment {name!r}: unknown key {key!r} (allowed: "
                    + ", ".join(YAML_EXPERIMENT_KEYS)
                    + ")"
                )
        if not spec.get("run"):
            raise CLIError(f"{path}: experiment {name!r} has no `run` (the algorithm)")
        for key in ("stop", "config"):
            if spec.get(key) is not None and not isinstance(spec[key], dict):
                raise CLIError(
                    f"{path}: experiment {name!r}: `{key}` must be a mapping"
                )
        experiments.append((str(name), spec))
    if not experiments:
        raise CLIError(f"{path}: no experiments")
    return experiments


def config_from_yaml_experiment(name: str, spec: Dict[str, Any], source: str):
    """(AlgorithmConfig, stop dict) of one YAML experiment."""
    cls = _resolve_algo(str(spec["run"]))
    config = cls.get_default_config()
    settings = dict(spec.get("config") or {})
    env = spec.get("env", settings.pop("env", None))
    if env is not None:
        config.environment(env)
    _apply_config_dict(config, settings, f"{source}: experiment {name!r} config")
    return config, dict(spec.get("stop") or {})


# ----------------------------------------------------------------- progress


def _metric(result: Dict[str, Any], key: str):
    value: Any = result
    for part in key.split("/"):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _env_steps(result: Dict[str, Any]) -> float:
    for key in (STEPS_KEY, f"{ENV_RUNNER_RESULTS}/{NUM_ENV_STEPS_SAMPLED_LIFETIME}"):
        value = _metric(result, key)
        if value is not None:
            return float(value)
    return math.nan


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(max(seconds, 0.0)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def format_progress(
    result: Dict[str, Any],
    previous: Optional[Tuple[float, float]],
    stop: Dict[str, Any],
    name: str = "",
) -> str:
    """One progress line: iteration, env steps, return, steps/s and ETA.

    `previous` is the (env steps, time_total_s) of the trial's previous result; the
    rate is measured since then. The ETA is the nearer of the step and iteration
    budgets in `stop` (none for a reward-only stop).
    """
    iteration = int(result.get(ITERS_KEY) or 0)
    steps = _env_steps(result)
    total_time = float(result.get("time_total_s") or 0.0)
    episode_return = _metric(result, RETURN_KEY)
    rate = math.nan
    if previous is not None and total_time > previous[1]:
        rate = (steps - previous[0]) / (total_time - previous[1])
    elif total_time > 0:
        rate = steps / total_time
    etas = []
    if STEPS_KEY in stop and rate > 0:
        etas.append((float(stop[STEPS_KEY]) - steps) / rate)
    if ITERS_KEY in stop and iteration > 0:
        etas.append((float(stop[ITERS_KEY]) - iteration) * total_time / iteration)
    parts = [
        f"iter {iteration:4d}",
        f"env steps {steps:9.0f}",
        "return "
        + (
            f"{float(episode_return):8.2f}"
            if episode_return is not None and math.isfinite(float(episode_return))
            else "     n/a"
        ),
        f"{rate:7.1f} steps/s" if math.isfinite(rate) else "    n/a steps/s",
        f"ETA {format_duration(min(etas))}" if etas else "ETA ?",
    ]
    return (f"[{name}] " if name else "") + " | ".join(parts)


class ProgressCallback(Callback):
    """Tune callback printing one progress line per training iteration."""

    def __init__(self, stop: Dict[str, Any]):
        self.stop = dict(stop)
        self._previous: Dict[str, Tuple[float, float]] = {}

    def setup(self, **info):
        self._previous = {}

    def on_trial_result(self, iteration, trials, trial, result, **info):
        name = str(trial) if len(trials) > 1 else ""
        line = format_progress(
            result, self._previous.get(trial.trial_id), self.stop, name
        )
        self._previous[trial.trial_id] = (
            _env_steps(result),
            float(result.get("time_total_s") or 0.0),
        )
        print(line, flush=True)

    def on_trial_error(self, iteration, trials, trial, **info):
        print(f"trial {trial} failed (see {trial.path}/error.txt)", flush=True)


# ---------------------------------------------------------------- ray & tune


@contextmanager
def _ray_session(args: argparse.Namespace) -> Iterator[None]:
    """Starts (or joins, with --ray-address) Ray unless it is up; shuts down after."""
    import ray

    started = False
    if not ray.is_initialized():
        try:
            if args.ray_address:
                ray.init(address=args.ray_address)
            else:
                ray.init(num_cpus=args.num_cpus, include_dashboard=False)
        except (ConnectionError, ValueError, RuntimeError) as error:
            target = args.ray_address or "a local Ray instance"
            raise CLIError(
                f"cannot start or join {target}: {_one_line(error)}"
            ) from None
        started = True
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def _class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _import_class(path: str) -> type:
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as error:
        raise CLIError(f"cannot import {path}: {error}") from None


class _Job:
    """One Tune experiment to run: trainable, config, stop and what to record."""

    def __init__(self, name, trainable, config, stop, source=None, script_args=()):
        self.name = name
        self.trainable = trainable  # a registered name or an Algorithm class
        self.config = config
        self.stop = stop
        self.source = source
        self.script_args = list(script_args)


def _run_job(job: _Job, args: argparse.Namespace) -> int:
    from ray import tune

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
    info = {
        "trainable": job.trainable if isinstance(job.trainable, str) else None,
        "trainable_class": None
        if isinstance(job.trainable, str)
        else _class_path(job.trainable),
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
        run_config=tune.RunConfig(
            name=run_name,
            storage_path=str(storage),
            stop=job.stop,
            verbose=args.verbose,
            callbacks=[ProgressCallback(job.stop)],
            failure_config=tune.FailureConfig(max_failures=args.max_failures),
            checkpoint_config=tune.CheckpointConfig(
                checkpoint_frequency=args.checkpoint_freq,
                checkpoint_at_end=args.checkpoint_at_end,
            ),
        ),
    )
    return _report(tuner.fit(), run_dir)


def _report(results, run_dir: Path) -> int:
    failed = 0
    checkpoint = None
    for result in results:
        metrics = result.metrics or {}
        episode_return = _metric(metrics, RETURN_KEY)
        status = "FAILED" if result.error else "done"
        trial = Path(result.path).name if result.path else "?"
        print(
            f"trial {trial}: {status}, iter {metrics.get(ITERS_KEY, 0)}, env steps "
            f"{_env_steps(metrics):.0f}, return "
            + (f"{float(episode_return):.2f}" if episode_return is not None else "n/a"),
            flush=True,
        )
        if result.checkpoint is not None:
            checkpoint = result.checkpoint.path
            print(f"  checkpoint: {checkpoint}", flush=True)
        if result.error:
            failed += 1
            print(f"  error: {_last_line(result.error)}", flush=True)
    print(f"Run directory: {run_dir}", flush=True)
    if failed:
        raise CLIError(
            f"{failed} of {len(results)} trial(s) failed (see error.txt in the trial "
            f"directories); after fixing the cause continue with `{PROG} resume "
            f"{run_dir}`"
        )
    print(f"Plot it: {PROG} plot {run_dir} -o curves.png", flush=True)
    if checkpoint:
        print(f"Evaluate it: {PROG} evaluate {checkpoint} --episodes 10", flush=True)
    return 0


# ----------------------------------------------------------------- commands


def cmd_train(args: argparse.Namespace) -> int:
    if args.resume:
        if args.what or args.algo:
            raise CLIError("--resume continues a run: give no file and no --algo", 2)
        return _resume(Path(args.resume), args)
    if args.script_args and args.what != "file":
        raise CLIError("arguments after `--` are for `train file X.py` only", 2)
    jobs: List[_Job] = []
    if args.what is not None:
        if args.what != "file" or not args.path:
            raise CLIError(
                "usage: train file PATH [options] | train --algo ALGO --env ENV "
                "[options] | train --resume RUN_DIR",
                2,
            )
        if args.algo:
            raise CLIError("give either `file PATH` or --algo, not both", 2)
        path = _resolve_example_path(args.path)
        if path.suffix == ".py":
            config, example_args = load_python_example(path, args.script_args)
            defaults = {}
            if example_args is not None:
                defaults = {
                    RETURN_KEY: getattr(example_args, "stop_reward", None),
                    STEPS_KEY: getattr(example_args, "stop_timesteps", None),
                    ITERS_KEY: getattr(example_args, "stop_iters", None),
                }
            jobs.append(
                _Job(
                    path.stem,
                    config.algo_class,
                    config,
                    defaults,
                    source=path,
                    script_args=args.script_args,
                )
            )
        elif path.suffix in (".yaml", ".yml"):
            if args.script_args:
                raise CLIError("arguments after `--` are for Python examples only", 2)
            for name, spec in load_yaml_experiments(path):
                config, stop = config_from_yaml_experiment(name, spec, str(path))
                jobs.append(_Job(name, str(spec["run"]), config, stop, source=path))
        else:
            raise CLIError(f"{path}: expected a .py or .yaml tuned example")
    elif args.algo:
        cls = _resolve_algo(args.algo)
        if not args.env:
            raise CLIError("--algo needs --env ENV")
        config = cls.get_default_config()
        jobs.append(_Job(f"{args.algo}_{args.env}", args.algo, config, {}))
    else:
        raise CLIError(
            "nothing to train: give `file PATH`, --algo ALGO --env ENV or --resume "
            "RUN_DIR",
            2,
        )

    overrides = _parse_json_object(args.config, "--config") if args.config else {}
    for job in jobs:
        config = job.config
        if args.env:
            config.environment(args.env)
        _apply_config_dict(config, overrides, "--config")
        if args.num_env_runners is not None:
            config.env_runners(num_env_runners=args.num_env_runners)
        if args.num_learners is not None:
            config.learners(num_learners=args.num_learners)
        if args.num_gpus_per_learner is not None:
            config.learners(num_gpus_per_learner=args.num_gpus_per_learner)
        if args.seed and len(args.seed) == 1:
            config.debugging(seed=args.seed[0])
        _check_env(config.env)
        _validate_config(config)
        job.stop = _stop_criteria(args, job.stop)
    if len(jobs) > 1 and args.name:
        raise CLIError("--name names one run; this file holds several experiments", 2)

    code = 0
    with _ray_session(args):
        for job in jobs:
            code = max(code, _run_job(job, args))
    return code


def _find_run_dir(path: Path) -> Path:
    path = path.expanduser().resolve()
    if not path.exists():
        raise CLIError(f"no such run directory: {path}")
    for candidate in (path, path.parent):
        if (candidate / "tuner.pkl").exists():
            return candidate
    raise CLIError(f"not a Tune run directory (no tuner.pkl): {path}")


def _trainable_name_from_state(run_dir: Path) -> Optional[str]:
    for state_file in sorted(run_dir.glob("experiment_state-*.json"), reverse=True):
        try:
            state = json.loads(state_file.read_text())
            for trial in state.get("trial_data", []):
                trial_json = trial[0] if isinstance(trial, list) else trial
                name = json.loads(trial_json).get("trainable_name")
                if name:
                    return name
        except (json.JSONDecodeError, TypeError, AttributeError, IndexError):
            continue
    return None


def _resume_trainable(run_dir: Path, info: Dict[str, Any]):
    if info.get("trainable"):
        _resolve_algo(info["trainable"])  # registered (NERS-DQN after the import)
        return info["trainable"]
    if info.get("trainable_class"):
        return _import_class(info["trainable_class"])
    name = _trainable_name_from_state(run_dir)
    if not name:
        raise CLIError(f"cannot tell which algorithm {run_dir} ran")
    import rllib_ners

    by_class_name = {
        obj.__name__: obj for obj in vars(rllib_ners).values() if isinstance(obj, type)
    }
    if name in by_class_name:
        return by_class_name[name]
    _resolve_algo(name)
    return name


def _resume(path: Path, args: argparse.Namespace) -> int:
    from ray import tune

    run_dir = _find_run_dir(path)
    info: Dict[str, Any] = {}
    info_file = run_dir / RUN_INFO_FILE
    if info_file.exists():
        try:
            info = json.loads(info_file.read_text())
        except json.JSONDecodeError as error:
            raise CLIError(f"{info_file}: invalid JSON: {error}") from None
    source = info.get("source")
    if source and source.endswith(".py") and Path(source).is_file():
        # Re-runs the example's module level: its env registrations, imports, etc.
        load_python_example(Path(source), info.get("script_args") or [])
    trainable = _resume_trainable(run_dir, info)
    print(f"Resuming {run_dir}", flush=True)
    with _ray_session(args):
        try:
            tuner = tune.Tuner.restore(
                str(run_dir), trainable=trainable, resume_errored=True
            )
        except (ValueError, RuntimeError, FileNotFoundError) as error:
            raise CLIError(f"cannot restore {run_dir}: {_one_line(error)}") from None
        results = tuner.fit()
    return _report(results, run_dir)


def cmd_resume(args: argparse.Namespace) -> int:
    return _resume(Path(args.run_dir), args)


def _is_checkpoint(path: Path) -> bool:
    return (path / "class_and_ctor_args.pkl").exists() and (
        (path / "algorithm_state.pkl").exists()
        or (path / "algorithm_state.msgpck").exists()
        or (path / "rllib_checkpoint.json").exists()
    )


def find_checkpoint(path: Path) -> Path:
    """`path` itself if it is a checkpoint, else the latest one of its single trial."""
    path = path.expanduser().resolve()
    if not path.exists():
        raise CLIError(f"no such checkpoint: {path}")
    if _is_checkpoint(path):
        return path
    found = [p for p in path.rglob("checkpoint_*") if p.is_dir() and _is_checkpoint(p)]
    if not found:
        raise CLIError(f"no RLlib checkpoint in {path}")
    trials = {p.parent for p in found}
    if len(trials) > 1:
        raise CLIError(
            f"{path} holds checkpoints of {len(trials)} trials; pass one trial "
            "directory or checkpoint"
        )
    return max(found, key=lambda p: (p.name, p.stat().st_mtime))


def _checkpoint_config(checkpoint: Path):
    """The AlgorithmConfig stored in a checkpoint, set up for local evaluation."""
    import pickle

    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    try:
        with open(checkpoint / "class_and_ctor_args.pkl", "rb") as f:
            ctor_info = pickle.load(f)
        state = ctor_info["ctor_args_and_kwargs"][0][0]
        config = (
            state
            if isinstance(state, AlgorithmConfig)
            else AlgorithmConfig.from_state(state)
        )
    except Exception as error:
        raise CLIError(
            f"cannot read the config of checkpoint {checkpoint}: {_one_line(error)}"
        ) from None
    config = config.copy(copy_frozen=False)
    # One local env runner and a local learner: no actors for a few episodes.
    config.env_runners(num_env_runners=0, num_envs_per_env_runner=1)
    config.learners(num_learners=0, num_gpus_per_learner=0)
    config.evaluation(evaluation_interval=None, evaluation_num_env_runners=0)
    return config


def _module_available(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def video_writer(path: Path) -> Callable[[List[np.ndarray], float], None]:
    """A function writing RGB frames to `path`, or CLIError if nothing can."""
    suffix = path.suffix.lower()
    if suffix == ".gif" and _module_available("PIL"):

        def write_gif(frames, fps):
            from PIL import Image

            images = [
                Image.fromarray(np.asarray(frame, dtype=np.uint8)) for frame in frames
            ]
            images[0].save(
                path,
                save_all=True,
                append_images=images[1:],
                duration=max(int(1000 / fps), 1),
                loop=0,
            )

        return write_gif
    if (
        suffix != ".gif"
        and _module_available("imageio")
        and _module_available("imageio_ffmpeg")
    ):

        def write_imageio(frames, fps):
            import imageio.v2 as imageio

            imageio.mimwrite(
                path, [np.asarray(f, dtype=np.uint8) for f in frames], fps=fps
            )

        return write_imageio
    if suffix in (".mp4", ".avi") and _module_available("cv2"):

        def write_cv2(frames, fps):
            import cv2

            height, width = np.asarray(frames[0]).shape[:2]
            fourcc = cv2.VideoWriter_fourcc(*("mp4v" if suffix == ".mp4" else "MJPG"))
            writer = cv2.VideoWriter(str(path), fourcc, float(fps), (width, height))
            if not writer.isOpened():
                raise CLIError(f"OpenCV cannot write {path}")
            try:
                for frame in frames:
                    rgb = np.asarray(frame, dtype=np.uint8)
                    writer.write(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
            finally:
                writer.release()

        return write_cv2
    raise CLIError(
        f"cannot write video {path}: no video writer available (pip install imageio "
        "imageio-ffmpeg, or name a .gif file)"
    )


def make_render_env(config, render_mode: str):
    """A single env of the checkpoint's config that renders in `render_mode`."""
    env = config.env
    env_config = dict(config.env_config or {})
    from ray.tune.registry import ENV_CREATOR, _global_registry

    try:
        if isinstance(env, str) and _global_registry.contains(ENV_CREATOR, env):
            from ray.rllib.env.env_context import EnvContext

            creator = _global_registry.get(ENV_CREATOR, env)
            return creator(EnvContext({**env_config, "render_mode": render_mode}, 0))
        if isinstance(env, str):
            import gymnasium as gym

            _check_env(env)
            env_id = env.partition(":")[2] if ":" in env else env
            return gym.make(env_id, render_mode=render_mode, **env_config)
        if isinstance(env, type):
            return env({**env_config, "render_mode": render_mode})
    except CLIError:
        raise
    except Exception as error:
        raise CLIError(f"cannot render {env!r}: {_one_line(error)}") from None
    raise CLIError(f"cannot render {env!r}: unsupported env specification")


def _greedy_action(module, observation):
    import torch

    batch = {"obs": torch.as_tensor(np.asarray(observation)[None], dtype=torch.float32)}
    with torch.no_grad():
        out = module.forward_inference(batch)
    if "actions" in out:
        action = out["actions"]
    else:
        dist_cls = module.get_inference_action_dist_cls()
        action = dist_cls.from_logits(out["action_dist_inputs"]).to_deterministic()
        action = action.sample()
    action = action[0].cpu().numpy()
    return action.item() if action.ndim == 0 else action


def _rendered_episodes(module, env, episodes, render_mode, seed):
    returns, lengths, frames = [], [], []
    for episode in range(episodes):
        observation, _ = env.reset(seed=None if seed is None else seed + episode)
        total, steps, done = 0.0, 0, False
        while not done:
            if render_mode == "rgb_array":
                frames.append(env.render())
            observation, reward, terminated, truncated, _ = env.step(
                _greedy_action(module, observation)
            )
            total += float(reward)
            steps += 1
            done = terminated or truncated
        if render_mode == "rgb_array":
            frames.append(env.render())
        returns.append(total)
        lengths.append(steps)
    return returns, lengths, frames


def _remove_if_empty(directory: Optional[str]) -> None:
    """Drops the empty log dir a Trainable built outside Tune makes in ~/ray_results."""
    if directory:
        try:
            os.rmdir(directory)
        except OSError:
            pass  # not empty (or gone): leave it


def cmd_evaluate(args: argparse.Namespace) -> int:
    if args.episodes < 1:
        raise CLIError("--episodes must be at least 1", 2)
    render = args.render
    if args.video:
        if render == "human":
            raise CLIError("--video records rgb_array frames; drop --render human", 2)
        render = "rgb_array"
    elif render == "rgb_array":
        raise CLIError("--render rgb_array needs --video FILE", 2)
    write = video_writer(Path(args.video)) if args.video else None
    checkpoint = find_checkpoint(Path(args.checkpoint))
    config = _checkpoint_config(checkpoint)
    if args.seed is not None:
        config.debugging(seed=args.seed)
    env = None
    if render:
        env = make_render_env(config, render)
        try:
            env.reset(seed=args.seed)
            if render == "rgb_array" and env.render() is None:
                raise CLIError(f"{config.env!r} rendered no rgb_array frame")
        except CLIError:
            raise
        except Exception as error:
            raise CLIError(
                f"cannot render {config.env!r}: {_one_line(error)}"
            ) from None

    from ray.rllib.algorithms.algorithm import Algorithm

    import rllib_ners  # noqa: F401  (NERS classes for unpickling)

    print(f"Restoring {checkpoint}", flush=True)
    with _ray_session(args):
        try:
            algo = Algorithm.from_checkpoint(str(checkpoint), config=config)
        except Exception as error:
            raise CLIError(
                f"cannot restore {checkpoint}: {type(error).__name__}: "
                f"{_last_line(error)}"
            ) from None
        try:
            if render:
                returns, lengths, frames = _rendered_episodes(
                    algo.get_module(), env, args.episodes, render, args.seed
                )
            else:
                episodes = algo.env_runner.sample(
                    num_episodes=args.episodes, explore=False
                )[: args.episodes]
                returns = [float(e.get_return()) for e in episodes]
                lengths = [len(e) for e in episodes]
                frames = []
        finally:
            algo.stop()
            _remove_if_empty(getattr(algo, "logdir", None))
            if env is not None:
                env.close()
    for i, (episode_return, length) in enumerate(zip(returns, lengths), 1):
        print(f"episode {i}: return {episode_return:.2f} ({length} steps)")
    values = np.asarray(returns, dtype=float)
    print(
        f"{config.env}: {values.size} greedy episode(s), mean return "
        f"{values.mean():.2f} +/- {values.std():.2f} (std), min {values.min():.2f}, "
        f"max {values.max():.2f}"
    )
    if write is not None:
        if not frames:
            raise CLIError("no frames were rendered")
        fps = float((getattr(env, "metadata", None) or {}).get("render_fps") or 30)
        video = Path(args.video)
        if video.parent and not video.parent.exists():
            video.parent.mkdir(parents=True, exist_ok=True)
        write(frames, fps)
        print(f"wrote {video} ({len(frames)} frames)")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from rllib_ners._plotting import PlotError, plot_runs

    try:
        counts = plot_runs(
            args.run_dirs,
            args.output,
            band=args.band,
            label_by=args.label_by,
            title=args.title,
        )
    except PlotError as error:
        raise CLIError(str(error)) from None
    summary = ", ".join(f"{label}: {n} trial(s)" for label, n in sorted(counts.items()))
    print(f"wrote {args.output} ({summary})")
    return 0


def example_description(path: Path) -> str:
    """First line of a Python example's docstring, or a YAML `description`."""
    try:
        text = path.read_text()
    except OSError:
        return ""
    if path.suffix == ".py":
        try:
            doc = ast.get_docstring(ast.parse(text)) or ""
        except SyntaxError:
            return "(syntax error)"
        return doc.strip().splitlines()[0] if doc.strip() else ""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return "(invalid YAML)"
    if isinstance(data, dict):
        if isinstance(data.get("description"), str):
            return data["description"].strip().splitlines()[0]
        for spec in data.values():
            if isinstance(spec, dict) and isinstance(spec.get("description"), str):
                return spec["description"].strip().splitlines()[0]
    for line in text.splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return ""


def cmd_examples(args: argparse.Namespace) -> int:
    directories = _example_dirs()
    if not directories:
        raise CLIError(
            "no tuned_examples/ directory found next to the package or above the "
            "current directory"
        )
    for directory in directories:
        rows = []
        for path in sorted(directory.rglob("*")):
            if path.suffix not in (".py", ".yaml", ".yml") or path.name.startswith("_"):
                continue
            rows.append((str(path.relative_to(directory)), example_description(path)))
        print(f"Tuned examples in {directory}:")
        width = max((len(name) for name, _ in rows), default=0)
        for name, description in rows:
            print(f"  {name:<{width}}  {description}")
    print(f"Run one with: {PROG} train file <name> [--stop-iters N] [...]")
    return 0


_COMMANDS: Dict[str, Callable[[argparse.Namespace], int]] = {
    "train": cmd_train,
    "resume": cmd_resume,
    "evaluate": cmd_evaluate,
    "plot": cmd_plot,
    "examples": cmd_examples,
}


if __name__ == "__main__":
    sys.exit(main())
