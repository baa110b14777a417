#!/usr/bin/env bash
# Two trees' bench_decode side by side on the GPU machine's CPU, alternated: the 1b Q4_K_M's and SmolLM2 Q4_1's
# prefill (128 tokens) and decode (128 cached) at each thread count. After
#   scripts/gpu/gpu-bundle.sh REV        (.gpu/bin/example-bench_decode = this tree, -REV the other)
# and .gpu/llamaq.tar.xz: `bash scripts/gpu/ab-cpu.sh [THREADS, default 16,2] [ROUNDS, default 2]`; writes $OUT/ab-cpu.log.
set -uo pipefail
threads=${1:-16,2}; rounds=${2:-2}
[ -x .gpu/bin/example-bench_decode ] || tar -C .gpu -xJf .gpu/bins.tar.xz
bash scripts/gpu/random-files.sh
log=$OUT/ab-cpu.log
for t in ${threads//,/ }; do
  for f in /tmp/llama-3.2-1b-q4_k_m.gguf /tmp/smollm2-135m-q4_1.gguf; do
    for r in $(seq "$rounds"); do
      for b in .gpu/bin/example-bench_decode*; do
        line=$(RAYON_NUM_THREADS=$t timeout 60 $b --model $f --device cpu --dtype f32 --modes calls --batches 1 \
          --cached 128 --steps 16 --prompt 128 2>&1 | grep -E '^calls|prefill' | tr -s ' ' | tr '\n' ' ')
        echo "t$t $(basename $f .gguf) ${b##*/}: $line" | tee -a "$log"
      done
    done
  done
done
