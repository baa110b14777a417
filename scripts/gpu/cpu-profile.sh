#!/usr/bin/env bash
# Where a CPU decode step's and prefill's time goes on the GPU machine's CPU, at 2 and 16 threads: perf's
# samples by symbol (self time) and by thread, for SmolLM2 Q4_1 decode at 128 cached and the 1b Q4_K_M's prefill.
# That machine has no perf: this machine's perf with its libraries, packed by
#   mkdir -p P/perf; cp -L /usr/bin/perf P/perf; ldd /usr/bin/perf | awk '/=>/{print $3} /ld-linux/{print $1}' \
#       | xargs -I{} cp -L {} P/perf; tar -C P -cJf .gpu/perf.tar.xz perf
# runs through its own loader. Run from the repository root with .gpu carried (bins.tar.xz, llamaq.tar.xz,
# perf.tar.xz, with bench_decode's unstripped binary as perf/bench_decode; with CALLS=1 a build with frame
# pointers, RUSTFLAGS="-C force-frame-pointers=yes"): `bash scripts/gpu/cpu-profile.sh`; writes $OUT/profile.log. Makes the two random files in /tmp
# where they are missing (make_gguf.py + llama-quantize), as check-31.sh does. ONLY: a regex of the profiles to
# run (smol-decode-t16, big-prefill-t2, ..); CALLS=1: call graphs, and the calling thread's inclusive times.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
log=$OUT/profile.log; say() { echo "[$(el) s] $*" | tee -a "$log"; }
[ -x .gpu/bin/example-bench_decode ] || tar -C .gpu -xJf .gpu/bins.tar.xz
[ -x .gpu/perf/perf ] || tar -C .gpu -xJf .gpu/perf.tar.xz
P=(.gpu/perf/ld-linux-x86-64.so.2 --library-path .gpu/perf .gpu/perf/perf)
perf() { "${P[@]}" "$@"; }
say "perf: $(perf --version 2>&1); paranoid $(cat /proc/sys/kernel/perf_event_paranoid)"
smol=/tmp/smollm2-135m-q4_1.gguf; big=/tmp/llama-3.2-1b-q4_k_m.gguf
bash scripts/gpu/random-files.sh
say "files: $(ls -la /tmp/*.gguf | awk '{print $5, $9}' | tr '\n' ' ')"
# bench_decode with its symbols (the bundle's binaries have none), packed beside perf.
B=.gpu/perf/bench_decode
# profile NAME THREADS FILE ARGS...: a perf record of bench_decode from the end of its load on (the time a run
# of 2 steps after a 1-token prompt takes), the threads' shares and the top symbols by self time.
profile() {
  local name=$1 t=$2 file=$3; shift 3
  [[ $name =~ ${ONLY:-.} ]] || return 0
  local s0=$(date +%s%N)
  RAYON_NUM_THREADS=$t timeout 60 $B --model $file --device cpu --dtype f32 --modes calls --batches 1 --cached 16 \
    --steps 2 --prompt 1 >/dev/null 2>&1
  local delay=$(( ($(date +%s%N) - s0) / 1000000 ))
  RAYON_NUM_THREADS=$t timeout 120 "${P[@]}" record -q ${CALLS:+-g} -e cpu-clock -F 4000 -D $delay -o /tmp/$name.data -- \
    $B --model $file --device cpu --dtype f32 --modes calls --batches 1 "$@" >/tmp/$name.out 2>&1
  say "$name: exit $?, from $delay ms on: $(grep -E '^calls|prefill' /tmp/$name.out | tr -s ' ' | tr '\n' ' ')"
  perf report -i /tmp/$name.data --no-children --sort comm --stdio 2>/dev/null | grep -E '%' | head -20 >>"$log"
  perf report -i /tmp/$name.data --no-children --sort symbol --stdio 2>/dev/null | grep -E '%' | head -40 \
    | cut -c1-140 >>"$log"
  if [ -n "${CALLS:-}" ]; then
    echo "-- the calling thread, time inside each function (callees included):" >>"$log"
    perf report -i /tmp/$name.data --children --sort comm,symbol -g none --stdio 2>/dev/null \
      | grep -E "%  +$(basename $B | cut -c1-15) " | head -60 | cut -c1-150 >>"$log"
  fi
  echo >>"$log"
}
for t in 16 2; do
  # Decode (a 1-token prompt: the prefill is a few ms of the run), for a few seconds.
  profile smol-decode-t$t $t $smol --cached 128 --steps $((t == 2 ? 512 : 1024)) --prompt 1
  profile big-decode-t$t $t $big --cached 128 --steps $((t == 2 ? 100 : 300)) --prompt 1
  [ $(el) -lt 420 ] && profile big-prefill-t$t $t $big --cached 16 --steps 2 --prompt 128
  [ $(el) -lt 420 ] && profile smol-prefill-t$t $t $smol --cached 16 --steps 2 --prompt 128
done
say done
