"""The sample-efficiency study's report command of issue 14, kept for its
recorded commands: `rllib-ners study report` (`rllib_ners.study.report`).

    python benchmarks/sample_efficiency_report.py [--results-dir DIR] [--also ...]
        [--arms ...] [--tasks ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

from rllib_ners.study.cli import main as study_main

DEFAULT_RESULTS_DIR = (
    Path(__file__).resolve().parents[1] / "results" / "sample_efficiency"
)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--results-dir" not in argv:
        argv = ["--results-dir", str(DEFAULT_RESULTS_DIR), *argv]
    return study_main(["report", *argv])


if __name__ == "__main__":
    sys.exit(main())
