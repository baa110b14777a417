#!/usr/bin/env bash
# Issue 34 on a machine of several GPUs (device kind nvidia-h200-x2 or nvidia-h100-x2; ask `status` first),
# from the repository root, after `scripts/gpu/gpu-bundle.sh` here (its default keeps the parallel tests and
# bench_tp):
#   scripts/gpu/tp-check.sh OUTDIR
# 1. tests/parallel.rs on every GPU there (FUSE_TEST_GPU=1 FUSE_TEST_GPUS=N: a skip is a failure), and
#    fuse-models' tensor_parallel tests;
# 2. compute-sanitizer's memcheck, racecheck (hazards), synccheck and initcheck over the 1-GPU NCCL case (the
#    sums' kernels are NCCL's; the tools check fuse's around them);
# 3. bench_tp (the MLP at BENCH.md's M, the 8B-shaped layer at batch 1 and 16, 1 GPU against N), then its
#    PyTorch peer, benches/peers/torch_tp_mlp.py, on N GPUs and on 1 (python3 -m torch.distributed.run).
# Logs: OUTDIR/tp-tests.log, tp-sanitize.log, bench_tp.log, torch_tp.log (+ torch_tp*.json).
set -uo pipefail
out=${1:?usage: scripts/gpu/tp-check.sh OUTDIR}
mkdir -p "$out"
if [ -f .gpu/bins.tar.xz ]; then tar -C .gpu -xJf .gpu/bins.tar.xz && rm .gpu/bins.tar.xz; fi
# NVLink multicast stays off (KINDS.md: a program that uses it can take the host's GPUs out of service).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
gpus=$(nvidia-smi -L | grep -c '^GPU')
echo "tp-check: $gpus GPUs" | tee "$out/tp-tests.log"
status=0
for t in .gpu/bin/test-parallel-* .gpu/bin/test-tensor_parallel-*; do
  [ -x "$t" ] || { echo "tp-check: missing $t" | tee -a "$out/tp-tests.log"; status=1; continue; }
  FUSE_TEST_GPU=1 FUSE_TEST_GPUS=$gpus timeout 300 "$t" --test-threads=1 >>"$out/tp-tests.log" 2>&1 || status=1
done
grep -E "^test result|FAILED|panicked" "$out/tp-tests.log"
for tool in memcheck racecheck synccheck initcheck; do
  extra=()
  [ $tool = racecheck ] && extra=(--racecheck-report hazard)
  FUSE_TEST_GPU=1 timeout 300 /usr/local/cuda/bin/compute-sanitizer --tool $tool "${extra[@]}" \
    .gpu/bin/test-parallel-* a_sharded_mlp_on_one_gpu --test-threads=1 >>"$out/tp-sanitize.log" 2>&1 || status=1
  echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/tp-sanitize.log" | tail -1)"
done
timeout 400 .gpu/bin/example-bench_tp --gpus "$gpus" >"$out/bench_tp.log" 2>&1 || status=1
cat "$out/bench_tp.log"
for n in "$gpus" 1; do
  timeout 300 python3 -m torch.distributed.run --nproc_per_node="$n" benches/peers/torch_tp_mlp.py \
    --json "$out/torch_tp$n.json" >>"$out/torch_tp.log" 2>&1 || status=1
done
grep -E "^torch" "$out/torch_tp.log"
exit $status
