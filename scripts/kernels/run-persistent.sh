#!/usr/bin/env bash
# From the repository root, on the GPU machine:  bash scripts/kernels/run-persistent.sh OUTDIR
# Builds scripts/kernels/persistent_decode.cu (the persistent decode-step prototype) with the machine's nvcc,
# runs its check and its benchmark with the phases, then the four compute-sanitizer tools over its small
# checks. Logs under OUTDIR: persistent.log (build's ptxas lines, checks, table, phases), persistent-sanitize.txt.
set -uo pipefail
out=${1:?usage: scripts/kernels/run-persistent.sh OUTDIR}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
export PATH="$cuda/bin:$PATH"
bin=$(mktemp -d)/persistent_decode
log="$out/persistent.log"
nvcc -O3 -std=c++17 -Xcompiler -fopenmp -gencode=arch=compute_90a,code=sm_90a -Xptxas -v \
  "$here/persistent_decode.cu" -o "$bin" 2>&1 | grep -E "registers|spill" >"$log" || { echo "build failed" | tee -a "$log"; exit 1; }
timeout "${PERSISTENT_TIMEOUT:-240}" "$bin" "${PERSISTENT_MODE:-all}" 2>&1 | tee -a "$log"
status=${PIPESTATUS[0]}
if [ "${PERSISTENT_SANITIZE:-1}" = 1 ]; then
  for tool in memcheck racecheck synccheck initcheck; do
    echo "== $tool" >>"$out/persistent-sanitize.txt"
    timeout 90 compute-sanitizer --tool "$tool" "$bin" sanitize 2>&1 | tail -4 >>"$out/persistent-sanitize.txt"
  done
  cat "$out/persistent-sanitize.txt"
fi
exit "$status"
