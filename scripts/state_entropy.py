#!/usr/bin/env python3
"""state_entropy.py: how much smaller a session state's packed KV codes would be with CacheGen-style
per-channel entropy coding (issue 33), measured before any format change.

For each KV spec it prefills the first N tokens of a text into a session (the Python bindings over
libveloxquant), saves the state (vq_session_save: the cache's packed codes exactly as stored) and
parses the KV stream (docs/state-format.md, "The KV stream"). Every code byte is assigned a
channel: (group, side K|V, byte offset inside the codec's block); for f16 a block is one row of one
head, so a channel is one half of one head-dim element. Per channel it reports

  - adaptive: the bits an adaptive order-0 arithmetic (or rANS with adaptive frequencies) coder
    would emit, Laplace-estimated (counts start at 1): log2((N+255)!/255!) - sum_s log2(n_s!),
    the exact code length of that model up to the coder's few bytes of flush (counted as 4 per
    channel here); nothing to transmit besides the stream;
  - static: the order-0 entropy N * H(p) of the channel's own histogram (a lower bound for any
    order-0 coder, which would also have to carry its table);
  - order-1: the adaptive model conditioned on the same channel's byte in the previous row (the
    token before, in storage order): CacheGen's observation that neighbouring tokens' values are
    close, as a context instead of a delta.

Ratios are packed code bytes / coded bytes (codes only: positions, window and sink rows, headers
are excluded and given separately). Run from the repository root:

  VELOXQUANT_LIB=build/libveloxquant.so PYTHONPATH=python .venv-ref/bin/python \
      scripts/state_entropy.py --tokens 1024 --kv q4_0 --kv turboquant_mse:k=4,v=4 --kv f16
"""
import argparse
import json
import math
import os
import struct
import sys
import tempfile

import numpy as np


def lfact(n):
    return math.lgamma(n + 1) / math.log(2)


LF = None


def lfact_table(n):
    global LF
    if LF is None or LF.size < n + 2:
        LF = np.concatenate([[0.0], np.cumsum(np.log2(np.arange(1, n + 2, dtype=np.float64)))])
    return LF


def order1_bits(v):
    """adaptive Laplace bits of v[1:] with the previous byte as context (+ 8 bits for v[0])"""
    if v.size < 2:
        return 8.0 * v.size
    c = np.bincount(v[:-1].astype(np.int64) * 256 + v[1:], minlength=65536).reshape(256, 256)
    t = lfact_table(int(v.size) + 256)
    n = c.sum(axis=1).astype(np.int64)
    used = n > 0
    return 8.0 + float((t[n[used] + 255] - t[255]).sum() - t[c[used].astype(np.int64)].sum())


def adaptive_bits(counts):
    n = int(counts.sum())
    return lfact(n + 255) - lfact(255) - sum(lfact(int(c)) for c in counts if c > 1)


def static_bits(counts):
    n = counts.sum()
    p = counts[counts > 0] / n
    return float(-(counts[counts > 0] * np.log2(p)).sum())


def parse_kv_stream(b, off):
    """-> dict channel -> bytearray of code bytes, plus byte totals"""
    assert b[off:off + 8] == b"VQKVSTR1", "not a KV stream"
    off += 8
    ver, sl = struct.unpack_from("<II", b, off)
    off += 8 + sl
    n_layers, n_heads, n_kv, hd, max_ctx = struct.unpack_from("<5I", b, off)
    off += 20 + 8
    (n_groups,) = struct.unpack_from("<I", b, off)
    off += 4
    chans = {}
    other = 0
    for gi in range(n_groups):
        lay = struct.unpack_from("<10I", b, off)
        off += 40
        nl, P, rk, rv, R, S, wprec, kbb, vbb, _crc = lay
        if wprec == 8:
            wb = n_kv * (hd // 32) * 34
        else:
            wb = n_kv * hd * (2 if wprec == 16 else 4)
        for _ in range(nl):
            layer, n_coded, n_win, n_sink = struct.unpack_from("<4I", b, off)
            off += 16
            left = n_coded
            while left > 0:
                u = min(P, left)
                off += 4 + 4 * u
                other += 4 + 4 * u
                for h in range(n_kv):
                    for side, rpb, bb in ((0, rk, kbb), (1, rv, vbb)):
                        nb = u // rpb
                        blk = np.frombuffer(b, dtype=np.uint8, count=nb * bb, offset=off).reshape(nb, bb)
                        off += nb * bb
                        for j in range(bb):
                            chans.setdefault((gi, side, j), []).append(blk[:, j])
                left -= u
            extra = n_win * 4 + 2 * n_win * wb + n_sink * 4 + 2 * n_sink * wb
            off += extra
            other += extra
    return {k: np.concatenate(v) for k, v in chans.items()}, other, off


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--text", default="../shared/data/wikitext-2-raw-test.txt")
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--kv", action="append", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
    import veloxquant as vq

    out = []
    with vq.Model(a.model, threads=a.threads) as m:
        ids = m.encode(open(a.text, encoding="utf-8").read()[: a.tokens * 12], add_bos=False)[: a.tokens]
        assert len(ids) == a.tokens, "text too short"
        for spec in a.kv:
            with m.session(kv=spec, n_ctx=a.tokens + 16, kv_seed=1) as s:
                s.decode(ids)
                with tempfile.TemporaryDirectory() as d:
                    p = os.path.join(d, "s.vqs")
                    s.save(p)
                    b = open(p, "rb").read()
            (spec_len,) = struct.unpack_from("<I", b, 120)
            (n_tok,) = struct.unpack_from("<I", b, 108)
            (flags,) = struct.unpack_from("<I", b, 12)
            (n_vocab,) = struct.unpack_from("<I", b, 72)
            off = 132 + spec_len + 4 * n_tok + (4 * n_vocab if flags & 1 else 0)
            chans, other, end = parse_kv_stream(b, off)
            assert end == len(b) - 4, f"{spec}: KV stream ends at {end}, file at {len(b) - 4}"
            code = sum(v.size for v in chans.values())
            ad = st = o1 = 0.0
            for v in chans.values():
                c = np.bincount(v, minlength=256).astype(np.float64)
                ad += adaptive_bits(c) / 8 + 4
                st += static_bits(c) / 8
                o1 += order1_bits(v) / 8 + 4
            r = dict(kv=spec, tokens=a.tokens, file_bytes=len(b), code_bytes=code, other_stream_bytes=other,
                     channels=len(chans), adaptive_bytes=round(ad), static_bytes=round(st),
                     order1_bytes=round(o1), ratio_adaptive=code / ad, ratio_static=code / st,
                     ratio_order1=code / o1)
            out.append(r)
            print(f"{spec:28s} codes {code:9d} B in {len(chans):4d} channels: adaptive order-0 {ad:10.0f} B "
                  f"(x{code / ad:.3f}), static entropy {st:10.0f} B (x{code / st:.3f}), order-1 adaptive {o1:10.0f} B "
                  f"(x{code / o1:.3f}); file {len(b)} B")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
