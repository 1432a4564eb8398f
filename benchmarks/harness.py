"""The timing harness every benchmark suite uses.

Arms live in one process and take turns, round by round, the order rotating by
one arm each round, so that whatever else loads the machine hits them alike;
each arm's figure is the median over the rounds. Beside wall-clock rates, env
steps per CPU second of the process: CPU time hardly depends on what else the
machine runs, so its ratios are the ones to read on a busy machine.

`header()` prints the lines a committed output starts with (`# key: value`:
command, date, commit, machine), the form `docs/hooks/generated.py` reads.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

# ------------------------------------------------------------ the machine


def cpu_model() -> str:
    """The CPU's model name (`/proc/cpuinfo` on Linux), else the platform's."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def commit() -> str:
    """The checkout's short commit (with `+` if it has uncommitted changes)."""
    root = Path(__file__).resolve().parents[1]
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("+" if dirty else "")


def machine() -> str:
    """CPU model and cores; Python, torch and Ray versions; torch threads."""
    import ray
    import torch

    return (
        f"{cpu_model()}, {os.cpu_count()} cores; Python "
        f"{platform.python_version()}, torch {torch.__version__} "
        f"({torch.get_num_threads()} thread), ray {ray.__version__}"
    )


def header() -> str:
    """The `# key: value` lines a committed output starts with."""
    now = datetime.datetime.now(datetime.timezone.utc)
    command = " ".join(["python", *sys.argv]) if sys.argv else "?"
    return "\n".join(
        [
            f"# command: {command}",
            f"# date: {now:%Y-%m-%d %H:%M} UTC",
            f"# commit: {commit()}",
            f"# machine: {machine()}",
        ]
    )


def status_mb(field: str) -> float:
    """A `/proc/self/status` size in MB (Linux)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(field)


def grown_peak_mb() -> Callable[[], float]:
    """Resets the peak resident size (Linux); returns the call giving the MB
    the peak has since grown above the resident size now."""
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")
    base = status_mb("VmRSS")
    return lambda: status_mb("VmHWM") - base


# ------------------------------------------------------------ the rounds


def rotation(names: Sequence[str], round_index: int) -> List[str]:
    """The arms' order in round `round_index`: shifted by one arm per round."""
    shift = round_index % len(names)
    return list(names[shift:]) + list(names[:shift])


def medians(samples: Mapping[str, Mapping[str, List[float]]]) -> Dict[str, dict]:
    """Per arm and key, the median of its samples."""
    return {
        name: {key: statistics.median(values) for key, values in keys.items()}
        for name, keys in samples.items()
    }


def take_turns(
    names: Sequence[str],
    rounds: int,
    chunk: Callable[[str], Mapping[str, float]],
    leave_out_failures: bool = False,
) -> Dict[str, dict]:
    """`rounds` rounds of one `chunk(name)` per arm, the order rotating; per arm
    and key of what `chunk` returns, the median over the rounds.
    `leave_out_failures`: an arm whose chunk raises is reported and left out
    from then on (its earlier samples too), and the others go on; otherwise
    the error ends the rounds."""
    names = list(names)
    samples: Dict[str, Dict[str, List[float]]] = {name: {} for name in names}
    for round_index in range(rounds):
        for name in rotation(names, round_index):
            try:
                measured = chunk(name)
            except Exception:
                if not leave_out_failures:
                    raise
                report_left_out(name, f"it failed in round {round_index + 1}")
                names.remove(name)
                del samples[name]
                continue
            for key, value in measured.items():
                samples[name].setdefault(key, []).append(value)
        print(f"round {round_index + 1}/{rounds} done", flush=True)
    return medians(samples)


def report_left_out(name: str, why: str) -> None:
    """Says that arm `name` is left out and why, then the traceback of the
    exception being handled (its last frames)."""
    print(f"{name} left out: {why}:", flush=True)
    traceback.print_exc(limit=-8)


def timed(call: Callable[[], object], repeats: int = 1) -> float:
    """Seconds per call of `repeats` calls."""
    start = time.perf_counter()
    for _ in range(repeats):
        call()
    return (time.perf_counter() - start) / repeats


def ratio(value: float, reference: float) -> str:
    """`value / reference` as the tables print it: `1.23x`."""
    return f"{value / reference:.2f}x"


class Arm:
    """Something that trains: `warm_up()` once, then `run(steps)` chunks."""

    batch_size = 1

    def warm_up(self) -> None:
        """Past the learning start, then one chunk with updates."""

    def run(self, steps: int) -> Tuple[int, int]:
        """Trains about `steps` env steps; returns (env steps, updates) taken."""
        raise NotImplementedError

    def close(self) -> None:
        pass


def measure(
    arms: Dict[str, Arm], rounds: int, steps: int, leave_out_failures: bool = False
) -> Dict[str, dict]:
    """Rounds of one `steps` chunk per arm, the order rotating; per arm the
    median env steps per second (`wall`) and per CPU second (`cpu`) and
    updates per second (`updates`). `leave_out_failures`: an arm that fails in
    a round is reported, closed and taken out of `arms`, and the others go on
    (`take_turns`)."""

    def chunk(name: str) -> Dict[str, float]:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        env_steps, updates = arms[name].run(steps)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        return {
            "wall": env_steps / wall,
            "cpu": env_steps / cpu,
            "updates": updates / wall,
        }

    median = take_turns(list(arms), rounds, chunk, leave_out_failures)
    for name in [name for name in arms if name not in median]:
        with contextlib.suppress(Exception):
            arms.pop(name).close()
    return median


# ------------------------------------------------------ a suite's run


def suite_parser(
    doc: str, suites: Sequence[str], rounds_help: str = ""
) -> argparse.ArgumentParser:
    """The options every suite of arms takes: `--suite`, `--arms` (a subset of
    the suite's), `--rounds` (default 3 unless `rounds_help` says otherwise)
    and `--steps` (env steps per arm and round)."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--suite", choices=sorted(suites), default="sac")
    parser.add_argument("--arms", nargs="+", help="a subset of the suite's arms")
    if rounds_help:
        parser.add_argument("--rounds", type=int, help=rounds_help)
    else:
        parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, help="env steps per arm and round")
    return parser


def chosen_arms(parser, args, suites: Mapping[str, Sequence[str]]) -> List[str]:
    """The arms of `--suite` that `--arms` names (all by default); an unknown
    one ends the run with the parser's error."""
    names = args.arms or list(suites[args.suite])
    unknown = set(names) - set(suites[args.suite])
    if unknown:
        parser.error(f"unknown arms for --suite {args.suite}: {sorted(unknown)}")
    return names


@contextlib.contextmanager
def ray_in_this_process(num_cpus: int = 1, **init):
    """For the block: RLlib's known log noise silenced, one torch thread and a
    local Ray of `num_cpus` CPUs (`init`: more `ray.init` arguments)."""
    import ray
    import torch

    from rllib_ners.utils.log_noise import silence_known_noise

    silence_known_noise()
    torch.set_num_threads(1)
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, **init)
    try:
        yield
    finally:
        ray.shutdown()


@contextlib.contextmanager
def warmed_up(arms: Dict[str, Arm], leave_out_failures: bool = False):
    """Every arm warmed up, in order, for the block; every arm closed after it.
    `leave_out_failures`: an arm whose warm-up fails is reported and left out
    of `arms`, and the others still run."""
    try:
        for name, arm in list(arms.items()):
            print(f"warming up {name}", flush=True)
            try:
                arm.warm_up()
            except Exception:
                if not leave_out_failures:
                    raise
                report_left_out(name, "its warm-up failed")
                del arms[name]
                with contextlib.suppress(Exception):
                    arm.close()
        yield arms
    finally:
        for arm in arms.values():
            arm.close()


def rounds_line(suite: str, args, machine: str, load_before: float) -> str:
    """The line above a suite's table: its rounds and steps, the machine and
    the load average before and after."""
    return (
        f"{suite}: median of {args.rounds} rounds x {args.steps} env steps per "
        f"arm; {machine}; load average before {load_before:.2f}, after "
        f"{os.getloadavg()[0]:.2f}."
    )


# ------------------------------------------------------ the tables


def report_rates(suite, median, args, machine, load_before, arms, **table) -> None:
    """A suite's output: the header, the rounds line, each arm's loop sections
    and sampler parts, and the rates table (`table`: `rates_table`'s options)."""
    print("\n" + header())
    print(rounds_line(suite, args, machine, load_before))
    for name, arm in arms.items():
        print_arm_parts(name, arm)
    print("\n".join(rates_table(median, **table)))


def print_arm_parts(name: str, arm: Arm) -> None:
    """Where an RLlib arm's measured env steps spent their time: per section
    of our training loop, and the NERS sampler's parts (nothing for others)."""
    steps = getattr(arm, "counts", (0,))[0] - getattr(arm, "measured_from", 0)
    cells = loop_section_cells(getattr(arm, "loop_times", {}), steps)
    if cells:
        print(
            f"{name}: loop sections, ms per env step: {', '.join(cells)} "
            f"({steps} measured env steps, all rounds)"
        )
    for part, (calls, seconds) in getattr(arm, "sampler_times", {}).items():
        print(
            f"{name}: {part} {int(calls)} calls, "
            f"{1e3 * seconds / max(calls, 1):.2f} ms each, "
            f"{1e3 * seconds / max(steps, 1):.3f} ms per env step "
            f"({steps} measured env steps, all rounds)"
        )


def rates_table(
    median: Dict[str, dict],
    references: Dict[str, str],
    cpu_ratios: bool = True,
    extra: Optional[Tuple[str, Callable[[str], str]]] = None,
) -> List[str]:
    """The markdown rows: per arm its rates and, per reference arm present
    ({arm: label}), the ratios to it (wall clock, and CPU with `cpu_ratios`);
    `extra`: a last column's title and its cell per arm."""
    present = {arm: label for arm, label in references.items() if arm in median}
    columns = ["arm", "env steps/s", "env steps / CPU s", "updates/s"]
    for label in present.values():
        columns += [f"vs {label} (wall)", f"vs {label} (CPU)"] if cpu_ratios else []
        columns += [] if cpu_ratios else [f"vs {label}"]
    columns += [extra[0]] if extra else []
    rows = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for name, rate in median.items():
        cells = [name, f"{rate['wall']:.1f}", f"{rate['cpu']:.1f}"]
        cells.append(f"{rate['updates']:.1f}")
        for ref in present:
            cells.append(ratio(rate["wall"], median[ref]["wall"]))
            if cpu_ratios:
                cells.append(ratio(rate["cpu"], median[ref]["cpu"]))
        cells += [extra[1](name)] if extra else []
        rows.append("| " + " | ".join(cells) + " |")
    return rows


# ------------------------------------- where an RLlib arm's time goes


def loop_section_labels() -> Dict[str, str]:
    """The sections of our training loop (RLlib's timer keys), as printed."""
    from ray.rllib.utils.metrics import (
        ENV_RUNNER_SAMPLING_TIMER,
        LEARNER_UPDATE_TIMER,
        REPLAY_BUFFER_ADD_DATA_TIMER,
        REPLAY_BUFFER_SAMPLE_TIMER,
        REPLAY_BUFFER_UPDATE_PRIOS_TIMER,
        SYNCH_WORKER_WEIGHTS_TIMER,
    )

    return {
        ENV_RUNNER_SAMPLING_TIMER: "sampling",
        REPLAY_BUFFER_ADD_DATA_TIMER: "buffer add",
        REPLAY_BUFFER_SAMPLE_TIMER: "replay sample",
        LEARNER_UPDATE_TIMER: "Learner update",
        REPLAY_BUFFER_UPDATE_PRIOS_TIMER: "priorities",
        SYNCH_WORKER_WEIGHTS_TIMER: "weight sync",
    }


def timed_method(owner, method: str, tally: List[float]) -> Callable[[], None]:
    """Replaces `owner.method` by a timer adding [calls, seconds] to `tally`;
    returns the call that puts the method back."""
    original = getattr(owner, method)
    own = vars(owner).get(method)  # an attribute of the instance, not its class

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            tally[0] += 1
            tally[1] += time.perf_counter() - start

    setattr(owner, method, timed)
    if own is not None:
        return lambda: setattr(owner, method, own)
    return lambda: delattr(owner, method)


def expect(owner, name: str, what: str):
    """`owner.name`, which the harness times or reads; a name the package no
    longer has stops the benchmark rather than leaving its figures blank."""
    if not hasattr(owner, name):
        raise AttributeError(
            f"not timed: {type(owner).__name__}.{name} missing (the harness "
            f"times {what} there); update benchmarks/harness.py to the "
            f"package's new name"
        )
    return getattr(owner, name)


def loop_section_methods(algo) -> Dict[str, List[Tuple[object, str]]]:
    """Per loop section, the public methods whose calls make it up, on an
    algorithm on our training loop (`uses_replay_loop`); empty on RLlib's own
    algorithms and on ours that fall back to RLlib's loop (they log why)."""
    from rllib_ners.seam.algorithm import local_learner_of

    if not type(algo).__module__.startswith("rllib_ners."):
        return {}  # RLlib's own algorithm: nothing of ours to time
    if not expect(algo, "uses_replay_loop", "whether our training loop runs"):
        return {}
    buffer = expect(algo, "local_replay_buffer", "the buffer's sections")
    group = algo.env_runner_group
    sampler = expect(algo, "overlapped_sampler", "the overlapped sampling")
    if sampler is not None:
        sampling = [(sampler, "request"), (sampler, "collect")]
    else:
        sampling = [(group.local_env_runner, "sample")]
    learner = local_learner_of(algo.learner_group)
    methods = [  # in the order of `loop_section_labels`
        sampling,
        [(buffer, "add")],
        [(buffer, "sample_batch")],
        [(learner or algo.learner_group, "update")],
        [(buffer, "update_priorities")],
        [(group, "sync_weights")],
    ]
    for label, owners in zip(loop_section_labels().values(), methods):
        for owner, method in owners:
            expect(owner, method, label)
    return dict(zip(loop_section_labels(), methods))


@contextlib.contextmanager
def loop_sections_into(algo, tally: Dict[str, List[float]]):
    """Inside the block, the calls and seconds of each section of our training
    loop add to `tally` ({timer key: [calls, seconds]}), timed at the public
    methods that make it up (nothing on RLlib's own loop)."""
    restore = [
        timed_method(owner, method, tally.setdefault(key, [0, 0.0]))
        for key, methods in loop_section_methods(algo).items()
        for owner, method in methods
    ]
    try:
        yield
    finally:
        for put_back in restore:
            put_back()


def loop_section_cells(tally: Mapping[str, List[float]], steps: int) -> List[str]:
    """`label ms-per-env-step` per section that ran."""
    return [
        f"{label} {1e3 * tally[key][1] / max(steps, 1):.3f}"
        for key, label in loop_section_labels().items()
        if tally.get(key, [0])[0]
    ]


def time_sampler_parts(algo) -> Dict[str, List[float]]:
    """With NERS replay: wraps the local Learner's scoring of replayed batches
    and its REINFORCE step with timers ({part: [calls, seconds]}); empty for
    other replay. A remote Learner's parts are not timed, and say so."""
    from rllib_ners import NERSEpisodeReplayBuffer
    from rllib_ners.seam.algorithm import local_learner_of

    buffer = getattr(algo, "local_replay_buffer", None)
    if not isinstance(buffer, NERSEpisodeReplayBuffer):
        return {}
    learner = local_learner_of(algo.learner_group)
    if learner is None:
        print("not timed: the NERS sampler's parts (the Learner is remote)")
        return {}
    sampler = expect(learner, "ners", "the NERS sampler")
    if sampler is None:
        raise AttributeError(
            f"not timed: {type(learner).__name__}.ners is None with NERS "
            f"replay; update benchmarks/harness.py to where the sampler lives"
        )
    parts: Dict[str, List[float]] = {}
    for part, name in (("scoring", "score"), ("REINFORCE", "reinforce")):
        expect(sampler, name, f"the sampler's {part}")
        parts[part] = [0, 0.0]
        timed_method(sampler, name, parts[part])
    return parts
