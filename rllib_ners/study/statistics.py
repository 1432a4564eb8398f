"""Every number of a study's report, from its runs: scores, IQM and
probabilities of improvement with seeded bootstrap intervals, throughput and the
sampler's diagnostics.

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

Which arm beats which: "X beats Y" on a scope's scores when P(X > Y) is at least
`BEATS_PROBABILITY` and the lower end of its 95% interval is above 1/2 (the
definition the decision rules of results/ners_paper_settings/PLAN.md use), for
every ordered pair of the arms with 2+ runs there. P(Y > X) is 1 - P(X > Y):
Mann-Whitney's U counts ties as halves, so the two sum to 1 on every task and on
every bootstrap sample, and the percentile interval mirrors.

Throughput: a run's env steps per CPU second (`results.Run`). An arm's figure is
the median over its runs, shown relative to uniform's and PER's on the same
task, with the lowest and highest run beside it: on a shared machine the same
arm's runs differ by tens of percent (load, CPU model), and a ratio inside that
spread is not a cost difference (`benchmarks/study_costs.py` times a task's
arms side by side, from the same configs).
"""

from __future__ import annotations

import multiprocessing
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from typing import Dict, List, Optional, Sequence

import numpy as np

from rllib_ners.study.declarations import ARMS, TASKS, Task, in_declaration_order
from rllib_ners.study.results import Run

# Arms every other arm is compared with (probability of improvement, cost).
BASELINES = ("uniform", "per")
# The other NERS arms (`Arm.algo == "ners"`, e.g. the paper's semantics in
# `ners_reference`) are also compared with this one: does a variant beat ours?
NERS_BASELINE = "ners"
# The scores every scope is reported on: final score and area under the curve.
SCORE_KINDS = ("final", "auc")
BOOTSTRAP_REPS = 5000
CURVE_BOOTSTRAP_REPS = 1000
BOOTSTRAP_SEED = 0
# "X beats Y": P(X > Y) at least this, and its interval's lower end above 1/2.
BEATS_PROBABILITY = 0.6
# Slack for P(Y > X) = 1 - P(X > Y) landing an ulp below a threshold.
_PROBABILITY_SLACK = 1e-9
# The interquartile mean drops this fraction of the scores at each end.
IQM_TRIM = 0.25
SECONDS_PER_HOUR = 3600


def normalise(returns: np.ndarray, task: Task) -> np.ndarray:
    return (returns - task.random_return) / (task.max_return - task.random_return)


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


# The bootstrap calls these once per sample (thousands of times per scope), so
# they compute rliable's metrics in a few numpy calls: rliable's own go through
# scipy's input checks on every call, and its probability of improvement runs a
# Mann-Whitney test per task. Both equal rliable's bit for bit (tested).


def _iqm(x):
    """rliable's `aggregate_iqm` of [runs x tasks] scores: scipy's
    `trim_mean(x, 0.25, axis=None)`, the same partition and mean."""
    flat = np.asarray(x).ravel()
    low = int(IQM_TRIM * flat.size)
    high = flat.size - low
    return np.array([np.mean(np.partition(flat, (low, high - 1))[low:high])])


def _poi(x, y):
    """rliable's `probability_of_improvement` of [runs x tasks] scores x over
    y: per task the Mann-Whitney U of x over y divided by n_x n_y, that is
    P(x > y) + P(x = y) / 2 over all pairs of runs, averaged over tasks."""
    greater = (x[:, None, :] > y[None, :, :]).sum(axis=(0, 1))
    ties = (x[:, None, :] == y[None, :, :]).sum(axis=(0, 1))
    per_task = (greater + 0.5 * ties) / (x.shape[0] * y.shape[0])
    return np.array([np.mean(per_task)])


def iqm_per_point(x):
    """IQM over runs x tasks at every evaluation point of x [runs, tasks,
    points]: rliable's `aggregate_iqm` (scipy's 25% trimmed mean), per point."""
    import scipy.stats

    return scipy.stats.trim_mean(x.reshape(-1, x.shape[-1]), IQM_TRIM, axis=0)


def interval_estimates(score_dict, func, reps):
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


def beats(estimate) -> bool:
    """Whether a probability of improvement (point, low, high) says "X beats Y"."""
    point, low = estimate[0], estimate[1]
    return point >= BEATS_PROBABILITY - _PROBABILITY_SLACK and low > 0.5


def _reverse(estimate):
    """P(Y > X) with its interval, from P(X > Y)'s."""
    point, low, high = estimate
    return (1.0 - point, 1.0 - high, 1.0 - low)


def pairwise_improvement(per_arm, known, reps):
    """P(X > Y) (point, low, high) for every ordered pair of the arms of
    `per_arm` ({arm: [runs x tasks] scores}): the pairs of `known` ({(x, y):
    estimate}), the reverses of those, and the pairs neither covers bootstrapped
    here."""
    pairs = dict(known)
    for (x, y), estimate in known.items():
        # A pair bootstrapped both ways (e.g. uniform and PER, each a baseline)
        # keeps both estimates, as the report's tables show them.
        pairs.setdefault((y, x), _reverse(estimate))
    arms = list(per_arm)
    missing = {
        (x, y): (per_arm[x], per_arm[y])
        for i, x in enumerate(arms)
        for y in arms[i + 1 :]
        if (x, y) not in pairs
    }
    if missing:
        points, intervals = interval_estimates(missing, _poi, reps)
        for pair, est in _with_intervals(points, intervals).items():
            pairs[pair] = est
            pairs[pair[::-1]] = _reverse(est)
    return {(x, y): pairs[(x, y)] for x in arms for y in arms if x != y}


def compute(
    runs: Sequence[Run],
    tasks: Dict[str, Task] = TASKS,
    reps: int = BOOTSTRAP_REPS,
    jobs: int = 1,
) -> dict:
    """Every number of the report; the scopes' bootstraps in `jobs` processes
    (the numbers do not depend on it: each bootstrap seeds its own RNG).

    Returns a dict with, for kind in ("final", "auc"):
      `iqm[kind][scope][arm] = (point, low, high, n_runs)` and
      `poi[kind][baseline][scope][arm] = (point, low, high)` (every arm vs
      each of `BASELINES` that has runs, and the other NERS arms vs
      `NERS_BASELINE`; `poi_compared[baseline]` lists the arms compared with
      it), where scope is a task name or a group of
      `aggregate_groups` (an arm is aggregated over a group when it has 2+ runs
      on every task of it, on the seeds it finished on all of them);
      `wins[kind][scope] = [(x, y, estimate of P(x > y))]` for every pair
      where x beats y (`beats`), and `unbeaten[kind][scope]`, the arms with
      2+ runs there that no other arm beats;
      `throughput[task][arm] = (median env steps/s, {baseline: ratio},
      (lowest, highest) over the runs)`;
      `diagnostics[task][arm] = {key: median final value}`; `curves`;
      `compute[group] = {"cpu_hours", "wall_hours", "runs_without_cpu_time"}`
      summed over the runs of each group of tasks.
    """
    scores, curves = score_tables(runs, tasks)
    arms = in_declaration_order({r.arm for r in runs})
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
        "wins": {},
        "unbeaten": {},
    }
    samples, single_runs = {}, {}
    for kind in SCORE_KINDS:
        samples[kind], single_runs[kind] = _scope_samples(
            scores[kind], arms, task_names, groups
        )
    statistics = _statistics_by_scope(
        {
            (kind, scope): per_arm
            for kind in SCORE_KINDS
            for scope, per_arm in samples[kind].items()
            if per_arm
        },
        compared,
        reps,
        jobs,
    )
    for kind in SCORE_KINDS:
        iqm = defaultdict(dict)
        for task, values in single_runs[kind].items():
            # One run: its score, no interval (nothing to resample).
            for arm, value in values.items():
                iqm[task][arm] = (float(value), float("nan"), float("nan"), 1)
        poi = {baseline: {} for baseline in compared}
        wins, unbeaten = {}, {}
        for scope, per_arm in samples[kind].items():
            if not per_arm:
                continue
            scope_iqm, scope_poi, wins[scope], unbeaten[scope] = statistics[
                (kind, scope)
            ]
            iqm[scope].update(scope_iqm)
            for baseline, estimates in scope_poi.items():
                if estimates:
                    poi[baseline][scope] = estimates
        out["iqm"][kind] = dict(iqm)
        out["poi"][kind] = poi
        out["wins"][kind] = wins
        out["unbeaten"][kind] = unbeaten

    by_task = defaultdict(lambda: defaultdict(list))
    for run in runs:
        by_task[run.task][run.arm].append(run)
    out["throughput"] = {
        task: _throughput(by_task[task], baselines) for task in task_names
    }
    out["compute"] = _compute_used(runs, groups)
    out["diagnostics"] = {
        task: _final_diagnostics(by_task[task]) for task in task_names
    }
    out["curves"] = {t: dict(curves[t]) for t in task_names}
    out["n_runs"] = len(runs)
    return out


def _scope_samples(table, arms, task_names, groups):
    """The scores the statistics resample, per scope: `{scope: {arm: [runs x
    tasks]}}` for every task and group (arms with 2+ runs there), and `{task:
    {arm: score}}` for arms with a single run on a task."""
    samples, single_runs = {}, defaultdict(dict)
    for task in task_names:
        for arm in arms:
            if len(table[task].get(arm, {})) == 1:
                (single_runs[task][arm],) = table[task][arm].values()
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
    return samples, single_runs


def _statistics_by_scope(work, compared, reps, jobs):
    """`{(kind, scope): _scope_statistics(per_arm, compared, reps)}` for each
    `(kind, scope): per_arm` of `work`, in up to `jobs` processes."""
    if jobs <= 1 or len(work) <= 1:
        return {
            key: _scope_statistics(per_arm, compared, reps)
            for key, per_arm in work.items()
        }
    # The costliest scopes first, so that no process is left with a big one at
    # the end: a scope's cost grows with its tasks (one Mann-Whitney test per
    # task and resample) and with its arms (pairs to compare).
    order = sorted(
        work, key=lambda key: -sum(matrix.size for matrix in work[key].values())
    )
    # Spawned, not forked: the parent may hold Ray's and torch's threads.
    with ProcessPoolExecutor(
        max_workers=min(jobs, len(work)),
        mp_context=multiprocessing.get_context("spawn"),
    ) as pool:
        futures = {
            key: pool.submit(_scope_statistics, work[key], compared, reps)
            for key in order
        }
        return {key: futures[key].result() for key in work}


def _scope_statistics(per_arm, compared, reps):
    """One scope's IQMs `{arm: estimate}`, probabilities of improvement
    `{baseline: {arm: estimate}}`, wins `[(x, y, estimate)]` and unbeaten arms."""
    points, intervals = interval_estimates(per_arm, _iqm, reps)
    sizes = {arm: matrix.shape[0] for arm, matrix in per_arm.items()}
    iqm = _with_intervals(points, intervals, sizes)
    poi = {}
    for baseline, compared_arms in compared.items():
        pairs = {
            arm: (per_arm[arm], per_arm[baseline])
            for arm in compared_arms
            if arm in per_arm and baseline in per_arm
        }
        poi[baseline] = {}
        if pairs:
            points, intervals = interval_estimates(pairs, _poi, reps)
            poi[baseline] = _with_intervals(points, intervals)
    known = {
        (arm, baseline): estimate
        for baseline, estimates in poi.items()
        for arm, estimate in estimates.items()
    }
    every_pair = pairwise_improvement(per_arm, known, reps)
    wins = [
        (x, y, estimate) for (x, y), estimate in every_pair.items() if beats(estimate)
    ]
    unbeaten = [arm for arm in per_arm if not any(y == arm for _, y, _ in wins)]
    return iqm, poi, wins, unbeaten


def _throughput(by_arm: Dict[str, List[Run]], baselines: Sequence[str]) -> dict:
    """One task's `{arm: (median env steps/s, {baseline: ratio}, (lowest,
    highest))}`."""
    rates = {
        arm: [r.env_steps_per_s for r in arm_runs] for arm, arm_runs in by_arm.items()
    }
    medians = {arm: float(np.median(values)) for arm, values in rates.items()}
    return {
        arm: (
            value,
            {b: value / medians[b] for b in baselines if medians.get(b)},
            (float(min(rates[arm])), float(max(rates[arm]))),
        )
        for arm, value in medians.items()
    }


def _final_diagnostics(by_arm: Dict[str, List[Run]]) -> dict:
    """One task's `{arm: {key: median over runs of the value at the end}}`, for
    the arms whose runs recorded sampler diagnostics."""
    diagnostics = {}
    for arm, arm_runs in by_arm.items():
        keys = sorted({k for r in arm_runs for k in r.final_diagnostics})
        if keys:
            diagnostics[arm] = {
                k: float(
                    np.median(
                        [
                            r.final_diagnostics[k]
                            for r in arm_runs
                            if k in r.final_diagnostics
                        ]
                    )
                )
                for k in keys
            }
    return diagnostics


def _compute_used(runs: Sequence[Run], groups: Dict[str, List[str]]) -> dict:
    """What the runs cost in all, per group of tasks: CPU hours of the runs'
    processes, wall hours, and how many runs recorded no CPU time."""
    used = {}
    for group, group_tasks in groups.items():
        group_runs = [r for r in runs if r.task in group_tasks]
        if group_runs:
            used[group] = {
                "cpu_hours": sum(
                    r.cpu_time_s for r in group_runs if r.cpu_time_s is not None
                )
                / SECONDS_PER_HOUR,
                "wall_hours": sum(r.wall_time_s for r in group_runs) / SECONDS_PER_HOUR,
                "runs_without_cpu_time": sum(r.cpu_time_s is None for r in group_runs),
            }
    return used
