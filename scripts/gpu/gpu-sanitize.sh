#!/usr/bin/env bash
# On the GPU machine, from the repository root, after `../shared/device/gpu-pack` packed .gpu/ here:
#   scripts/gpu/gpu-sanitize.sh OUTDIR [TOOLS]
# Runs the GPU suite's `sanitize::` tests (every config of every GEMM template at odd shapes, the pointwise and
# row kernels; tests/gpu/sanitize.rs) under each of compute-sanitizer's tools, TOOLS defaulting to
# "racecheck memcheck synccheck initcheck". Writes OUTDIR/sanitize-TOOL.log for each and prints one line per
# tool with its error count; exits non-zero when a tool reports errors or a test fails. Kernels are compiled
# with -lineinfo (SANITIZE_TIMEOUT: seconds per tool, default 600; SANITIZE_BIN another test binary;
# SANITIZE_FILTER the tests, default sanitize::), so reports name source lines (FUSE_DEBUG=4 prints the sources with their line numbers).
set -uo pipefail
out=${1:?usage: scripts/gpu/gpu-sanitize.sh OUTDIR [TOOLS]}
tools=${2:-racecheck memcheck synccheck initcheck}
mkdir -p "$out"
gpu_test=${SANITIZE_BIN:-$(ls .gpu/bin/test-gpu-* | head -1)}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} FUSE_TEST_GPU=1 FUSE_AUTOTUNE=off
# A fresh kernel cache: every kernel is compiled in this process (the tools see the same cubins either way).
FUSE_CACHE_DIR=$(mktemp -d)
export FUSE_CACHE_DIR
status=0
for tool in $tools; do
  extra=()
  case $tool in
    racecheck) extra=(--racecheck-report hazard) ;;
    memcheck) extra=(--leak-check no) ;;
  esac
  log="$out/sanitize-$tool.log"
  t0=$(date +%s)
  # Every report is printed (no limit) and folded by scripts/gpu/sanitizer_summary.py into one line per distinct
  # error with its count, at the end of the log.
  timeout "${SANITIZE_TIMEOUT:-600}" /usr/local/cuda/bin/compute-sanitizer --tool "$tool" "${extra[@]}" \
    --print-limit 100000000 --show-backtrace no "$gpu_test" ${SANITIZE_FILTER:-sanitize::} --test-threads=1 2>&1 \
    | python3 scripts/gpu/sanitizer_summary.py "$log" || status=1
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | sed 's/^=* *//' | tr '\n' ' ')
  result=$(grep -E "^test result" "$log" | tail -1)
  echo "$tool: ${summary:-no summary} | ${result:-no test result} | $(( $(date +%s) - t0 )) s"
  # racecheck: "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)"; the others: "ERROR SUMMARY: E errors".
  grep -qE "ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards" "$log" || status=1
  grep -qE "ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9]" "$log" && status=1
done
exit $status
