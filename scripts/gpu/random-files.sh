#!/usr/bin/env bash
# The two random-weight files the CPU commands on the GPU machine measure, made where missing (make_gguf.py,
# then llama-quantize from .gpu/llamaq.tar.xz): /tmp/smollm2-135m-q4_1.gguf and /tmp/llama-3.2-1b-q4_k_m.gguf.
set -uo pipefail
[ -x .gpu/llamaq/llama-quantize ] || tar -C .gpu -xJf .gpu/llamaq.tar.xz
make() {  # make OUT CONFIG TYPE
  [ -s "$1" ] && return 0
  pip install --no-index --no-deps --target /tmp/site scripts/wheels/gguf-*.whl >/dev/null 2>&1
  PYTHONPATH=/tmp/site python3 .gpu/peers/llama.cpp/make_gguf.py /tmp/$2-f16.gguf --config "$2" --type f16 >/dev/null
  LD_LIBRARY_PATH=.gpu/llamaq .gpu/llamaq/llama-quantize /tmp/$2-f16.gguf "$1" "$3" 8 >/dev/null 2>&1
  rm -f /tmp/$2-f16.gguf
}
make /tmp/smollm2-135m-q4_1.gguf smollm2-135m Q4_1
make /tmp/llama-3.2-1b-q4_k_m.gguf llama-3.2-1b Q4_K_M
