#!/usr/bin/env bash
# Issue 33, item 5: random-weight Llama-family GGUF files (../shared/peers/llama.cpp/make_gguf.py, carried as
# .gpu/peers) through the generated one-launch step on the GPU machine, after
# `GPU_BUNDLE_KEEP='^(example-bench_decode|test-one_launch_step-[0-9a-f]+)$' scripts/gpu/gpu-bundle.sh` here:
#   [LLAMA_BIN=DIR] scripts/gpu/one-launch-files.sh OUTDIR [CONFIG:TYPE ...]
#   PREPARE=1 [LLAMA_BIN=DIR] scripts/gpu/one-launch-files.sh OUTDIR [CONFIG:TYPE ...]: only builds llama.cpp into
#   LLAMA_BIN's tree (/tmp/llama/llama.cpp/build/bin) where it is missing and writes the files (each whole, then
#   renamed): start it with setsid in the background of one command, and benchmark in the next.
#   (default qwen2.5-0.5b:q8_0 llama-3.2-1b:q8_0 llama-3.2-1b:q4_k_m)
# make_gguf.py writes Q8_0 (and f16, Q4_0, Q4_1) itself; other types (Q4_K_M ...) are the f16 file quantized by
# $LLAMA_BIN/llama-quantize (`.gpu/peers/llama.cpp/build.sh /tmp/llama cuda` builds it in ~5 min: start it in
# the background first; without LLAMA_BIN those files are skipped). Each file: bench_decode --model FILE, graph
# and generated, at FILES_BATCHES (1,4,16) and FILES_CACHED (128,1024,4000: the files' context is 4,096), with
# the generated step's report (what became tasks); with LLAMA_BIN also llama-bench's batch-1 decode on the
# GPU (-ngl 99 -fa 1 -n 64) -> OUTDIR/files.log. Where the bundle kept the one_launch_step test, it first checks
# each file's generated step against the graph path (its gguf_files case: batch 1, 4, 16, 64 greedy steps).
# FILES_AB=1: instead of the table, each bench_decode of the bundle (gpu-bundle.sh REV ...) at batch 1, alternated;
# with FILES_AB_KNOBS='A=1 B=2;A=0' the tree's bench_decode under each setting instead. FILES_AB_ROUNDS (2):
# how many times; FILES_AB_MODES (graph,generated): generated alone halves a short loan's time.
# FILES_TRACE=1: each file's generated step traced too (FUSE_STEP_TRACE, batch 1) -> OUTDIR/trace-CONFIG-TYPE.tsv.xz.
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
if [ -n "${PREPARE:-}" ]; then
  LLAMA_BIN=${LLAMA_BIN:-/tmp/llama/llama.cpp/build/bin}
  [ -x "$LLAMA_BIN/llama-quantize" ] || .gpu/peers/llama.cpp/build.sh /tmp/llama cuda >"$out/llama-build.log" 2>&1
fi
for one in ${*:-qwen2.5-0.5b:q8_0 llama-3.2-1b:q8_0 llama-3.2-1b:q4_k_m}; do
  config=${one%%:*} type=${one##*:}
  file=/tmp/$config-$type.gguf
  if [ -n "${PREPARE:-}" ]; then
    [ -s "$file" ] || { make_file "$config" "$type" "$file.part" >>"$out/prepare.log" 2>&1 && mv "$file.part" "$file"; }
    continue
  fi
  [ -s "$file" ] || make_file "$config" "$type" "$file" >>"$out/files.log" 2>&1 || continue
  echo "== $config $type ($(du -h "$file" | cut -f1))" >>"$out/files.log"
  for t in .gpu/bin/test-one_launch_step-*; do
    [ -x "$t" ] || continue
    FUSE_TEST_GPU=1 FUSE_TEST_GGUF=$file FUSE_TUNE_FILE=/tmp/files-tune.tsv timeout "${FILES_TEST_TIMEOUT:-300}" "$t" gguf_files::cuda \
      --nocapture 2>&1 | grep -E "^test |test result|panicked|differ|relative|batch [0-9]+:$|as_tasks|greedy tokens|choose otherwise|launches become" >>"$out/files.log"
  done
  if [ -n "${FILES_AB:-}" ]; then
    # Each bench_decode the bundle holds (gpu-bundle.sh REV ...: the tree's and each revision's), graph and
    # generated at FILES_AB_BATCHES (1) and 128 cached, alternated twice, in place of the full table.
    # FILES_AB_KNOBS: settings (environment assignments separated by spaces; settings by ';') alternated on
    # the tree's bench_decode instead of the bundle's binaries.
    runs=()
    if [ -n "${FILES_AB_KNOBS:-}" ]; then
      IFS=';' read -r -a settings <<<"$FILES_AB_KNOBS"
      for setting in "${settings[@]}"; do runs+=("$setting|.gpu/bin/example-bench_decode"); done
    else
      for b in .gpu/bin/example-bench_decode*; do runs+=("|$b"); done
    fi
    for round in $(seq "${FILES_AB_ROUNDS:-2}"); do
      for run in "${runs[@]}"; do
        setting=${run%%|*} b=${run#*|}
        echo "== ${b##*/} ${setting}, round $round" >>"$out/files.log"
        # shellcheck disable=SC2086 # a setting is words
        env $setting FUSE_TUNE_FILE="$(mktemp -d)/t.tsv" timeout 150 "$b" --model "$file" --batches "${FILES_AB_BATCHES:-1}" \
          --cached 128 --modes "${FILES_AB_MODES:-graph,generated}" --extras off --steps 32 2>&1 |
          grep -E "^(graph|generated) " >>"$out/files.log"
      done
    done
  else
    FUSE_TUNE_FILE=/tmp/files-tune.tsv timeout "${FILES_TIMEOUT:-240}" .gpu/bin/example-bench_decode --model "$file" \
      --batches "${FILES_BATCHES:-1,4,16}" --cached "${FILES_CACHED:-128,1024,4000}" --modes graph,generated \
      --extras off --steps 32 2>&1 | grep -v "^fuse: " >>"$out/files.log"
  fi
  if [ -n "${FILES_TRACE:-}" ]; then
    # Where the generated step's time goes on this file (batch 1, 128 cached): scripts/gpu/step-trace.py here
    # reads OUTDIR/trace-CONFIG-TYPE.tsv.xz; the paths the products took (FUSE_DEBUG=3 lines, counted) go
    # to the end of files.log.
    FUSE_DEBUG=3 FUSE_STEP_TRACE="$out/trace-$config-$type.tsv" FUSE_TUNE_FILE=/tmp/files-tune.tsv timeout 120 \
      .gpu/bin/example-bench_decode --model "$file" --batches 1 --cached 128 --modes generated --extras off --steps 8 \
      2>&1 | grep -E "^fuse: .*(template|path)" | sed -E 's/^fuse: [^:]*: //' | sort | uniq -c | sort -rn | head -20 >>"$out/files.log"
    [ -s "$out/trace-$config-$type.tsv" ] && xz -9 "$out/trace-$config-$type.tsv"
  fi
  if [ -x "${LLAMA_BIN:-}/llama-bench" ]; then
    timeout 120 "$LLAMA_BIN/llama-bench" -m "$file" -ngl 99 -fa 1 -p 0 -n 64 -r 3 -o md 2>&1 | grep -E "^\|" >>"$out/files.log"
  fi
done
