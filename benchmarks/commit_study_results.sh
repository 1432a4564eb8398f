#!/usr/bin/env bash
# Commits the sample-efficiency study's finished CSVs (and, with --report, the
# regenerated report.md and report.png) on the current branch. Safe to run while
# the study runs: a CSV exists only once its run has finished (written to a
# temporary file and renamed), and half-written temporary files and the logs are
# git-ignored.
#
#   bash benchmarks/commit_study_results.sh            # CSVs only
#   bash benchmarks/commit_study_results.sh --report   # CSVs + report (~1 min)
#
# Run it from anywhere inside the repository (e.g. from cron or by hand every
# hour while the study runs). Commits nothing when nothing new has finished.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
dir=results/sample_efficiency

if [[ "${1:-}" == "--report" ]]; then
    PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" \
        nice -n 10 python benchmarks/sample_efficiency.py --report >/dev/null
fi

git add -- "$dir"/*/*/seed*.csv 2>/dev/null || true
if [[ -f "$dir/report.md" ]]; then
    git add -- "$dir/report.md" "$dir/report.png"
fi
if git diff --cached --quiet -- "$dir"; then
    echo "nothing new to commit under $dir"
    exit 0
fi
total=$(find "$dir" -path "$dir/archive" -prune -o -name 'seed*.csv' -print | wc -l)
new=$(git diff --cached --name-only --diff-filter=A -- "$dir" | grep -c 'seed.*\.csv$' || true)
if [[ "$new" -gt 0 ]]; then
    message="Study results: $new more finished runs ($total in all) of the sample-efficiency study"
else
    message="Study report regenerated from the $total finished runs"
fi
git commit -q -m "$message" -- "$dir"
git log --oneline -1
