#!/usr/bin/env bash
# One session on the GPU machine, in one call, within a time budget: the `gpu`
# test suite, then benchmarks/gpu.py's suites, each under its own timeout so a
# hang costs one part, never the rest. Outputs go to $OUT (one file per part).
#
# From the checkout's root on the GPU machine, after `bash
# ../shared/tools/gpu/make-bundle.sh pytest pluggy iniconfig packaging` here
# (carry .gpu):
#     . .gpu/setup.sh && bash benchmarks/gpu_session.sh 560
#
# While the test suite runs (CPU-bound, a few of the 16 cores), the main job's
# runs and the profile run beside it; the SAC and Atari suites run alone.
#
# `bash benchmarks/gpu_session.sh 560 runners` runs only the many-EnvRunner
# scaling suite (benchmarks/gpu.py --suite runners) within the budget.
set -u
BUDGET=${1:-560}
PART=${2:-learner}
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
DEADLINE=$((SECONDS + BUDGET))

# seconds for the next part: at most $1, and never past the deadline
allow() {
  local left=$((DEADLINE - SECONDS - 5))
  ((left < $1)) && echo $((left > 1 ? left : 1)) || echo "$1"
}

{
  date -u
  nvidia-smi -L
  python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"
  lscpu | grep -m1 'Model name'
  nproc
} >"$OUT/machine.txt" 2>&1

if [ "$PART" = runners ]; then
  timeout "$(allow "$BUDGET")" python3 benchmarks/gpu.py --suite runners \
    --runners 1 2 4 8 12 --steps 4000 >"$OUT/runners.txt" 2>&1
  echo "session done at ${SECONDS}s of ${BUDGET}s" >>"$OUT/machine.txt"
  exit 0
fi

# The CUDA-graph tests first (never run on a GPU yet), then the rest.
(
  SUITE_END=$((SECONDS + $(allow 280)))
  timeout "$(allow 150)" python3 -m pytest -m gpu tests/gpu -v -p no:cacheprovider \
    -k graph --durations=12 -W ignore::DeprecationWarning
  echo "pytest (graph tests) exit status $?"
  timeout $((SUITE_END - SECONDS > 1 ? SUITE_END - SECONDS : 1)) python3 -m pytest \
    -m gpu tests/gpu -v -p no:cacheprovider -k "not graph" --durations=12 \
    -W ignore::DeprecationWarning
  echo "pytest (the rest) exit status $?"
) >"$OUT/gpu_suite.txt" 2>&1 &
SUITE=$!

timeout "$(allow 140)" python3 benchmarks/gpu.py --suite main --rounds 2 \
  --steps 5000 >"$OUT/main.txt" 2>&1
timeout "$(allow 110)" python3 benchmarks/gpu.py --suite profile --steps 100 \
  --out "$OUT" >"$OUT/profile.txt" 2>&1
wait $SUITE

# Arms measured in the last run and not changed since (eager floor, eager
# NERS) are left out to fit the budget; every ratio is still within one run.
timeout "$(allow 170)" python3 benchmarks/gpu.py --suite sac --rounds 2 \
  --steps 150 --arms sb3-gpu sb3-cpu per-gpu per-gpu-graph ners-gpu-graph \
  per-cpu floor-gpu-graph >"$OUT/sac.txt" 2>&1
timeout "$(allow 110)" python3 benchmarks/gpu.py --suite atari --rounds 2 \
  --steps 150 --arms per-gpu per-gpu-graph per-gpu-graph-act ners-gpu per-cpu \
  >"$OUT/atari.txt" 2>&1
echo "session done at ${SECONDS}s of ${BUDGET}s" >>"$OUT/machine.txt"
