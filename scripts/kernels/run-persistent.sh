#!/usr/bin/env bash
# From the repository root, on the GPU machine:  bash scripts/kernels/run-persistent.sh OUTDIR
# Builds scripts/kernels/persistent_decode.cu (the persistent decode-step prototype) with the machine's nvcc,
# runs its checks and its benchmark with the phases (PERSISTENT_MODE: other modes, space-separated), then
# decode_step_fused's checks, rows, stages alone and ablations in processes of their own (PERSISTENT_FUSED=0
# skips them; a kernel that traps ends only its process), then the four compute-sanitizer tools over the
# small checks (PERSISTENT_SANITIZE=0 skips them). Logs under OUTDIR: persistent.log (build's ptxas lines,
# checks, tables, phases), persistent-sanitize.txt. PERSISTENT_TIMEOUT bounds the runs together.
# PERSISTENT_NCU=1 instead: ncu's full set (warp-state sampling by instruction) over one launch of
# decode_step_flow (PERSISTENT_NCU_KERNEL=fused: decode_step_fused with every option) at batch 1, 128 cached
# (the binary's `profile` / `profile-fused` mode), at the GPU's own clocks with warm caches:
# OUTDIR/KERNEL-details.txt (every section), KERNEL-sass.csv.gz (metrics by SASS instruction, where the warps
# wait), KERNEL.ncu-rep.gz (the report).
set -uo pipefail
out=${1:?usage: scripts/kernels/run-persistent.sh OUTDIR}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
export PATH="$cuda/bin:$PATH"
bin=$(mktemp -d)/persistent_decode
log="$out/persistent.log"
nvcc -O3 -std=c++17 -lineinfo -Xcompiler -fopenmp -gencode=arch=compute_90a,code=sm_90a -Xptxas -v \
  "$here/persistent_decode.cu" -o "$bin" 2>&1 | grep -E "registers|spill" >"$log" || { echo "build failed" | tee -a "$log"; exit 1; }
if [ "${PERSISTENT_NCU:-0}" = 1 ]; then
  kernel=${PERSISTENT_NCU_KERNEL:-flow}
  mode=profile
  [ "$kernel" = fused ] && mode=profile-fused
  timeout "${PERSISTENT_TIMEOUT:-240}" ncu --set full --import-source yes --cache-control none --clock-control none \
    --kernel-name "regex:decode_step_$kernel" --launch-skip 3 --launch-count 1 -o "$out/$kernel" "$bin" "$mode" >"$out/ncu.log" 2>&1
  status=$?
  tail -5 "$out/ncu.log"
  ncu -i "$out/$kernel.ncu-rep" --page details >"$out/$kernel-details.txt" 2>&1
  ncu -i "$out/$kernel.ncu-rep" --page source --csv --print-source sass 2>&1 | gzip >"$out/$kernel-sass.csv.gz"
  gzip -f "$out/$kernel.ncu-rep"
  exit $status
fi
end=$(($(date +%s) + ${PERSISTENT_TIMEOUT:-240}))
read -ra modes <<<"${PERSISTENT_MODE:-all}"  # one mode or several, space-separated
[ "${PERSISTENT_FUSED:-1}" = 1 ] && modes+=(check-fused phases-fused stages-alone ablate)
status=0
for mode in "${modes[@]}"; do
  left=$((end - $(date +%s)))
  [ "$left" -gt 5 ] || { echo "persistent_decode $mode: SKIPPED, out of time" | tee -a "$log"; status=124; break; }
  timeout "$left" "$bin" "$mode" 2>&1 | tee -a "$log"
  s=${PIPESTATUS[0]}
  [ "$s" = 0 ] || { echo "persistent_decode $mode: exit $s" | tee -a "$log"; [ "$status" = 124 ] || status=$s; }
  [ "$s" = 124 ] && status=124 && break
done
# The sanitizers only after runs that ended by themselves (124: one hung or ran out of time; they would too).
if [ "${PERSISTENT_SANITIZE:-1}" = 1 ] && [ "$status" != 124 ]; then
  checks=(sanitize)
  [ "${PERSISTENT_FUSED:-1}" = 1 ] && checks+=(sanitize-fused)
  for tool in memcheck racecheck synccheck initcheck; do
    extra=()
    [ "$tool" = racecheck ] && extra=(--racecheck-report hazard)
    for check in "${checks[@]}"; do
      echo "== $tool $check" >>"$out/persistent-sanitize.txt"
      timeout "${PERSISTENT_SANITIZE_TIMEOUT:-60}" compute-sanitizer --tool "$tool" "${extra[@]}" "$bin" "$check" 2>&1 | tail -4 >>"$out/persistent-sanitize.txt"
    done
  done
  cat "$out/persistent-sanitize.txt"
fi
exit "$status"
