#!/usr/bin/env bash
# NVRTC and ptxas for the kernel compile check (tests/kernels_compile.rs), which needs no GPU.
# Sourced by scripts/test.sh from the repository root. Uses .deps/cuda when it is there, else a CUDA toolkit
# on the machine, else installs the two PyPI wheels into .deps/cuda (about 290 MB, a few seconds).
# On success exports LD_LIBRARY_PATH (libnvrtc), FUSE_PTXAS and FUSE_TEST_NVRTC=1 (a missing NVRTC then
# fails the test instead of skipping it). If nothing works it says so and the compile check is skipped.

fuse_cuda_deps=".deps/cuda"
# cudarc is built for CUDA 13 (fuse-runtime/Cargo.toml): keep the wheels on the same major version.
fuse_cuda_wheels=("nvidia-cuda-nvrtc==13.*" "nvidia-cuda-nvcc==13.*")

fuse_find_deps() {
    fuse_nvrtc_dir=$(dirname "$(ls -1 "$fuse_cuda_deps"/nvidia/cu*/lib/libnvrtc.so* 2>/dev/null | sort | tail -n 1)" 2>/dev/null)
    fuse_ptxas=$(ls -1 "$fuse_cuda_deps"/nvidia/cu*/bin/ptxas 2>/dev/null | sort | tail -n 1)
    [ -n "$fuse_ptxas" ] && [ -x "$fuse_ptxas" ] && [ -d "$fuse_nvrtc_dir" ] && [ "$fuse_nvrtc_dir" != "." ]
}

fuse_find_system() {
    local home="${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}"
    fuse_ptxas=$(command -v ptxas 2>/dev/null || true)
    [ -z "$fuse_ptxas" ] && [ -x "$home/bin/ptxas" ] && fuse_ptxas="$home/bin/ptxas"
    fuse_nvrtc_dir=""
    for dir in "$home/lib64" "$home/lib" "$home/targets/x86_64-linux/lib"; do
        if ls "$dir"/libnvrtc.so* >/dev/null 2>&1; then fuse_nvrtc_dir="$dir"; break; fi
    done
    if [ -z "$fuse_nvrtc_dir" ] && command -v ldconfig >/dev/null && ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so'; then
        fuse_nvrtc_dir="system"
    fi
    [ -n "$fuse_ptxas" ] && [ -n "$fuse_nvrtc_dir" ]
}

if fuse_find_deps; then
    echo "cuda-tools: using NVRTC and ptxas from $fuse_cuda_deps"
elif fuse_find_system; then
    echo "cuda-tools: using the CUDA toolkit on this machine (ptxas: $fuse_ptxas, libnvrtc: $fuse_nvrtc_dir)"
elif command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1; then
    echo "cuda-tools: installing ${fuse_cuda_wheels[*]} from PyPI into $fuse_cuda_deps (python3 -m pip install --no-deps --target)"
    fuse_started=$(date +%s)
    if PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$fuse_cuda_deps" "${fuse_cuda_wheels[@]}" \
        && fuse_find_deps; then
        echo "cuda-tools: installed in $(( $(date +%s) - fuse_started ))s, $(du -sh "$fuse_cuda_deps" | cut -f1)"
    else
        echo "cuda-tools: installing NVRTC and ptxas failed; the kernel compile check will be skipped" >&2
        fuse_ptxas=""
    fi
else
    echo "cuda-tools: no NVRTC, no ptxas and no python3 -m pip to install them; the kernel compile check will be skipped" >&2
    fuse_ptxas=""
fi

if [ -n "$fuse_ptxas" ]; then
    if [ "$fuse_nvrtc_dir" != "system" ]; then
        export LD_LIBRARY_PATH="$(cd "$fuse_nvrtc_dir" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    FUSE_PTXAS="$(cd "$(dirname "$fuse_ptxas")" && pwd)/$(basename "$fuse_ptxas")"
    export FUSE_PTXAS
    export FUSE_TEST_NVRTC=1
fi
unset -f fuse_find_deps fuse_find_system
