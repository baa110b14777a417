#!/usr/bin/env bash
# Where a CPU prefill's time goes, group by group, at each thread count (FUSE_DEBUG=2's per-group times of
# bench_decode's prefill runs, summed by group and divided by the runs), for finding what does not scale:
#   scripts/gpu/cpu-groups.sh OUT FILE.gguf [THREADS, default 2,16]
# BENCH_DECODE: the bench_decode binary (default .gpu/bin/example-bench_decode). Writes OUT/groups.txt: per
# thread count the prefill's tokens/s, then one line a group: ms a prefill, the group, calls x ms a call.
set -uo pipefail
out=${1:?usage: cpu-groups.sh OUT FILE.gguf [THREADS]}; file=${2:?file}; threads=${3:-2,16}
bench=${BENCH_DECODE:-.gpu/bin/example-bench_decode}
mkdir -p "$out"
for t in ${threads//,/ }; do
  log="$out/debug-t$t.log"
  FUSE_DEBUG=2 RAYON_NUM_THREADS=$t timeout 120 "$bench" --model "$file" --device cpu --dtype f32 --modes calls \
    --batches 1 --cached 16 --steps 2 --prompt 128 >"$log" 2>&1
  grep prefill "$log" | sed "s/^/t$t /" >>"$out/groups.txt"
  # The prefill's six runs (one warm-up, five timed) follow the decode table's line.
  awk '/^calls /{on=1; next} on' "$log" | grep -E '^fuse: .* k[0-9]+ .*: [0-9.]+ ms' \
    | sed -E 's/^fuse: `([^`]*)` (k[0-9]+ [a-z_]+): ([0-9.]+) ms.*/\1|\2|\3/' \
    | awk -F'|' -v t="$t" '{k=$1" "$2; s[k]+=$3; n[k]++} END {for (k in s) printf "%9.1f t%s %-50s %4d x %8.3f ms\n", s[k]/6, t, k, n[k], s[k]/n[k]}' \
    | sort -n -r >>"$out/groups.txt"
done
cat "$out/groups.txt"
