"""The many-EnvRunner scaling suite of `benchmarks/gpu.py` (`--suite runners`).

Rainbow on MsPacman (`--preset rainbow`: `atari_rainbow`, Nature CNN, one update
of 32 per 4 env steps; `der`: data-efficient Rainbow, one per env step) fed by
`--runners` remote EnvRunners, for `--arms` per and ners, each `lockstep`
(RLlib's sample-then-learn) and `overlapped` (`overlap_sampling=True`), plus
`ceiling`: the same EnvRunners sampling into the buffer with no updates; the
Learner on the GPU where there is one. Each point is its own algorithm,
measured over `--steps` env steps after warm-up. Per point: env steps/s,
updates/s, the Learner's busy share of the wall time, the fragments' weight
staleness, the weight syncs and the driver's ms per env step in each loop
section; at the end, what bounds each point. The options (`--help`) pick the
points, the replay ratio, the weight sync intervals and the request shapes;
`benchmarks/runners_plot.py` draws the output.
"""

from __future__ import annotations

import itertools
import statistics
import time
from typing import Dict, List, Optional, Tuple

from baselines import ATARI_BATCH, ATARI_GAME
from harness import loop_section_labels, loop_sections_into, timed_method

from rllib_ners.seam.algorithm import local_learner_of


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def add_runner_arguments(parser) -> None:
    """The options of --suite runners (several values: a point per value)."""
    add = parser.add_argument
    add("--runners", type=int, nargs="+", default=[1, 2, 4, 8, 12], help="counts")
    add("--preset", choices=sorted(RUNNER_PRESETS), default="rainbow")
    add(
        "--envs-per-runner",
        type=int,
        nargs="+",
        default=[1],
        help="sub-envs per EnvRunner (the Nature CNN's batch-1 forward is half "
        "of an EnvRunner's time per step on a CPU: benchmarks/atari_ingest.py)",
    )
    add(
        "--rollout-fragment-length",
        type=int,
        nargs="+",
        help="env steps per sub-env in each sample() request (default: the "
        "preset's); the driver pays a fixed cost per request",
    )
    add("--modes", nargs="+", choices=RUNNER_MODES, default=list(RUNNER_MODES))
    add(
        "--training-intensity",
        type=float,
        help="replayed per sampled env step (default: the preset's; 1 for the "
        "scaling where the Learner is not the bound)",
    )
    add(
        "--weights-sync-interval",
        type=int,
        nargs="+",
        default=[1],
        help="the overlapped points' fewest Learner updates between weight syncs",
    )


def check_runner_arguments(parser, args) -> None:
    """Rejects counts below one and a non-positive --training-intensity."""
    if args.training_intensity is not None and args.training_intensity <= 0:
        parser.error(f"--training-intensity must be > 0, got {args.training_intensity}")
    for flag, values in (
        ("--envs-per-runner", args.envs_per_runner),
        ("--rollout-fragment-length", args.rollout_fragment_length or []),
        ("--weights-sync-interval", args.weights_sync_interval),
    ):
        if any(value < 1 for value in values):
            parser.error(f"{flag} takes counts >= 1, got {values}")


# -------------------------------------------------------------- runners
# The ceiling first: it is the bound of the same EnvRunner count's other points.
RUNNER_MODES = ("ceiling", "lockstep", "overlapped")


# --preset of --suite runners: the Atari config each point builds.
RUNNER_PRESETS = {
    "rainbow": "atari_rainbow",  # one update of 32 per 4 env steps
    "der": "atari_data_efficient_rainbow",  # one update of 32 per env step
}


def runners_point(
    arm: str,
    mode: str,
    num_runners: int,
    steps: int,
    envs_per_runner: int = 1,
    preset: str = "rainbow",
    training_intensity: Optional[float] = None,
    weights_sync_interval: int = 1,
    rollout_fragment_length: Optional[int] = None,
) -> dict:
    """One algorithm with `num_runners` EnvRunners of `envs_per_runner`
    sub-envs each: warmed up past the learning start, then one iteration of
    `steps` env steps timed. `training_intensity`: replayed per sampled env
    step (None: the preset's); `weights_sync_interval`: of overlapped
    points; `rollout_fragment_length`: env steps per sub-env and `sample()`
    request (None: the preset's)."""
    from ray.rllib.utils.metrics import (
        ALL_MODULES,
        ENV_RUNNER_RESULTS,
        LEARNER_RESULTS,
        NUM_ENV_STEPS_SAMPLED_LIFETIME,
        NUM_ENV_STEPS_TRAINED_LIFETIME,
        SYNCH_WORKER_WEIGHTS_TIMER,
    )

    from rllib_ners.algorithms.common.training.overlapped_sampling import (
        WEIGHTS_STALENESS_MAX,
        WEIGHTS_STALENESS_MEAN,
    )
    from rllib_ners.algorithms.rainbow import presets

    learning_starts = 10**9 if mode == "ceiling" else 1600
    config = (
        getattr(presets, RUNNER_PRESETS[preset])(
            ATARI_GAME,
            replay=arm,
            capacity=100_000,
            learning_starts=learning_starts,
        )
        .env_runners(
            num_env_runners=num_runners, num_envs_per_env_runner=envs_per_runner
        )
        # A GPU Learner replays its updates from CUDA graphs (3.37x the eager
        # updates' rate for data-efficient Rainbow on the H200, 2026-11-28).
        .training(
            overlap_sampling=mode != "lockstep",
            weights_sync_interval=weights_sync_interval if mode != "lockstep" else 1,
            cuda_graph_updates=cuda_available(),
        )
    )
    if training_intensity is not None:
        config = config.training(training_intensity=training_intensity)
    if rollout_fragment_length is not None:
        config = config.env_runners(rollout_fragment_length=rollout_fragment_length)
    if mode == "lockstep":
        # RLlib's lockstep weights count a local EnvRunner beside the remote
        # ones ((N + 1) / N times the ratio): this intensity keeps the preset's
        # updates per env step, as overlapped sampling does.
        config = config.training(
            training_intensity=config.training_intensity
            * num_runners
            / (num_runners + 1)
        )
    config = (
        config.learners(num_gpus_per_learner=1 if cuda_available() else 0)
        .reporting(min_sample_timesteps_per_iteration=steps, min_time_s_per_iteration=0)
        .debugging(seed=0)
    )

    def counts(result):
        sampled = result[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME]
        learners = result.get(LEARNER_RESULTS, {}).get(ALL_MODULES, {})
        return sampled, learners.get(NUM_ENV_STEPS_TRAINED_LIFETIME, 0)

    algo = config.build_algo()
    try:
        result = algo.train()
        while mode != "ceiling" and counts(result)[1] == 0:
            result = algo.train()
        busy = [0, 0.0]  # the Learner's updates: calls, seconds
        timed_method(local_learner_of(algo.learner_group), "update", busy)
        sampled0, trained0 = counts(result)
        sections: Dict[str, List[float]] = {}
        wall0, cpu0 = time.perf_counter(), time.process_time()
        with loop_sections_into(algo, sections):
            result = algo.train()
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        sampling_from_the_loop_timer(result, sections)
        sampled, trained = counts(result)
    finally:
        algo.stop()
    env_steps = sampled - sampled0
    return {
        "env steps/s": env_steps / wall,
        # The driver process's CPU time (all its threads: Ray's too) per env step.
        "driver CPU ms per env step": 1e3 * cpu / max(env_steps, 1),
        "updates/s": (trained - trained0) / ATARI_BATCH / wall,
        "Learner busy": busy[1] / wall,
        "staleness mean/max": (
            f"{result[WEIGHTS_STALENESS_MEAN]:.1f}/{result[WEIGHTS_STALENESS_MAX]:.0f}"
            if WEIGHTS_STALENESS_MEAN in result
            else "-"
        ),
        # Weight syncs to the EnvRunners, and the driver's ms per sync.
        "weight syncs": _calls_and_ms_each(sections.get(SYNCH_WORKER_WEIGHTS_TIMER)),
        # The driver's wall time per env step in each loop section (ms).
        "sections": {
            label: 1e3 * sections.get(key, [0, 0.0])[1] / max(env_steps, 1)
            for key, label in loop_section_labels().items()
        },
    }


def sampling_from_the_loop_timer(result, sections) -> None:
    """Lockstep with remote EnvRunners samples through RLlib's
    `synchronous_parallel_sample`, with no method of ours to time: its seconds
    are the loop's own sampling timer (the iteration's mean per call) times
    its calls, one per buffer add."""
    from ray.rllib.utils.metrics import (
        ENV_RUNNER_SAMPLING_TIMER,
        REPLAY_BUFFER_ADD_DATA_TIMER,
        TIMERS,
    )

    sampling = sections.setdefault(ENV_RUNNER_SAMPLING_TIMER, [0, 0.0])
    mean = result.get(TIMERS, {}).get(ENV_RUNNER_SAMPLING_TIMER)
    if sampling[0] == 0 and mean is not None:
        calls = sections.get(REPLAY_BUFFER_ADD_DATA_TIMER, [0])[0]
        sampling[:] = [calls, calls * float(mean)]


def _calls_and_ms_each(tally: Optional[List[float]]) -> str:
    """`[calls, seconds]` of a loop section as "calls (ms each)"."""
    calls, seconds = tally or (0, 0.0)
    return f"{calls} ({1e3 * seconds / max(calls, 1):.1f} ms)"


# What bounds a point (`point_bound`): its env steps/s reach this share of the
# sampling-only ceiling at the same EnvRunner count, or its Learner is busy
# for at least this share of the wall time.
CEILING_SHARE = 0.9
LEARNER_BUSY_SHARE = 0.8
# The driver's loop sections, grouped into what `point_bound` names.
DRIVER_PARTS = {
    "waiting for and receiving fragments": ("sampling",),
    "sending weights": ("weight sync",),
    "the buffer (add, replay sample, priorities)": (
        "buffer add",
        "replay sample",
        "priorities",
    ),
    "the Learner's updates": ("Learner update",),
}


def point_bound(point: dict, ceiling: Optional[float], mode: str) -> str:
    """What bounds a `mode` (lockstep or overlapped) point, in words.

    `ceiling`: the sampling-only env steps/s with the same EnvRunners (None
    where it was not measured). The EnvRunners bound a point that reaches
    `CEILING_SHARE` of it; the Learner one whose updates take
    `LEARNER_BUSY_SHARE` of the wall time. Otherwise the driver's time is
    split among `DRIVER_PARTS`, and the two largest shares of the wall time
    are named (in lockstep, waiting for fragments is the EnvRunners'
    sampling, which the Learner waits for)."""
    rate = point["env steps/s"]
    if ceiling and rate >= CEILING_SHARE * ceiling:
        return f"the EnvRunners ({rate / ceiling:.0%} of the sampling-only ceiling)"
    if point["Learner busy"] >= LEARNER_BUSY_SHARE:
        return f"the Learner (busy {point['Learner busy']:.0%} of the wall time)"
    shares = {
        part: sum(point["sections"].get(label, 0.0) for label in labels) * rate / 1e3
        for part, labels in DRIVER_PARTS.items()
    }
    if mode == "lockstep":
        waiting = next(iter(DRIVER_PARTS))
        shares["the EnvRunners' sampling, waited for in lockstep"] = shares.pop(waiting)
    largest = sorted(shares, key=shares.get, reverse=True)[:2]
    return "the driver's time, mostly " + " and ".join(
        f"{part} ({shares[part]:.0%})" for part in largest
    )


def runners_suite(
    arms: List[str],
    runner_counts: List[int],
    steps: int,
    envs_per_runner: Tuple[int, ...] = (1,),
    preset: str = "rainbow",
    modes: Tuple[str, ...] = RUNNER_MODES,
    training_intensity: Optional[float] = None,
    weights_sync_intervals: Tuple[int, ...] = (1,),
    rounds: int = 1,
    rollout_fragment_lengths: Tuple[Optional[int], ...] = (None,),
) -> None:
    """Every point of the scaling table, printed as it is measured (a timeout
    keeps the rows so far), then what bounds each (`point_bound`). Overlapped
    points run once per `weights_sync_intervals` entry (labelled
    `overlapped-k<K>` where there are several). Every point runs once per
    request shape: each `rollout_fragment_lengths` entry (None: the
    preset's) with each `envs_per_runner` entry, labelled `-f<L>` and `-e<E>`
    where there are several of either. With `rounds` > 1 each EnvRunner
    count's points run that many times, in reverse order every other round;
    `benchmarks/runners_plot.py` takes each point's median and draws the
    table (of one request shape)."""
    updates = "replayed from CUDA graphs" if cuda_available() else "eager (CPU)"
    intensity = (
        "the preset's training_intensity"
        if training_intensity is None
        else f"training_intensity={training_intensity:g}"
    )
    intervals = ", ".join(str(k) for k in weights_sync_intervals)
    envs = ", ".join(str(e) for e in envs_per_runner)
    fragments = ", ".join(
        "the preset's" if length is None else str(length)
        for length in rollout_fragment_lengths
    )
    print(
        f"{RUNNER_PRESETS[preset]}; {intensity}; {envs} sub-env(s) "
        f"per EnvRunner; rollout_fragment_length {fragments}; overlapped: "
        f"weights_sync_interval {intervals}; Learner updates {updates}; "
        f"{rounds} round(s)"
    )
    labels = list(loop_section_labels().values())
    print(
        "| EnvRunners | arm | mode | env steps/s | driver CPU ms per env step | "
        "updates/s | Learner busy | staleness mean/max | weight syncs (ms each) | "
        f"driver ms per env step: {' / '.join(labels)} |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    # (mode, shape, label, arm, weights_sync_interval, fragment length, sub-envs)
    specs = []
    for length, envs in itertools.product(rollout_fragment_lengths, envs_per_runner):
        shape = f"-f{length}" if len(rollout_fragment_lengths) > 1 else ""
        shape += f"-e{envs}" if len(envs_per_runner) > 1 else ""
        for mode in sorted(modes, key=RUNNER_MODES.index):
            for arm in arms[:1] if mode == "ceiling" else arms:
                if mode != "overlapped":
                    specs.append((mode, shape, mode + shape, arm, 1, length, envs))
                    continue
                for interval in weights_sync_intervals:
                    label = mode
                    if len(weights_sync_intervals) > 1:
                        label += f"-k{interval}"
                    label += shape
                    specs.append((mode, shape, label, arm, interval, length, envs))
    # (EnvRunners, mode, shape, arm, label, point)
    points: List[Tuple[int, str, str, str, str, dict]] = []
    for num_runners in runner_counts:
        for round_index in range(rounds):
            for mode, shape, label, arm, interval, length, envs in specs[
                :: -1 if round_index % 2 else 1
            ]:
                point = runners_point(
                    arm,
                    mode,
                    num_runners,
                    steps,
                    envs,
                    preset,
                    training_intensity,
                    interval,
                    length,
                )
                points.append((num_runners, mode, shape, arm, label, point))
                sections = " / ".join(
                    f"{point['sections'][name]:.3f}" for name in labels
                )
                print(
                    f"| {num_runners} | {arm if mode != 'ceiling' else '-'} | "
                    f"{label} | {point['env steps/s']:.1f} | "
                    f"{point['driver CPU ms per env step']:.3f} | "
                    f"{point['updates/s']:.1f} | {point['Learner busy']:.0%} | "
                    f"{point['staleness mean/max']} | {point['weight syncs']} | "
                    f"{sections} |",
                    flush=True,
                )
    # The sampling-only ceiling of each EnvRunner count and request shape.
    ceilings: Dict[Tuple[int, str], List[float]] = {}
    for n, mode, shape, _, _, point in points:
        if mode == "ceiling":
            ceilings.setdefault((n, shape), []).append(point["env steps/s"])
    print("\nWhat bounds each point:")
    for num_runners, mode, shape, arm, label, point in points:
        if mode != "ceiling":
            ceiling = (
                statistics.median(ceilings.get((num_runners, shape), [0.0])) or None
            )
            bound = point_bound(point, ceiling, mode)
            print(f"- {num_runners} EnvRunners, {arm}, {label}: {bound}")
