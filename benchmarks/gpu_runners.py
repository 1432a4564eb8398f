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
from typing import Dict, List, Optional

from baselines import ATARI_BATCH, ATARI_GAME
from harness import loop_section_labels, loop_sections_into, timed_method

from rllib_ners.seam.algorithm import local_learner_of

# The ceiling first: it is the bound of the same EnvRunner count's other points.
RUNNER_MODES = ("ceiling", "lockstep", "overlapped")
# --preset: the Atari config each point builds.
RUNNER_PRESETS = {
    "rainbow": "atari_rainbow",  # one update of 32 per 4 env steps
    "der": "atari_data_efficient_rainbow",  # one update of 32 per env step
}


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
        default=[None],
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
    for flag in ("envs_per_runner", "rollout_fragment_length", "weights_sync_interval"):
        values = getattr(args, flag)
        if any(value is not None and value < 1 for value in values):
            flag = "--" + flag.replace("_", "-")
            parser.error(f"{flag} takes counts >= 1, got {values}")


def runners_config(args, arm: str, mode: str, num_runners: int, spec: dict):
    """A point's config: `args.preset` with `num_runners` EnvRunners of
    `spec["envs"]` sub-envs; `spec["interval"]`: the weights sync interval of
    overlapped points; `spec["length"]`: env steps per sub-env and `sample()`
    request (None: the preset's); `args.training_intensity`: replayed per
    sampled env step (None: the preset's)."""
    from rllib_ners.algorithms.rainbow import presets

    learning_starts = 10**9 if mode == "ceiling" else 1600
    preset = getattr(presets, RUNNER_PRESETS[args.preset])
    config = (
        preset(
            ATARI_GAME, replay=arm, capacity=100_000, learning_starts=learning_starts
        )
        .env_runners(num_env_runners=num_runners, num_envs_per_env_runner=spec["envs"])
        # A GPU Learner replays its updates from CUDA graphs (3.37x the eager
        # updates' rate for data-efficient Rainbow on the H200, 2026-11-28).
        .training(
            overlap_sampling=mode != "lockstep",
            weights_sync_interval=spec["interval"] if mode != "lockstep" else 1,
            cuda_graph_updates=cuda_available(),
        )
    )
    if args.training_intensity is not None:
        config = config.training(training_intensity=args.training_intensity)
    if spec["length"] is not None:
        config = config.env_runners(rollout_fragment_length=spec["length"])
    if mode == "lockstep":
        # RLlib's lockstep weights count a local EnvRunner beside the remote
        # ones ((N + 1) / N times the ratio): this intensity keeps the preset's
        # updates per env step, as overlapped sampling does.
        intensity = config.training_intensity * num_runners / (num_runners + 1)
        config = config.training(training_intensity=intensity)
    return (
        config.learners(num_gpus_per_learner=1 if cuda_available() else 0)
        .reporting(
            min_sample_timesteps_per_iteration=args.steps, min_time_s_per_iteration=0
        )
        .debugging(seed=0)
    )


def runners_point(config, mode: str) -> dict:
    """One algorithm warmed up past the learning start, then one iteration of
    `args.steps` env steps timed."""
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
    syncs, sync_seconds = sections.get(SYNCH_WORKER_WEIGHTS_TIMER) or (0, 0.0)
    staleness = "-"
    if WEIGHTS_STALENESS_MEAN in result:
        mean, most = result[WEIGHTS_STALENESS_MEAN], result[WEIGHTS_STALENESS_MAX]
        staleness = f"{mean:.1f}/{most:.0f}"
    return {
        "env steps/s": env_steps / wall,
        # The driver process's CPU time (all its threads: Ray's too) per env step.
        "driver CPU ms per env step": 1e3 * cpu / max(env_steps, 1),
        "updates/s": (trained - trained0) / ATARI_BATCH / wall,
        "Learner busy": busy[1] / wall,
        "staleness mean/max": staleness,
        # Weight syncs to the EnvRunners, and the driver's ms per sync.
        "weight syncs": f"{syncs} ({1e3 * sync_seconds / max(syncs, 1):.1f} ms)",
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


def point_specs(arms: List[str], args) -> List[dict]:
    """Every point of one EnvRunner count: per request shape (each
    `--rollout-fragment-length` with each `--envs-per-runner`, labelled `-f<L>`
    and `-e<E>` where there are several of either), per mode and arm (the
    ceiling once), overlapped once per `--weights-sync-interval` (labelled
    `overlapped-k<K>` where there are several)."""
    lengths, envs_counts = args.rollout_fragment_length, args.envs_per_runner
    intervals = args.weights_sync_interval
    specs = []
    for length, envs in itertools.product(lengths, envs_counts):
        shape = f"-f{length}" if len(lengths) > 1 else ""
        shape += f"-e{envs}" if len(envs_counts) > 1 else ""
        for mode in sorted(args.modes, key=RUNNER_MODES.index):
            for arm in arms[:1] if mode == "ceiling" else arms:
                for interval in intervals if mode == "overlapped" else [1]:
                    several = mode == "overlapped" and len(intervals) > 1
                    label = mode + (f"-k{interval}" if several else "") + shape
                    specs.append({"mode": mode, "shape": shape, "label": label})
                    specs[-1].update(arm=arm, interval=interval, length=length)
                    specs[-1]["envs"] = envs
    return specs


def runners_suite(arms: List[str], args) -> None:
    """Every point of the scaling table, printed as it is measured (a timeout
    keeps the rows so far), then what bounds each (`point_bound`). With
    `--rounds` > 1 each EnvRunner count's points run that many times, in
    reverse order every other round; `benchmarks/runners_plot.py` takes each
    point's median and draws the table (of one request shape)."""
    updates = "replayed from CUDA graphs" if cuda_available() else "eager (CPU)"
    intensity = (
        "the preset's training_intensity"
        if args.training_intensity is None
        else f"training_intensity={args.training_intensity:g}"
    )
    fragments = ", ".join(
        "the preset's" if length is None else str(length)
        for length in args.rollout_fragment_length
    )
    print(
        f"{RUNNER_PRESETS[args.preset]}; {intensity}; "
        f"{', '.join(map(str, args.envs_per_runner))} sub-env(s) per EnvRunner; "
        f"rollout_fragment_length {fragments}; overlapped: weights_sync_interval "
        f"{', '.join(map(str, args.weights_sync_interval))}; Learner updates "
        f"{updates}; {args.rounds} round(s)"
    )
    labels = list(loop_section_labels().values())
    print(
        "| EnvRunners | arm | mode | env steps/s | driver CPU ms per env step | "
        "updates/s | Learner busy | staleness mean/max | weight syncs (ms each) | "
        f"driver ms per env step: {' / '.join(labels)} |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    specs = point_specs(arms, args)
    points = []  # (EnvRunners, spec, point)
    for num_runners in args.runners:
        for round_index in range(args.rounds):
            for spec in specs[:: -1 if round_index % 2 else 1]:
                mode, arm = spec["mode"], spec["arm"]
                config = runners_config(args, arm, mode, num_runners, spec)
                point = runners_point(config, mode)
                points.append((num_runners, spec, point))
                sections = " / ".join(f"{point['sections'][n]:.3f}" for n in labels)
                print(
                    f"| {num_runners} | {arm if mode != 'ceiling' else '-'} | "
                    f"{spec['label']} | {point['env steps/s']:.1f} | "
                    f"{point['driver CPU ms per env step']:.3f} | "
                    f"{point['updates/s']:.1f} | {point['Learner busy']:.0%} | "
                    f"{point['staleness mean/max']} | {point['weight syncs']} | "
                    f"{sections} |",
                    flush=True,
                )
    # The sampling-only ceiling of each EnvRunner count and request shape.
    ceilings: Dict[tuple, List[float]] = {}
    for n, spec, point in points:
        if spec["mode"] == "ceiling":
            ceilings.setdefault((n, spec["shape"]), []).append(point["env steps/s"])
    print("\nWhat bounds each point:")
    for n, spec, point in points:
        if spec["mode"] != "ceiling":
            ceiling = statistics.median(ceilings.get((n, spec["shape"]), [0.0]))
            bound = point_bound(point, ceiling or None, spec["mode"])
            print(f"- {n} EnvRunners, {spec['arm']}, {spec['label']}: {bound}")
