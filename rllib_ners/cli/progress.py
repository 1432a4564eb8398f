"""What a run prints: one progress line per training iteration (shared by
`rllib-ners train` and the tuned examples' `run_example`) and the one-line outcome
of a trial in the closing summary."""

from __future__ import annotations

import difflib
import math
from typing import Any, Dict, Optional, Tuple

from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME
from ray.tune import Callback

from rllib_ners.cli.common import (
    ITERS_KEY,
    RETURN_KEY,
    STEPS_KEY,
    result_env_steps,
    result_metric,
)

# Stop keys that are an env-step budget (RLlib's examples use the second).
STEP_BUDGET_KEYS = (STEPS_KEY, f"{ENV_RUNNER_RESULTS}/{NUM_ENV_STEPS_SAMPLED_LIFETIME}")
# NERS sampler diagnostics shown when `result["ners"]` has them, in display order:
# per slot the first (key, label) present with a numeric value, absent ones skipped.
# Five significant digits: a sampler that does nothing shows values near 1.
NERS_DIAGNOSTICS = (
    (("priority_entropy_normalized", "entropy/max"),),
    (("effective_sample_fraction", "ess frac"),),
    (("scored_priority_max_over_min", "max/min"),),
    (("num_sampler_updates_lifetime", "updates"), ("num_sampler_updates", "updates")),
    (("replay_reward", "replay reward"),),
)


def _step_budget(stop: Dict[str, Any]) -> Optional[float]:
    budgets = [float(stop[key]) for key in STEP_BUDGET_KEYS if key in stop]
    return min(budgets) if budgets else None


def finite_number(value: Any) -> Optional[float]:
    """`value` as a float (numpy scalars included) if it is a finite number,
    else None (also for a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:  # numpy scalars
            value = float(value)
        except (TypeError, ValueError):
            return None
    value = float(value)
    return value if math.isfinite(value) else None


def format_ners_diagnostics(result: Dict[str, Any]) -> str:
    """`ners: entropy/max 0.99919, updates 40, replay reward 3.5` from `result["ners"]`
    (only the keys of `NERS_DIAGNOSTICS` it has, with numeric values), or ""."""
    ners = result.get("ners")
    if not isinstance(ners, dict):
        return ""
    parts = []
    for slot in NERS_DIAGNOSTICS:
        found = [(label, finite_number(ners.get(key))) for key, label in slot]
        found = [(label, value) for label, value in found if value is not None]
        if not found:
            continue
        label, value = found[0]
        parts.append(
            f"{label} {value:.0f}" if value.is_integer() else f"{label} {value:.5g}"
        )
    return "ners: " + ", ".join(parts) if parts else ""


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

    `previous` is the (env steps, time_total_s) of the trial's previous result
    (`progress_point`); the rate is measured since then. The ETA is the nearer of
    the step and iteration budgets in `stop` (none for a reward-only stop). NERS
    sampler diagnostics follow when the result has a `ners` dict.
    """
    iteration = int(result.get(ITERS_KEY) or 0)
    steps = result_env_steps(result)
    total_time = float(result.get("time_total_s") or 0.0)
    episode_return = result_metric(result, RETURN_KEY)
    rate = math.nan
    if previous is not None and total_time > previous[1]:
        rate = (steps - previous[0]) / (total_time - previous[1])
    elif total_time > 0:
        rate = steps / total_time
    etas = []
    budget = _step_budget(stop)
    if budget is not None and rate > 0:
        etas.append((budget - steps) / rate)
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
    ners = format_ners_diagnostics(result)
    if ners:
        parts.append(ners)
    return (f"[{name}] " if name else "") + " | ".join(parts)


def progress_point(result: Dict[str, Any]) -> Tuple[float, float]:
    """(env steps, time_total_s) of a result: `previous` of the next line."""
    return result_env_steps(result), float(result.get("time_total_s") or 0.0)


def return_criterion(stop: Dict[str, Any]) -> Optional[Tuple[str, float]]:
    """The (key, value) of the stop criterion on a mean return, if any (e.g.
    `env_runners/episode_return_mean`, or an Atari example's game return)."""
    for key, value in stop.items():
        if key.rsplit("/", 1)[-1].endswith("return_mean"):
            return key, float(value)
    return None


def format_outcome(metrics: Dict[str, Any], stop: Optional[Dict[str, Any]]) -> str:
    """`iter 41, env steps 41000, return 465.32 (stop reward 450 reached),
    training time 0:03:30` for a trial's last result."""
    episode_return = finite_number(result_metric(metrics, RETURN_KEY))
    # NaN before the first result (a failed start).
    env_steps = result_env_steps(metrics)
    text = (
        f"iter {metrics.get(ITERS_KEY, 0)}, env steps "
        + (f"{env_steps:.0f}" if env_steps == env_steps else "n/a")
        + ", return "
        + (f"{episode_return:.2f}" if episode_return is not None else "n/a")
    )
    criterion = return_criterion(stop or {})
    if criterion is not None:
        key, target = criterion
        value = finite_number(result_metric(metrics, key))
        if key != RETURN_KEY:
            text += f", {key.rsplit('/', 1)[-1]} " + (
                f"{value:.2f}" if value is not None else "n/a"
            )
        reached = value is not None and value >= target
        text += f" (stop reward {target:g} {'reached' if reached else 'not reached'})"
    if metrics.get("time_total_s"):
        text += f", training time {format_duration(float(metrics['time_total_s']))}"
    return text


def unknown_stop_keys_note(result: Dict[str, Any], stop: Dict[str, Any]) -> str:
    """For a run's first result: a line naming each stop key the result lacks
    (a typo stops nothing: the run would go on until another criterion, or
    forever), with the result keys closest to it; "" where all are there. The
    return and the env-step keys appear later in some runs, so are not named."""
    expected_late = {RETURN_KEY, ITERS_KEY, *STEP_BUDGET_KEYS}
    missing = [
        key
        for key in stop
        if key not in expected_late and result_metric(result, key) is None
    ]
    if not missing:
        return ""
    known = list(_key_paths(result))
    notes = []
    for key in missing:
        close = difflib.get_close_matches(key, known, n=2, cutoff=0.6)
        hint = f" (closest: {', '.join(close)})" if close else ""
        notes.append(f"{key!r}{hint}")
    return (
        f"note: stop key(s) not in the first result, so they stop nothing until "
        f"they appear: {'; '.join(notes)}"
    )


def _key_paths(tree: Dict[str, Any], prefix: str = "", depth: int = 4):
    """The "a/b/c" paths of a result's values, down to `depth` levels."""
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and depth > 1:
            yield from _key_paths(value, f"{path}/", depth - 1)
        else:
            yield path


class ProgressCallback(Callback):
    """Tune callback printing one progress line per training iteration."""

    def __init__(self, stop: Dict[str, Any]):
        self.stop = dict(stop)
        self._previous: Dict[str, Tuple[float, float]] = {}

    def setup(self, **info):
        self._previous = {}

    def on_trial_result(self, iteration, trials, trial, result, **info):
        name = str(trial) if len(trials) > 1 else ""
        if trial.trial_id not in self._previous:
            note = unknown_stop_keys_note(result, self.stop)
            if note:
                print(note, flush=True)
        line = format_progress(
            result, self._previous.get(trial.trial_id), self.stop, name
        )
        self._previous[trial.trial_id] = progress_point(result)
        print(line, flush=True)

    def on_trial_error(self, iteration, trials, trial, **info):
        print(f"trial {trial} failed (see {trial.path}/error.txt)", flush=True)
