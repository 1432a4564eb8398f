#!/usr/bin/env bash
# One session on the GPU machine, in one call, within a time budget (seconds);
# each part under its own timeout, so a hang costs one part, never the rest, and
# each part alone (parts run beside each other gave rates not worth reporting).
# Outputs go to $OUT, one file per part. From the checkout's root there, after
# `bash ../shared/tools/gpu/make-bundle.sh pytest pluggy iniconfig packaging`
# here (carry .gpu):
#     . .gpu/setup.sh && bash benchmarks/gpu_session.sh 540          # learner
#     bash benchmarks/gpu_session.sh 240 main      # profiles, the main job
#     bash benchmarks/gpu_session.sh 560 runners   # many-EnvRunner scaling
#     bash benchmarks/gpu_session.sh 300 der       # data-efficient Rainbow, 1-4
# learner: the `gpu` test suite, then gpu.py's sac suite. Draw a
# runners output with `python benchmarks/runners_plot.py runners.txt fig.png`.
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

if [ "$PART" = main ]; then
  # The two graph arms, each in its own process (a failed capture breaks
  # every later CUDA random draw of its process), data-efficient Rainbow first.
  timeout "$(allow 50)" python3 benchmarks/gpu.py --suite profile --steps 100 \
    --arms atari-per-gpu-graph --out "$OUT" >"$OUT/profile_atari.txt" 2>&1
  timeout "$(allow 45)" python3 benchmarks/gpu.py --suite profile --steps 100 \
    --arms per-gpu-graph --out "$OUT" >"$OUT/profile.txt" 2>&1
  # The README's main job: each run starts Ray and CUDA (about a minute), so
  # one round.
  timeout "$(allow "$BUDGET")" python3 benchmarks/gpu.py --suite main --rounds 1 \
    --steps 4000 --arms hidden default gpu >"$OUT/main.txt" 2>&1
  echo "session done at ${SECONDS}s of ${BUDGET}s" >>"$OUT/machine.txt"
  exit 0
fi

if [ "$PART" = der ]; then
  timeout "$(allow "$BUDGET")" python3 benchmarks/gpu.py --suite runners \
    --preset der --runners 1 2 4 --arms per ners --steps 3000 \
    --weights-sync-interval 16 >"$OUT/der.txt" 2>&1  # 3.6 MB of weights
  echo "session done at ${SECONDS}s of ${BUDGET}s" >>"$OUT/machine.txt"
  exit 0
fi

if [ "$PART" = runners ]; then
  # The Rainbow preset's scaling, weights synced at most every 64 updates
  # (each sync puts the Nature CNN's 28 MB into the object store), 32 env
  # steps per request (docs/scaling.md, "Env steps per request"); then PER
  # overlapped at a replay ratio of 1, where the Learner is not the bound.
  SHAPE=(--envs-per-runner 4 --rollout-fragment-length 8)
  timeout "$(allow $((BUDGET - 120)))" python3 benchmarks/gpu.py --suite runners \
    --runners 1 2 4 8 12 --steps 4000 --weights-sync-interval 64 "${SHAPE[@]}" \
    >"$OUT/runners.txt" 2>&1
  timeout "$(allow "$BUDGET")" python3 benchmarks/gpu.py --suite runners \
    --runners 1 2 4 8 --arms per --modes overlapped --training-intensity 1 \
    --weights-sync-interval 64 --steps 4000 "${SHAPE[@]}" \
    >"$OUT/runners_rr1.txt" 2>&1
  echo "session done at ${SECONDS}s of ${BUDGET}s" >>"$OUT/machine.txt"
  exit 0
fi

# The `gpu` test suite first, on pytest workers where pytest-xdist is there
# (its cases took 10-80 s each on the H200 on 2026-12-04): the cases that have
# not passed there with the current code, the ones that failed on 2026-12-04
# first; stopped by SIGINT at the time limit, pytest still prints the
# tracebacks of the tests that failed.
if python3 -c "import xdist" 2>/dev/null; then WORKERS=(-n 8); else WORKERS=(); fi
FIRST="leave_the_processes or rainbow_laber or (graph and (atari or sac_relo or td3_ners))"
timeout -s INT -k 10 "$(allow 200)" python3 -m pytest -m gpu tests/gpu -k "$FIRST" -v \
  -p no:cacheprovider "${WORKERS[@]}" --durations=12 \
  -W ignore::DeprecationWarning >"$OUT/gpu_suite.txt" 2>&1
echo "pytest exit status $?" >>"$OUT/gpu_suite.txt"
# Then the checkpoint moves, the Atari frame stacks, uniform replay's held
# priority writes and the remote TD3 cases, none run there with this code.
REST="checkpoint or frame_stacks or uniform_replay or (td3 and remote)"
timeout -s INT -k 10 "$(allow 110)" python3 -m pytest -m gpu tests/gpu \
  -k "not ($FIRST) and ($REST)" -v \
  -p no:cacheprovider "${WORKERS[@]}" --durations=12 \
  -W ignore::DeprecationWarning >"$OUT/gpu_suite_rest.txt" 2>&1
echo "pytest exit status $?" >>"$OUT/gpu_suite_rest.txt"

# SAC only: the Atari arms ran on 2026-12-04 (docs/benchmarks/gpu_atari_2026-12-04_1.txt);
# `--suite atari --rounds 2 --steps 150` runs them again where a session has the time.
timeout "$(allow 150)" python3 benchmarks/gpu.py --suite sac --rounds 2 \
  --steps 150 --arms sb3-gpu sb3-cpu per-gpu-graph per-gpu-graph-act \
  ners-gpu-graph per-cpu floor-gpu-graph >"$OUT/sac.txt" 2>&1
echo "session done at ${SECONDS}s of ${BUDGET}s" >>"$OUT/machine.txt"
