#!/usr/bin/env python3
"""Bar chart of scripts/bench-gguf.sh tables (its OUT/table.md, or copies in docs/gguf/): for each file, device
and cache fill, fuse's batch-1 decode time and prefill tokens/s as ratios to llama.cpp's in the same command,
beside the issue's decode targets. Writes SVG with no plotting library (none is installed on either machine).

    python3 scripts/plot_gguf.py docs/gguf/h200-2026-12-05.md docs/gguf/gpu-machine-cpu-2026-12-05.md -o docs/gguf/ratios.svg
"""
import argparse
import html
import os
import re
import sys


def number(text):
    return float(text.replace(",", "").strip())


def rows(path):
    """(label, decode ratio, prefill ratio or None) for each data row of a bench-gguf table; labels start with
    the table's file name up to its date (`h200-host-cpu-2026-12-05.md`: `h200-host-cpu`)."""
    machine = re.sub(r"(-\d{4}-\d{2}-\d{2})?\.md$", "", os.path.basename(path))
    out = []
    with open(path) as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 9 or not cells[2].isdigit():
                continue
            name, where, cached = cells[0], cells[1], cells[2]
            fuse, llama = number(cells[3]), number(cells[4])
            prefill = None
            if "/" in cells[8]:
                a, b = (number(x) for x in cells[8].split("/"))
                prefill = b / a if a > 0 else None  # llama.cpp's time over fuse's: lower is better, like decode
            short = name.split(".")[0].replace("-Instruct", "")
            out.append((f"{machine}: {short} {where} {cached}", fuse / llama, prefill))
    return out


def target(label):
    """The issue's decode target for a row as a ratio: 0.6 for the 1b on the GPU, none for SmolLM2 there (its
    target is 500 us), else 0.8 (the CPU rows and the 8B)."""
    if "cuda" in label and "1b" in label:
        return 0.6
    if "cuda" in label and "smollm2" in label.lower():
        return None
    return 0.8


def svg(data, title):
    bar, gap, left, top, width = 14, 10, 420, 40, 420
    # The axis stops at 3x; a longer bar is cut there and its label says how long it is.
    most = 3.0
    scale = width / most
    clip = lambda r: min(r, most)
    height = top + len(data) * (2 * bar + gap) + 40
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 40}" height="{height}" font-family="sans-serif" font-size="12">',
        f'<text x="10" y="20" font-size="14">{html.escape(title)}</text>',
    ]
    for x in (0.5, 1.0, 1.5, 2.0, 2.5, 3.0):
        px = round(left + x * scale, 1)
        parts.append(f'<line x1="{px}" y1="{top - 5}" x2="{px}" y2="{height - 30}" stroke="#ccc"/>')
        parts.append(f'<text x="{px - 8}" y="{height - 15}">{x:.1f}x</text>')
    for i, (label, decode, prefill) in enumerate(data):
        y = top + i * (2 * bar + gap)
        parts.append(f'<text x="10" y="{y + bar + 4}">{html.escape(label)}</text>')
        goal = target(label)
        color = "#888" if goal is None else "#2a7" if decode <= goal else "#c63"
        parts.append(f'<rect x="{left}" y="{y}" width="{clip(decode) * scale:.1f}" height="{bar}" fill="{color}"/>')
        parts.append(f'<text x="{left + clip(decode) * scale + 4:.1f}" y="{y + bar - 3}">decode {decode:.2f}</text>')
        if goal is not None:
            tx = left + goal * scale
            parts.append(f'<line x1="{tx:.1f}" y1="{y - 2}" x2="{tx:.1f}" y2="{y + bar + 2}" stroke="#000" stroke-width="2"/>')
        if prefill is not None:
            color = "#58c" if prefill <= 1.0 else "#c63"
            parts.append(f'<rect x="{left}" y="{y + bar}" width="{clip(prefill) * scale:.1f}" height="{bar - 3}" fill="{color}"/>')
            parts.append(f'<text x="{left + clip(prefill) * scale + 4:.1f}" y="{y + 2 * bar - 5}">prefill {prefill:.2f}</text>')
    parts.append(
        f'<text x="10" y="{height - 2}">time as a multiple of llama.cpp\'s (prefill: its tokens/s over fuse\'s); '
        "black marks: the decode targets (grey: a target in us, not a ratio); green/blue: met</text>"
    )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("tables", nargs="+")
    p.add_argument("-o", "--out", required=True)
    p.add_argument("--title", default="fuse against llama.cpp on the same GGUF files (lower is faster)")
    a = p.parse_args()
    data = [row for path in a.tables for row in rows(path)]
    if not data:
        sys.exit("plot_gguf: no rows in " + ", ".join(a.tables))
    with open(a.out, "w") as f:
        f.write(svg(data, a.title))
    print(f"{a.out}: {len(data)} rows")


if __name__ == "__main__":
    main()
