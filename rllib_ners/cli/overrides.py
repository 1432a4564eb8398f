"""Config overrides (`--config` JSON, YAML `config:`), stopping criteria, and
loading tuned examples (Python scripts and old-style `rllib train` YAML)."""

from __future__ import annotations

import argparse
import difflib
import io
import re
import runpy
import sys
import warnings
from contextlib import contextmanager, redirect_stderr
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from rllib_ners.cli.common import (
    ITERS_KEY,
    PROG,
    RETURN_KEY,
    STEPS_KEY,
    CLIError,
    import_class,
    last_line,
    one_line,
    parse_json_object,
)
from rllib_ners.cli.examples import example_dirs
from rllib_ners.seam.config import config_attribute_for_key

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


def resolve_algo(name: str) -> type:
    """The Algorithm class registered with Tune as `name` (ours registered again
    first); CLIError with a suggestion for an unknown name."""
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
            f"unknown algorithm {name!r}: not registered with Ray Tune "
            f"({_algo_suggestion(name)})"
        ) from None
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise CLIError(f"{name!r} is a Tune trainable but not an RLlib algorithm")
    return cls


def _algo_suggestion(name: str) -> str:
    """ "did you mean X?" for a name that differs from a known algorithm's only
    in case, dashes or underscores, or is close to one; else the usual names."""
    from ray.rllib.algorithms.registry import ALGORITHMS

    from rllib_ners import TUNE_NAMES

    known = [*TUNE_NAMES, *ALGORITHMS]

    def squashed(text: str) -> str:
        return text.lower().replace("-", "").replace("_", "")

    same = [algo for algo in known if squashed(algo) == squashed(name)]
    close = same or difflib.get_close_matches(name, known, n=2, cutoff=0.6)
    if close:
        return f"did you mean {' or '.join(close)}?"
    return "try NERS-DQN, NERS-SAC, RainbowDQN, ACER, TD3, DQN, SAC or PPO"


def check_env(env: Any) -> None:
    """Raises CLIError unless `env` is a gymnasium id or registered with Tune."""
    if env is None:
        raise CLIError("no environment: give --env ENV or set `env` in the config")
    if not isinstance(env, str):
        return  # an env class or creator set in a Python example
    from rllib_ners import register_with_tune
    from rllib_ners.algorithms.common.config.config_checks import (
        unknown_env_id_error,
    )

    register_with_tune()  # "rllib_ners.atari", even after a ray.shutdown()
    error = unknown_env_id_error(env)
    if error is not None:
        raise CLIError(error)


def apply_config_dict(config, overrides: Dict[str, Any], source: str) -> None:
    """Applies an old-style config dict to an AlgorithmConfig, checking every key."""
    import inspect

    for key, value in overrides.items():
        if not isinstance(key, str):
            raise CLIError(f"{source}: config keys must be strings, got {key!r}")
        if key in _CONFIG_METHODS and isinstance(value, dict) and hasattr(config, key):
            _call_config_method(config, key, value, source)
            continue
        if key == "ners_config" and hasattr(config, "ners"):
            if not isinstance(value, dict):
                raise CLIError(
                    f"{source}: ners_config must be a JSON object of .ners() "
                    f'settings, e.g. {{"ners_config": {{"lr": 0.0001}}}}; got {value!r}'
                )
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
                value = import_class(value)  # a dotted path in JSON or YAML
            _call_config_method(config, method, {kwarg: value}, source, shown=key)
            continue
        attribute = config_attribute_for_key(config, key)
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
                f"{source}: bad value for {key!r}: {one_line(error)}"
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
            f"{source}: bad value for {shown!r}: {one_line(error)}"
        ) from None


def fit_our_buffer_into_stock_config(config) -> None:
    """For a stock RLlib config whose `replay_buffer_config` names one of our
    buffers as `type`: checks its settings as the buffer does (RLlib builds
    it only inside the trial; our configs' `validate()` checks them itself),
    and gives a stock `SACConfig` the buffer through `with_replay_buffer`, as
    in Python (RLlib's `SACConfig.validate()` takes its own buffer names only).
    CLIError names a bad setting."""
    from ray.rllib.algorithms.sac import SACConfig

    from rllib_ners.algorithms.common.config.buffer_config_checks import (
        buffer_settings_problem,
    )
    from rllib_ners.algorithms.common.config.buffer_types import (
        is_fast_buffer,
        resolve_buffer_class,
    )
    from rllib_ners.replay_buffers.rllib_compat import (
        is_a_package_config,
        with_replay_buffer,
    )

    if is_a_package_config(config):
        return
    buffer_config = config.replay_buffer_config or {}
    if buffer_config.get("type") is None:
        return
    try:
        buffer_class = resolve_buffer_class(buffer_config["type"])
    except ValueError:
        return  # validate() names the unknown type
    if not is_fast_buffer(buffer_class):
        return
    problem = buffer_settings_problem(buffer_class, buffer_config)
    if problem is not None:
        raise CLIError(f"invalid config: {one_line(problem)}")
    if isinstance(config, SACConfig):
        with_replay_buffer(config, buffer_class)


def validate_config(config) -> None:
    """Runs `config.validate()` on a copy; CLIError with RLlib's message if it
    refuses the config."""
    try:
        config.copy(copy_frozen=False).validate()
    except (ValueError, TypeError, KeyError) as error:
        raise CLIError(f"invalid config: {one_line(error)}") from None


def _rllib_metric_names() -> set:
    import ray.rllib.utils.metrics as metrics

    return {
        value
        for name, value in vars(metrics).items()
        if name.isupper() and isinstance(value, str)
    } | {"time_total_s", "time_this_iter_s", "training_iteration"}


# Result keys a run is commonly stopped on. Tune only warns once of a stop key
# missing from the results, and the run then never stops on it.
COMMON_STOP_KEYS = (
    ITERS_KEY,
    STEPS_KEY,
    RETURN_KEY,
    f"evaluation/{RETURN_KEY}",
    "env_runners/episode_len_mean",
    "time_total_s",
    "time_this_iter_s",
    "num_training_step_calls_per_iteration",
)


def _refuse_a_misspelled_stop_key(key: str) -> None:
    """CLIError for a stop key close to one of `COMMON_STOP_KEYS` (a typo)
    that is no metric name of RLlib's (`ray.rllib.utils.metrics`, alone or
    under `env_runners/` or `evaluation/env_runners/`: `episode_return_max`
    is not a typo of `episode_return_mean`); any other key (a custom metric)
    passes."""
    if key in COMMON_STOP_KEYS or key.rpartition("/")[2] in _rllib_metric_names():
        return
    close = difflib.get_close_matches(key, COMMON_STOP_KEYS, n=1, cutoff=0.85)
    if close:
        raise CLIError(
            f"stop criterion {key!r} is not a result key: did you mean {close[0]!r}? "
            f"(a run would never stop on it)"
        )


def stop_criteria(
    args: argparse.Namespace, defaults: Optional[Dict[str, Any]] = None
) -> Dict[str, Any]:
    """The stop dict of a run: `defaults`, updated by `--stop` and the
    `--stop-*` flags, old key names mapped to RLlib's; CLIError if a value is not
    a number or nothing is left to stop on."""
    stop = {_STOP_ALIASES.get(k, k): v for k, v in (defaults or {}).items()}
    if args.stop:
        given = parse_json_object(args.stop, "--stop")
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
        _refuse_a_misspelled_stop_key(key)
    if not stop:
        raise CLIError(
            "no stopping criterion: give --stop-iters, --stop-timesteps, "
            "--stop-reward or --stop '{...}'"
        )
    return stop


def resolve_example_path(path: str) -> Path:
    """The tuned example file `path` names: as given, else relative to a
    `tuned_examples/` directory (or its parent); CLIError if there is none."""
    given = Path(path).expanduser()
    if given.is_file():
        return given.resolve()
    if not given.is_absolute():
        for directory in example_dirs():
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


def _script_flags_hint(path: Path, script_args: Sequence[str]) -> str:
    """Where to look when an example's own parser refused its flags (all of
    them came after `--`, where they belong)."""
    listing = f"`{PROG} train file {path} -- --help` lists its flags"
    if script_args:
        return f"the example has no such flag, or wants another value: {listing}"
    return f"its flags go after `--`; {listing}"


def load_python_example(
    path: Path, script_args: Sequence[str] = (), *, refuse_runner_flags: bool = False
):
    """Loads a tuned example's module-level `config` (and its parsed `args`).

    The file runs with `sys.argv = [path, *script_args]` under a module name other
    than `__main__`, so its argparse sees only its own flags and its
    `if __name__ == "__main__"` block (the experiment) does not run. With
    `refuse_runner_flags`, flags only that block would apply raise a CLIError
    (`RUNNER_FLAGS`).
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
            reason = last_line(captured.getvalue()) or f"exit code {exit_.code}"
            raise CLIError(
                f"{path.name}'s own argument parser failed: {reason} "
                f"({_script_flags_hint(path, script_args)})"
            ) from None
        except CLIError:
            raise
        except Exception as error:
            raise CLIError(
                f"cannot load {path}: {type(error).__name__}: {one_line(error)} (run "
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
    parser = namespace.get("parser")
    if (
        refuse_runner_flags
        and example_args is not None
        and isinstance(parser, argparse.ArgumentParser)
    ):
        _refuse_flags_left_to_the_runner(path, parser, example_args)
    return config, example_args


# The example flags that only the example's own runner (`run_example`, what
# `python EXAMPLE.py` runs) applies, and `rllib-ners train`'s flag for each
# where it has one. `rllib-ners train file` builds the example's module-level
# config and trains it itself, so these would change nothing.
RUNNER_FLAGS = {
    "num_env_runners": "--num-env-runners",
    "num_learners": "--num-learners",
    "num_gpus_per_learner": "--num-gpus-per-learner",
    "checkpoint_freq": "--checkpoint-freq",
    "checkpoint_at_end": "--checkpoint-at-end",
    "num_cpus": "--num-cpus",
    "verbose": "--verbose",
    "num_envs_per_env_runner": None,
    "rollout_fragment_length": None,
    "num_cpus_per_learner": None,
    "num_aggregator_actors_per_learner": None,
    "num_gpus": None,
    "evaluation_interval": None,
    "evaluation_num_env_runners": None,
    "evaluation_duration": None,
    "evaluation_duration_unit": None,
    "evaluation_parallel_to_training": None,
    "log_level": None,
    "output": None,
    "old_api_stack": None,
    "no_tune": None,
    "as_test": None,
    "as_release_test": None,
    "num_samples": None,
    "max_concurrent_trials": None,
    "wandb_key": None,
    "wandb_project": None,
    "wandb_run_name": None,
}


def _refuse_flags_left_to_the_runner(
    path: Path, parser: argparse.ArgumentParser, example_args: argparse.Namespace
) -> None:
    """Raises a CLIError naming the example flags given after `--` that only
    the example's runner applies (`RUNNER_FLAGS`), unless the example's own
    module reads them (`args.<name>` in its source)."""
    defaults = vars(parser.parse_args([]))
    read_by_module = set(re.findall(r"\bargs\.(\w+)", path.read_text()))
    given = [
        dest
        for dest in RUNNER_FLAGS
        if dest in defaults
        and dest not in read_by_module
        and getattr(example_args, dest, None) != defaults[dest]
    ]
    if not given:
        return
    fixes = []
    for dest in given:
        flag = "--" + dest.replace("_", "-")
        own = RUNNER_FLAGS[dest]
        fixes.append(
            f"{flag}: give it to train before `--` ({PROG} train {own} ... file "
            f"{path.name})"
            if own
            else f"{flag}: run `python {path} {flag} ...` instead"
        )
    raise CLIError(
        f"`{PROG} train file` trains {path.name}'s config itself, so flags that "
        f"only the example's runner applies would change nothing: " + "; ".join(fixes),
        2,
    )


def load_yaml_experiments(path: Path) -> List[Tuple[str, Dict[str, Any]]]:
    """The experiments of an old-style `rllib train` YAML file, checked."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise CLIError(f"{path}: invalid YAML: {one_line(error)}") from None
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
    cls = resolve_algo(str(spec["run"]))
    config = cls.get_default_config()
    settings = dict(spec.get("config") or {})
    env = spec.get("env", settings.pop("env", None))
    if env is not None:
        config.environment(env)
    apply_config_dict(config, settings, f"{source}: experiment {name!r} config")
    return config, dict(spec.get("stop") or {})
