#!/usr/bin/env bash
# On the GPU machine, from the repository root, after `../shared/device/gpu-pack` packed .gpu/ here:
#   scripts/gpu/gpu-bench.sh OUTDIR [peer modes]
# Runs the GPU test suite (and every kernel config under compute-sanitizer's four tools), the MLP benchmark, the main
# job, the start-up measurements (fresh processes, empty and warm caches, pre-tuning every bucket) and the
# PyTorch peers in one go, and writes every log and JSON under OUTDIR: eight files, the most the device tool
# brings back (tables print as they come). Peer modes default to the cheap ones; the torch.compile
# max-autotune modes take minutes of compilation (pass "autotune,autotune-graph" for those).
set -uo pipefail
out=${1:?usage: scripts/gpu/gpu-bench.sh OUTDIR [peer modes]}
modes=${2:-eager,merged,compile,eager-graph}
batches=1,4,16,64,256,1024,4096
mkdir -p "$out"
export PYTHONUNBUFFERED=1
status=0
.gpu/run >"$out/gpu-tests.log" 2>&1 || status=1
grep -E "^== |test result|FAILED|panicked" "$out/gpu-tests.log" | tail -20
# Every GEMM template config and the pointwise and row kernels, as the runtime generates them, under each of
# compute-sanitizer's tools (memcheck, racecheck, synccheck, initcheck): scripts/gpu/gpu-sanitize.sh.
scripts/gpu/gpu-sanitize.sh "$out/sanitize" >"$out/sanitize.txt" 2>&1 || status=1
cat "$out/sanitize.txt"
{ echo "== compute-sanitizer (scripts/gpu/gpu-sanitize.sh)"; cat "$out/sanitize.txt"; tail -n 3 "$out"/sanitize/*.log; } >>"$out/gpu-tests.log"
rm -rf "$out/sanitize.txt" "$out/sanitize"
.gpu/run --example bench_mlp --overlap-ab --json "$out/bench.json" 2>&1 | tee "$out/bench.log" || status=1
.gpu/run --example llama_mlp 2>&1 | tail -8 | tee "$out/llama_mlp.log" || status=1
# Start-up: the first call in a fresh process, with an empty cache (tuning off, then on) and a warm one.
startup() { # $1 label, $2 batch; the rest of the environment is set by the caller
  .gpu/run --example llama_mlp --batches "$2" --reps 3 2>&1 | grep "first call" | sed "s/^/$1: /"
}
{
  cache=$(mktemp -d)
  FUSE_CACHE_DIR=$cache FUSE_AUTOTUNE=off startup "empty cache, tuning off" 1
  rm -rf "$cache"; cache=$(mktemp -d)
  FUSE_CACHE_DIR=$cache startup "empty cache, tuning on (fast)" 1
  FUSE_CACHE_DIR=$cache startup "warm cache (kernels and tune results)" 1
  FUSE_CACHE_DIR=$cache startup "warm kernels, tuning a new bucket" 256
  FUSE_CACHE_DIR=$cache startup "warm cache" 256
  # Pre-tuning every bucket from an empty cache (kernels compiled, every candidate timed: the full mode).
  cache=$(mktemp -d)
  # FUSE_DEBUG=3: every candidate's time; the table gives each family's best per M and group.
  FUSE_DEBUG=3 FUSE_CACHE_DIR=$cache .gpu/run --example tune_mlp --out "$out/tune-mlp.tsv" --mode full >"$cache/tune.log" 2>&1
  grep -E "tuned|->" "$cache/tune.log"
  python3 scripts/gpu/tune_table.py "$cache/tune.log"
} 2>&1 | tee "$out/startup.log"
python3 .gpu/peers/torch_mlp.py --batches "$batches" --modes "$modes" --json "$out/peers.json" >"$out/peers.log" 2>&1 || status=1
tail -15 "$out/peers.log"
exit $status
