#!/usr/bin/env python3
"""make_wtype_fixtures.py: random blocks of every quantized weight type we read, and the floats the
`gguf` Python package's numpy dequantize (gguf.quants.dequantize) makes of them.

Writes tests/fixtures/wtypes_gguf.bin, read by tests/kernels/test_wtypes_fixture.c:
  "VQWTFIX1", u32 count, then per type: u32 ggml type id, u32 elements n, u32 bytes nb,
  nb bytes of blocks, n little-endian float32 (the expected to_float output).
Blocks: random bytes (numpy default_rng, seed below), then each fp16 scale field overwritten with a
finite value (sign random, magnitude 2^-12..2^2) so no NaN/Inf reaches the comparison; the first
block of every type is all-ones bytes and the second all-zero bytes (before the scale overwrite)
to hit the extreme codes and scales. Run it in a venv with `pip install gguf numpy`:
  python3 tools/reference/make_wtype_fixtures.py [--seed 1201] [--out tests/fixtures/wtypes_gguf.bin]
"""
import argparse
import importlib.metadata
import struct
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

# type -> byte offsets of its fp16 scale fields inside one block (ggml layouts)
F16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.IQ4_NL: [0], T.IQ4_XS: [0],
}
N_ELEMS = 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1201)
    ap.add_argument("--out", default="tests/fixtures/wtypes_gguf.bin")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    out = [b"VQWTFIX1", struct.pack("<I", len(F16_FIELDS))]
    for t, fields in F16_FIELDS.items():
        blk, bb = gguf.GGML_QUANT_SIZES[t]
        nblk = N_ELEMS // blk
        raw = rng.integers(0, 256, size=(nblk, bb), dtype=np.uint8)
        raw[0, :] = 0xFF
        raw[1, :] = 0x00
        for off in fields:
            mag = np.exp2(rng.uniform(-12, 2, size=nblk))
            sgn = np.where(rng.integers(0, 2, size=nblk) == 1, -1.0, 1.0)
            h = (mag * sgn).astype(np.float16)
            raw[:, off:off + 2] = h.view(np.uint8).reshape(nblk, 2)
        y = gguf.quants.dequantize(raw.reshape(-1), t).astype(np.float32).reshape(-1)
        assert y.size == N_ELEMS and np.all(np.isfinite(y)), t.name
        out += [struct.pack("<III", int(t), N_ELEMS, raw.size), raw.tobytes(), y.astype("<f4").tobytes()]
        print(f"{t.name}: {nblk} blocks of {blk}, {bb} bytes each", file=sys.stderr)
    with open(a.out, "wb") as f:
        f.write(b"".join(out))
    print(f"wrote {a.out} (gguf {importlib.metadata.version('gguf')}, numpy {np.__version__}, seed {a.seed})",
          file=sys.stderr)


if __name__ == "__main__":
    main()
