#!/usr/bin/env bash
# Commits a study's finished CSVs (and, with --report, the regenerated
# report.md and report.png) on the current branch. Safe to run while
# the study runs: a CSV exists only once its run has finished (written to a
# temporary file and renamed), and half-written temporary files and the logs are
# git-ignored.
#
#   bash results/commit_study_results.sh            # CSVs only
#   bash results/commit_study_results.sh --report   # CSVs + report (~1 min)
#   bash results/commit_study_results.sh --dir results/ners_paper_settings --report
#   bash results/commit_study_results.sh --dir results/sample_efficiency_encoder
#       # a side study's CSVs (its report.md/png compares it with the main
#       # study: regenerate it by hand with `rllib-ners study report --also ...`)
#
# Run it from anywhere inside the repository (e.g. from cron or by hand every
# hour while the study runs), in the session that ran the runs: a study folder
# with a machines.csv gets one row per new run naming this machine's CPU.
# Commits nothing when nothing new has finished.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
dir=results/sample_efficiency
report=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --report) report=1; shift ;;
        --dir) dir="${2:?--dir needs a folder, e.g. --dir results/sample_efficiency_encoder}"; shift 2 ;;
        *) echo "unknown option $1; use --report and/or --dir DIR" >&2; exit 2 ;;
    esac
done
dir="${dir%/}"
if [[ ! -d "$dir" ]]; then
    echo "no such results folder: $dir" >&2
    exit 2
fi
if [[ "$report" == 1 && "$dir" == results/sample_efficiency_encoder ]]; then
    echo "the encoder side study's report compares it with the main study:" \
        "regenerate it by hand with rllib-ners study report --also ..." >&2
    exit 2
fi
if [[ "$report" == 1 ]]; then
    PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" nice -n 10 \
        python -m rllib_ners.study report --results-dir "$dir" >/dev/null
fi

git add -- "$dir"/*/*/seed*.csv 2>/dev/null || true
# The CPU that ran each new run (a run regenerates bit for bit only on the same
# CPU model): read from this machine, so commit in the session that ran them.
if [[ -f "$dir/machines.csv" ]]; then
    cpu=$(grep -m1 "model name" /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')
    cpu=${cpu:-$(uname -m)}
    for csv in $(git diff --cached --name-only --diff-filter=A -- "$dir" | grep 'seed[0-9]*\.csv$'); do
        rel=${csv#"$dir"/}
        task=${rel%%/*}
        rest=${rel#*/}
        arm=${rest%%/*}
        seed=${rest#*/seed}
        seed=${seed%.csv}
        echo "$task,$arm,$seed,$cpu,/proc/cpuinfo at commit" >> "$dir/machines.csv"
    done
    git add -- "$dir/machines.csv"
fi
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
    runs=$([ "$new" -eq 1 ] && echo run || echo runs)
    message="Study results: $new more finished $runs ($total in all) in $dir"
else
    message="Study report regenerated from the $total finished runs in $dir"
fi
git commit -q -m "$message" -- "$dir"
git log --oneline -1
