#!/usr/bin/env bash
# One device command that does a session's checks, in order, within a time budget (scripts/gpu/README.md). On
# the GPU machine, from the repository root, after `scripts/gpu/gpu-bundle.sh [REV...]` here (or
# `../shared/device/gpu-pack bench_decode` and `scripts/gpu/ab-bench.sh REV...` for revisions to compare, which
# puts example-bench_decode-REV beside the packed example-bench_decode):
#   scripts/gpu/gpu-check.sh OUTDIR [STEP ...]
# STEPs (default: ab tests sanitize bench), each skipped when fewer than its seconds are left of CHECK_BUDGET
# (default 540; a command may run 600):
#   model     join the model file: /tmp/model/partaa (an earlier command of the same warm machine copied it
#             there from .model-a) and .model-b/partab; FUSE_MODEL_DIR is then set for the steps after it
#   ab        every packed bench_decode build at batches 1, 4, 16 with 128 and 1024 cached, graph mode, a fresh
#             autotune file each; a second round at the end while time is left (AB_BATCHES, AB_CACHED)
#   tests     every packed test binary with FUSE_TEST_GPU=1 (and FUSE_TEST_MODEL=1 after `model`)
#   sanitize  the four compute-sanitizer tools at once over the GPU suite's sanitize tests
#   bench     the packed bench_decode, every mode (BENCH_MODES; one-launch at batch 1) and the extras, with JSON
#   peers     gpt-fast's decode (shared/peers, copied by gpu-pack) and transformers' prefill
#   profile   ncu over one recorded step (scripts/gpu/gpu-profile-decode.sh)
#   cluster   the one-launch decode step's harness (benches/kernels/cluster_step/run.sh: its checks against the
#             reference, its bench with per-stage clocks, the four sanitizers; CLUSTER_BUILDS for variants)
#   one-launch  the library's one-launch decoder on the real model (after `model`): smollm2 --one-launch (its
#             tokens, us a token, the kernel alone) and the greedy-token test against transformers
# Writes OUTDIR/check.log (what ran, how long, the tables' rows, the tests' results) and the steps' own
# files: ab.log, tests.log, sanitize.txt, bench.log, bench_decode.json, peers.json, prefill_peers.json, profile/.
set -uo pipefail
out=${1:?usage: scripts/gpu/gpu-check.sh OUTDIR [STEP ...]}
shift
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(ab tests sanitize bench)
mkdir -p "$out"
# scripts/gpu/gpu-bundle.sh compresses the binaries for the trip: unpack them first.
if [ -f .gpu/bins.tar.xz ]; then tar -C .gpu -xJf .gpu/bins.tar.xz && rm .gpu/bins.tar.xz; fi
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
budget=${CHECK_BUDGET:-540}
t0=$(date +%s)
log="$out/check.log"
elapsed() { echo $(($(date +%s) - t0)); }
say() { echo "[$(elapsed) s] $*" | tee -a "$log"; }
# Runs step $1 when at least $2 seconds are left.
fits() { [ $((budget - $(elapsed))) -ge "$2" ] || { say "SKIPPED $1: $((budget - $(elapsed))) s left, it needs $2"; return 1; }; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader >>"$log" 2>&1

ab_round() {
  for bin in .gpu/bin/example-bench_decode*; do
    name=${bin##*/example-bench_decode}
    name=${name#-}
    say "ab ${name:-packed} round $1"
    FUSE_TUNE_FILE=$(mktemp -d)/tune.tsv timeout 90 "$bin" --batches "${AB_BATCHES:-1,4,16}" --cached "${AB_CACHED:-128,1024}" \
      --modes graph --extras off --steps 48 >>"$out/ab.log" 2>&1 || say "ab ${name:-packed}: exit $?"
    grep -E "^graph" "$out/ab.log" | tail -n "$(($(echo "${AB_BATCHES:-1,4,16}" | tr ',' '\n' | wc -l) * $(echo "${AB_CACHED:-128,1024}" | tr ',' '\n' | wc -l)))" | sed "s/^/  ${name:-packed} /" >>"$log"
  done
}

for step in "${steps[@]}"; do
  case $step in
    model)
      mkdir -p /tmp/model
      [ -f /tmp/model/partab ] && cat /tmp/model/partaa /tmp/model/partab .model-c/part* >/tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf && rm /tmp/model/partaa /tmp/model/partab
      say "model: $(sha256sum /tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf 2>&1 | cut -c1-16)"
      export FUSE_MODEL_DIR=/tmp/model FUSE_TEST_MODEL=1
      ;;
    ab)
      fits ab 60 && ab_round 1
      ;;
    tests)
      fits tests 300 || continue
      for t in .gpu/bin/test-*; do
        echo "== ${t##*/}" >>"$out/tests.log"
        FUSE_TEST_GPU=1 FUSE_TUNE_FILE=$(mktemp -d)/tune.tsv timeout 300 "$t" >>"$out/tests.log" 2>&1 || say "FAILED ${t##*/}: exit $?"
      done
      grep -E "^test result" "$out/tests.log" | sed 's/^/  /' >>"$log"
      ;;
    sanitize)
      fits sanitize 80 || continue
      for tool in memcheck racecheck synccheck initcheck; do
        SANITIZE_TIMEOUT=$((budget - $(elapsed) - 10)) scripts/gpu/gpu-sanitize.sh "/tmp/sanitize-$tool" "$tool" >"/tmp/sanitize-$tool.out" 2>&1 &
      done
      wait
      cat /tmp/sanitize-*.out | tee "$out/sanitize.txt" | sed 's/^/  /' >>"$log"
      ;;
    bench)
      fits bench 60 || continue
      say "bench"
      FUSE_TUNE_FILE=$(mktemp -d)/tune.tsv timeout 90 .gpu/bin/example-bench_decode --modes "${BENCH_MODES:-graph,calls,unfused,one-launch}" \
        --json "$out/bench_decode.json" >"$out/bench.log" 2>&1 || say "bench: exit $?"
      grep -vE "^(calls|unfused)" "$out/bench.log" | sed 's/^/  /' >>"$log"
      ;;
    peers)
      fits peers 150 || continue
      say "peers: gpt-fast decode"
      timeout 170 python3 .gpu/peers/torch_llama_decode.py --batches 1,4,16 --modes gptfast --prompt 32 --new 128 --json "$out/peers.json" >"$out/peers.log" 2>&1 || say "peers: exit $?"
      grep gptfast "$out/peers.log" | sed 's/^/  /' >>"$log"
      fits prefill-peers 45 || continue
      say "peers: prefill"
      timeout $((budget - $(elapsed))) python3 scripts/gpu/peer_prefill.py --prompt 512 --json "$out/prefill_peers.json" >"$out/prefill_peers.log" 2>&1 || say "prefill peers: exit $?"
      grep "prefill" "$out/prefill_peers.log" | sed 's/^/  /' >>"$log"
      ;;
    cluster)
      fits cluster 200 || continue
      say "one-launch decode step harness"
      CLUSTER_TIMEOUT=$((budget - $(elapsed) - 120)) bash benches/kernels/cluster_step/run.sh "$out" >/dev/null 2>&1 || say "cluster: exit $?"
      grep -E "^(==|check|bench|    |fuse_decode_step|ptxas)" "$out/cluster-step.log" | sed 's/^/  /' >>"$log"
      grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^==" "$out/cluster-step-sanitize.txt" | sed 's/^/  /' >>"$log"
      ;;
    one-launch)
      fits one-launch 90 || continue
      say "one-launch decoder (library)"
      timeout 60 .gpu/bin/example-smollm2 --prompt "Once upon a time" --max-tokens 48 --one-launch >"$out/one-launch.log" 2>&1 || say "one-launch: exit $?"
      for t in .gpu/bin/test-smollm2_decode_step-*; do
        FUSE_TEST_GPU=1 timeout 60 "$t" --nocapture >>"$out/one-launch.log" 2>&1 || say "FAILED ${t##*/}: exit $?"
      done
      grep -vE "^\s*$" "$out/one-launch.log" | tail -12 | sed 's/^/  /' >>"$log"
      ;;
    profile)
      fits profile 170 || continue
      say "profile"
      PROFILE_TIMEOUT=150 scripts/gpu/gpu-profile-decode.sh "$out/profile" 1 128 >>"$log" 2>&1 || say "profile: exit $?"
      ;;
    *) say "unknown step $step" ;;
  esac
done
# A second A/B round while time is left (the noise between rounds is the measure of a difference).
case " ${steps[*]} " in *" ab "*) [ $((budget - $(elapsed))) -ge 60 ] && ab_round 2 ;; esac
say "done"
cat "$log"
