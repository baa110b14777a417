#!/usr/bin/env bash
# Packs what one device command needs, small enough to travel beside half of the SmolLM2 file (64 MiB a call):
#   scripts/gpu/gpu-bundle.sh [REV ...]
# ../shared/device/gpu-pack bench_decode bench_mlp bench_quant bench_tp smollm2 step_header (release test binaries and the examples), keeps the test binaries that
# use the GPU (GPU_BUNDLE_KEEP, a regex of their names), builds bench_decode at each REV beside it
# (scripts/gpu/ab-bench.sh), then compresses .gpu/bin into .gpu/bins.tar.xz (the binaries share most of their
# code: about 50 MB become 5). scripts/gpu/gpu-check.sh unpacks it on the device before its steps.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/cuda-tools.sh
source scripts/cuda-tools.sh >/dev/null
keep=${GPU_BUNDLE_KEEP:-'^(example-bench_decode|example-bench_mlp|example-bench_tp|example-bench_quant|example-smollm2|example-step_header|test-(gpu|model_ops|graphs|views|device_checks|fused|eager_and_fused|numerics|nan|eager|fuse_runtime|fuse_models|smollm2_generate|smollm2_decode_step|smollm2_stored|quantized|parallel|tensor_parallel)-[0-9a-f]+)$'}
../shared/device/gpu-pack bench_decode bench_mlp bench_quant bench_tp smollm2 step_header >/tmp/gpu-bundle-pack.log 2>&1 || { tail -20 /tmp/gpu-bundle-pack.log; exit 1; }
for f in .gpu/bin/*; do
    [[ ${f##*/} =~ $keep ]] || rm -f "$f"
done
[ $# -eq 0 ] || scripts/gpu/ab-bench.sh "$@"
tar -C .gpu -cJf .gpu/bins.tar.xz bin
rm -rf .gpu/bin
echo "gpu-bundle: $(ls .gpu/bins.tar.xz) $(du -h .gpu/bins.tar.xz | cut -f1), .gpu $(du -sh .gpu | cut -f1): $(tar -tJf .gpu/bins.tar.xz | grep -c -v '/$') binaries"
