#!/usr/bin/env bash
# The generated one-launch step on the GPU machine (issue 33), after
# `GPU_BUNDLE_KEEP='^(example-bench_decode|test-(graphs|one_launch_step)-[0-9a-f]+)$' scripts/gpu/gpu-bundle.sh` here:
#   scripts/gpu/one-launch-check.sh OUTDIR [tests] [sanitize] [bench] [prefetch] [params] [splits] [blocks] [knobs] [ab] [taskcheck] [trace] [gate]
# (with `scripts/gpu/gpu-bundle.sh REV ...` after GPU_BUNDLE_KEEP, bench_decode built at each REV rides along)
# tests: the one-launch tests (graphs' and fuse-models' one_launch_step, GPU cases) with FUSE_TEST_GPU=1, then
# the small and quantized models' with STEP_KNOBS -> OUTDIR/tests.log;
# sanitize: the four compute-sanitizer tools (SANITIZE_TOOLS) over the two-layer model's test (SANITIZE_TEST, of
# SANITIZE_BIN: another kept test binary, a glob; fixed GEMM rule;
# the graph path beside the one-launch step calls cuBLAS) -> OUTDIR/sanitize.txt, with the kernels each
# finding is in;
# bench: bench_decode's graph, task-graph and generated modes (BENCH_MODES, BENCH_BATCHES, BENCH_CACHED) -> OUTDIR/bench.log;
# prefetch: the generated step with FUSE_STEP_PREFETCH off and on, alternated -> OUTDIR/prefetch.log;
# splits: the generated step with each floor:one-split-keys pair of SPLITS (FUSE_STEP_SPLIT_KEYS,
# FUSE_STEP_ONE_SPLIT_KEYS) at 128 and 1024 cached, alternated -> OUTDIR/splits.log;
# blocks: the generated step with FUSE_STEP_BLOCKS_PER_SM 1 and 2, alternated -> OUTDIR/blocks.log;
# params: the generated step with FUSE_STEP_SHARED_PARAMS off and on, alternated -> OUTDIR/params.log;
# knobs: the generated step under each setting of KNOBS ('A=1 B=2;A=0'), alternated -> OUTDIR/knobs.log;
# ab: graph and generated from this tree's bench_decode and each REV's, alternated -> OUTDIR/ab.log;
# taskcheck: the quantized and small models' one-launch tests (TASKCHECK_TESTS) under each setting of TASKCHECK, with the paths
# their products took and the tune file -> OUTDIR/taskcheck.log;
# trace: FUSE_STEP_TRACE over the generated step at batch 1 -> OUTDIR/trace.tsv.xz (scripts/gpu/step-trace.py);
# gate: what a setting needs before it goes on by default, with GATE (environment assignments) set: the
# one-launch tests' GPU cases, then the four sanitizers over GATE_TESTS (each SANITIZE_TIMEOUT, default 300 s)
# -> OUTDIR/gate.log and OUTDIR/sanitize.txt.
set -uo pipefail
out=${1:?usage: scripts/gpu/one-launch-check.sh OUTDIR [tests] [sanitize] [bench] [prefetch] [params] [splits] [blocks] [knobs] [ab] [taskcheck] [trace] [gate]}
shift
mkdir -p "$out"
if [ -f .gpu/bins.tar.xz ]; then tar -C .gpu -xJf .gpu/bins.tar.xz && rm .gpu/bins.tar.xz; fi
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} FUSE_TEST_GPU=1
graphs=$(ls .gpu/bin/test-graphs-* | head -1)
model=$(ls .gpu/bin/test-one_launch_step-* | head -1)
quiet() { grep -v -E '^\s+[0-9]+: |^note: |^stack backtrace|^\s+at '; }
# alternate LOG CACHED SETTING...: the generated step under each SETTING (environment assignments, separated by
# spaces), alternated, twice -> OUTDIR/LOG.
alternate() {
  local log=$1 cached=$2
  shift 2
  for round in 1 2; do
    for setting in "$@"; do
      echo "== $setting, round $round" >>"$out/$log"
      # shellcheck disable=SC2086 # a setting is words
      env $setting FUSE_TUNE_FILE="$(mktemp -d)/t.tsv" timeout 100 .gpu/bin/example-bench_decode --batches "${BENCH_BATCHES:-1,16}" \
        --cached "$cached" --modes generated --extras off --steps 48 2>&1 | grep -E "^generated " >>"$out/$log"
    done
  done
}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader >"$out/gpu.txt" 2>&1
for step in "$@"; do
  case $step in
    tests)
      timeout 60 "$graphs" one_launch --test-threads=1 --nocapture 2>&1 | quiet >>"$out/tests.log"
      timeout "${MODEL_TEST_TIMEOUT:-240}" "$model" cuda --test-threads=1 --nocapture 2>&1 | quiet >>"$out/tests.log"
      # The small models again with the step's knobs set otherwise than their defaults (STEP_KNOBS), and
      # quantized layers with them.
      knobs=${STEP_KNOBS-FUSE_STEP_SHARED_PARAMS=off FUSE_STEP_ONE_SPLIT_KEYS=0}
      if [ -n "$knobs" ]; then
        echo "== $knobs" >>"$out/tests.log"
        # shellcheck disable=SC2086 # the knobs are words
        env $knobs timeout 200 "$model" small quantized --test-threads=1 2>&1 | quiet | grep -E "^test |test result|panicked|differ" >>"$out/tests.log"
      fi
      # Other GPU tests the bundle kept (GPU_BUNDLE_KEEP), e.g. test-sort for the model kernels' sort.cu, with
      # OTHER_TEST_ARGS (test name filters, say) and OTHER_TEST_TIMEOUT seconds each.
      for t in .gpu/bin/test-*; do
        case ${t##*/} in test-graphs-* | test-one_launch_step-*) continue ;; esac
        echo "== ${t##*/}" >>"$out/tests.log"
        # shellcheck disable=SC2086 # the filters are words
        timeout "${OTHER_TEST_TIMEOUT:-120}" "$t" ${OTHER_TEST_ARGS:-} --test-threads=1 2>&1 | quiet | grep -E "^test |test result|panicked" >>"$out/tests.log"
      done
      ;;
    sanitize)
      for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}; do
        extra=()
        # racecheck over every kernel, every finding printed (the counts below name their kernels: the graph
        # path's cuBLAS calls report hazards of their own). A --kernel-name filter made the sanitizer fail
        # ("failed to handle a hardware exception", an H100 on 2026-12-06): RACECHECK_KERNELS=kns=NAME asks
        # for one anyway.
        if [ "$tool" = racecheck ]; then
          extra=(--racecheck-report hazard --print-limit 100000)
          [ -z "${RACECHECK_KERNELS:-}" ] || extra+=(--kernel-name "$RACECHECK_KERNELS")
        fi
        echo "== $tool" >>"$out/sanitize.txt"
        # shellcheck disable=SC2086 # SANITIZE_BIN is a glob
        FUSE_AUTOTUNE=off FUSE_TUNE_FILE=$(mktemp -d)/t.tsv timeout "${SANITIZE_TIMEOUT:-150}" /usr/local/cuda/bin/compute-sanitizer --tool "$tool" "${extra[@]}" \
          ${SANITIZE_BIN:-$model} "${SANITIZE_TEST:-small_smollm2_bf16::cuda}" --test-threads=1 >/tmp/sanitize-$tool.txt 2>&1
        grep -E "SUMMARY|test result" /tmp/sanitize-$tool.txt >>"$out/sanitize.txt"
        # The first findings in fuse's kernels in full (less the host frames; cuBLAS's nvjet and gemv kernels
        # left out) and why the test failed, if it did.
        grep -v -E "Host Frame|Saved host backtrace" /tmp/sanitize-$tool.txt |
          awk '/^=+ (Error|Invalid|Uninitialized)/ { if (b !~ /nvjet|gemv/) printf "%s", b; b = "" }
               /^=+ / { b = b $0 "\n"; next } /panicked|differ|called `Result/ { print }
               END { if (b !~ /nvjet|gemv/) printf "%s", b }' | grep -v "SUMMARY" | head -40 >>"$out/sanitize.txt"
        # Each hazard's kernels (the graph path's cuBLAS calls are not fuse's), counted.
        grep -E "^=+ +(Read|Write) Thread|^=+ +Invalid|^=+ +Uninitialized" -A1 /tmp/sanitize-$tool.txt | grep -oE " at [A-Za-z_][A-Za-z0-9_]*" | sort | uniq -c | sort -rn | head -12 >>"$out/sanitize.txt"
      done
      ;;
    bench)
      FUSE_TUNE_FILE=$(mktemp -d)/t.tsv timeout 150 .gpu/bin/example-bench_decode --batches "${BENCH_BATCHES:-1,16}" \
        --cached "${BENCH_CACHED:-128}" --modes "${BENCH_MODES:-graph,task-graph,generated}" --extras off --steps 48 >"$out/bench.log" 2>&1
      ;;
    prefetch) alternate prefetch.log "${BENCH_CACHED:-128}" FUSE_STEP_PREFETCH=off FUSE_STEP_PREFETCH=on ;;
    params) alternate params.log "${BENCH_CACHED:-128}" FUSE_STEP_SHARED_PARAMS=off FUSE_STEP_SHARED_PARAMS=on ;;
    blocks) alternate blocks.log "${BENCH_CACHED:-128}" FUSE_STEP_BLOCKS_PER_SM=1 FUSE_STEP_BLOCKS_PER_SM=2 ;;
    knobs)
      # KNOBS: settings separated by ';' (each environment assignments separated by spaces), alternated.
      IFS=';' read -r -a settings <<<"${KNOBS:?knobs: set KNOBS='A=1 B=2;A=0'}"
      alternate knobs.log "${BENCH_CACHED:-128}" "${settings[@]}"
      ;;
    splits)
      # SPLITS: floor:one-split-keys pairs (FUSE_STEP_SPLIT_KEYS, FUSE_STEP_ONE_SPLIT_KEYS), at 128 and 1024 cached.
      settings=()
      for pair in ${SPLITS:-64:192 64:0 64:512 256:192}; do
        settings+=("FUSE_STEP_SPLIT_KEYS=${pair%%:*} FUSE_STEP_ONE_SPLIT_KEYS=${pair##*:}")
      done
      alternate splits.log 128,1024 "${settings[@]}"
      ;;
    ab)
      # The generated step from this tree and from each revision built beside it (gpu-bundle.sh REV ...),
      # alternated, twice: what the step's machinery changes did, one number each.
      for round in 1 2; do
        for b in .gpu/bin/example-bench_decode*; do
          echo "== ${b##*/}, round $round" >>"$out/ab.log"
          FUSE_TUNE_FILE=$(mktemp -d)/t.tsv timeout 100 "$b" --batches "${BENCH_BATCHES:-1,16}" --cached "${BENCH_CACHED:-128}" \
            --modes graph,generated --extras off --steps 48 2>&1 | grep -E "^(graph|generated) " >>"$out/ab.log"
        done
      done
      ;;
    taskcheck)
      # The one-launch tests of quantized and small models under each setting of TASKCHECK (';'-separated, each
      # environment assignments), each with a fresh tune file and FUSE_DEBUG=3: the test results, the paths
      # the products took (graph and recorded step, counted) and the tune file's task keys -> OUTDIR/taskcheck.log.
      # For the settings that are off by default (the forty-second session's quantized::cuda failure).
      IFS=';' read -r -a settings <<<"${TASKCHECK:-FUSE_TUNE_TASKS=on;FUSE_QUANT_SCALED=on;FUSE_TUNE_TASKS=on FUSE_QUANT_SCALED=on;FUSE_STEP_ROW_BLOCKS=off}"
      for setting in "${settings[@]}"; do
        tune=$(mktemp -d)/t.tsv
        echo "== $setting" >>"$out/taskcheck.log"
        # shellcheck disable=SC2086 # a setting and the test filters are words
        env $setting FUSE_DEBUG=3 FUSE_TUNE_FILE="$tune" timeout "${TASKCHECK_TIMEOUT:-200}" "$model" \
          ${TASKCHECK_TESTS:-quantized::cuda small_smollm2_bf16::cuda small_smollm2_bf16_batch16::cuda} \
          --test-threads=1 --nocapture >/tmp/taskcheck.txt 2>&1
        grep -v "^fuse: " /tmp/taskcheck.txt | grep -E "^test |test result|activations:|greedy|relative|panicked" >>"$out/taskcheck.log"
        grep -E "^fuse: .*path " /tmp/taskcheck.txt | sed -E 's/^fuse: [^:]*: //; s/ \(tuned: .*//' | sort | uniq -c | sort -rn | head -30 >>"$out/taskcheck.log"
        # Candidates whose largest difference from the tuner's baseline is 1% of the rms or more.
        grep -E "^fuse: .*candidate .* against" /tmp/taskcheck.txt |
          awk '{ for (i = 1; i < NF; i++) if ($i == "difference" && $(i + 1) + 0 >= 0.01) { print; break } }' |
          sort | uniq -c | head -30 >>"$out/taskcheck.log"
        [ -f "$tune" ] && cut -f2-5 "$tune" >>"$out/taskcheck.log"
      done
      ;;
    gate)
      # shellcheck disable=SC2086 # GATE is words
      env ${GATE:?gate: set GATE='A=on'} timeout "${GATE_TEST_TIMEOUT:-300}" "$model" cuda --test-threads=1 --nocapture 2>&1 |
        grep -E "^test |test result|panicked|greedy tokens|choose otherwise|launches become" >>"$out/gate.log"
      for t in ${GATE_TESTS:-small_smollm2_bf16::cuda quantized::cuda}; do
        echo "== $GATE over $t" >>"$out/sanitize.txt"
        # shellcheck disable=SC2086 # GATE is words
        env $GATE SANITIZE_TEST="$t" SANITIZE_TIMEOUT="${SANITIZE_TIMEOUT:-300}" "$0" "$out" sanitize
      done
      ;;
    trace)
      # Where the generated step's time goes (batch 1): scripts/gpu/step-trace.py here reads the file. With
      # FUSE_DEBUG=3: the template and config each product took (its calls before the step is recorded),
      # each distinct line counted, at the end of trace-bench.log.
      FUSE_DEBUG=3 FUSE_STEP_TRACE="$out/trace.tsv" FUSE_TUNE_FILE=$(mktemp -d)/t.tsv timeout 90 .gpu/bin/example-bench_decode \
        --batches 1 --cached "${BENCH_CACHED:-128}" --modes generated --extras off --steps 8 >/tmp/trace-bench.log 2>&1
      grep -v "^fuse: " /tmp/trace-bench.log >"$out/trace-bench.log"
      grep -E "^fuse: .*template" /tmp/trace-bench.log | sed -E 's/^fuse: [^:]*: //' | sort | uniq -c | sort -rn | head -40 >>"$out/trace-bench.log"
      xz -9 "$out/trace.tsv"
      ;;
  esac
done
