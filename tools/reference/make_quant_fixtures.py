#!/usr/bin/env python3
"""make_quant_fixtures.py: float rows and the bytes the `gguf` Python package's numpy quantizer
(gguf.quants.quantize) makes of them in Q8_0, Q4_0 and Q4_1, for the library's from_float.

Writes tests/fixtures/quant_gguf.bin, read by tests/kernels/test_quant_fixture.c:
  "VQQFIX01", u32 count, then per record: u32 ggml type id, u32 elements n, u32 bytes nb,
  n little-endian float32 (the input), nb bytes (gguf-py's blocks).
Inputs (numpy default_rng, seed below), 1024 floats per type, 32 blocks: Gaussian blocks at scales
2^-12..2^4, a zero block, a constant block, blocks of small integers (exact ties of the rounding:
x*id lands on k + 0.5), a block with one large outlier, a block whose largest magnitude appears
twice with opposite signs (Q4_0 takes the first), and uniform blocks. All finite: non-finite
input is the library's own convention, not gguf-py's. Run it in a venv with `pip install gguf numpy`:
  python3 tools/reference/make_quant_fixtures.py [--seed 1202] [--out tests/fixtures/quant_gguf.bin]
"""
import argparse
import importlib.metadata
import struct
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

N_ELEMS = 1024


def inputs(rng):
    b = []
    for _ in range(20):
        b.append(rng.standard_normal(32) * np.exp2(rng.uniform(-12, 4)))
    b.append(np.zeros(32))
    b.append(np.full(32, 0.75))
    b.append(rng.integers(-8, 8, size=32).astype(np.float64))            # Q4_0 ties
    b.append(rng.integers(-127, 128, size=32).astype(np.float64) / 2)    # Q8_0 ties at d = 0.5
    o = rng.standard_normal(32) * 0.01
    o[7] = 3.0
    b.append(o)
    t = rng.standard_normal(32) * 0.1
    t[3], t[20] = -0.5, 0.5
    b.append(t)
    while len(b) < N_ELEMS // 32:
        b.append(rng.uniform(-1, 1, size=32))
    return np.concatenate(b).astype(np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1202)
    ap.add_argument("--out", default="tests/fixtures/quant_gguf.bin")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    types = [T.Q8_0, T.Q4_0, T.Q4_1]
    out = [b"VQQFIX01", struct.pack("<I", len(types))]
    for t in types:
        x = inputs(rng)
        q = gguf.quants.quantize(x, t)
        assert q.dtype == np.uint8 and q.size == N_ELEMS // 32 * gguf.GGML_QUANT_SIZES[t][1], t.name
        out += [struct.pack("<III", int(t), N_ELEMS, q.size), x.astype("<f4").tobytes(), q.tobytes()]
        print(f"{t.name}: {N_ELEMS} floats -> {q.size} bytes", file=sys.stderr)
    with open(a.out, "wb") as f:
        f.write(b"".join(out))
    print(f"wrote {a.out} (gguf {importlib.metadata.version('gguf')}, numpy {np.__version__}, seed {a.seed})",
          file=sys.stderr)


if __name__ == "__main__":
    main()
