#!/usr/bin/env python3
"""Summarises `FUSE_DEBUG=3` tuning output of examples/tune_mlp: per M and group, the fastest candidate of
each family (cuBLAS/cuBLASLt, skinny template, wgmma template) in microseconds, and the path chosen.
Usage: scripts/gpu/tune_table.py LOG"""
import re, sys

pending = []
print(f"{'M':>6} {'group':>5} {'library':>20} {'skinny':>24} {'wgmma':>20}  chosen")
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"fuse: \w+: path (\S+) \(tuned: (.*)\)\s*$", line)
    if m:
        best = {}
        for name, t in re.findall(r"(\S+) ([0-9.]+) us", m.group(2)):
            family = name.split(":")[0] if name.startswith(("skinny", "wgmma")) else "library"
            if family not in best or float(t) < best[family][1]:
                best[family] = (name, float(t))
        group = "dual" if "cublas:split" in m.group(2) else "one"
        pending.append((group, best, m.group(1)))
    done = re.match(r"M=\s*(\d+): tuned", line)
    if done:
        for group, best, chosen in pending:
            cell = lambda f: f"{best[f][0]} {best[f][1]:.1f}" if f in best else "-"
            print(f"{done.group(1):>6} {group:>5} {cell('library'):>20} {cell('skinny'):>24} {cell('wgmma'):>20}  {chosen}")
        pending = []
