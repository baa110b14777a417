#!/usr/bin/env bash
# From the repository root, on the GPU machine:  bash benches/kernels/cluster_step/run.sh OUTDIR
# Builds benches/kernels/cluster_step/cluster_step.cu (the one-launch decode step's harness: the kernel is the
# library's, fuse-models/src/llama/step_kernel/) with the machine's nvcc, after writing the layout header the
# kernel includes first (fuse-models' `step_header` example: CLUSTER_STEP_HEADER=FILE uses a header written
# before instead; CLUSTER_MAX_POSITIONS=N builds for N positions, default the library's 2048). Then runs its
# checks and its bench (CLUSTER_MODE: all, check or bench) and (unless CLUSTER_SANITIZE=0) compute-sanitizer's
# four tools over one small check.
# Logs: OUTDIR/cluster-step.log, OUTDIR/cluster-step-sanitize.txt (each report's first hazards and its summary).
# CLUSTER_NCU=1 instead: ncu's full set over one launch at 128 cached (bench mode), at the GPU's own clocks with
# warm caches: OUTDIR/step-details.txt, step-sass.csv.gz (metrics by SASS instruction).
set -uo pipefail
out=${1:?usage: benches/kernels/cluster_step/run.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
dir=$(mktemp -d)
log="$out/cluster-step.log"
: >"$log"
status=0

# The generated preamble (the layout header and the PTX helpers): a file given, the bundled example (scripts/gpu-bundle.sh), or cargo.
header="$dir/step_layout.h"
positions=()
[ -n "${CLUSTER_MAX_POSITIONS:-}" ] && positions=(--max-positions "$CLUSTER_MAX_POSITIONS")
if [ -n "${CLUSTER_STEP_HEADER:-}" ]; then
  cp "$CLUSTER_STEP_HEADER" "$header"
elif [ -x "$root/.gpu/bin/example-step_header" ]; then
  "$root/.gpu/bin/example-step_header" "$header" ${positions[@]+"${positions[@]}"} 2>>"$log"
elif command -v cargo >/dev/null; then
  (cd "$root" && cargo run -q -p fuse-models --example step_header -- "$header" ${positions[@]+"${positions[@]}"}) 2>>"$log"
fi
[ -s "$header" ] || { echo "no layout header (CLUSTER_STEP_HEADER, .gpu/bin/example-step_header or cargo)" | tee -a "$log"; exit 1; }

bin="$dir/cluster_step"
echo "== build" >>"$log"
nvcc -O3 -std=c++17 -lineinfo -I"$dir" -gencode=arch=compute_90a,code=sm_90a -Xptxas -v \
  "$here/cluster_step.cu" -o "$bin" 2>&1 | grep -E "error|registers|spill" >>"$log"
[ -x "$bin" ] || { echo "build failed" | tee -a "$log"; cat "$log"; exit 1; }
if [ "${CLUSTER_NCU:-0}" = 1 ]; then
  timeout 300 ncu --set full --import-source yes --cache-control none --clock-control none --kernel-name fuse_decode_step \
    --launch-skip 3 --launch-count 1 -o "$out/step" "$bin" bench >"$out/ncu.log" 2>&1 || status=1
  tail -3 "$out/ncu.log"
  ncu -i "$out/step.ncu-rep" --page details >"$out/step-details.txt" 2>&1
  ncu -i "$out/step.ncu-rep" --page source --csv --print-source sass 2>&1 | gzip >"$out/step-sass.csv.gz"
  rm -f "$out/step.ncu-rep"
  exit $status
fi
timeout "${CLUSTER_TIMEOUT:-240}" "$bin" "${CLUSTER_MODE:-all}" >>"$log" 2>&1 || status=1
if [ "${CLUSTER_SANITIZE:-1}" = 1 ]; then
  for tool in memcheck racecheck synccheck initcheck; do
    echo "== $tool" >>"$out/cluster-step-sanitize.txt"
    extra=()
    [ "$tool" = racecheck ] && extra=(--racecheck-report hazard)
    timeout 300 compute-sanitizer --tool "$tool" "${extra[@]}" --print-limit 4 "$bin" check-small >"$dir/$tool.txt" 2>&1 || status=1
    { head -40 "$dir/$tool.txt"; echo ...; tail -4 "$dir/$tool.txt"; } >>"$out/cluster-step-sanitize.txt"
  done
fi
cat "$log"
exit $status
