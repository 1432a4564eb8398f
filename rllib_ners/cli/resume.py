"""`rllib-ners resume` (and `train --resume`): continue a Tune run."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Dict, Optional

from rllib_ners.cli.common import RUN_INFO_FILE, CLIError, import_class, one_line
from rllib_ners.cli.overrides import load_python_example, resolve_algo
from rllib_ners.cli.session import ray_session, report_results, tune_output


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
        resolve_algo(info["trainable"])  # registered (NERS-DQN after the import)
        return info["trainable"]
    if info.get("trainable_class"):
        return import_class(info["trainable_class"])
    name = _trainable_name_from_state(run_dir)
    if not name:
        raise CLIError(f"cannot tell which algorithm {run_dir} ran")
    import rllib_ners

    by_class_name = {
        obj.__name__: obj for obj in vars(rllib_ners).values() if isinstance(obj, type)
    }
    if name in by_class_name:
        return by_class_name[name]
    resolve_algo(name)
    return name


def resume_run(path: Path, args: argparse.Namespace) -> int:
    """Restores the Tune run at `path` (a run directory or a trial directory in
    it), with its trainable and example, runs it on and reports it; the exit
    code."""
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
    started = time.time()
    with ray_session(args):
        try:
            tuner = tune.Tuner.restore(
                str(run_dir), trainable=trainable, resume_errored=True
            )
        except (ValueError, RuntimeError, FileNotFoundError) as error:
            raise CLIError(f"cannot restore {run_dir}: {one_line(error)}") from None
        with tune_output(args.verbose):
            results = tuner.fit()
    return report_results(results, run_dir, info.get("stop"), started)


def cmd_resume(args: argparse.Namespace) -> int:
    return resume_run(Path(args.run_dir), args)
