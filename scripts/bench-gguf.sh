#!/usr/bin/env bash
# fuse beside llama.cpp on GGUF files, one table (issue 31's benchmark): batch-1 decode us a token at 128 and
# 1024 cached positions, prefill tokens/s, resident weight bytes, the floor (the weights and the cache once a
# token over the copy bandwidth), on the GPU or on the CPU at each thread count.
#
#   scripts/bench-gguf.sh OUT DEVICE THREADS FILE.gguf ...      DEVICE cuda|cpu, THREADS e.g. 2,16 (cpu only)
#
# Needs BENCH_DECODE (fuse's bench_decode binary; default target/release/examples/bench_decode) and LLAMA_BIN
# (llama.cpp's build/bin with llama-bench; ../shared/peers/llama.cpp/build.sh builds it). Writes OUT/*.json
# and OUT/table.md, and prints the table. PREFILL (default 512 on the GPU, 128 on the CPU), STEPS (64).
set -uo pipefail
out=${1:?usage: bench-gguf.sh OUT cuda|cpu THREADS FILE...}; device=${2:?device}; threads=${3:?threads}; shift 3
here=$(cd "$(dirname "$0")" && pwd)
bench=${BENCH_DECODE:-$here/../target/release/examples/bench_decode}
llama=${LLAMA_BIN:?LLAMA_BIN: llama.cpp build/bin}
steps=${STEPS:-64}
mkdir -p "$out"
if [ "$device" = cuda ]; then
    prefill=${PREFILL:-512}; threads=0; bw=4200
else
    prefill=${PREFILL:-128}
fi
for file in "$@"; do
    name=$(basename "$file" .gguf)
    for t in ${threads//,/ }; do
        tag="$name-$device-t$t"
        if [ "$device" = cpu ]; then
            # The copy bandwidth at t threads (numpy copies release the GIL): the CPU floor's denominator.
            bw=$(python3 "$here/copy_bandwidth.py" "$t")
            modes=calls
            ngl=0
            export RAYON_NUM_THREADS=$t
            hide=(env CUDA_VISIBLE_DEVICES=)
        else
            modes=graph
            ngl=99
            hide=(env)
        fi
        echo "== $tag (copy bandwidth $bw GB/s)"
        FUSE_TUNE_FILE="$out/tune-$tag.json" timeout 900 "$bench" --model "$file" --device "$device" --dtype f32 \
            --modes "$modes" --batches 1 --cached 128,1024 --steps "$steps" --prompt "$prefill" --bandwidth "$bw" \
            --json "$out/fuse-$tag.json" 2>&1 | grep -v "^  tuned" | tee "$out/fuse-$tag.log"
        llama_threads=$([ "$t" = 0 ] && echo 8 || echo "$t")
        LD_LIBRARY_PATH="$llama" timeout 900 "${hide[@]}" "$llama/llama-bench" -m "$file" -ngl "$ngl" -t "$llama_threads" \
            -fa on -p "$prefill" -n "$steps" -d 0,128,1024 -r 3 -o json > "$out/llama-$tag.json" 2> "$out/llama-$tag.err" \
            || { echo "llama-bench failed:"; tail -5 "$out/llama-$tag.err"; }
        echo "{\"tag\": \"$tag\", \"file\": \"$file\", \"file_bytes\": $(stat -c %s "$file"), \"bandwidth_gbs\": $bw}" \
            > "$out/run-$tag.json"
    done
done
python3 "$here/bench_gguf_table.py" "$out" | tee "$out/table.md"
