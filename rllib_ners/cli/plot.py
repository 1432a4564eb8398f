"""`rllib-ners plot`: learning curves of runs."""

from __future__ import annotations

import argparse

from rllib_ners.cli.common import CLIError


def cmd_plot(args: argparse.Namespace) -> int:
    from rllib_ners.utils.plotting import PlotError, plot_runs

    try:
        counts = plot_runs(
            args.run_dirs,
            args.output,
            band=args.band,
            label_by=args.label_by,
            title=args.title,
        )
    except PlotError as error:
        raise CLIError(str(error)) from None
    summary = ", ".join(f"{label}: {n} trial(s)" for label, n in sorted(counts.items()))
    print(f"wrote {args.output} ({summary})")
    return 0
