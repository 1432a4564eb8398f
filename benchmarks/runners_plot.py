"""The scaling plot and summary of one `benchmarks/gpu.py --suite runners` output.

Reads the output as printed (a run cut short by its timeout keeps the rows it
finished), draws env steps/s and the Learner's busy share against the number
of EnvRunners (each arm lockstep and overlapped, and the sampling-only
ceiling), and prints a Markdown table: per EnvRunner count, each point's env
steps/s, overlapped against lockstep, NERS against PER, and the rate against
the smallest count's.

    python benchmarks/runners_plot.py docs/benchmarks/gpu_runners_<date>_1.txt \\
        docs/runners_scaling.png

The figure depends only on the output file, so it regenerates byte for byte.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple

MODES = ("ceiling", "lockstep", "overlapped")
# Matches a row of the suite's table: EnvRunners, arm, mode, env steps/s,
# driver CPU, updates/s, Learner busy (the columns after are not drawn).
_ROW = re.compile(
    r"^\|\s*(\d+)\s*\|\s*([\w-]+)\s*\|\s*(ceiling|lockstep|overlapped)\s*\|"
    r"\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*(\d+)%\s*\|"
)


class Point(NamedTuple):
    runners: int
    arm: str  # "-" for the ceiling
    mode: str
    env_steps_per_s: float
    updates_per_s: float
    learner_busy: float  # share of the wall time


def read_points(text: str) -> Tuple[List[Point], str]:
    """The table's points and a title made of the run's header lines."""
    points = []
    header = []
    for line in text.splitlines():
        match = _ROW.match(line)
        if match:
            runners, arm, mode, rate, _, updates, busy = match.groups()
            points.append(
                Point(
                    int(runners),
                    arm,
                    mode,
                    float(rate),
                    float(updates),
                    int(busy) / 100,
                )
            )
        elif line.startswith("runners: ") or "sub-env(s) per EnvRunner" in line:
            header.append(line.removeprefix("runners: "))
    if not points:
        raise SystemExit(
            "no rows of `benchmarks/gpu.py --suite runners` found in the input"
        )
    return points, "\n".join(header)


def _series(points: List[Point], arm: str, mode: str) -> Dict[int, Point]:
    return {
        p.runners: p
        for p in points
        if p.mode == mode and (p.arm == arm or mode == "ceiling")
    }


def _arms(points: List[Point]) -> List[str]:
    return list(dict.fromkeys(p.arm for p in points if p.mode != "ceiling"))


def summary(points: List[Point]) -> str:
    """A Markdown table: one row per EnvRunner count."""
    arms = _arms(points)
    counts = sorted({p.runners for p in points})
    ceiling = _series(points, "-", "ceiling")
    columns = ["EnvRunners", "ceiling"]
    for arm in arms:
        columns += [
            f"{arm} lockstep",
            f"{arm} overlapped",
            f"{arm} overlapped / lockstep",
        ]
    if len(arms) > 1:
        columns.append(f"{arms[1]} / {arms[0]} (overlapped)")
    first = arms[0] if arms else None
    columns.append(f"{first} overlapped vs {counts[0]} EnvRunner(s)")

    def rate(series: Dict[int, Point], n: int) -> Optional[float]:
        point = series.get(n)
        return None if point is None else point.env_steps_per_s

    def cell(value: Optional[float], fmt: str = "{:.1f}") -> str:
        return "-" if value is None else fmt.format(value)

    def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
        return None if a is None or not b else a / b

    rows = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    base = rate(_series(points, first, "overlapped"), counts[0]) if first else None
    for n in counts:
        cells = [str(n), cell(rate(ceiling, n))]
        for arm in arms:
            lock = rate(_series(points, arm, "lockstep"), n)
            over = rate(_series(points, arm, "overlapped"), n)
            cells += [cell(lock), cell(over), cell(ratio(over, lock), "{:.2f}x")]
        if len(arms) > 1:
            cells.append(
                cell(
                    ratio(
                        rate(_series(points, arms[1], "overlapped"), n),
                        rate(_series(points, arms[0], "overlapped"), n),
                    ),
                    "{:.2f}x",
                )
            )
        if first:
            over = rate(_series(points, first, "overlapped"), n)
            cells.append(cell(ratio(over, base), "{:.2f}x"))
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def plot(points: List[Point], title: str, output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = sorted({p.runners for p in points})
    fig, (rates, busy) = plt.subplots(1, 2, figsize=(11, 4.4), layout="constrained")
    ceiling = _series(points, "-", "ceiling")
    if ceiling:
        xs = sorted(ceiling)
        rates.plot(
            xs,
            [ceiling[n].env_steps_per_s for n in xs],
            "k--",
            marker="s",
            label="sampling only (ceiling)",
        )
    styles = {"overlapped": "-", "lockstep": ":"}
    for i, arm in enumerate(_arms(points)):
        for mode, style in styles.items():
            series = _series(points, arm, mode)
            if not series:
                continue
            xs = sorted(series)
            label = f"{arm}, {mode}"
            kwargs = {"color": f"C{i}", "linestyle": style, "marker": "o"}
            kwargs["label"] = label
            rates.plot(xs, [series[n].env_steps_per_s for n in xs], **kwargs)
            busy.plot(xs, [100 * series[n].learner_busy for n in xs], **kwargs)
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
    print(summary(points))
    if args.figure is not None:
        plot(points, title, args.figure)
        print(f"wrote {args.figure}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
