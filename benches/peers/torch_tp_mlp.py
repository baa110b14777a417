#!/usr/bin/env python3
"""PyTorch's tensor-parallel Llama-3-8B MLP, the peer of fuse's `examples/bench_tp.rs` (issue 34): one process a
GPU (torch.distributed, NCCL), Megatron's sharding (gate and up by rows, down by columns, an all-reduce of the
output), the step captured in a torch.cuda.CUDAGraph (the all-reduce inside it) and replayed back to back,
timed with CUDA events (calls in a row divided by their number, the median of rounds). Rank 0 prints one line
per M and, with --json, writes them.

Run on the 2-GPU machine:
    NCCL_NVLS_ENABLE=0 torchrun --nproc_per_node=2 benches/peers/torch_tp_mlp.py --ms 1,4,16,64,256,1024,4096
(--nproc_per_node=1 gives the 1-GPU time of the same code, its all-reduce a no-op.)
"""
import argparse, json, os, statistics
import torch
import torch.distributed as dist
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--hidden", type=int, default=4096)
p.add_argument("--inter", type=int, default=14336)
p.add_argument("--ms", default="1,4,16,64,256,1024,4096")
p.add_argument("--calls", type=int, default=20)
p.add_argument("--rounds", type=int, default=5)
p.add_argument("--json", default=None)
a = p.parse_args()

rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
dist.init_process_group("nccl")
dev, dt, H, I = "cuda", torch.bfloat16, a.hidden, a.inter
assert I % world == 0, f"{I} columns in {world} ranks"
g = torch.Generator(device="cpu").manual_seed(0)
# The whole weights made alike on every rank, then each keeps its part.
wg, wu, wd = (torch.randn(s, generator=g) * 0.02 for s in [(I, H), (I, H), (H, I)])
part = slice(rank * I // world, (rank + 1) * I // world)
wg, wu, wd = (w.to(dev, dt).contiguous() for w in (wg[part], wu[part], wd[:, part]))


def mlp(x):
    y = (F.silu(x @ wg.T) * (x @ wu.T)) @ wd.T
    dist.all_reduce(y)
    return y


rows = []
for m in [int(v) for v in a.ms.split(",")]:
    x = torch.randn(m, H, device=dev, dtype=dt)
    for _ in range(3):
        mlp(x)  # warm-up outside the capture (NCCL's and cuBLAS's set-up)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mlp(x)
    for _ in range(3):
        graph.replay()
    times = []
    for _ in range(a.rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(a.calls):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / a.calls)
    us = torch.tensor([statistics.median(times)], device=dev)
    dist.all_reduce(us, op=dist.ReduceOp.MAX)  # the slowest rank's
    rows.append({"m": m, "world": world, "us": us.item()})
    if rank == 0:
        print(f"torch tensor-parallel MLP, {world} GPU(s), M={m}: {us.item():.1f} us", flush=True)
if rank == 0 and a.json:
    with open(a.json, "w") as f:
        json.dump({"peer": "torch_tp_mlp", "graph": True, "rows": rows}, f, indent=1)
dist.destroy_process_group()
