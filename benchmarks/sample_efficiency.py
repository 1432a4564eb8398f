"""The sample-efficiency study's command of issue 14, kept for its recorded
commands: the harness now lives in the package (`rllib_ners.study`, CLI
`rllib-ners study`). This translates the old options:

    python benchmarks/sample_efficiency.py [--tasks ...] [--arms ...] [--seeds ...]
        [--jobs N] [--results-dir DIR] [--budget N] [--dry-run]
        -> rllib-ners study run ... (default --results-dir results/sample_efficiency)
    python benchmarks/sample_efficiency.py --report [--results-dir DIR]
        -> rllib-ners study report --results-dir DIR
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rllib_ners.study.cli import main as study_main

REPO = Path(__file__).resolve().parents[1]
DEFAULT_RESULTS_DIR = REPO / "results" / "sample_efficiency"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--results-dir", type=Path, default=DEFAULT_RESULTS_DIR)
    parser.add_argument("--run-one", nargs=3, metavar=("TASK", "ARM", "SEED"))
    args, rest = parser.parse_known_args(argv)
    results = ["--results-dir", str(args.results_dir)]
    if args.report:
        return study_main(["report", *results, *rest])
    if args.run_one:
        return study_main(["run-one", *args.run_one, *results, *rest])
    return study_main(["run", *results, *rest])


if __name__ == "__main__":
    sys.exit(main())
