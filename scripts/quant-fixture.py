#!/usr/bin/env python3
"""Writes fuse-ir/tests/data/quant_blocks.bin: random blocks of each GGUF block type fuse reads and their values
as gguf-py (the `gguf` package that llama.cpp publishes, a reference written elsewhere) dequantizes them.

    pip install --no-index --no-deps --target /tmp/gguf-py scripts/wheels/gguf-*.whl   # and numpy
    PYTHONPATH=/tmp/gguf-py python3 scripts/quant-fixture.py

The file (little-endian): b"FUSEQ1\\0\\0", u32 entries; each entry: the type's name (8 bytes, NUL-padded), u32
blocks, the blocks' bytes, then their values as f32. Seeded: the same file every run.
"""
import struct
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

# name, gguf type, elements and bytes a block, the byte offsets of its f16 scales (d first), blocks written.
TYPES = [
    ("Q4_0", T.Q4_0, 32, 18, [0], 7),
    ("Q4_1", T.Q4_1, 32, 20, [0, 2], 7),
    ("Q5_0", T.Q5_0, 32, 22, [0], 7),
    ("Q5_1", T.Q5_1, 32, 24, [0, 2], 7),
    ("Q8_0", T.Q8_0, 32, 34, [0], 7),
    ("Q4_K", T.Q4_K, 256, 144, [0, 2], 3),
    ("Q5_K", T.Q5_K, 256, 176, [0, 2], 3),
    ("Q6_K", T.Q6_K, 256, 210, [208], 3),
]


def main() -> None:
    rng = np.random.default_rng(20261202)
    out = bytearray(b"FUSEQ1\0\0" + struct.pack("<I", len(TYPES)))
    for name, qtype, elements, nbytes, scales, blocks in TYPES:
        data = rng.integers(0, 256, size=(blocks, nbytes), dtype=np.uint8)
        for b in range(blocks):
            for k, at in enumerate(scales):
                # d (the first) of either sign for the plain types, positive for the K types' super-block
                # scale; mins positive; the last block's d is 0 (all its values 0, or -min).
                v = rng.uniform(1e-3, 5e-2) * (rng.choice([-1.0, 1.0]) if k == 0 and elements == 32 else 1.0)
                if b == blocks - 1 and k == 0:
                    v = 0.0
                data[b, at : at + 2] = np.frombuffer(np.float16(v).tobytes(), dtype=np.uint8)
        values = dequantize(data.reshape(-1), qtype).astype(np.float32).reshape(-1)
        assert values.size == blocks * elements and np.isfinite(values).all(), name
        out += name.encode().ljust(8, b"\0") + struct.pack("<I", blocks) + data.tobytes() + values.tobytes()
    path = Path(__file__).resolve().parent.parent / "fuse-ir/tests/data/quant_blocks.bin"
    path.write_bytes(bytes(out))
    print(f"quant-fixture: {path} ({len(out)} bytes, {len(TYPES)} types)", file=sys.stderr)


if __name__ == "__main__":
    main()
