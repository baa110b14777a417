# The peer of examples/bench_sort.rs: torch's topk (then the softmax of the k values) and sort (values and
# indices, descending) over the same bf16 logits, timed the same way (CUDA events around 20 calls, median of
# 5 rounds, after warm-up), eager and under torch.compile.
import torch

def timed(f, rounds=5, calls=20):
    for _ in range(3):
        f()
    out = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            f()
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end) * 1e3 / calls)
    return sorted(out)[len(out) // 2]

def top_k(logits, k):
    values, indices = torch.topk(logits, k, dim=-1)
    return torch.softmax(values.float(), dim=-1), indices

def sort(logits):
    return torch.sort(logits, dim=-1, descending=True)

compiled_top_k = torch.compile(top_k)
print(f"# torch {torch.__version__} | {torch.cuda.get_device_name()}")
print("| vocab | rows | torch topk(50) + softmax (us) | compiled (us) | torch sort (us) |")
print("|---|---|---|---|---|")
for vocab in (49152, 151936):
    for rows in (1, 16):
        i = torch.arange(rows * vocab, device="cuda", dtype=torch.int64)
        logits = (((i * 7919 % 100003).float() / 100003.0 - 0.5) * 20.0).reshape(rows, vocab).bfloat16()
        eager = timed(lambda: top_k(logits, 50))
        compiled = timed(lambda: compiled_top_k(logits, 50))
        s = timed(lambda: sort(logits))
        print(f"| {vocab} | {rows} | {eager:.1f} | {compiled:.1f} | {s:.1f} |")
