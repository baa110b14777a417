#!/usr/bin/env python3
"""Peer timings for prefill with SmolLM2-135M's shape (the same model as shared/peers/torch_llama_decode.py:
random bf16 weights, hidden 576, 30 layers, 9 query and 3 key/value heads of 64, vocabulary 49152), so that
examples/bench_decode's prefill line (tokens/s of a --prompt-token prompt at batch 1, call by call) has peers
from the same device command. The target (BENCHMARKS.md): prefill faster than every peer.

Modes (each: the median of --reps timed forwards after warm-up, the cache filled as a generate call fills it,
logits of the last position only, as a decoder's prefill needs):
  eager     LlamaForCausalLM's forward with the default dynamic cache (transformers' default attention, sdpa)
  compiled  the same forward under torch.compile (default mode: Inductor's fused kernels, no CUDA graph, since a
            prompt's length changes from call to call)
Run on the GPU machine:  python3 scripts/gpu/peer_prefill.py --prompt 512 --json OUT/prefill_peers.json
"""
import argparse
import json
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--prompt", type=int, default=512)
p.add_argument("--modes", default="eager,compiled")
p.add_argument("--reps", type=int, default=5)
p.add_argument("--json", default=None)
a = p.parse_args()

import transformers
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
cfg = LlamaConfig(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                  num_key_value_heads=3, head_dim=64, vocab_size=49152, max_position_embeddings=8192,
                  rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, torch_dtype=torch.bfloat16)
model = LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
print(f"transformers {transformers.__version__}, torch {torch.__version__}, prefill of {a.prompt} tokens, batch 1")
ids = torch.randint(0, cfg.vocab_size, (1, a.prompt), device="cuda")


def prefill(forward):
    with torch.no_grad():
        return forward(input_ids=ids, past_key_values=DynamicCache(), use_cache=True, logits_to_keep=1).logits


def median_seconds(forward):
    for _ in range(3):
        prefill(forward)
    torch.cuda.synchronize()
    times = []
    for _ in range(a.reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        prefill(forward)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


results = []
for mode in a.modes.split(","):
    if mode == "eager":
        forward = model
    elif mode == "compiled":
        forward = torch.compile(model)
    else:
        raise SystemExit(f"unknown mode {mode}: eager or compiled")
    started = time.perf_counter()
    seconds = median_seconds(forward)
    tps = a.prompt / seconds
    print(f"{mode:<9} prefill {a.prompt} tokens: {seconds * 1e3:8.2f} ms, {tps:10.0f} tokens/s"
          f"  (set-up and timing {time.perf_counter() - started:.1f} s)")
    results.append({"mode": mode, "prompt": a.prompt, "ms": seconds * 1e3, "tokens_per_s": tps})
if a.json:
    with open(a.json, "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__, "prefill": results}, f, indent=1)
