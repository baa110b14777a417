#!/usr/bin/env bash
# The test command (README, .ci/run): builds everything and runs every test, on a fresh machine.
# cargo fetches the crates; scripts/cuda-tools.sh fetches NVRTC and ptxas (PyPI wheels, into .deps/) so that
# every generated CUDA kernel is compiled and assembled even on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "test.sh: cargo not found; install Rust from https://rustup.rs" >&2; exit 1; }
# shellcheck source=scripts/cuda-tools.sh
source scripts/cuda-tools.sh
cargo test --workspace --all-targets
cargo test --workspace --doc
