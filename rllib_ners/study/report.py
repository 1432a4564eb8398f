"""A study's report, from its CSVs alone.

    rllib-ners study report --results-dir DIR

Writes `<results-dir>/report.md` and `<results-dir>/report.png`.

A side study (an extra arm on some tasks, in a folder of its own) is compared
with the study's own runs without copying them: `--also` adds the runs of
another folder, `--arms` and `--tasks` keep only the named ones, e.g.

    rllib-ners study report --results-dir results/sample_efficiency_encoder \
        --also results/sample_efficiency --arms uniform per ners ners_module \
        --tasks minatar_breakout minatar_space_invaders

Scores. A run's greedy evaluation return (`eval_return_mean`: the mean over the
task's `eval_episodes` greedy episodes, every `eval_every` env steps) is min-max
normalised with the task's anchors, `(R - random_return) / (max_return -
random_return)` (each task's declaration says where its anchors come from;
scores are not clipped, so a run can score above 1 or below 0):
- final: the normalised return of the evaluation at the budget;
- AUC: the mean of the normalised returns of all evaluations (every
  `eval_every` env steps up to the budget): the area under the learning curve
  divided by its length.

Statistics, all from `rliable` (Agarwal et al. 2021): IQM (25% trimmed mean over
runs, and over runs x tasks for the aggregate) with 95% percentile intervals from
the stratified bootstrap (runs resampled within each task), and the probability
of improvement P(X > PER) (Mann-Whitney over runs, averaged over tasks) with a
stratified independent bootstrap interval. The aggregate over tasks uses, for
each arm, the seeds it has finished on every task that all arms have runs on.

Throughput: env steps per CPU second of a run = training env steps / (CPU time
of the run's process - the CPU time of the study's own greedy evaluation; wall
time where a CSV has no CPU time). CPU time, because the machine is shared with
other work, whose load changes wall time from run to run. An arm's figure is
the median over its runs, shown relative to uniform's and PER's on the same
task, with the lowest and highest run beside it: on a shared machine the same
arm's runs differ by tens of percent (load, CPU model), and a ratio inside that
spread is not a cost difference (`benchmarks/study_costs.py` times a task's
arms side by side, from the same configs). The `ners_reference` arm's own
evaluation episodes (its replay reward) are part of its cost and stay in.

Machines. A results folder may hold a `machines.csv` (columns task, arm, seed,
cpu, recorded_from: one row per run, written by
`benchmarks/commit_study_results.sh` when it commits the run). Runs regenerate
bit for bit only on the CPU model that ran them (torch's CPU kernels round
differently on different models), and CPU time compares best between runs of one
model, so the report lists the CPU models of its runs, task by task and arm by
arm; a run without a row counts as "not recorded".
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from rllib_ners.study.declarations import ARMS, DEFAULT_SEEDS, TASKS, Task

# Arms every other arm is compared with (probability of improvement, cost).
BASELINES = ("uniform", "per")
# The other NERS arms (`Arm.algo == "ners"`, e.g. the paper's semantics in
# `ners_reference`) are also compared with this one: does a variant beat ours?
NERS_BASELINE = "ners"
BOOTSTRAP_REPS = 5000
CURVE_BOOTSTRAP_REPS = 1000
BOOTSTRAP_SEED = 0
# What the report says produced it, unless told otherwise.
STUDY_REPORT_COMMAND = "rllib-ners study report"
DEFAULT_TITLE = "Sample-efficiency study"
MACHINES_FILE = "machines.csv"
MACHINE_NOT_RECORDED = "not recorded"


class Run:
    """One finished (arm, task, seed): its evaluations and throughput."""

    def __init__(self, arm: str, task: str, seed: int, rows: List[dict]):
        self.arm, self.task, self.seed = arm, task, seed
        evals = [r for r in rows if r.get("eval_step")]
        self.eval_steps = np.array([int(float(r["eval_step"])) for r in evals])
        self.eval_returns = np.array([float(r["eval_return_mean"]) for r in evals])
        last = rows[-1]
        self.env_steps = int(float(last["env_steps"]))
        if last.get("cpu_time_s"):
            busy = float(last["cpu_time_s"]) - float(last.get("study_eval_cpu_s") or 0)
        else:
            busy = float(last["wall_time_s"]) - float(
                last.get("study_eval_time_s") or 0
            )
        self.env_steps_per_s = self.env_steps / busy if busy > 0 else float("nan")
        self.wall_time_s = float(last["wall_time_s"])
        self.eval_env_steps = int(float(last.get("eval_env_steps") or 0))
        self.final_diagnostics = {
            key: float(last[key])
            for key in ("effective_sample_fraction", "priority_entropy_normalized")
            if last.get(key)
        }


def read_run(path: Path) -> Run:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path}: no rows")
    first = rows[0]
    return Run(first["arm"], first["task"], int(first["seed"]), rows)


def load_runs(results_dir: Path, tasks: Dict[str, Task] = TASKS):
    """The finished runs under `results_dir` whose evaluations match the task's
    current schedule; and notes on the CSVs left out."""
    runs: List[Run] = []
    notes: List[str] = []
    for path in sorted(Path(results_dir).glob("*/*/seed*.csv")):
        run = read_run(path)
        task = tasks.get(run.task)
        if task is None:
            notes.append(f"{path}: task {run.task!r} is not declared; left out")
            continue
        expected = np.arange(task.eval_every, task.budget + 1, task.eval_every)
        if not np.array_equal(run.eval_steps, expected):
            notes.append(
                f"{path}: evaluations at {run.eval_steps.tolist()} do not match the "
                f"task's schedule (every {task.eval_every} to {task.budget}); left out"
            )
            continue
        runs.append(run)
    return runs, notes


def normalise(returns: np.ndarray, task: Task) -> np.ndarray:
    return (returns - task.random_return) / (task.max_return - task.random_return)


def _ordered_arms(names) -> List[str]:
    known = [a for a in ARMS if a in names]
    return known + sorted(set(names) - set(known))


def score_tables(runs: Sequence[Run], tasks: Dict[str, Task] = TASKS):
    """{kind: {task: {arm: {seed: score}}}} for kind "final" and "auc", and
    {task: {arm: (steps, [runs x evals] normalised returns)}} for the curves."""
    scores = {
        "final": defaultdict(lambda: defaultdict(dict)),
        "auc": defaultdict(lambda: defaultdict(dict)),
    }
    curves = defaultdict(lambda: defaultdict(list))
    for run in runs:
        task = tasks[run.task]
        norm = normalise(run.eval_returns, task)
        scores["final"][run.task][run.arm][run.seed] = float(norm[-1])
        scores["auc"][run.task][run.arm][run.seed] = float(np.mean(norm))
        curves[run.task][run.arm].append((run.eval_steps, norm))
    return scores, curves


def _iqm(x):
    from rliable import metrics

    return np.array([metrics.aggregate_iqm(x)])


def _poi(x, y):
    from rliable import metrics

    return np.array([metrics.probability_of_improvement(x, y)])


def _iqm_per_point(x):
    """IQM over runs x tasks at every evaluation point of x [runs, tasks,
    points]: rliable's `aggregate_iqm` (scipy's 25% trimmed mean), per point."""
    import scipy.stats

    return scipy.stats.trim_mean(x.reshape(-1, x.shape[-1]), 0.25, axis=0)


def _estimates(score_dict, func, reps):
    """rliable's interval estimates, seeded: the same scores give the same
    intervals. rliable 1.2's bootstraps draw their indices from numpy's global
    RNG (`np.random.choice`), whatever `random_state` says, so the global RNG
    is seeded for the call (and restored after it)."""
    from rliable import library as rly

    state = np.random.get_state()
    np.random.seed(BOOTSTRAP_SEED)
    try:
        return rly.get_interval_estimates(
            score_dict,
            func,
            reps=reps,
            random_state=np.random.RandomState(BOOTSTRAP_SEED),
        )
    finally:
        np.random.set_state(state)


def aggregate_matrix(
    table: Dict[str, Dict[str, Dict[int, float]]], arm: str, tasks: Sequence[str]
) -> Optional[np.ndarray]:
    """[runs x tasks] scores of `arm` on `tasks` over the seeds it finished on
    all of them (None if fewer than two)."""
    seeds = None
    for task in tasks:
        have = set(table[task].get(arm, {}))
        seeds = have if seeds is None else seeds & have
    seeds = sorted(seeds or ())
    if len(seeds) < 2:
        return None
    return np.array([[table[task][arm][s] for task in tasks] for s in seeds])


def aggregate_groups(task_names: Sequence[str], tasks: Dict[str, Task]):
    """The groups of tasks the report aggregates over: all tasks, and one group
    per algorithm (e.g. SAC on MuJoCo, Rainbow on Atari) when there are several.
    """
    groups = {"all tasks": list(task_names)}
    algos = sorted({tasks[name].algo for name in task_names})
    if len(algos) > 1:
        for algo in algos:
            groups[f"all {algo} tasks"] = [
                name for name in task_names if tasks[name].algo == algo
            ]
    return groups


def _with_intervals(points, intervals, sizes=None):
    return {
        key: (
            float(points[key][0]),
            float(intervals[key][0, 0]),
            float(intervals[key][1, 0]),
        )
        + ((sizes[key],) if sizes is not None else ())
        for key in points
    }


def _is_ners_arm(name: str) -> bool:
    """Whether `name` is a declared arm with a NERS sampler (`algo == "ners"`)."""
    arm = ARMS.get(name)
    return arm is not None and arm.algo == "ners"


def compute(
    runs: Sequence[Run], tasks: Dict[str, Task] = TASKS, reps: int = BOOTSTRAP_REPS
) -> dict:
    """Every number of the report.

    Returns a dict with, for kind in ("final", "auc"):
      `iqm[kind][scope][arm] = (point, low, high, n_runs)` and
      `poi[kind][baseline][scope][arm] = (point, low, high)` (every arm vs
      each of `BASELINES` that has runs, and the other NERS arms vs
      `NERS_BASELINE`; `poi_compared[baseline]` lists the arms compared with
      it), where scope is a task name or a group of
      `aggregate_groups` (an arm is aggregated over a group when it has 2+ runs
      on every task of it, on the seeds it finished on all of them);
      `throughput[task][arm] = (median env steps/s, {baseline: ratio},
      (lowest, highest) over the runs)`;
      `diagnostics[task][arm] = {key: median final value}`; `curves`.
    """
    scores, curves = score_tables(runs, tasks)
    arms = _ordered_arms({r.arm for r in runs})
    task_names = [t for t in tasks if t in scores["final"]]
    groups = aggregate_groups(task_names, tasks)
    baselines = [b for b in BASELINES if b in arms]
    # baseline -> the arms compared with it
    compared = {baseline: [a for a in arms if a != baseline] for baseline in baselines}
    variants = [a for a in arms if a != NERS_BASELINE and _is_ners_arm(a)]
    if NERS_BASELINE in arms and variants:
        compared[NERS_BASELINE] = variants
    out = {
        "arms": arms,
        "tasks": task_names,
        "groups": groups,
        "baselines": baselines,
        "poi_compared": compared,
        "iqm": {},
        "poi": {},
    }
    for kind in ("final", "auc"):
        table = scores[kind]
        iqm = defaultdict(dict)
        poi = {baseline: defaultdict(dict) for baseline in compared}
        samples = {}  # scope -> {arm: matrix [runs x tasks]}
        for task in task_names:
            for arm in arms:
                if len(table[task].get(arm, {})) == 1:
                    # One run: its score, no interval (nothing to resample).
                    (value,) = table[task][arm].values()
                    iqm[task][arm] = (float(value), float("nan"), float("nan"), 1)
            samples[task] = {
                arm: np.array(list(table[task][arm].values()))[:, None]
                for arm in arms
                if len(table[task].get(arm, {})) >= 2
            }
        for group, group_tasks in groups.items():
            samples[group] = {
                arm: matrix
                for arm in arms
                if (matrix := aggregate_matrix(table, arm, group_tasks)) is not None
            }
        for scope, per_arm in samples.items():
            if not per_arm:
                continue
            points, intervals = _estimates(per_arm, _iqm, reps)
            sizes = {arm: matrix.shape[0] for arm, matrix in per_arm.items()}
            iqm[scope].update(_with_intervals(points, intervals, sizes))
            for baseline, compared_arms in compared.items():
                pairs = {
                    arm: (per_arm[arm], per_arm[baseline])
                    for arm in compared_arms
                    if arm in per_arm and baseline in per_arm
                }
                if pairs:
                    points, intervals = _estimates(pairs, _poi, reps)
                    poi[baseline][scope].update(_with_intervals(points, intervals))
        out["iqm"][kind] = dict(iqm)
        out["poi"][kind] = {b: dict(p) for b, p in poi.items()}

    by = defaultdict(lambda: defaultdict(list))
    for run in runs:
        by[run.task][run.arm].append(run)
    throughput, diagnostics = {}, {}
    for task in task_names:
        rates = {arm: [r.env_steps_per_s for r in by[task][arm]] for arm in by[task]}
        medians = {arm: float(np.median(values)) for arm, values in rates.items()}
        throughput[task] = {
            arm: (
                value,
                {b: value / medians[b] for b in baselines if medians.get(b)},
                (float(min(rates[arm])), float(max(rates[arm]))),
            )
            for arm, value in medians.items()
        }
        diagnostics[task] = {}
        for arm in by[task]:
            keys = sorted({k for r in by[task][arm] for k in r.final_diagnostics})
            if keys:
                diagnostics[task][arm] = {
                    k: float(
                        np.median(
                            [
                                r.final_diagnostics[k]
                                for r in by[task][arm]
                                if k in r.final_diagnostics
                            ]
                        )
                    )
                    for k in keys
                }
    out["throughput"] = throughput
    out["diagnostics"] = diagnostics
    out["curves"] = {t: dict(curves[t]) for t in task_names}
    out["n_runs"] = len(runs)
    return out


def load_machines(folders: Sequence[Path]) -> Dict[tuple, str]:
    """`(task, arm, seed) -> CPU model` from each folder's `machines.csv` (the
    first row of a run counts; folders without the file add nothing)."""
    machines: Dict[tuple, str] = {}
    for folder in folders:
        path = Path(folder) / MACHINES_FILE
        if not path.is_file():
            continue
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                key = (row["task"], row["arm"], int(row["seed"]))
                machines.setdefault(key, row["cpu"].strip() or MACHINE_NOT_RECORDED)
    return machines


def machine_table(runs: Sequence[Run], machines: Dict[tuple, str]) -> Dict[tuple, dict]:
    """`{(task, arm): {cpu: runs}}` over the runs, or `{}` when no run has a
    recorded machine."""
    if not any((r.task, r.arm, r.seed) in machines for r in runs):
        return {}
    counts: Dict[tuple, Dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for run in runs:
        cpu = machines.get((run.task, run.arm, run.seed), MACHINE_NOT_RECORDED)
        counts[(run.task, run.arm)][cpu] += 1
    return {key: dict(sorted(by_cpu.items())) for key, by_cpu in counts.items()}


def _fmt(estimate) -> str:
    if estimate is None:
        return "-"
    if estimate[1] != estimate[1]:  # NaN: a single run
        return f"{estimate[0]:.2f} [no CI]"
    return f"{estimate[0]:.2f} [{estimate[1]:.2f}, {estimate[2]:.2f}]"


def render_markdown(
    result: dict,
    notes: Sequence[str],
    *,
    expected_runs: int,
    tasks: Dict[str, Task] = TASKS,
    png_name="report.png",
    command: str = STUDY_REPORT_COMMAND,
    machines: Optional[Dict[tuple, dict]] = None,
    title: str = DEFAULT_TITLE,
) -> str:
    """The report's Markdown; `machines` as `machine_table` returns it."""
    arms, baselines = result["arms"], result["baselines"]
    scopes = result["tasks"] + list(result["groups"])
    partial = result["n_runs"] < expected_runs
    names = {"uniform": "uniform", "per": "PER", NERS_BASELINE: NERS_BASELINE}
    compared = result["poi_compared"]
    lines = [
        f"# {title}" + (" (PARTIAL)" if partial else ""),
        "",
        f"{result['n_runs']} finished runs"
        + (
            f" of the {expected_runs} planned: the numbers will move."
            if partial
            else "."
        ),
        f"Generated by `{command}` from the committed CSVs. Scores: greedy "
        "evaluation return, min-max normalised per task; IQM with 95% "
        "stratified-bootstrap intervals and probabilities of improvement over "
        + " and over ".join(names[b] for b in baselines)
        + (
            f" (the other NERS arms also over {NERS_BASELINE})"
            if NERS_BASELINE in compared
            else ""
        )
        + f", from rliable ({BOOTSTRAP_REPS} bootstrap samples, seeded).",
        "",
        "| task | env | budget (env steps) | normalisation anchors (0 / 1) |",
        "|---|---|---|---|",
    ]
    for name in result["tasks"]:
        t = tasks[name]
        lines.append(
            f"| {name} | {t.env} | {t.budget} | {t.random_return:g} / "
            f"{t.max_return:g} ({t.anchor_note}) |"
        )
    lines += [""] + [
        f"'{group}' aggregates {', '.join(group_tasks)} (an arm counts where it "
        "has 2+ runs on each, over the seeds it finished on all of them)."
        for group, group_tasks in result["groups"].items()
    ]
    for kind, title in (
        ("final", "Final score (evaluation at the budget)"),
        ("auc", "Area under the curve (mean over evaluations)"),
    ):
        lines += [
            "",
            f"## {title}: IQM [95% CI] (runs)",
            "",
            "| arm | " + " | ".join(scopes) + " |",
            "|---|" + "---|" * len(scopes),
        ]
        for arm in arms:
            cells = []
            for scope in scopes:
                est = result["iqm"][kind].get(scope, {}).get(arm)
                cells.append("-" if est is None else f"{_fmt(est)} ({est[3]})")
            lines.append(f"| {arm} | " + " | ".join(cells) + " |")
        for baseline, compared_arms in compared.items():
            lines += [
                "",
                f"Probability of improvement over {names[baseline]}, {kind} score:",
                "",
                "| arm | " + " | ".join(scopes) + " |",
                "|---|" + "---|" * len(scopes),
            ]
            table = result["poi"][kind][baseline]
            for arm in compared_arms:
                cells = [_fmt(table.get(scope, {}).get(arm)) for scope in scopes]
                lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Throughput: env steps per CPU second (median over runs), relative to "
        + " and to ".join(names[b] for b in baselines),
        "",
        "[lowest-highest run] where an arm has 2+ runs on a task: CPU seconds of "
        "runs made at different times on a shared machine vary with its load and "
        "CPU model (see Machines), so ratios within that spread are not a cost "
        "difference; benchmarks/study_costs.py measures the arms' costs side by "
        "side.",
        "",
        "| arm | " + " | ".join(result["tasks"]) + " |",
        "|---|" + "---|" * len(result["tasks"]),
    ]
    for arm in arms:
        cells = []
        for task in result["tasks"]:
            value = result["throughput"][task].get(arm)
            if value is None:
                cells.append("-")
                continue
            ratios = ", ".join(
                f"{ratio:.2f}x {names[b]}" for b, ratio in value[1].items()
            )
            low, high = value[2]
            spread = f" [{low:.0f}-{high:.0f}]" if low != high else ""
            cells.append(f"{value[0]:.0f}{spread}" + (f" ({ratios})" if ratios else ""))
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    diag_rows = [
        (task, arm, values)
        for task in result["tasks"]
        for arm, values in result["diagnostics"].get(task, {}).items()
    ]
    if diag_rows:
        lines += [
            "",
            "## NERS sampler at the end of the run (median over runs)",
            "",
            "| task | arm | effective_sample_fraction | priority_entropy_normalized |",
            "|---|---|---|---|",
        ]
        for task, arm, values in diag_rows:
            ess = values.get("effective_sample_fraction")
            ent = values.get("priority_entropy_normalized")
            lines.append(
                f"| {task} | {arm} | {'-' if ess is None else f'{ess:.3f}'} | "
                f"{'-' if ent is None else f'{ent:.4f}'} |"
            )
    if machines:
        models = {cpu for counts in machines.values() for cpu in counts}
        unknown = sum(
            counts.get(MACHINE_NOT_RECORDED, 0) for counts in machines.values()
        )
        models.discard(MACHINE_NOT_RECORDED)
        lines += [
            "",
            "## Machines: the CPU model of each run (runs)",
            "",
            "Runs regenerate bit for bit only on the CPU model that ran them, "
            "and CPU time compares best between runs of one model; "
            f"{len(models)} CPU model(s) ran these runs ({MACHINES_FILE})"
            + (f", {unknown} run(s) without a recorded machine." if unknown else "."),
            "",
            "| task | arm | CPU models (runs) |",
            "|---|---|---|",
        ]
        for task in result["tasks"]:
            for arm in arms:
                counts = machines.get((task, arm))
                if counts:
                    cells = ", ".join(f"{cpu} ({n})" for cpu, n in counts.items())
                    lines.append(f"| {task} | {arm} | {cells} |")
    lines += ["", f"![study]({png_name})"]
    if notes:
        lines += ["", "Left out:", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path, reps: int = CURVE_BOOTSTRAP_REPS) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms, tasks = result["arms"], result["tasks"]
    colors = {arm: f"C{i}" for i, arm in enumerate(arms)}
    ncols = max(3, len(tasks))
    fig, axes = plt.subplots(2, ncols, figsize=(4.2 * ncols, 8.0), squeeze=False)
    scopes = tasks + list(result["groups"])
    baseline = (
        "per" if "per" in result["baselines"] else next(iter(result["baselines"]), None)
    )
    panels = [
        ("final", "IQM final normalised score"),
        ("auc", "IQM normalised AUC"),
        (None, f"P(arm > {baseline}), final score"),
    ]
    for ax, (kind, title) in zip(axes[0], panels):
        y = 0
        ticks, labels = [], []
        for scope in scopes:
            for arm in arms:
                if kind is None:
                    table = result["poi"]["final"].get(baseline, {})
                    est = table.get(scope, {}).get(arm)
                else:
                    est = result["iqm"][kind].get(scope, {}).get(arm)
                if est is None:
                    continue
                ax.errorbar(
                    est[0],
                    y,
                    xerr=None
                    if est[1] != est[1]  # a single run: no interval
                    else [[est[0] - est[1]], [est[2] - est[0]]],
                    fmt="o",
                    color=colors[arm],
                    capsize=3,
                )
                ticks.append(y)
                labels.append(f"{scope}: {arm}")
                y -= 1
            y -= 0.5
        if kind is None:
            ax.axvline(0.5, color="gray", ls="--", lw=1)
        ax.set_yticks(ticks)
        ax.set_yticklabels(labels, fontsize=7)
        ax.set_title(title, fontsize=10)
    for ax in axes[0][len(panels) :]:
        ax.axis("off")
    for ax, task in zip(axes[1], tasks):
        for arm, runs in result["curves"][task].items():
            if len(runs) < 2:  # one run: its curve, dashed, no interval
                steps, norm = runs[0]
                ax.plot(steps, norm, color=colors[arm], ls="--", label=f"{arm} (1)")
                continue
            steps = runs[0][0]
            matrix = np.array([norm for _, norm in runs])  # runs x evals
            scores = {arm: matrix[:, None, :]}  # runs x 1 task x evals

            points, intervals = _estimates(scores, _iqm_per_point, reps)
            ax.plot(steps, points[arm], color=colors[arm], label=f"{arm} ({len(runs)})")
            ax.fill_between(
                steps,
                intervals[arm][0],
                intervals[arm][1],
                color=colors[arm],
                alpha=0.2,
            )
        ax.set_title(f"{task}: IQM greedy return, normalised", fontsize=10)
        ax.set_xlabel("training env steps")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    for ax in axes[1][len(tasks) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def planned_runs(runs: Sequence[Run], tasks: Optional[Sequence[str]] = None) -> int:
    """The runs a study plans: on each task (the given ones, else those with
    runs), every arm that has runs on a task of the same algorithm, times the
    report seeds (`DEFAULT_SEEDS`)."""
    planned = set(tasks) if tasks is not None else {r.task for r in runs}
    arms_by_algo = defaultdict(set)
    for run in runs:
        arms_by_algo[TASKS[run.task].algo].add(run.arm)
    return sum(
        len(arms_by_algo[TASKS[task].algo]) for task in planned if task in TASKS
    ) * len(DEFAULT_SEEDS)


def write_report(
    results_dir: Path,
    *,
    also: Sequence[Path] = (),
    arms: Optional[Sequence[str]] = None,
    tasks: Optional[Sequence[str]] = None,
    expected_runs: Optional[int] = None,
    reps: int = BOOTSTRAP_REPS,
    command: str = STUDY_REPORT_COMMAND,
    title: str = DEFAULT_TITLE,
) -> Path:
    """Writes report.md and report.png into `results_dir`; returns the .md path.

    The report covers the runs under `results_dir` and under each folder of
    `also`, keeping only the runs of `arms` and `tasks` when they are given."""
    results_dir = Path(results_dir)
    runs, notes = load_runs(results_dir)
    for folder in also:
        more_runs, more_notes = load_runs(folder)
        runs += more_runs
        notes += more_notes
    seen = set()
    for run in runs:
        key = (run.arm, run.task, run.seed)
        if key in seen:
            raise SystemExit(
                f"{run.arm} on {run.task}, seed {run.seed}, is in two of the folders "
                f"{[str(results_dir), *map(str, also)]}: give each folder once"
            )
        seen.add(key)
    if arms is not None:
        runs = [r for r in runs if r.arm in arms]
    if tasks is not None:
        runs = [r for r in runs if r.task in tasks]
    if not runs:
        raise SystemExit(
            f"no finished runs (seed*.csv) under {[str(results_dir), *map(str, also)]}"
            + ("" if arms is None and tasks is None else " for the given arms/tasks")
        )
    if expected_runs is None:
        expected_runs = planned_runs(runs, tasks)
    result = compute(runs, reps=reps)
    plot(result, results_dir / "report.png", reps=min(reps, CURVE_BOOTSTRAP_REPS))
    text = render_markdown(
        result,
        notes,
        expected_runs=expected_runs,
        command=command,
        machines=machine_table(runs, load_machines([results_dir, *also])),
        title=title,
    )
    path = results_dir / "report.md"
    path.write_text(text)
    print(text)
    print(f"wrote {path} and {results_dir / 'report.png'}")
    return path
