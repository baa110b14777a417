#!/usr/bin/env python3
"""Summarise an ncu CSV of examples/bench_decode (scripts/gpu/gpu-profile-decode.sh writes it): the kernels of one
decode step, kernel by kernel in launch order and totalled by name.

A step starts with its embeddings (cos, sin, then the token ids); the step summarised is the last complete
one before the last embedding group, i.e. the last replayed step. ncu serialises the kernels at base clocks
with the caches flushed, so its times are larger than inside a graph; read them as relative costs.

    python3 scripts/gpu/ncu_decode_summary.py ncu.csv [--layers 30]
"""
import argparse
import collections
import csv
import sys


def kernels(path):
    """[{name, metric: value}] in launch order, from ncu's --csv output (other lines skipped)."""
    with open(path, newline="") as fh:
        lines = [line for line in fh if line.startswith('"')]
    by_id = collections.OrderedDict()
    for row in csv.DictReader(lines):
        k = by_id.setdefault(int(row["ID"]), {"name": row["Kernel Name"]})
        try:
            k[row["Metric Name"]] = float(row["Metric Value"].replace(",", ""))
        except ValueError:
            pass
    return list(by_id.values())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("csv")
    p.add_argument("--layers", type=int, default=30)
    a = p.parse_args()
    ks = kernels(a.csv)
    starts = [i for i, k in enumerate(ks) if k["name"] == "fuse_model_embedding"]
    # Three embeddings start a step (cos, sin, ids): the starts of steps are every third.
    steps = starts[::3]
    if len(steps) < 2:
        sys.exit(f"ncu_decode_summary: fewer than two steps in {a.csv} ({len(ks)} kernels)")
    step = ks[steps[-2]:steps[-1]]
    time = "gpu__time_duration.sum"
    total = sum(k.get(time, 0.0) for k in step)
    print(f"one step: {len(step)} kernels, {len(step) / a.layers:.1f} per layer, {total / 1e3:.1f} us under ncu")
    print("first layer, in launch order:")
    per_layer = max(1, (len(step) - 3) // a.layers)
    for k in step[: 3 + per_layer]:
        grid = int(k.get("launch__grid_size", 0))
        print(f"  {k['name'][:60]:60s} {k.get(time, 0.0) / 1e3:7.2f} us  grid {grid}")
    print("by kernel:")
    totals = collections.defaultdict(lambda: [0, 0.0])
    for k in step:
        totals[k["name"][:60]][0] += 1
        totals[k["name"][:60]][1] += k.get(time, 0.0)
    for name, (count, t) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        print(f"  {name:60s} {count:4d} x {t / count / 1e3:6.2f} us = {t / 1e3:8.1f} us ({100 * t / total:4.1f}%)")


if __name__ == "__main__":
    main()
