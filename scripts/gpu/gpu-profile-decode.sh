#!/usr/bin/env bash
# On the GPU machine, from the repository root, after `../shared/device/gpu-pack bench_decode` packed .gpu/:
#   scripts/gpu/gpu-profile-decode.sh OUTDIR [BATCH] [CACHED]
# Profiles the recorded decode step of examples/bench_decode with ncu, kernel by kernel. A normal run first
# fills a tune file (autotuning under ncu would time serialised, flushed kernels and pick wrong paths); the
# profiled run reads it with FUSE_AUTOTUNE=off. Writes OUTDIR/ncu.csv.gz and OUTDIR/summary.txt
# (scripts/gpu/ncu_decode_summary.py: one step in launch order and totalled by kernel). ncu runs with warm caches
# at the GPU's own clocks (PROFILE_NCU_ARGS, default "--cache-control none --clock-control none"), nearer the
# times inside a graph than its defaults (flushed caches, base clocks: about 1.7x them).
set -uo pipefail
out=${1:?usage: scripts/gpu/gpu-profile-decode.sh OUTDIR [BATCH] [CACHED]}
batch=${2:-1}
cached=${3:-128}
mkdir -p "$out"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export FUSE_TUNE_FILE=${FUSE_TUNE_FILE:-$(mktemp -d)/tune.tsv}
args=(--batches "$batch" --cached "$cached" --steps 2 --modes graph --extras off)
.gpu/bin/example-bench_decode "${args[@]}" >"$out/bench.log" 2>&1 || { tail -5 "$out/bench.log"; exit 1; }
# shellcheck disable=SC2086
FUSE_AUTOTUNE=off timeout "${PROFILE_TIMEOUT:-300}" /usr/local/cuda/bin/ncu --graph-profiling node ${PROFILE_NCU_ARGS:---cache-control none --clock-control none} \
  --metrics gpu__time_duration.sum,launch__grid_size,dram__bytes_read.sum --csv \
  .gpu/bin/example-bench_decode "${args[@]}" >"$out/ncu.csv" 2>"$out/ncu.err"
status=$?
python3 "$(dirname "$0")/ncu_decode_summary.py" "$out/ncu.csv" | tee "$out/summary.txt"
gzip -f "$out/ncu.csv"
exit $status
