#!/usr/bin/env bash
# From the repository root, on the GPU machine:  bash scripts/kernels/run-cluster-step.sh OUTDIR
# Builds scripts/kernels/cluster_step.cu (the one-launch decode step's harness: the kernel is the library's,
# fuse-ir/src/codegen/model/decode_step/) with the machine's nvcc once for each entry of CLUSTER_BUILDS
# (space-separated NAME or NAME:FLAGS, FLAGS comma-separated nvcc -D options; default: the CUDA-core GEMVs and
# the tensor-core ones), runs its checks and its bench (CLUSTER_MODE: all, check or bench), then (unless
# CLUSTER_SANITIZE=0) compute-sanitizer's four tools over one small check of each build (CLUSTER_SANITIZE="NAME ...":
# of those builds only).
# Logs: OUTDIR/cluster-step.log, OUTDIR/cluster-step-sanitize.txt (each report's first hazards and its summary).
# CLUSTER_NCU=1 instead: ncu's full set over one launch of the first build at 128 cached (bench mode), at the
# GPU's own clocks with warm caches: OUTDIR/step-details.txt, step-sass.csv.gz (metrics by SASS instruction).
set -uo pipefail
out=${1:?usage: scripts/kernels/run-cluster-step.sh OUTDIR}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
dir=$(mktemp -d)
log="$out/cluster-step.log"
: >"$log"
status=0
for build in ${CLUSTER_BUILDS:-default mma:-DFUSE_STEP_MMA=1}; do
  name=${build%%:*}
  flags=
  [ "$name" != "$build" ] && flags=${build#*:}
  bin="$dir/cluster_step_$name"
  echo "== build $name ${flags//,/ }" >>"$log"
  # shellcheck disable=SC2086
  nvcc -O3 -std=c++17 -lineinfo ${flags//,/ } -gencode=arch=compute_90a,code=sm_90a -Xptxas -v \
    "$here/cluster_step.cu" -o "$bin" 2>&1 | grep -E "error|registers|spill" >>"$log"
  [ -x "$bin" ] || { echo "build failed" | tee -a "$log"; status=1; continue; }
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
  sanitize=${CLUSTER_SANITIZE:-1}
  if [ "$sanitize" = 1 ] || [[ " $sanitize " == *" $name "* ]]; then
    for tool in memcheck racecheck synccheck initcheck; do
      echo "== $name $tool" >>"$out/cluster-step-sanitize.txt"
      extra=()
      [ "$tool" = racecheck ] && extra=(--racecheck-report hazard)
      timeout 300 compute-sanitizer --tool "$tool" "${extra[@]}" --print-limit 4 "$bin" check-small >"/tmp/cluster-$tool.txt" 2>&1 || status=1
      { head -40 "/tmp/cluster-$tool.txt"; echo ...; tail -4 "/tmp/cluster-$tool.txt"; } >>"$out/cluster-step-sanitize.txt"
    done
  fi
done
cat "$log"
exit $status
