#!/usr/bin/env bash
# On the GPU machine, from the repository root:  bash benches/kernels/skinny/run.sh OUTDIR
# Builds benches/kernels/skinny/skinny_bench.cu (the harness of the skinny GEMM template) with nvcc, prints each config's
# ptxas resource line (registers, spills), runs compute-sanitizer memcheck on a small odd-shape correctness pass,
# then the full correctness check and the benchmark. Logs under OUTDIR:
#   build.log (nvcc + ptxas -v), ptxas.txt (one line per kernel), sanitize.log, bench.log (full tables).
# Variables:
#   SKINNY_DIR      the copy of fuse-ir/src/codegen to include (cuda/prelude.cuh, gemm/templates/skinny.cuh and
#                   skinny_kernel.cuh), relative to benches/kernels/skinny or absolute (default: the project's own,
#                   ../../../fuse-ir/src/codegen; point it at a copy to try a variant)
#   SKINNY_CONFIGS  the config list (default: the template's CONFIG SET k1..k8): "MT,NT,KW,S,MINB,PF,XS,U[,f]" separated by spaces (f: also f16 kernels)
#   SKINNY_MODE     all (default) | check | bench | sanitize-only | build (build only, here: no GPU needed)
#   SKINNY_BIN      a harness binary built earlier (SKINNY_MODE=build wrote OUTDIR/skinny_bench): skip the build
#   SKINNY_SANITIZE 1 (default) runs compute-sanitizer memcheck, 0 skips it
# The harness resolves cuBLAS with dlopen when built with -DSKINNY_NO_CUBLAS_HEADERS (done automatically when
# cublas_v2.h is not found), so it can be built on a machine without cuBLAS and carried to the GPU machine.
set -uo pipefail
out=${1:?usage: benches/kernels/skinny/run.sh OUTDIR}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
export PATH="$cuda/bin:$PATH"
mode=${SKINNY_MODE:-all}
codegen=${SKINNY_DIR:-../../../fuse-ir/src/codegen}
configs=${SKINNY_CONFIGS:-"1,1,8,4,3,1,0,1,f 2,1,8,2,2,1,0,1 1,2,8,4,2,1,0,1 1,2,2,4,2,1,1,1 1,4,8,4,2,1,0,1 1,4,2,4,2,1,1,1 1,8,1,4,1,1,1,1,f 1,8,4,4,1,1,1,1"}
bin=${SKINNY_BIN:-}
if [ -z "$bin" ]; then
    build=$(mktemp -d)
    {
        echo "static std::vector<Cfg> g_cfgs = {"
        for c in $configs; do
            IFS=, read -r mt nt kw st minb pf xs u f16 <<<"$c"
            if [ "${f16:-}" = f ]; then echo "    CFGF($mt, $nt, $kw, $st, $minb, $pf, $xs, $u),"; else echo "    CFGB($mt, $nt, $kw, $st, $minb, $pf, $xs, $u),"; fi
        done
        # the template's own extern "C" kernel (default config, dual): must compile and pass too
        echo '    Cfg{"extern-default", FUSE_SK_MT, FUSE_SK_NT, FUSE_SK_KW, FUSE_SK_S, FUSE_SK_XS, FUSE_SK_U, {nullptr, fuse_skinny_default_kernel}, {nullptr, nullptr}},'
        echo "};"
    } >"$build/skinny_configs.inc"
    cat "$build/skinny_configs.inc" >"$out/configs.inc"
    extra=""
    [ -f "$cuda/include/cublas_v2.h" ] || extra="-DSKINNY_NO_CUBLAS_HEADERS"
    [ -n "$extra" ] && libs="-ldl" || libs="-lcublas"
    echo "== build ($codegen)"
    t0=$(date +%s)
    if ! nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -Xptxas -v -I"$build" -I"$here" $extra \
            -I"$(cd "$here" && cd "$codegen" && pwd)" "$here/skinny_bench.cu" -L"$cuda/lib64" -L"$cuda/lib" $libs -Xcompiler -static-libstdc++,-static-libgcc \
            -o "$build/skinny_bench" >"$out/build.log" 2>&1; then
        tail -40 "$out/build.log"
        echo "BUILD FAILED"
        exit 1
    fi
    echo "built in $(( $(date +%s) - t0 )) s"
    # one line per kernel: name, registers, stack/spills
    awk '/Compiling entry function/ { match($0, /'"'"'[^'"'"']+'"'"'/); name = substr($0, RSTART + 1, RLENGTH - 2) }
         /stack frame/ { sp = $0; gsub(/^ +/, "", sp) }
         /Used [0-9]+ registers/ { u = $0; sub(/.*Used /, "", u); print name " | " u " | " sp }' "$out/build.log" |
        (command -v cu++filt >/dev/null && cu++filt || cat) | sed 's/(FuseSkinnyParams)//; s/void //' >"$out/ptxas.txt"
    echo "== ptxas (bench_sk<MT,NT,KW,S,DUAL,DT,MINB,PF,XS,U>: registers | spills)"
    sed -E 's/, used [0-9]+ barriers//; s/, [0-9]+ bytes cmem\[0\]//' "$out/ptxas.txt"
    if grep -vq " 0 bytes spill stores, 0 bytes spill loads" "$out/ptxas.txt"; then echo "WARNING: some kernel spills"; fi
    if grep -v "^0 bytes stack" "$out/ptxas.txt" | grep -q "stack frame" && grep -vq "| 0 bytes stack frame" "$out/ptxas.txt"; then echo "WARNING: some kernel has a stack frame"; fi
    bin="$build/skinny_bench"
    if [ "$mode" = build ]; then cp "$bin" "$out/skinny_bench"; echo "binary: $out/skinny_bench"; exit 0; fi
fi

if [ "${SKINNY_SANITIZE:-1}" = 1 ]; then
    echo "== compute-sanitizer memcheck (small odd shapes)"
    if command -v compute-sanitizer >/dev/null; then
        compute-sanitizer --tool memcheck --error-exitcode 9 "$bin" sanitize >"$out/sanitize.log" 2>&1
        echo "memcheck exit code $?"
        grep -E "CHECK:|ERROR SUMMARY|FAIL" "$out/sanitize.log" | tail -5
    else
        echo "compute-sanitizer not found"
    fi
fi
[ "$mode" = sanitize-only ] && exit 0

echo "== check + bench"
"$bin" "$mode" >"$out/bench.log" 2>&1
rc=$?
grep -E "^device|^copy bandwidth|CHECK:|FAIL|error" "$out/bench.log" | head -20
sed -n '/^BEST per M/,$p' "$out/bench.log"
echo "exit code $rc"
exit $rc
