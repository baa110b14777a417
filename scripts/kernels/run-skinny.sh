#!/usr/bin/env bash
# On the GPU machine, from the repository root:  bash scripts/kernels/run-skinny.sh OUTDIR
# Builds scripts/kernels/skinny_bench.cu (the harness of fuse-ir/src/codegen/templates/skinny.cuh) with nvcc,
# prints each config's ptxas resource line (registers, spills), runs compute-sanitizer memcheck on a small
# odd-shape correctness pass, then the full correctness check and the benchmark. Logs under OUTDIR:
#   build.log (nvcc + ptxas -v), ptxas.txt (one line per kernel), sanitize.log, bench.log (full tables).
# SKINNY_CONFIGS overrides the config list: "MT,NT,KW,S,MINB,PF,XD[,f]" separated by spaces (f: also f16 kernels).
# SKINNY_MODE: all (default) | check | bench | sanitize-only.
set -uo pipefail
out=${1:?usage: scripts/kernels/run-skinny.sh OUTDIR}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
export PATH="$cuda/bin:$PATH"
build=$(mktemp -d)
configs=${SKINNY_CONFIGS:-"1,1,8,6,3,1,1 1,1,8,6,4,2,1 1,2,8,6,3,1,1,f 1,4,8,6,2,1,1 1,4,4,6,2,0,1 1,8,8,6,1,0,1 1,8,4,6,1,0,1,f"}
{
    echo "static std::vector<Cfg> g_cfgs = {"
    for c in $configs; do
        IFS=, read -r mt nt kw st minb pf xd f16 <<<"$c"
        if [ "${f16:-}" = f ]; then echo "    CFGF($mt, $nt, $kw, $st, $minb, $pf, $xd),"; else echo "    CFGB($mt, $nt, $kw, $st, $minb, $pf, $xd),"; fi
    done
    # the template's own extern "C" kernel (default config, dual): must compile and pass too
    echo '    Cfg{"extern-default", FUSE_SK_MT, FUSE_SK_NT, FUSE_SK_KW, FUSE_SK_S, {nullptr, fuse_skinny_default_kernel}, {nullptr, nullptr}},'
    echo "};"
} >"$build/skinny_configs.inc"
cat "$build/skinny_configs.inc" >"$out/configs.inc"

echo "== build"
t0=$(date +%s)
if ! nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -Xptxas -v -I"$build" "$here/skinny_bench.cu" \
        -lcublas -o "$build/skinny_bench" >"$out/build.log" 2>&1; then
    tail -40 "$out/build.log"
    echo "BUILD FAILED"
    exit 1
fi
echo "built in $(( $(date +%s) - t0 )) s"
# one line per kernel: name, registers, stack/spills, smem
awk '/Compiling entry function/ { match($0, /'"'"'[^'"'"']+'"'"'/); name = substr($0, RSTART + 1, RLENGTH - 2) }
     /stack frame/ { sp = $0; gsub(/^ +/, "", sp) }
     /Used [0-9]+ registers/ { u = $0; sub(/.*Used /, "", u); print name " | " u " | " sp }' "$out/build.log" |
    (command -v cu++filt >/dev/null && cu++filt || cat) | sed 's/(FuseSkinnyParams)//; s/void //' >"$out/ptxas.txt"
echo "== ptxas (bench_sk<MT,NT,KW,S,DUAL,DT,MINB,PF,XD>: registers | spills)"
sed -E 's/, used 1 barriers//; s/, [0-9]+ bytes cmem\[0\]//' "$out/ptxas.txt"
if grep -vq " 0 bytes spill stores, 0 bytes spill loads" "$out/ptxas.txt"; then echo "WARNING: some kernel spills"; fi

echo "== compute-sanitizer memcheck (small odd shapes)"
if command -v compute-sanitizer >/dev/null; then
    compute-sanitizer --tool memcheck --error-exitcode 9 "$build/skinny_bench" sanitize >"$out/sanitize.log" 2>&1
    echo "memcheck exit code $?"
    grep -E "CHECK:|ERROR SUMMARY|FAIL" "$out/sanitize.log" | tail -5
else
    echo "compute-sanitizer not found"
fi
[ "${SKINNY_MODE:-all}" = sanitize-only ] && exit 0

echo "== check + bench"
"$build/skinny_bench" "${SKINNY_MODE:-all}" >"$out/bench.log" 2>&1
rc=$?
grep -E "^device|^copy bandwidth|CHECK:|FAIL" "$out/bench.log" | head -20
sed -n '/^BEST per M/,$p' "$out/bench.log"
echo "exit code $rc"
exit $rc
