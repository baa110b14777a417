#!/usr/bin/env bash
# The test command (README, .ci/run): builds everything and runs every test, on a fresh machine.
# cargo fetches the crates; there is nothing else to install until the CUDA backend lands.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "test.sh: cargo not found; install Rust from https://rustup.rs" >&2; exit 1; }
cargo test --workspace --all-targets
cargo test --workspace --doc
