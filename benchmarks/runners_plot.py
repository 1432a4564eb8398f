"""The scaling plot and summary of one `benchmarks/gpu.py --suite runners` output.

Reads the output as printed (a run cut short by its timeout keeps the rows it
finished; a point measured in several rounds counts with its median), draws
env steps/s and the Learner's busy share against the number of EnvRunners
(each arm lockstep and overlapped, once per weight sync interval where the run
had several, and the sampling-only ceiling), and prints a Markdown table: per
EnvRunner count, each point's env steps/s, overlapped against lockstep, NERS
against PER, and the first overlapped series' rate against its smallest
count's. A run of several request shapes (`--rollout-fragment-length`,
`--envs-per-runner`) is compared shape by shape instead (the ceiling's rate
and driver CPU, each point's rate against the first shape's), and not drawn.

    python benchmarks/runners_plot.py docs/benchmarks/gpu_runners_<date>_1.txt \\
        docs/runners_scaling.png

The figure depends only on the output file, so it regenerates byte for byte.
"""

from __future__ import annotations

import argparse
import re
import statistics
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple

# Matches a row of the suite's table: EnvRunners, arm, mode (`overlapped-k16`
# where the run had several weight sync intervals), the request shape (`-f32`,
# `-e4` where it had several fragment lengths or sub-env counts), env steps/s,
# driver CPU, updates/s, Learner busy (the columns after are not drawn).
ROW = re.compile(
    r"^\|\s*(\d+)\s*\|\s*([\w-]+)\s*\|\s*(ceiling|lockstep|overlapped(?:-k\d+)?)"
    r"((?:-[fe]\d+)*)\s*\|"
    r"\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*(\d+)%\s*\|"
)


class Point(NamedTuple):
    runners: int
    arm: str  # "-" for the ceiling
    mode: str
    shape: str  # the request shape's label suffix ("-f8-e4"), if any
    env_steps_per_s: float
    updates_per_s: float
    learner_busy: float  # share of the wall time
    driver_cpu_ms: float  # the driver's CPU ms per env step


def read_points(text: str) -> Tuple[List[Point], str]:
    """The table's points (the median of each point's rounds) and a title
    made of the run's header lines."""
    rounds: Dict[tuple, List[Point]] = {}
    header = []
    for line in text.splitlines():
        match = ROW.match(line)
        if match:
            runners, arm, mode, shape, rate, cpu, updates, busy = match.groups()
            rates = float(rate), float(updates), int(busy) / 100, float(cpu)
            point = Point(int(runners), arm, mode, shape, *rates)
            rounds.setdefault(point[:4], []).append(point)
        elif line.startswith("runners: ") or "sub-env(s) per EnvRunner" in line:
            header.append(line.removeprefix("runners: "))
    if not rounds:
        raise SystemExit(
            "no rows of `benchmarks/gpu.py --suite runners` found in the input"
        )
    points = [
        Point(*key, *map(statistics.median, zip(*(p[4:] for p in measured))))
        for key, measured in rounds.items()
    ]
    return points, "\n".join(header)


def shapes_of(points: List[Point]) -> List[str]:
    return list(dict.fromkeys(p.shape for p in points))


def arms_of(points: List[Point]) -> List[str]:
    return list(dict.fromkeys(p.arm for p in points if p.mode != "ceiling"))


def overlapped_modes(points: List[Point]) -> List[str]:
    return list(dict.fromkeys(p.mode for p in points if p.mode.startswith("overl")))


def series(points: List[Point], arm: str, mode: str, shape=None) -> Dict[int, Point]:
    """`arm`'s `mode` points by EnvRunner count (the ceiling's for any arm), of
    one request `shape` (None: any)."""
    return {
        p.runners: p
        for p in points
        if p.mode == mode
        and (p.arm == arm or mode == "ceiling")
        and shape in (None, p.shape)
    }


def rate_of(points, arm: str, mode: str, runners: int, shape=None) -> Optional[float]:
    point = series(points, arm, mode, shape).get(runners)
    return None if point is None else point.env_steps_per_s


def ratio_of(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or not b else a / b


def cell(value: Optional[float], fmt: str = "{:.1f}") -> str:
    return "-" if value is None else fmt.format(value)


def markdown(columns: List[str], rows: List[List[str]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in rows])


def shape_summary(points: List[Point]) -> str:
    """A Markdown table of a run with several request shapes: per EnvRunner
    count and shape, the sampling-only ceiling (env steps/s and the driver's
    CPU ms per env step) and each arm's points, each rate also against the
    first shape's."""
    shapes = shapes_of(points)
    first = shapes[0].lstrip("-")
    pairs = list(dict.fromkeys((p.arm, p.mode) for p in points if p.mode != "ceiling"))
    columns = ["EnvRunners", "request shape", "env steps per request"]
    columns += ["ceiling env steps/s", "ceiling driver CPU ms per env step"]
    columns.append(f"ceiling vs {first}")
    for arm, mode in pairs:
        columns += [f"{arm} {mode}", f"{arm} {mode} vs {first}"]
    rows = []
    for n in sorted({p.runners for p in points}):
        for shape in shapes:
            # `rollout_fragment_length x sub-envs` (none where the shape leaves
            # the fragment length at the preset's)
            parts = dict(re.findall(r"-([fe])(\d+)", shape))
            per_request = (
                int(parts["f"]) * int(parts.get("e", 1)) if "f" in parts else None
            )
            ceiling = series(points, "-", "ceiling", shape).get(n)
            cells = [str(n), shape.lstrip("-"), cell(per_request, "{}")]
            cells += [cell(rate_of(points, "-", "ceiling", n, shape))]
            cells.append(cell(ceiling and ceiling.driver_cpu_ms, "{:.3f}"))
            for arm, mode in [("-", "ceiling"), *pairs]:
                if arm != "-":
                    cells.append(cell(rate_of(points, arm, mode, n, shape)))
                base = rate_of(points, arm, mode, n, shapes[0])
                ratio = ratio_of(rate_of(points, arm, mode, n, shape), base)
                cells.append(cell(ratio, "{:.2f}x"))
            rows.append(cells)
    return markdown(columns, rows)


def summary(points: List[Point]) -> str:
    """A Markdown table: one row per EnvRunner count."""
    arms, overlapped = arms_of(points), overlapped_modes(points)
    counts = sorted({p.runners for p in points})
    columns = ["EnvRunners", "ceiling"]
    for arm in arms:
        columns.append(f"{arm} lockstep")
        for mode in overlapped:
            columns += [f"{arm} {mode}", f"{arm} {mode} / lockstep"]
    if len(arms) > 1:
        columns += [f"{arms[1]} / {arms[0]} ({mode})" for mode in overlapped]
    first = (arms[0], overlapped[0]) if arms and overlapped else None
    if first:
        columns.append(f"{first[0]} {first[1]} vs {counts[0]} EnvRunner(s)")
    rows = []
    for n in counts:
        cells = [str(n), cell(rate_of(points, "-", "ceiling", n))]
        for arm in arms:
            lockstep = rate_of(points, arm, "lockstep", n)
            cells.append(cell(lockstep))
            for mode in overlapped:
                rate = rate_of(points, arm, mode, n)
                cells += [cell(rate), cell(ratio_of(rate, lockstep), "{:.2f}x")]
        for mode in overlapped if len(arms) > 1 else []:
            ratio = ratio_of(*(rate_of(points, arm, mode, n) for arm in arms[1::-1]))
            cells.append(cell(ratio, "{:.2f}x"))
        if first:
            base = rate_of(points, *first, counts[0])
            cells.append(cell(ratio_of(rate_of(points, *first, n), base), "{:.2f}x"))
        rows.append(cells)
    return markdown(columns, rows)


def plot(points: List[Point], title: str, output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = sorted({p.runners for p in points})
    fig, (rates, busy) = plt.subplots(1, 2, figsize=(11, 4.4), layout="constrained")
    ceiling = series(points, "-", "ceiling")
    if ceiling:
        xs = sorted(ceiling)
        ys = [ceiling[n].env_steps_per_s for n in xs]
        rates.plot(xs, ys, "k--", marker="s", label="sampling only (ceiling)")
    # Lockstep dotted, overlapped solid (dashed, dash-dotted for further
    # weight sync intervals); one color per arm.
    line_styles = ["-", "--", "-."]
    styles = {"lockstep": ":"}
    for i, mode in enumerate(overlapped_modes(points)):
        styles[mode] = line_styles[i % len(line_styles)]
    for i, arm in enumerate(arms_of(points)):
        for mode, style in styles.items():
            line = series(points, arm, mode)
            if not line:
                continue
            xs = sorted(line)
            kwargs = {"color": f"C{i}", "linestyle": style, "marker": "o"}
            kwargs["label"] = f"{arm}, {mode}"
            rates.plot(xs, [line[n].env_steps_per_s for n in xs], **kwargs)
            busy.plot(xs, [100 * line[n].learner_busy for n in xs], **kwargs)
    busy.axhline(80, color="grey", linewidth=0.8)
    for ax, ylabel in ((rates, "env steps/s"), (busy, "Learner busy, % of wall time")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, [str(n) for n in counts])
        ax.minorticks_off()
        ax.set_xlabel("remote EnvRunners")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
    rates.set_ylim(bottom=0)
    busy.set_ylim(0, 105)
    rates.legend(fontsize=8, loc="upper left")
    fig.suptitle(title, fontsize=9)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("output", type=Path, help="a `gpu.py --suite runners` output")
    parser.add_argument("figure", type=Path, nargs="?", help="the PNG to write")
    args = parser.parse_args(argv)
    points, title = read_points(args.output.read_text())
    if len(shapes_of(points)) > 1:
        print(shape_summary(points))
        if args.figure is not None:
            raise SystemExit(
                "the input has points of several request shapes: no figure drawn "
                "(draw a run of one --rollout-fragment-length and --envs-per-runner)"
            )
        return 0
    print(summary(points))
    if args.figure is not None:
        plot(points, title, args.figure)
        print(f"wrote {args.figure}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
