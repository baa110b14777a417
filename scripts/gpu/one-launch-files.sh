#!/usr/bin/env bash
# Issue 33, item 5: random-weight Llama-family GGUF files (../shared/peers/llama.cpp/make_gguf.py, carried as
# .gpu/peers) through the generated one-launch step on the GPU machine, after
# `GPU_BUNDLE_KEEP='^example-bench_decode$' scripts/gpu/gpu-bundle.sh` here:
#   [LLAMA_BIN=DIR] scripts/gpu/one-launch-files.sh OUTDIR [CONFIG:TYPE ...]
#   (default qwen2.5-0.5b:q8_0 llama-3.2-1b:q8_0 llama-3.2-1b:q4_k_m)
# make_gguf.py writes Q8_0 (and f16, Q4_0, Q4_1) itself; other types (Q4_K_M ...) are the f16 file quantized by
# $LLAMA_BIN/llama-quantize (`.gpu/peers/llama.cpp/build.sh /tmp/llama cuda` builds it in ~5 min: start it in
# the background first; without LLAMA_BIN those files are skipped). Each file: bench_decode --model FILE, graph
# and generated, at FILES_BATCHES (1,4,16) and FILES_CACHED (128,1024,4000: the files' context is 4,096), with
# the generated step's report (what became tasks); with LLAMA_BIN also llama-bench's batch-1 decode on the
# GPU (-ngl 99 -fa 1 -n 64) -> OUTDIR/files.log.
set -uo pipefail
out=${1:?usage: scripts/gpu/one-launch-files.sh OUTDIR [CONFIG:TYPE ...]}
shift
mkdir -p "$out"
if [ -f .gpu/bins.tar.xz ]; then tar -C .gpu -xJf .gpu/bins.tar.xz && rm .gpu/bins.tar.xz; fi
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
pip install --no-index --no-deps --target /tmp/site scripts/wheels/gguf-*.whl >/dev/null 2>&1
make_file() {  # make_file CONFIG TYPE FILE
  case $2 in
    f16 | q8_0 | q4_0 | q4_1)
      PYTHONPATH=/tmp/site timeout 300 python3 .gpu/peers/llama.cpp/make_gguf.py "$3" --config "$1" --type "$2" >/dev/null ;;
    *)
      [ -x "${LLAMA_BIN:-}/llama-quantize" ] || { echo "no llama-quantize (LLAMA_BIN) for $2: skipped"; return 1; }
      [ -s "/tmp/$1-f16.gguf" ] || PYTHONPATH=/tmp/site timeout 300 python3 .gpu/peers/llama.cpp/make_gguf.py "/tmp/$1-f16.gguf" --config "$1" --type f16 >/dev/null
      "$LLAMA_BIN/llama-quantize" "/tmp/$1-f16.gguf" "$3" "${2^^}" 8 >/dev/null 2>&1 ;;
  esac
}
for one in ${*:-qwen2.5-0.5b:q8_0 llama-3.2-1b:q8_0 llama-3.2-1b:q4_k_m}; do
  config=${one%%:*} type=${one##*:}
  file=/tmp/$config-$type.gguf
  [ -s "$file" ] || make_file "$config" "$type" "$file" >>"$out/files.log" 2>&1 || continue
  echo "== $config $type ($(du -h "$file" | cut -f1))" >>"$out/files.log"
  FUSE_TUNE_FILE=/tmp/files-tune.tsv timeout "${FILES_TIMEOUT:-240}" .gpu/bin/example-bench_decode --model "$file" \
    --batches "${FILES_BATCHES:-1,4,16}" --cached "${FILES_CACHED:-128,1024,4000}" --modes graph,generated \
    --extras off --steps 32 2>&1 | grep -v "^fuse: " >>"$out/files.log"
  if [ -x "${LLAMA_BIN:-}/llama-bench" ]; then
    timeout 120 "$LLAMA_BIN/llama-bench" -m "$file" -ngl 99 -fa 1 -p 0 -n 64 -r 3 -o md 2>&1 | grep -E "^\|" >>"$out/files.log"
  fi
done
