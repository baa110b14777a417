#!/usr/bin/env bash
# The main job (README): SmolLM2-135M-Instruct generating a short answer on the best device (fetched on first
# use), one decode step fused against unfused, then the Llama-3-8B MLP on the best device available, checked
# and timed. Extra arguments go to the MLP example.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "run-main.sh: cargo not found; install Rust from https://rustup.rs" >&2; exit 1; }
scripts/fetch-smollm2.sh
cargo run --release --example smollm2 -- --prompt "What is the capital of France?" --chat --max-tokens 48 --compare-unfused
exec cargo run --release --example llama_mlp -- "$@"
