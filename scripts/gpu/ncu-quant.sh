#!/usr/bin/env bash
# On the GPU machine, from the repository root, after scripts/gpu/gpu-bundle.sh packed .gpu/ (bins.tar.xz):
#   scripts/gpu/ncu-quant.sh OUTDIR TYPE PATH [ACTS]
# ncu's full set over the 8B MLP's two GEMMs (bench_quant, M = 1) on one path: `PATH` as bench_quant's
# --paths (qskinny:r1c8, cublas, tuned), ACTS its --acts (f32 as decode runs, default). Writes
# OUTDIR/ncu-TYPE.txt (the details page: throughput, occupancy, stall reasons, per kernel).
set -uo pipefail
out=${1:?usage: ncu-quant.sh OUTDIR TYPE PATH [ACTS]}
type=${2:?TYPE}
path=${3:?PATH}
acts=${4:-f32}
mkdir -p "$out"
[ -d .gpu/bin ] || tar -C .gpu -xJf .gpu/bins.tar.xz
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
# Warm-up 3 calls + 1 timed: the last call's two GEMMs are the 7th and 8th GEMM launches; profile them all.
timeout "${PROFILE_TIMEOUT:-240}" /usr/local/cuda/bin/ncu --set full -k regex:gemm --launch-skip 6 --launch-count 2 \
  -o "$out/ncu-$type" -f .gpu/bin/example-bench_quant --ms 1 --types "$type" --paths "$path" --acts "$acts" --reps 1 \
  >"$out/ncu-$type.log" 2>&1
/usr/local/cuda/bin/ncu --import "$out/ncu-$type.ncu-rep" --page details >"$out/ncu-$type.txt" 2>&1
/usr/local/cuda/bin/ncu --import "$out/ncu-$type.ncu-rep" --page source --csv >"$out/ncu-$type-source.csv" 2>/dev/null || true
