"""Names and helpers every `rllib-ners` subcommand shares: result keys, the
user-facing error, one-line error texts."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
from typing import Any, Dict, Optional

from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    EPISODE_RETURN_MEAN,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
)

PROG = "rllib-ners"
RUN_INFO_FILE = "rllib_ners_run.json"

RETURN_KEY = f"{ENV_RUNNER_RESULTS}/{EPISODE_RETURN_MEAN}"
STEPS_KEY = NUM_ENV_STEPS_SAMPLED_LIFETIME
ITERS_KEY = "training_iteration"
# The exit code of a run stopped by Ctrl-C (128 + SIGINT), as shells report it.
INTERRUPTED_EXIT_CODE = 130


class CLIError(Exception):
    """A problem the user can fix: printed as one line, exit code `code`."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def one_line(text: Any, limit: int = 500) -> str:
    """`text` with its whitespace runs (newlines included) as single spaces, cut
    to `limit` characters with "..." at the end."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)\b(: .+)?$")


def last_line(text: Any) -> str:
    """The gist of an error text with tracebacks: its last exception line that has
    a message (RLlib re-raises env errors as a bare `RuntimeError` from the cause),
    else the last line."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    exceptions = [line for line in lines if _EXCEPTION_LINE.match(line)]
    with_message = [line for line in exceptions if ": " in line]
    chosen = (with_message or exceptions or lines or [str(text)])[-1]
    return one_line(chosen)


def parse_json_object(text: str, flag: str) -> Dict[str, Any]:
    """The JSON object `text` given to `flag`; CLIError naming the flag if it is
    not valid JSON or not an object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise CLIError(f"{flag} is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise CLIError(f"{flag} must be a JSON object, got {type(value).__name__}")
    return value


def result_metric(result: Dict[str, Any], key: str):
    """The value under the "a/b/c" path `key` of a nested result dict, or None
    where the path is missing."""
    value: Any = result
    for part in key.split("/"):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def result_env_steps(result: Dict[str, Any]) -> float:
    """The lifetime env steps of a result (at the top, or under the EnvRunners'
    results), NaN if it has none."""
    for key in (STEPS_KEY, f"{ENV_RUNNER_RESULTS}/{NUM_ENV_STEPS_SAMPLED_LIFETIME}"):
        value = result_metric(result, key)
        if value is not None:
            return float(value)
    return math.nan


def class_path(cls: type) -> str:
    """The dotted path `import_class` imports `cls` back from."""
    return f"{cls.__module__}.{cls.__qualname__}"


def import_class(path: str) -> type:
    """The class at dotted `path` ("package.module.Class"); CLIError naming the
    path if it cannot be imported."""
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as error:
        raise CLIError(f"cannot import {path}: {error}") from None


def module_available(name: str) -> bool:
    """Whether module `name` can be imported (without importing it)."""
    return importlib.util.find_spec(name) is not None


def remove_if_empty(directory: Optional[str]) -> None:
    """Drops the empty log dir a Trainable built outside Tune makes in ~/ray_results."""
    if directory:
        try:
            os.rmdir(directory)
        except OSError:
            pass  # not empty (or gone): leave it
