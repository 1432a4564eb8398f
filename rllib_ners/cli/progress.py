"""The one-line-per-iteration progress output and duration formatting."""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple

from ray.tune import Callback

from rllib_ners.cli.common import (
    ITERS_KEY,
    RETURN_KEY,
    STEPS_KEY,
    _env_steps,
    _metric,
)


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
