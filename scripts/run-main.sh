#!/usr/bin/env bash
# The main job (README): the Llama-3-8B MLP on the best device available, checked and timed.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "run-main.sh: cargo not found; install Rust from https://rustup.rs" >&2; exit 1; }
exec cargo run --release --example llama_mlp -- "$@"
