#!/usr/bin/env bash
# Issue 33, item 5: random-weight Llama-family GGUF files (../shared/peers/llama.cpp/make_gguf.py, carried as
# .gpu/peers) through the generated one-launch step on the GPU machine, after
# `GPU_BUNDLE_KEEP='^example-bench_decode$' scripts/gpu/gpu-bundle.sh` here:
#   scripts/gpu/one-launch-files.sh OUTDIR [CONFIG:TYPE ...]   (default qwen2.5-0.5b:q8_0 llama-3.2-1b:q8_0)
# make_gguf.py writes Q8_0 (and f16, Q4_0, Q4_1) itself; K-quants need llama-quantize (random-files.sh). Each
# file: bench_decode --model FILE, graph and generated, at FILES_BATCHES (1,4,16) and FILES_CACHED (128,1024,4000:
# the files' context is 4,096) -> OUTDIR/files.log, the generated step's report (what became tasks) included.
set -uo pipefail
out=${1:?usage: scripts/gpu/one-launch-files.sh OUTDIR [CONFIG:TYPE ...]}
shift
mkdir -p "$out"
if [ -f .gpu/bins.tar.xz ]; then tar -C .gpu -xJf .gpu/bins.tar.xz && rm .gpu/bins.tar.xz; fi
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
pip install --no-index --no-deps --target /tmp/site scripts/wheels/gguf-*.whl >/dev/null 2>&1
for spec in "${@:-qwen2.5-0.5b:q8_0 llama-3.2-1b:q8_0}"; do
  for one in $spec; do
    config=${one%%:*} type=${one##*:} file=/tmp/${one%%:*}-${one##*:}.gguf
    [ -s "$file" ] || PYTHONPATH=/tmp/site timeout 300 python3 .gpu/peers/llama.cpp/make_gguf.py "$file" --config "$config" --type "$type" >/dev/null 2>>"$out/files.log"
    echo "== $config $type ($(du -h "$file" 2>/dev/null | cut -f1))" >>"$out/files.log"
    FUSE_TUNE_FILE=/tmp/files-tune.tsv timeout "${FILES_TIMEOUT:-240}" .gpu/bin/example-bench_decode --model "$file" \
      --batches "${FILES_BATCHES:-1,4,16}" --cached "${FILES_CACHED:-128,1024,4000}" --modes graph,generated \
      --extras off --steps 32 2>&1 | grep -v "^fuse: " >>"$out/files.log"
  done
done
