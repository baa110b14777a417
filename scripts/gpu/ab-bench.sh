#!/usr/bin/env bash
# Builds examples/bench_decode (release, stripped; AB_EXAMPLE names another example) from each git revision
# named, into .gpu/bin as example-bench_decode-REV (after ../shared/device/gpu-pack, which empties .gpu), so
# that one device command can time them side by side:
#   scripts/gpu/ab-bench.sh next-attention-cluster next-skinny-early-weights
#   then on the device:  for b in .gpu/bin/example-bench_decode*; do $b --batches 1 --cached 128,1024 --extras off; done
# Each revision is built in its own worktree under .ab/ (ignored), with its own target directory.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -gt 0 ] || { echo "usage: scripts/gpu/ab-bench.sh REV [REV ...]" >&2; exit 2; }
# shellcheck source=scripts/cuda-tools.sh
source scripts/cuda-tools.sh >/dev/null
example=${AB_EXAMPLE:-bench_decode}
mkdir -p .gpu/bin
for rev in "$@"; do
    name=${rev//\//-}
    dir=.ab/$name
    rm -rf "$dir"
    git worktree prune
    git worktree add --detach --force "$dir" "$rev" >/dev/null
    ln -sfn "$PWD/.deps" "$dir/.deps"
    (cd "$dir" && CARGO_TARGET_DIR="$PWD/../../target-ab" cargo build --quiet --release --example "$example")
    cp "target-ab/release/examples/$example" ".gpu/bin/example-$example-$name"
    strip ".gpu/bin/example-$example-$name" 2>/dev/null || true
    git worktree remove --force "$dir"
    echo "ab-bench: .gpu/bin/example-$example-$name ($(git rev-parse --short "$rev"))"
done
