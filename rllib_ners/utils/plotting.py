"""Learning curves from Ray Tune run directories (used by `rllib-ners plot`).

Reads each trial's `progress.csv` (or `result.json`) under the given directories,
labels the trial by its replay type (from `params.json`), and draws one curve per
label: the mean return over the trials (seeds) against env steps, with a band
(min-max or +-1 std) across them. Ray-free: only numpy and matplotlib (Agg).
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np

# Result columns (Tune flattens nested result dicts with "/"), first found wins.
STEP_COLUMNS = (
    "num_env_steps_sampled_lifetime",
    "env_runners/num_env_steps_sampled_lifetime",
    "timesteps_total",
)
RETURN_COLUMNS = (
    "env_runners/episode_return_mean",
    "episode_return_mean",
    "episode_reward_mean",
)


class PlotError(Exception):
    """A user-facing problem with the plot inputs (no trials, no metrics)."""


@dataclass
class TrialCurve:
    """One trial's learning curve and where it came from."""

    path: Path
    label: str
    steps: np.ndarray
    returns: np.ndarray
    params: Dict = field(default_factory=dict)


def find_trial_dirs(roots: Iterable[os.PathLike]) -> List[Path]:
    """Trial directories (holding progress.csv or result.json) under `roots`."""
    found: List[Path] = []
    for root in roots:
        root = Path(root)
        if not root.exists():
            raise PlotError(f"no such directory: {root}")
        for dirpath, dirnames, filenames in os.walk(root):
            # Checkpoint folders never hold results; skip them (they can be big).
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("checkpoint_"))
            if "progress.csv" in filenames or "result.json" in filenames:
                found.append(Path(dirpath))
    return sorted(dict.fromkeys(found))


def _algo_from_trial_name(name: str) -> str:
    # Tune names trials "<trainable>_<env>_<id>_<n>_<params>_<date>".
    return name.split("_", 1)[0] if "_" in name else name


def trial_label(params: Dict, trial_name: str = "") -> str:
    """A short replay-method label for a trial's config (its `params.json`).

    "NERS" for the NERS buffer; for this package's
    FastPrioritizedEpisodeReplayBuffer the method its settings make: "ReLo" or
    "LaBER" (its `sampler`), "PAL" (uniform replay with `critic_loss="pal"`),
    "uniform" (alpha 0), "LAP" (`min_priority` 1: `max(|delta|, 1) ** alpha`)
    or "PER"; "RLlib PER" / "RLlib uniform" for RLlib's own buffers; the
    algorithm name without replay.
    """
    buffer_config = params.get("replay_buffer_config") or {}
    # `with_replay_buffer` keeps an RLlib name in `type` and the class beside it.
    buffer_type = str(
        buffer_config.get("rllib_ners_buffer_class") or buffer_config.get("type", "")
    )
    alpha = buffer_config.get("alpha") if buffer_config else None
    uniform = alpha is not None and float(alpha) == 0.0
    if "NERS" in buffer_type:
        return "NERS"
    if "FastPrioritized" in buffer_type:
        return _fast_buffer_method(buffer_config, params, uniform)
    if "PrioritizedEpisodeReplayBuffer" in buffer_type:
        return "RLlib uniform" if uniform else "RLlib PER"
    if "ReplayBuffer" in buffer_type:
        return "RLlib uniform"
    return _algo_from_trial_name(trial_name) or "trial"


# The `"sampler"` settings of the fast buffer that are methods of their own.
_SAMPLER_LABELS = {"relo": "ReLo", "laber": "LaBER"}


def _fast_buffer_method(buffer_config: Dict, params: Dict, uniform: bool) -> str:
    """The replay method a FastPrioritizedEpisodeReplayBuffer config makes."""
    sampler = buffer_config.get("sampler")
    if sampler in _SAMPLER_LABELS:
        return _SAMPLER_LABELS[sampler]
    if uniform:
        return "PAL" if params.get("critic_loss") == "pal" else "uniform"
    min_priority = buffer_config.get("min_priority")
    if min_priority is not None and float(min_priority) >= 1.0:
        return "LAP"
    return "PER"


def _to_float(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _column(rows: Sequence[Dict], names: Sequence[str]) -> Optional[np.ndarray]:
    for name in names:
        if rows and any(name in row for row in rows):
            return np.array([_to_float(row.get(name)) for row in rows])
    return None


def _flatten(result: Dict, prefix: str = "") -> Dict:
    flat = {}
    for key, value in result.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _read_rows(trial_dir: Path) -> List[Dict]:
    progress = trial_dir / "progress.csv"
    if progress.exists() and progress.stat().st_size > 0:
        with open(progress, newline="") as f:
            return list(csv.DictReader(f))
    rows = []
    result_json = trial_dir / "result.json"
    if result_json.exists():
        with open(result_json) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        rows.append(_flatten(json.loads(line)))
                    except json.JSONDecodeError:
                        continue  # a line cut off by an interrupted run
    return rows


def load_trial(trial_dir: Path, label_by: str = "replay") -> Optional[TrialCurve]:
    """The trial's (steps, return) curve, or None if it has no such metrics."""
    rows = _read_rows(trial_dir)
    steps = _column(rows, STEP_COLUMNS)
    returns = _column(rows, RETURN_COLUMNS)
    if steps is None or returns is None:
        return None
    keep = np.isfinite(steps) & np.isfinite(returns)
    if not keep.any():
        return None
    order = np.argsort(steps[keep], kind="stable")
    params = {}
    params_file = trial_dir / "params.json"
    if params_file.exists():
        try:
            params = json.loads(params_file.read_text())
        except json.JSONDecodeError:
            params = {}
    if label_by == "run":
        label = trial_dir.parent.name
    else:
        label = trial_label(params, trial_dir.name)
    return TrialCurve(
        path=trial_dir,
        label=label,
        steps=steps[keep][order],
        returns=returns[keep][order],
        params=params,
    )


def aggregate(curves: Sequence[TrialCurve], band: str = "minmax", points: int = 200):
    """Mean and band of the curves on a common env-step grid.

    Each curve counts only inside the step range it covers (a seed that stopped
    early at the reward goal does not drag the mean down afterwards).
    Returns (grid, mean, low, high, count).
    """
    lo = min(c.steps[0] for c in curves)
    hi = max(c.steps[-1] for c in curves)
    if hi <= lo:
        grid = np.array([lo])
    else:
        grid = np.linspace(lo, hi, points)
    values = np.full((len(curves), grid.size), np.nan)
    for i, curve in enumerate(curves):
        inside = (grid >= curve.steps[0]) & (grid <= curve.steps[-1])
        values[i, inside] = np.interp(grid[inside], curve.steps, curve.returns)
    count = np.sum(np.isfinite(values), axis=0)
    valid = count > 0
    grid, values, count = grid[valid], values[:, valid], count[valid]
    mean = np.nanmean(values, axis=0)
    if band == "std":
        std = np.nanstd(values, axis=0)
        low, high = mean - std, mean + std
    elif band == "minmax":
        low, high = np.nanmin(values, axis=0), np.nanmax(values, axis=0)
    else:
        low = high = mean
    return grid, mean, low, high, count


def _sort_key(label: str):
    order = ["NERS", "PER", "uniform", "RLlib PER", "RLlib uniform"]
    return (order.index(label) if label in order else len(order), label)


def plot_runs(
    run_dirs: Sequence[os.PathLike],
    output: os.PathLike,
    *,
    band: str = "minmax",
    label_by: str = "replay",
    title: Optional[str] = None,
) -> Dict[str, int]:
    """Draws the learning curves of all trials under `run_dirs` into `output`.

    Returns {label: number of trials}.
    """
    trial_dirs = find_trial_dirs(run_dirs)
    if not trial_dirs:
        raise PlotError(
            "no Tune trials (progress.csv or result.json) under "
            + ", ".join(str(d) for d in run_dirs)
        )
    curves = [c for c in (load_trial(d, label_by) for d in trial_dirs) if c]
    if not curves:
        raise PlotError(
            f"{len(trial_dirs)} trial(s) found, but none reports env steps and "
            "env_runners/episode_return_mean yet"
        )
    groups: Dict[str, List[TrialCurve]] = {}
    for curve in curves:
        groups.setdefault(curve.label, []).append(curve)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, label in enumerate(sorted(groups, key=_sort_key)):
        members = groups[label]
        grid, mean, low, high, _ = aggregate(members, band)
        color = colors[i % len(colors)]
        n = len(members)
        ax.plot(grid, mean, color=color, label=f"{label} ({n} run{'s' * (n > 1)})")
        if band != "none" and n > 1:
            ax.fill_between(grid, low, high, color=color, alpha=0.2, linewidth=0)
    ax.set_xlabel("env steps")
    ax.set_ylabel("episode return (env_runners/episode_return_mean)")
    envs = sorted({str(c.params.get("env")) for c in curves if c.params.get("env")})
    ax.set_title(title or (", ".join(envs) if envs else "learning curves"))
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best")
    fig.tight_layout()
    output = Path(output)
    if output.parent and not output.parent.exists():
        output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=100)
    plt.close(fig)
    return {label: len(members) for label, members in groups.items()}
