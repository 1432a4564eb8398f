"""Shared by the learning benchmarks (`ners_vs_per.py`, `acer.py`): run one
config until a smoothed return target or a step budget, summarise arms.

A run records env steps/s and learner updates/s (over the whole run after the
first iteration, which is mostly warm-up), env steps per CPU second of this
process (the benchmarks run everything in it: `num_env_runners=0`, a local
Learner; CPU time, unlike wall time, hardly depends on what else the machine
runs, so its ratios are the ones to read on a busy machine) and the env steps
at which the training return (`env_runners/episode_return_mean`, RLlib's
100-episode window) first reached the target.
"""

from __future__ import annotations

import argparse
import csv
import logging
import os
import statistics
import time
from typing import Callable, Dict, List, Sequence

import ray
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    EPISODE_RETURN_MEAN,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
)


def run_to_target(
    config,
    *,
    max_steps: int,
    target: float,
    count_updates: Callable[[dict], int],
) -> Dict[str, float]:
    """Trains `config` until the return reaches `target` or `max_steps` env steps.

    `count_updates(result)` returns the lifetime number of learner updates.
    """
    algo = config.build_algo()
    steps_to_target = None
    start_time = start_cpu = start_steps = start_updates = None
    steps = updates = 0
    try:
        while steps < max_steps:
            result = algo.train()
            steps = int(result[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME])
            updates = count_updates(result)
            if start_time is None:
                start_time, start_cpu, start_steps, start_updates = (
                    time.perf_counter(),
                    time.process_time(),
                    steps,
                    updates,
                )
            ret = result[ENV_RUNNER_RESULTS].get(EPISODE_RETURN_MEAN, float("nan"))
            if ret >= target:
                steps_to_target = steps
                break
        elapsed = time.perf_counter() - start_time
        cpu = time.process_time() - start_cpu
    finally:
        algo.stop()
    rate = (lambda n: n / elapsed) if elapsed > 0 else (lambda n: float("nan"))
    return {
        "steps_to_target": steps_to_target,
        "env_steps": steps,
        "env_steps_per_s": rate(steps - start_steps),
        "updates_per_s": rate(updates - start_updates),
        "env_steps_per_cpu_s": (steps - start_steps) / cpu if cpu > 0 else float("nan"),
        "wall_s": elapsed,
        "cpu_s": cpu,
    }


def summarize(
    rows: List[dict],
    arms: Sequence[str],
    *,
    title: str,
    target: float,
    max_steps: int,
    ratios: Sequence[tuple] = (),
) -> None:
    """Prints one line per arm and the throughput ratios `(a, b)` of `ratios`."""
    print(f"\n{title}, target return {target:g}, budget {max_steps} env steps")
    header = (
        f"{'arm':<12} {'env steps/s':>12} {'updates/s':>10} {'steps/cpu s':>12} "
        f"{'reached':>8} "
        f"{'steps to target: median':>24} {'[min, max]':>18}"
    )
    print(header)
    print("-" * len(header))
    medians = {}
    for arm in arms:
        mine = [r for r in rows if r["arm"] == arm]
        if not mine:
            continue
        sps = statistics.median(r["env_steps_per_s"] for r in mine)
        ups = statistics.median(r["updates_per_s"] for r in mine)
        cps = statistics.median(
            r.get("env_steps_per_cpu_s", float("nan")) for r in mine
        )
        medians[arm] = (sps, ups, cps)
        reached = [r for r in mine if r["steps_to_target"] is not None]
        # Runs that never reach the target count as the budget (a lower bound).
        censored = sorted(
            r["steps_to_target"] if r["steps_to_target"] is not None else max_steps
            for r in mine
        )
        spread = f"[{censored[0]}, {censored[-1]}]"
        print(
            f"{arm:<12} {sps:>12.1f} {ups:>10.1f} {cps:>12.1f} "
            f"{len(reached):>4}/{len(mine):<3} "
            f"{statistics.median(censored):>24.0f} {spread:>18}"
        )
    for a, b in ratios:
        if a in medians and b in medians:
            print(
                f"throughput ratio {a}/{b}: env steps/s "
                f"{medians[a][0] / medians[b][0]:.2f}x, updates/s "
                f"{medians[a][1] / medians[b][1]:.2f}x, env steps per CPU second "
                f"{medians[a][2] / medians[b][2]:.2f}x"
            )
    print("(steps to target: runs that missed it count as the budget)")


def write_csv(rows: List[dict], path: str) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def read_csv(path: str) -> List[dict]:
    """Rows of `write_csv`, with numbers parsed back."""
    rows = []
    with open(path) as f:
        for row in csv.DictReader(f):
            parsed = dict(row)
            for key in ("seed", "env_steps"):
                parsed[key] = int(row[key])
            for key in ("env_steps_per_s", "updates_per_s", "wall_s"):
                parsed[key] = float(row[key])
            for key in ("env_steps_per_cpu_s", "cpu_s"):  # absent in older CSVs
                parsed[key] = float(row.get(key) or "nan")
            parsed["steps_to_target"] = (
                int(row["steps_to_target"]) if row["steps_to_target"] else None
            )
            rows.append(parsed)
    return rows


def add_arguments(parser: argparse.ArgumentParser, *, arms, default_arms, max_steps):
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--max-steps", type=int, default=max_steps)
    parser.add_argument("--target", type=float, default=450.0)
    parser.add_argument("--arms", nargs="+", choices=arms, default=list(default_arms))
    parser.add_argument(
        "--from-csv",
        help="print the summary of an earlier (possibly interrupted) run's CSV",
    )


def run_arms(
    args,
    *,
    all_arms: Sequence[str],
    build_config: Callable[[str, int], object],
    count_updates: Callable[[dict], int],
    report: Callable[[List[dict], Sequence[str]], None],
) -> int:
    """Runs every arm for every seed (arms interleaved seed by seed), writing the
    CSV after each run; or, with `--from-csv`, only reports an earlier run."""
    if args.from_csv:
        rows = read_csv(args.from_csv)
        report(rows, [a for a in all_arms if any(r["arm"] == a for r in rows)])
        return 0
    logging.getLogger("ray").setLevel(logging.ERROR)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    rows = []
    try:
        for seed in range(args.seeds):
            for arm in args.arms:
                row = {"arm": arm, "seed": seed}
                row.update(
                    run_to_target(
                        build_config(arm, seed),
                        max_steps=args.max_steps,
                        target=args.target,
                        count_updates=count_updates,
                    )
                )
                rows.append(row)
                print(
                    f"seed {seed} {arm:<10} steps_to_target={row['steps_to_target']} "
                    f"env_steps/s={row['env_steps_per_s']:.1f} "
                    f"updates/s={row['updates_per_s']:.1f} "
                    f"steps/cpu-s={row['env_steps_per_cpu_s']:.1f} "
                    f"wall={row['wall_s']:.0f}s",
                    flush=True,
                )
                write_csv(rows, args.out)
    finally:
        ray.shutdown()
    report(rows, args.arms)
    print(f"rows written to {args.out}")
    return 0
