#!/usr/bin/env bash
# On the GPU machine, from the repository root, after
# `GPU_BUNDLE_KEEP='^(example-bench_decode|test-(graphs|one_launch_step|quantized)-[0-9a-f]+)$' scripts/gpu/gpu-bundle.sh` here:
#   scripts/gpu/tasks-sanitize.sh OUTDIR [TOOLS]
# compute-sanitizer over a step whose products were timed as tasks (FUSE_TUNE_TASKS=on), which
# scripts/gpu/gpu-sanitize.sh alone never sees: it runs with FUSE_AUTOTUNE=off, and tuning under the tools would
# time every candidate instrumented. So `one_launch_step`'s TASKS_FILTER case (quantized::cuda) first runs
# plainly with task tuning on, keeping its results in TASKS_TUNE_FILE (/tmp/tasks-tune.tsv, reused while it
# exists; copied to OUTDIR), then runs under each tool (TOOLS: "memcheck synccheck initcheck racecheck")
# reading them (FUSE_AUTOTUNE=off takes the file's task keys while FUSE_TUNE_TASKS=on). SANITIZE_TIMEOUT as
# gpu-sanitize.sh (seconds a tool; racecheck over this case took more than 190 s in the forty-second session).
set -uo pipefail
out=${1:?usage: scripts/gpu/tasks-sanitize.sh OUTDIR [TOOLS]}
tools=${2:-memcheck synccheck initcheck racecheck}
mkdir -p "$out"
if [ -f .gpu/bins.tar.xz ]; then tar -C .gpu -xJf .gpu/bins.tar.xz && rm .gpu/bins.tar.xz; fi
test_bin=$(ls .gpu/bin/test-one_launch_step-* 2>/dev/null | head -1)
[ -x "$test_bin" ] || { echo "tasks-sanitize: no one_launch_step test binary in .gpu/bin"; exit 1; }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
tune=${TASKS_TUNE_FILE:-/tmp/tasks-tune.tsv} filter=${TASKS_FILTER:-quantized::cuda}
if [ ! -s "$tune" ]; then
  t0=$(date +%s)
  FUSE_TEST_GPU=1 FUSE_TUNE_TASKS=on FUSE_TUNE_FILE=$tune timeout "${TASKS_TUNE_TIMEOUT:-240}" "$test_bin" "$filter" \
    --nocapture >"$out/tasks-tune-run.log" 2>&1
  echo "tasks-sanitize: the tuning run exited $? after $(( $(date +%s) - t0 )) s" | tee -a "$out/tasks-tune-run.log"
fi
[ -s "$tune" ] || { echo "tasks-sanitize: the tuning run left no results in $tune"; exit 1; }
cp "$tune" "$out/tasks-tune.tsv"
FUSE_TUNE_TASKS=on FUSE_TUNE_FILE=$tune SANITIZE_BIN=$test_bin SANITIZE_FILTER=$filter scripts/gpu/gpu-sanitize.sh "$out" "$tools"
