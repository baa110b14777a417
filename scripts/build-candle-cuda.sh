#!/usr/bin/env bash
# Builds fuse with candle's CUDA build in one program (feature `candle-cuda`, without `cuda`), here, with no
# GPU and no CUDA installed, for the GPU machine:  scripts/build-candle-cuda.sh [CARGO BUILD ARGS...]
# (default: the candle test binary and the candle_model example, release, into target-candle-cuda/).
#
# candle-core's CUDA build compiles its kernels with nvcc at build time and links the CUDA libraries
# (cudarc's `dynamic-linking`). This script installs nvcc, its front end and the CUDA headers from PyPI into
# .deps/candle-cuda-13.0 (about 300 MB, once), and makes link stubs for libcuda, libcublas, libcublasLt and
# libcurand: shared libraries with the real ones' sonames that define the symbols the program references, so
# that on the GPU machine the real libraries are loaded (LD_LIBRARY_PATH=/usr/local/cuda/lib64). libcudart
# and libnvrtc are linked against the real ones from the wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
# CUDA 13.0, the GPU machine's driver's version: candle loads PTX that nvcc wrote, and a driver refuses PTX of
# a newer toolkit than its own.
root=$PWD/.deps/candle-cuda-13.0
wheels=("nvidia-cuda-nvcc==13.0.*" "nvidia-cuda-runtime==13.0.*" "nvidia-cuda-crt==13.0.*" "nvidia-nvvm==13.0.*" "nvidia-cuda-cccl==13.0.*" "nvidia-cuda-nvrtc==13.0.*")
if [ ! -x "$root/nvidia/cu13/bin/nvcc" ] || [ ! -x "$root/nvidia/cu13/nvvm/bin/cicc" ]; then
    echo "build-candle-cuda: installing ${wheels[*]} from PyPI into $root" >&2
    for w in "${wheels[@]}"; do
        PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$root/tmp" "$w"
        cp -r "$root/tmp/nvidia" "$root/" && rm -rf "$root/tmp"
    done
fi
cuda=$root/nvidia/cu13
# cccl's headers (nv/target, cuda/std) where nvcc looks for them.
[ -d "$cuda/include/nv" ] || cp -r "$cuda/include/cccl/"* "$cuda/include/"
stubs=$cuda/lib/stubs
mkdir -p "$stubs"
ln -sf libcudart.so.13 "$cuda/lib/libcudart.so"
ln -sf libnvrtc.so.13 "$cuda/lib/libnvrtc.so"
export PATH=$cuda/bin:$PATH CUDA_HOME=$cuda CUDA_PATH=$cuda CUDA_COMPUTE_CAP=90 CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target-candle-cuda}
args=("$@")
mkdir -p "$CARGO_TARGET_DIR"
[ ${#args[@]} -gt 0 ] || args=(--release -p fuse-kernels --no-default-features --features candle-cuda --test candle --example candle_model)

# Stubs: the C symbols the crates' objects leave undefined, by library.
make_stubs() {
    local syms=$CARGO_TARGET_DIR/candle-cuda-symbols.txt
    find "$CARGO_TARGET_DIR" -name 'libcudarc-*.rlib' -o -name 'libcandle_core-*.rlib' -o -name 'libcandle_kernels-*.rlib' -o -name 'libfuse_runtime-*.rlib' -o -name 'libmoe.a' |
        xargs -r nm -u --format=just-symbols 2>/dev/null | sort -u >"$syms"
    stub() { # NAME SONAME REGEX
        grep -E "$3" "$syms" | sed 's/.*/void &(void) {}/' >"$stubs/$1.c" || true
        gcc -shared -fPIC -Wl,-soname,"$2" -o "$stubs/lib$1.so" "$stubs/$1.c"
    }
    stub cuda libcuda.so.1 '^cu[A-Z]'
    stub cublas libcublas.so.13 '^cublas[^L]'
    stub cublasLt libcublasLt.so.13 '^cublasLt'
    stub curand libcurand.so.10 '^curand'
    echo "build-candle-cuda: link stubs from $(wc -l <"$syms") undefined symbols" >&2
}
[ -f "$stubs/libcuda.so" ] || make_stubs
if ! cargo build "${args[@]}"; then
    # The first build links before the stubs know every symbol: make them again from what was built.
    make_stubs
    cargo build "${args[@]}"
fi
