#!/usr/bin/env bash
# From the repository root, on the GPU machine:  bash scripts/kernels/profile-persistent.sh OUTDIR
# ncu's full set (with warp-state sampling by source line) over one launch of the prototype's
# decode_step_flow at batch 1, 128 cached (persistent_decode.cu's `profile` mode), at the GPU's own clocks
# with warm caches. Writes OUTDIR/flow-details.txt (every section), OUTDIR/flow-source.csv.gz (metrics by
# CUDA source line: where the warps wait) and OUTDIR/flow.ncu-rep.gz (the report, for ncu-ui).
set -uo pipefail
out=${1:?usage: scripts/kernels/profile-persistent.sh OUTDIR}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
export PATH="$cuda/bin:$PATH"
bin=$(mktemp -d)/persistent_decode
nvcc -O3 -std=c++17 -lineinfo -Xcompiler -fopenmp -gencode=arch=compute_90a,code=sm_90a "$here/persistent_decode.cu" -o "$bin" ||
  { echo "build failed"; exit 1; }
timeout "${PROFILE_TIMEOUT:-240}" ncu --set full --import-source yes --cache-control none --clock-control none \
  --kernel-name regex:decode_step_flow --launch-skip 3 --launch-count 1 -o "$out/flow" "$bin" profile >"$out/ncu.log" 2>&1
status=$?
tail -5 "$out/ncu.log"
ncu -i "$out/flow.ncu-rep" --page details >"$out/flow-details.txt" 2>&1
ncu -i "$out/flow.ncu-rep" --page source --csv --print-source cuda 2>&1 | gzip >"$out/flow-source.csv.gz"
gzip -f "$out/flow.ncu-rep"
exit $status
