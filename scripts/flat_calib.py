#!/usr/bin/env python3
"""flat_calib.py: write a calibration file (docs/calibration-format.md, version 3, or 5 with
--vecinfer) with flat statistics for given dims, for kernel benchmarks of codecs that need
calib=FILE (tq_split, vecinfer).

`veloxquant bench-kernels` builds caches of 1 layer, 3 query heads and 1 KV head at each head_dim,
which no model's calibration matches. A codec's speed does not depend on which RoPE pairs it gives
more bits, so a flat file serves: every pair has the same energy (tq_split then takes the first
pairs; ties go to the lower pair), unit second moments, zero means, the first basis vector as the
Q-Filter. Never use such a file for quality: it carries no statistics of any model.

  scripts/flat_calib.py --head-dim 64 -o /tmp/flat64.vqc            # bench-kernels' dims
  scripts/flat_calib.py --layers 30 --heads 9 --kv-heads 3 --head-dim 64 -o FILE
  scripts/flat_calib.py --head-dim 64 --vecinfer model.vqc:12:0 -o /tmp/vi64.vqc

--vecinfer FILE:LAYER:HEAD copies the VecInfer section's λ and codebooks of that layer and KV head of
a real calibration file (same head_dim) to every layer and KV head of the flat file, so the codec
runs on trained codebooks (its speed does not depend on them; its codes' spread does a little).
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
    ap.add_argument("--vecinfer", help="FILE:LAYER:HEAD of a version 4 calibration to copy codebooks from")
    a = ap.parse_args()
    L, NH, H, d = a.layers, a.heads, a.kv_heads, a.head_dim
    if not (1 <= L <= 4096 and 1 <= H <= NH <= 4096 and NH % H == 0 and 2 <= d <= 4096 and d % 2 == 0):
        print(f"flat_calib: bad dims layers={L} heads={NH} kv_heads={H} head_dim={d} "
              "(1..4096, heads a multiple of kv_heads, head_dim even)", file=sys.stderr)
        return 2
    name = f"flat-{L}x{NH}x{H}x{d}".encode()
    hdr = bytearray(128)
    hdr[0:8] = b"VQCALIB\0"
    struct.pack_into("<II", hdr, 8, 5 if a.vecinfer else 3, 128)
    hdr[16:16 + len(name)] = name
    struct.pack_into("<Q", hdr, 80, fnv1a64(name))
    struct.pack_into("<6I", hdr, 88, L, NH, H, d, d, 0)
    struct.pack_into("<QI", hdr, 112, 1, 0)
    struct.pack_into("<I", hdr, 124, zlib.crc32(bytes(hdr[:124])))
    kv, q = L * H, L * NH
    f = lambda n, v: struct.pack(f"<{n}f", *([v] * n))
    filt = b"".join(struct.pack(f"<{d}f", 1.0, *([0.0] * (d - 1))) for _ in range(kv))
    data = (f(kv * d // 2, 1.0) + f(kv * d, 0.0) + f(kv * d, 1.0) + f(kv * d, 1.0) +
            f(q * d, 0.0) + f(q * d, 1.0) + filt + f(L, 1.0))
    if a.vecinfer:   # version 5 = version 4 (low-rank arrays, zero here) + the section
        data += f(kv * d, 0.0) + f(kv * d * d, 0.0) * 2 + f(kv * d, 0.0) + f(kv * d * d, 0.0)
    sec = b""
    if a.vecinfer:
        path, layer, head = a.vecinfer.rsplit(":", 2)
        layer, head = int(layer), int(head)
        src = open(path, "rb").read()
        if src[:8] != b"VQCALIB\0" or struct.unpack_from("<I", src, 8)[0] != 5:
            print(f"flat_calib: {path} is not a version 5 calibration (no VecInfer section)", file=sys.stderr)
            return 2
        sL, sNH, sH, sd = struct.unpack_from("<4I", src, 88)
        if sd != d or not (0 <= layer < sL and 0 <= head < sH):
            print(f"flat_calib: {path} has head_dim {sd}, {sL} layers, {sH} KV heads", file=sys.stderr)
            return 2
        base = 128 + 4 * (sL * sH * (d // 2) + 4 * sL * sH * d + 2 * sL * sNH * d + sL +
                          sL * sH * (2 * d + 3 * d * d)) + 4
        tag, sk, sv, cb, res, seed = struct.unpack_from("<8sIIIIQ", src, base)
        n = sL * sH * d
        kh = layer * sH + head
        o = base + 32
        lam = src[o + 4 * kh * d: o + 4 * (kh + 1) * d]
        o += 4 * n
        cbk = src[o + 4 * kh * d * cb: o + 4 * (kh + 1) * d * cb]
        o += 4 * n * cb
        cbv = src[o + 4 * kh * d * cb: o + 4 * (kh + 1) * d * cb]
        body = struct.pack("<8sIIIIQ", tag, sk, sv, cb, res, seed) + lam * kv + cbk * kv + cbv * kv
        sec = body + struct.pack("<I", zlib.crc32(body))
    with open(a.output, "wb") as out:
        out.write(bytes(hdr) + data + struct.pack("<I", zlib.crc32(data)) + sec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
