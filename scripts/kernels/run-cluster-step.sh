#!/usr/bin/env bash
# From the repository root, on the GPU machine:  bash scripts/kernels/run-cluster-step.sh OUTDIR
# Builds scripts/kernels/cluster_step.cu with the machine's nvcc, runs its checks and its bench, then (unless
# CLUSTER_SANITIZE=0) compute-sanitizer's four tools over one small check. Logs: OUTDIR/cluster-step.log,
# OUTDIR/cluster-step-sanitize.txt.
set -uo pipefail
out=${1:?usage: scripts/kernels/run-cluster-step.sh OUTDIR}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
bin=$(mktemp -d)/cluster_step
log="$out/cluster-step.log"
nvcc -O3 -std=c++17 -lineinfo -gencode=arch=compute_90a,code=sm_90a -Xptxas -v "$here/cluster_step.cu" -o "$bin" 2>&1 |
  grep -E "error|registers|spill" >"$log"
[ -x "$bin" ] || { echo "build failed" | tee -a "$log"; exit 1; }
status=0
timeout "${CLUSTER_TIMEOUT:-240}" "$bin" "${CLUSTER_MODE:-all}" >>"$log" 2>&1 || status=$?
if [ "${CLUSTER_SANITIZE:-1}" = 1 ]; then
  for tool in memcheck racecheck synccheck initcheck; do
    echo "== $tool" >>"$out/cluster-step-sanitize.txt"
    timeout 300 compute-sanitizer --tool "$tool" "$bin" check-small 2>&1 | tail -6 >>"$out/cluster-step-sanitize.txt" || status=1
  done
fi
cat "$log"
exit $status
