#!/usr/bin/env bash
# The SASS of a hand-written model kernel, without a GPU: NVRTC's PTX (examples/kernel_ptx.rs), assembled by
# ptxas for the arch, disassembled by cuobjdump; then ptxas's report and how many instructions of each kind.
#   scripts/sass.sh OUTDIR KERNEL [--dtype bf16] [--arch sm_90] [-DNAME=VALUE ...]
# e.g. scripts/sass.sh /tmp/sass fuse_model_attention_decode -DFUSE_ATTENTION_D=64 -DFUSE_DECODE_ROPE=1
# Writes OUTDIR/kernel.{ptx,cubin,sass}. cuobjdump and nvdisasm come from their PyPI wheels (into .deps/sass).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/sass.sh OUTDIR KERNEL [args for examples/kernel_ptx]}
shift
arch=sm_90
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do [ "${args[$i]}" = --arch ] && arch=${args[$((i + 1))]}; done
# shellcheck source=scripts/cuda-tools.sh
source scripts/cuda-tools.sh >/dev/null
tools=.deps/sass
if ! ls "$tools"/nvidia/cu*/bin/nvdisasm >/dev/null 2>&1; then
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$tools" \
        "nvidia-cuda-cuobjdump==13.*" "nvidia-cuda-nvdisasm==13.*"
fi
bin=$(dirname "$(ls -1 "$tools"/nvidia/cu*/bin/cuobjdump | sort | tail -n 1)")
mkdir -p "$out"
cargo run --quiet --example kernel_ptx -- "$@" >"$out/kernel.ptx"
"$FUSE_PTXAS" -arch="$arch" -O3 -v "$out/kernel.ptx" -o "$out/kernel.cubin" 2>&1 | grep -E "registers|stack|spill"
PATH="$bin:$PATH" cuobjdump -sass "$out/kernel.cubin" >"$out/kernel.sass"
# One line per instruction: /*offset*/ [@predicate] OPCODE.modifiers operands ;
grep -E '^\s+/\*[0-9a-f]{4,}\*/' "$out/kernel.sass" | sed -E 's/^\s+\/\*[0-9a-f]+\*\/\s+(@!?U?P[0-9T] )?//' |
    awk '{print $1}' | sed 's/\..*//;s/;//' | sort | uniq -c | sort -rn >"$out/opcodes.txt"
echo "$(awk '{n += $1} END {print n}' "$out/opcodes.txt") instructions; the most frequent:"
head -12 "$out/opcodes.txt"
