#!/usr/bin/env bash
# On the GPU machine's CPU: fuse's batch-1 CPU decode of a GGUF file at each thread count, with the spin pool's
# helpers spinning (the default) and parking at once (FUSE_CPU_SPIN_US=0), beside the CPU topology: whether
# decode gets faster with threads, and what spinning costs the threads sharing a core.
#   scripts/gpu/cpu-scaling.sh OUT FILE.gguf [THREADS, default 1,2,4,8,16]
# BENCH_DECODE: the bench_decode binary (default .gpu/cpu-bench/bench_decode).
set -uo pipefail
out=${1:?usage: cpu-scaling.sh OUT FILE.gguf [THREADS]}; file=${2:?file}; threads=${3:-1,2,4,8,16}
bench=${BENCH_DECODE:-.gpu/cpu-bench/bench_decode}
mkdir -p "$out"
lscpu | grep -E "^(Model name|Thread|Core|Socket|NUMA node\(s\)|L3)" | tee "$out/topology.txt"
for t in ${threads//,/ }; do
    for spin in default 0; do
        env_spin=(); [ "$spin" = 0 ] && env_spin=(FUSE_CPU_SPIN_US=0)
        us=$(env RAYON_NUM_THREADS="$t" "${env_spin[@]}" timeout 300 "$bench" --model "$file" --device cpu --dtype f32 \
            --modes calls --batches 1 --cached 128,1024 --steps 32 --extras off 2>/dev/null | awk '$1 == "calls" {printf "%s ", $4}')
        echo "threads $t spin $spin: us/token at 128, 1024 cached: $us" | tee -a "$out/scaling.txt"
    done
done
