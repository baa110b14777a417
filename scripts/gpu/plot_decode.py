#!/usr/bin/env python3
"""Plot the SmolLM2 decode benchmark: us per decode step against the batch, one panel per cache fill.

Lines: each fuse mode of examples/bench_decode's --json (graph, calls, unfused), each peer mode of
shared/peers/torch_llama_decode.py's --json (measured at its own prompt length), the floor (weights and cache
read once at 4.2 TB/s, from the bench JSON) and the issue's bar at batch 1 (300 us).

    python3 scripts/gpu/plot_decode.py LOGDIR/bench.json --peers LOGDIR/peers.json -o LOGDIR/decode.png

Needs matplotlib (a venv: python3 -m venv .venv && .venv/bin/pip install matplotlib).
"""
import argparse
import sys

from plot_bench import load

BAR_US = 300.0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bench")
    p.add_argument("--peers", action="append", default=[])
    p.add_argument("-o", "--output", default="decode_bench.png")
    a = p.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bench = load(a.bench)
    rows = bench.get("decode", [])
    fills = sorted({r["cached"] for r in rows})
    if not fills:
        sys.exit("plot_decode: the bench JSON has no decode rows")
    peers = [row for path in a.peers for row in load(path).get("rows", [])]
    fig, axes = plt.subplots(1, len(fills), figsize=(6 * len(fills), 4.5), sharey=True, squeeze=False)
    for ax, cached in zip(axes[0], fills):
        at = [r for r in rows if r["cached"] == cached]
        for mode in sorted({r["mode"] for r in at}):
            points = sorted((r["batch"], r["us_per_token"]) for r in at if r["mode"] == mode)
            ax.plot(*zip(*points), marker="o", label=f"fuse {mode}")
        floor = sorted({(r["batch"], r["floor_us"]) for r in at})
        ax.plot(*zip(*floor), linestyle=":", color="gray", label="floor (4.2 TB/s)")
        for mode in sorted({r["mode"] for r in peers}):
            points = sorted((r["batch"], r["us_per_token"]) for r in peers if r["mode"] == mode)
            ax.plot(*zip(*points), marker="s", linestyle="--", label=f"peer {mode}")
        ax.axhline(BAR_US, color="red", linewidth=0.8, label="bar at batch 1 (300 us)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch (sequences decoded together)")
        ax.set_title(f"{cached} cached positions, {bench.get('dtype', '')} on {bench.get('device', '')}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("us per decode step")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.output, dpi=110)
    print(f"plot_decode: wrote {a.output}")


if __name__ == "__main__":
    main()
