#!/usr/bin/env python3
"""flat_calib.py: write a calibration file (docs/calibration-format.md, version 2) with flat
statistics for given dims, for kernel benchmarks of codecs that need calib=FILE (tq_split).

`veloxquant bench-kernels` builds caches of 1 layer, 3 query heads and 1 KV head at each head_dim,
which no model's calibration matches. A codec's speed does not depend on which RoPE pairs it gives
more bits, so a flat file serves: every pair has the same energy (tq_split then takes the first
pairs; ties go to the lower pair), unit second moments, zero means, the first basis vector as the
Q-Filter. Never use such a file for quality: it carries no statistics of any model.

  scripts/flat_calib.py --head-dim 64 -o /tmp/flat64.vqc            # bench-kernels' dims
  scripts/flat_calib.py --layers 30 --heads 9 --kv-heads 3 --head-dim 64 -o FILE
"""
import argparse
import struct
import sys
import zlib


def fnv1a64(text: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in text:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--heads", type=int, default=3, help="query heads (bench-kernels: 3)")
    ap.add_argument("--kv-heads", type=int, default=1)
    ap.add_argument("--head-dim", type=int, required=True)
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    L, NH, H, d = a.layers, a.heads, a.kv_heads, a.head_dim
    if not (1 <= L <= 4096 and 1 <= H <= NH <= 4096 and NH % H == 0 and 2 <= d <= 4096 and d % 2 == 0):
        print(f"flat_calib: bad dims layers={L} heads={NH} kv_heads={H} head_dim={d} "
              "(1..4096, heads a multiple of kv_heads, head_dim even)", file=sys.stderr)
        return 2
    name = f"flat-{L}x{NH}x{H}x{d}".encode()
    hdr = bytearray(128)
    hdr[0:8] = b"VQCALIB\0"
    struct.pack_into("<II", hdr, 8, 2, 128)
    hdr[16:16 + len(name)] = name
    struct.pack_into("<Q", hdr, 80, fnv1a64(name))
    struct.pack_into("<6I", hdr, 88, L, NH, H, d, d, 0)
    struct.pack_into("<QI", hdr, 112, 1, 0)
    struct.pack_into("<I", hdr, 124, zlib.crc32(bytes(hdr[:124])))
    kv, q = L * H, L * NH
    f = lambda n, v: struct.pack(f"<{n}f", *([v] * n))
    filt = b"".join(struct.pack(f"<{d}f", 1.0, *([0.0] * (d - 1))) for _ in range(kv))
    data = (f(kv * d // 2, 1.0) + f(kv * d, 0.0) + f(kv * d, 1.0) + f(kv * d, 1.0) +
            f(q * d, 0.0) + f(q * d, 1.0) + filt)
    with open(a.output, "wb") as out:
        out.write(bytes(hdr) + data + struct.pack("<I", zlib.crc32(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
