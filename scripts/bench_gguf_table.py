#!/usr/bin/env python3
"""The table of scripts/bench-gguf.sh from its OUT folder: per file and device/threads, fuse's and llama.cpp's
batch-1 decode us a token at 128 and 1024 cached, the ratio (fuse's time over llama.cpp's), prefill tokens/s
of both, fuse's resident weight bytes against the file's, and the floor."""
import glob
import json
import os
import sys

out = sys.argv[1]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


print("| file | where | cached | fuse us/token | llama.cpp us/token | ratio | floor us | fuse x floor | "
      "prefill fuse / llama.cpp tokens/s | fuse weights MB / file MB |")
print("|---|---|---|---|---|---|---|---|---|---|")
for run_path in sorted(glob.glob(os.path.join(out, "run-*.json"))):
    run = load(run_path)
    tag = run["tag"]
    fuse = load(os.path.join(out, f"fuse-{tag}.json")) or {}
    llama = load(os.path.join(out, f"llama-{tag}.json")) or []
    name, where = tag.rsplit("-", 2)[0], "-".join(tag.rsplit("-", 2)[1:])
    decode = {d["cached"]: d for d in fuse.get("decode", [])}
    tg = {r["n_depth"]: 1e6 / r["avg_ts"] for r in llama if r.get("n_gen", 0) > 0}
    pp = next((r["avg_ts"] for r in llama if r.get("n_prompt", 0) > 0 and r.get("n_depth") == 0), None)
    prefill = (fuse.get("prefill") or {}).get("tokens_per_s")
    weights = fuse.get("weight_bytes")
    for cached in (128, 1024):
        d = decode.get(cached)
        us = d["us_per_token"] if d else None
        floor = d["floor_us"] if d else None
        ref = tg.get(cached)
        fmt = lambda v, p=1: "-" if v is None else f"{v:,.{p}f}"
        ratio = f"{us / ref:.2f}" if us and ref else "-"
        x_floor = f"{us / floor:.2f}" if us and floor else "-"
        pre = f"{fmt(prefill, 0)} / {fmt(pp, 0)}" if cached == 128 else ""
        wb = f"{fmt(weights / 1e6 if weights else None)} / {run['file_bytes'] / 1e6:,.1f}" if cached == 128 else ""
        print(f"| {name} | {where} | {cached} | {fmt(us)} | {fmt(ref)} | {ratio} | {fmt(floor)} | {x_floor} | {pre} | {wb} |")
