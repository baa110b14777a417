#!/usr/bin/env bash
# One device command for issue 31 (session 28 wrote it; no device could be started then): test-quantized on the GPU (the new column-blocks test among them), then the GPU machine's
# CPU beside llama.cpp at 2 and 16 threads (huge pages, the 16-bit decode kernel, the attention stretch), then
# prefill and decode at 4 and 8 threads and llama.cpp's weight buffer type.
# Run from the repository root on the device with .gpu carried: scripts/gpu/gpu-bundle.sh (GPU_BUNDLE_KEEP='^(example-bench_decode|test-quantized-[0-9a-f]+)$'), then .gpu/llamaq.tar.xz (llama-quantize and its libraries), then `bash scripts/gpu/check-31.sh`; writes $OUT/cmd7.log, test-quantized.log, gguf-cpu.log, table-cpu.md.
# SKIP_TESTS=1 leaves out test-quantized; PROFILE=1 runs scripts/gpu/cpu-profile.sh first ($OUT/profile.log).
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
log=$OUT/cmd7.log; say() { echo "[$(el) s] $*" | tee -a $log; }
tar -C .gpu -xJf .gpu/bins.tar.xz
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 CUDA_HOME=/usr/local/cuda
nvidia-smi --query-gpu=name --format=csv,noheader >>$log; lscpu | grep -E "^(Model name|Core|Thread|Flags)" | cut -c1-200 >>$log
cat /sys/kernel/mm/transparent_hugepage/enabled >>$log
(setsid nohup bash .gpu/peers/llama.cpp/build.sh /tmp/llama cpu >/tmp/llama-build.log 2>&1 &)
(setsid nohup bash -c 'bash scripts/gpu/random-files.sh; echo files done' >/tmp/files.log 2>&1 &)
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  q=$(ls .gpu/bin/test-quantized-*)
  FUSE_TEST_GPU=1 FUSE_TUNE_FILE=$(mktemp -d)/t.tsv timeout 300 $q --test-threads 4 >$OUT/test-quantized.log 2>&1; say "test-quantized (all) exit $?"
  grep -E "^test |^test result" $OUT/test-quantized.log >>$log
fi
# PROFILE=1 (with .gpu/perf.tar.xz carried): perf's profiles first (scripts/gpu/cpu-profile.sh), while llama.cpp builds.
if [ "${PROFILE:-0}" = 1 ]; then
  while ! grep -q "files done" /tmp/files.log && [ $(el) -lt 200 ]; do sleep 3; done
  bash scripts/gpu/cpu-profile.sh >/dev/null 2>&1; say "profiles done"
fi
while { [ ! -x /tmp/llama/llama.cpp/build/bin/llama-bench ] || ! grep -q "files done" /tmp/files.log; } && [ $(el) -lt 300 ]; do sleep 3; done
say "llama.cpp built, files: $(ls /tmp/*.gguf | tr '\n' ' ')"
B=.gpu/bin/example-bench_decode
STEPS=32 BENCH_DECODE=$B LLAMA_BIN=/tmp/llama/llama.cpp/build/bin timeout $((560 - $(el))) scripts/bench-gguf.sh /tmp/gc cpu 2,16 /tmp/smollm2-135m-q4_1.gguf /tmp/llama-3.2-1b-q4_k_m.gguf >$OUT/gguf-cpu.log 2>&1
say "cpu bench exit $?"
[ -s /tmp/gc/table.md ] || python3 scripts/bench_gguf_table.py /tmp/gc >/tmp/gc/table.md 2>&1  # the rows done before a timeout
cp /tmp/gc/table.md $OUT/table-cpu.md 2>/dev/null
# Prefill and decode at 4 and 8 threads too (whether prefill scales: 2 -> 16 did not at 584860f), and which
# buffer type llama.cpp's CPU build gives the weights there (its AMX repacking, or none).
for t in 4 8; do for f in /tmp/llama-3.2-1b-q4_k_m.gguf /tmp/smollm2-135m-q4_1.gguf; do
    [ $(el) -lt 540 ] && say "$(basename $f) t$t: $(RAYON_NUM_THREADS=$t timeout 30 $B --model $f --device cpu --dtype f32 \
        --modes calls --batches 1 --cached 128 --steps 16 --prompt 128 2>&1 | grep -E '^calls|prefill' | tr -s ' ' | tr '\n' ' ')"
done; done
# Small products at 16 threads: the least weight bytes a task (FUSE_CPU_TASK_KB, default 0).
for kb in 16 64 256; do
    [ $(el) -lt 550 ] && say "smollm2 t16 task ${kb} KB: $(FUSE_CPU_TASK_KB=$kb RAYON_NUM_THREADS=16 timeout 20 $B \
        --model /tmp/smollm2-135m-q4_1.gguf --device cpu --dtype f32 --modes calls --batches 1 --cached 128 --steps 32 \
        --prompt 1 2>&1 | grep -E '^calls' | tr -s ' ')"
done
L=/tmp/llama/llama.cpp/build/bin
LD_LIBRARY_PATH=$L timeout 20 env CUDA_VISIBLE_DEVICES= $L/llama-bench -m /tmp/smollm2-135m-q4_1.gguf -ngl 0 -t 2 -p 0 -n 2 -r 1 -v 2>&1 \
    | grep -i -E "amx|repack|buffer size" | head -4 >>$log
say done
