"""`rllib-ners plot`: learning curves of runs."""

from __future__ import annotations

import argparse
from pathlib import Path

from rllib_ners.cli.common import CLIError


def cmd_plot(args: argparse.Namespace) -> int:
    from rllib_ners.utils.plotting import PlotError, plot_runs

    output = _image_path(args.output)
    try:
        counts = plot_runs(
            args.run_dirs,
            output,
            band=args.band,
            label_by=args.label_by,
            title=args.title,
        )
    except PlotError as error:
        raise CLIError(str(error)) from None
    summary = ", ".join(f"{label}: {n} trial(s)" for label, n in sorted(counts.items()))
    print(f"wrote {output} ({summary})")
    return 0


def _image_path(output: str) -> str:
    """The image file `--output` names: as given, with ".png" added where it
    has no suffix (what matplotlib writes then); refused, before any run is
    read, where its suffix names no image format matplotlib writes."""
    from matplotlib.figure import Figure

    suffix = Path(output).suffix.lower().lstrip(".")
    if not suffix:
        return output + ".png"
    formats = Figure().canvas.get_supported_filetypes()
    if suffix not in formats:
        raise CLIError(
            f"-o/--output {output!r}: not an image file matplotlib writes; end "
            f"it in .png, .pdf, .svg or another of {', '.join(sorted(formats))}"
        )
    return output
