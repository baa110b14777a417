#!/usr/bin/env python3
"""Copy bandwidth of this machine's memory at THREADS threads, GB/s (bytes read + bytes written over time), the
best of 5 copies of 512 MB split among the threads (numpy's copy releases the GIL). The CPU floor's denominator
in scripts/bench-gguf.sh: the weights read once a token at this rate."""
import sys
import threading
import time

import numpy as np

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
n = 512 * 1024 * 1024 // 8
src, dst = np.ones(n), np.zeros(n)
parts = np.array_split(np.arange(n), threads)
bounds = [(p[0], p[-1] + 1) for p in parts if len(p)]


def copy(lo, hi):
    np.copyto(dst[lo:hi], src[lo:hi])


best = float("inf")
for _ in range(5):
    workers = [threading.Thread(target=copy, args=b) for b in bounds]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    best = min(best, time.perf_counter() - start)
print(f"{2 * n * 8 / best / 1e9:.1f}")
