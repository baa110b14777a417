#!/usr/bin/env python3
"""Plot the Llama MLP benchmark: time (us, log y) against M (log x).

Lines: fuse fused and fuse unfused (from bench_mlp's --json), each peer mode (from torch_mlp.py's --json, any
number of files), and the two floors computed from the bench JSON's ceilings measured in the same run:
bandwidth (weight bytes / copy bandwidth) and compute (MLP FLOPs / 8192^3 matmul rate).

    python3 scripts/gpu/plot_bench.py LOGDIR/bench.json --peers LOGDIR/peers.json -o LOGDIR/mlp.png

Needs matplotlib (a venv: python3 -m venv .venv && .venv/bin/pip install matplotlib).
"""
import argparse
import json
import sys

BYTES_PER_ELEMENT = {"bf16": 2, "bfloat16": 2, "f16": 2, "float16": 2, "f32": 4, "float32": 4}


def load(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError) as e:
        sys.exit(f"plot_bench: cannot read {path}: {e}")


def fuse_series(bench):
    """{label: [(M, us)]} for the project's own paths; rows without a time are skipped."""
    rows = sorted(bench.get("rows", []), key=lambda r: r["m"])
    series = {}
    labels = (
        ("fused_ms", "fuse fused (per call)"),
        ("fused_flushed_ms", "fuse fused (timed as the peers)"),
        ("unfused_ms", "fuse unfused (per call)"),
    )
    for key, label in labels:
        points = [(r["m"], r[key] * 1e3) for r in rows if r.get(key) is not None]
        if points:
            series[label] = points
    return series


def floors(bench):
    """The bandwidth and compute floors (us) at each M of the bench, from its own measured ceilings."""
    h, i = bench["hidden"], bench["inter"]
    elem = BYTES_PER_ELEMENT.get(str(bench.get("dtype", "bf16")).lower(), 2)
    weight_bytes = 3 * h * i * elem
    ms = sorted({r["m"] for r in bench.get("rows", [])})
    out = {}
    if bench.get("copy_bytes_per_s"):
        out["bandwidth floor"] = [(m, weight_bytes / bench["copy_bytes_per_s"] * 1e6) for m in ms]
    if bench.get("matmul_flop_per_s"):
        out["compute floor"] = [(m, 2 * m * 3 * h * i / bench["matmul_flop_per_s"] * 1e6) for m in ms]
    return out


def peer_series(peers):
    """{'torch <mode>': [(batch, us)]}, one line per mode, in the order the modes first appear."""
    series = {}
    for r in peers.get("rows", []):
        series.setdefault(f"torch {r['mode']}", []).append((r["batch"], r["us"]))
    return {k: sorted(v) for k, v in series.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bench", help="bench_mlp --json output")
    p.add_argument("--peers", action="append", default=[], help="torch_mlp.py --json output (repeatable)")
    p.add_argument("-o", "--output", default="mlp_bench.png")
    p.add_argument("--title", default=None)
    a = p.parse_args()

    import matplotlib

    matplotlib.use("Agg")  # no display on the machines this runs on
    import matplotlib.pyplot as plt

    bench = load(a.bench)
    measured = dict(fuse_series(bench))
    for path in a.peers:
        measured.update(peer_series(load(path)))
    if not measured:
        sys.exit(f"plot_bench: no times in {a.bench} or the peers' files")
    fig, ax = plt.subplots(figsize=(9, 6))
    for label, points in measured.items():
        own = label.startswith("fuse")
        ax.plot(*zip(*points), marker="o" if own else ".", linewidth=2.2 if own else 1, alpha=1 if own else 0.8, label=label)
    floor_lines = floors(bench)
    for label, points in floor_lines.items():
        ax.plot(*zip(*points), linestyle="--", color="black" if label.startswith("bandwidth") else "gray", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ms = sorted({m for points in measured.values() for m, _ in points})
    ax.set_xticks(ms, [str(m) for m in ms])
    # The compute floor at M=1 is far below anything measured; start the axis near the interesting range.
    interesting = [us for points in measured.values() for _, us in points]
    interesting += [us for _, us in floor_lines.get("bandwidth floor", [])]
    ax.set_ylim(bottom=0.5 * min(interesting))
    ax.set_xlabel("M (rows of x)")
    ax.set_ylabel("time (us, median)")
    dims = f"{bench.get('hidden')}/{bench.get('inter')} {bench.get('dtype', '')}"
    ax.set_title(a.title or f"Llama MLP {dims} on {bench.get('device', '?')} ({bench.get('arch', '?')})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.output, dpi=120)
    print(f"plot_bench: wrote {a.output}")


if __name__ == "__main__":
    main()
