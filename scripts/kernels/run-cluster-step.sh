#!/usr/bin/env bash
# From the repository root, on the GPU machine:  bash scripts/kernels/run-cluster-step.sh OUTDIR
# Builds scripts/kernels/cluster_step.cu with the machine's nvcc for each block size in CLUSTER_THREADS
# (default "256"), runs its checks and its bench (CLUSTER_MODE: all, check or bench), then (unless
# CLUSTER_SANITIZE=0) compute-sanitizer's four tools over one small check of the first build.
# Logs: OUTDIR/cluster-step.log, OUTDIR/cluster-step-sanitize.txt.
set -uo pipefail
out=${1:?usage: scripts/kernels/run-cluster-step.sh OUTDIR}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
dir=$(mktemp -d)
log="$out/cluster-step.log"
: >"$log"
status=0
first=
for threads in ${CLUSTER_THREADS:-256}; do
  bin="$dir/cluster_step_$threads"
  echo "== $threads threads a block" >>"$log"
  nvcc -O3 -std=c++17 -lineinfo -DSTEP_THREADS="$threads" -gencode=arch=compute_90a,code=sm_90a -Xptxas -v \
    "$here/cluster_step.cu" -o "$bin" 2>&1 | grep -E "error|registers|spill" >>"$log"
  [ -x "$bin" ] || { echo "build failed" | tee -a "$log"; status=1; continue; }
  first=${first:-$bin}
  timeout "${CLUSTER_TIMEOUT:-240}" "$bin" "${CLUSTER_MODE:-all}" >>"$log" 2>&1 || status=1
done
if [ "${CLUSTER_SANITIZE:-1}" = 1 ] && [ -n "$first" ]; then
  for tool in memcheck racecheck synccheck initcheck; do
    echo "== $tool" >>"$out/cluster-step-sanitize.txt"
    timeout 300 compute-sanitizer --tool "$tool" "$first" check-small 2>&1 | tail -6 >>"$out/cluster-step-sanitize.txt" || status=1
  done
fi
cat "$log"
exit $status
