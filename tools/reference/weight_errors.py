#!/usr/bin/env python3
"""weight_errors.py: how far re-quantized weight matrices are from their source, two ways, for
files that re-code some matrices of a source model and keep every other tensor byte for byte (the
equal-bits comparison of docs/weights-tqw.md: only ffn_down re-coded, by `veloxquant quantize` or
by llama.cpp's llama-quantize).

For each candidate file, the tensors whose bytes differ from the source's are the re-coded ones
(every other tensor must be identical: checked, and listed when not). For each re-coded matrix W
(the source's dequantized floats) and Ŵ (the candidate's):
  - rel_rms  = ‖Ŵ − W‖ / ‖W‖ (Frobenius);
  - rel_out  = ‖(Ŵ − W) Xᵀ‖ / ‖W Xᵀ‖, X the matrix's real inputs (one row per token) in an
    independent float64 forward pass of the source model (tools/reference/smollm2_numpy.py or
    gemma3_numpy.py) over a calibration text: the error of the matrix's output on real
    activations, which weights the error by the activations' second moments (what matters for
    the model's output), not by the weights alone.
Aggregates over all re-coded matrices: sqrt(Σ‖ΔW‖² / Σ‖W‖²) and sqrt(Σ‖ΔW Xᵀ‖² / Σ‖W Xᵀ‖²).

Dequantization: gguf-py's `gguf.quants.dequantize` for ggml's types; VeloxQuant's tqw4/3/2
(absent from gguf-py) by this file's own decoder written from docs/weights-tqw.md's byte layout
(codes -> d·L[c] -> the inverse rotation D·H/8), independent of the C code. Files are read with
bench/gguf_lite.py (a reservoir's tensor types are not gguf-py's).

Tokens: `veloxquant tokenize` (the C tokenizer, tested against the reference tokenizers), the
first --calib-tokens of the text in windows of --ctx (no BOS for SmolLM2, BOS first for Gemma).

  .venv-ref/bin/python tools/reference/weight_errors.py --source models/SmolLM2-135M-Instruct.Q4_1.gguf \
      --json out.json LABEL=FILE [LABEL=FILE ...]
(venv: python3 -m venv .venv-ref && .venv-ref/bin/pip install numpy gguf)
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import gguf

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "bench"))
import gguf_lite  # noqa: E402

# docs/weights-tqw.md: int8 level tables, the sign word of D, block bytes
TQW_LEVELS = {0x10004: [-127, -96, -75, -58, -44, -31, -18, -6, 6, 18, 31, 44, 58, 75, 96, 127],
              0x10003: [-127, -79, -45, -14, 14, 45, 79, 127],
              0x10002: [-127, -38, 38, 127]}
TQW_SIGNS = 0x33520de2b1611190


def hadamard(n):
    h = np.array([[1.0]])
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


def tqw_dequant(raw, ttype, rows, cols):
    """rows x cols float64 from tqw blocks (64 weights per block)."""
    bb = gguf_lite.LAYOUT[ttype][1]
    b = np.frombuffer(raw, dtype=np.uint8).reshape(rows * cols // 64, bb)
    d = b[:, 0:4].copy().view(np.float16).astype(np.float64)            # (nb, 2): d[0], d[1]
    i = np.arange(64)
    if ttype == 0x10004:
        qs = b[:, 4:36]
        c = np.concatenate([qs & 15, qs >> 4], axis=1)
    elif ttype == 0x10003:
        ql = b[:, 4:20]
        qh = b[:, 20:28].copy().view("<u8")[:, 0]
        low = (ql[:, i & 15] >> (2 * (i >> 4))) & 3
        high = (qh[:, None] >> i.astype(np.uint64)) & np.uint64(1)
        c = low | (high.astype(np.uint8) << 2)
    else:
        qs = b[:, 4:20]
        c = (qs[:, i & 15] >> (2 * (i >> 4))) & 3
    L = np.array(TQW_LEVELS[ttype], dtype=np.float64)
    y = L[c.astype(np.int64)] * np.repeat(d, 32, axis=1)                  # rotated values, exact
    signs = np.where((TQW_SIGNS >> i) & 1, -1.0, 1.0)
    x = (y @ hadamard(64)) * signs / 8.0                                  # Rᵀ y = D H y / 8 (H symmetric)
    return x.reshape(rows, cols)


def dequant(f, t):
    cols, rows = int(t.shape[0]), int(t.shape[1])
    raw = f.data(t)
    if t.type in TQW_LEVELS:
        return tqw_dequant(raw, t.type, rows, cols)
    q = gguf.GGMLQuantizationType(t.type)
    a = np.frombuffer(raw, dtype=np.uint8).reshape(rows, -1)
    if q == gguf.GGMLQuantizationType.F32:
        return a.view(np.float32).astype(np.float64)
    if q == gguf.GGMLQuantizationType.F16:
        return a.view(np.float16).astype(np.float64)
    return gguf.quants.dequantize(a, q).astype(np.float64).reshape(rows, cols)


class Recorder:
    """Stands for a weight matrix W in `x @ W.T`: records x (float32), returns x @ W.T."""
    __array_ufunc__ = None     # numpy defers `ndarray @ Recorder` to __rmatmul__

    def __init__(self, w, store):
        self.w, self.store = w, store

    @property
    def T(self):
        return self

    def __rmatmul__(self, x):
        self.store.append(np.asarray(x, dtype=np.float32))
        return x @ self.w.T


def calib_inputs(source, kind, text, n_tokens, ctx, binary):
    """{layer: X (tokens, cols)} of the kind's matrix in every layer, from the source's float64 pass."""
    r = gguf.GGUFReader(source)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    if arch == "llama":
        import smollm2_numpy as ref
        m = ref.Model(source)
        bos = False
    elif arch == "gemma3":
        import gemma3_numpy as ref
        m = ref.Model(source)
        bos = True
    else:
        raise SystemExit(f"{source}: architecture {arch}: no reference forward pass here")
    with open(text, "rb") as fh:
        body = fh.read(max(64 * n_tokens, 4096))       # plenty of bytes for n_tokens
    out = subprocess.run([binary, "tokenize", "-m", source, "-f", "-", "--no-bos"], input=body,
                         capture_output=True, check=True).stdout.decode()
    ids = [int(l.split("\t", 1)[0]) for l in out.splitlines() if l.strip()]
    per = ctx - 1 if bos else ctx
    if len(ids) < n_tokens:
        raise SystemExit(f"{text}: only {len(ids)} tokens in the bytes read, {n_tokens} asked")
    stores = {l: [] for l in range(m.n_layer)}
    for l in range(m.n_layer):
        m.layers[l][kind] = Recorder(m.layers[l][kind], stores[l])
    done = 0
    while done < n_tokens:
        w = ids[done:done + min(per, n_tokens - done)]
        done += len(w)
        seq = ([r.fields["tokenizer.ggml.bos_token_id"].parts[-1][0]] if bos else []) + w
        if arch == "gemma3":
            m.forward(seq, want=[len(seq) - 1])
        else:
            m.forward(seq)
    return {l: np.concatenate(s, axis=0) for l, s in stores.items()}, m


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", required=True)
    ap.add_argument("--kind", default="ffn_down", help="the re-coded matrix kind (default ffn_down)")
    ap.add_argument("--calib", default=os.path.join(REPO, "..", "shared", "data", "calibration-moby-dick.txt"))
    ap.add_argument("--calib-tokens", type=int, default=2048)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "veloxquant"))
    ap.add_argument("--json", help="write the results here (atomically)")
    ap.add_argument("cands", nargs="+", metavar="LABEL=FILE")
    a = ap.parse_args()
    t0 = time.time()
    src = gguf_lite.File(a.source)
    cands = []
    for c in a.cands:
        label, _, path = c.partition("=")
        if not path:
            raise SystemExit(f"candidate '{c}': expected LABEL=FILE")
        f = gguf_lite.File(path)
        diff = gguf_lite.differing(src, f)
        bad = [n for n in diff if f".{a.kind}." not in n]
        cands.append((label, path, f, diff, bad))
        if bad:
            print(f"{label}: {len(bad)} tensors other than {a.kind} differ from the source: {' '.join(bad[:8])}",
                  file=sys.stderr)
    names = sorted({n for c in cands for n in c[3] if n not in c[4]}, key=lambda n: (int(n.split(".")[1]), n))
    X, _ = calib_inputs(a.source, a.kind, a.calib, a.calib_tokens, a.ctx, a.bin)
    res = {"source": a.source, "kind": a.kind, "calib": os.path.basename(a.calib), "calib_tokens": a.calib_tokens,
           "ctx": a.ctx, "command": " ".join([os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:]),
           "versions": f"numpy {np.__version__}, gguf {gguf.__version__ if hasattr(gguf, '__version__') else '?'}",
           "candidates": []}
    ref = {}
    for n in names:
        t = src.by_name[n]
        W = dequant(src, t)
        layer = int(n.split(".")[1])
        WX = W @ X[layer].T.astype(np.float64)
        ref[n] = (W, float((W * W).sum()), float((WX * WX).sum()), t.type_name)
    for label, path, f, diff, bad in cands:
        rows, e2, w2, o2, x2, nb, ne = [], 0.0, 0.0, 0.0, 0.0, 0, 0
        for n in [n for n in names if n in diff]:
            W, ww, wx, st = ref[n]
            t = f.by_name[n]
            D = dequant(f, t) - W
            layer = int(n.split(".")[1])
            DX = D @ X[layer].T.astype(np.float64)
            dd, dx = float((D * D).sum()), float((DX * DX).sum())
            rows.append({"tensor": n, "src_type": st, "type": t.type_name, "bpw": t.bpw,
                         "rel_rms": (dd / ww) ** 0.5, "rel_out": (dx / wx) ** 0.5})
            e2, w2, o2, x2 = e2 + dd, w2 + ww, o2 + dx, x2 + wx
            nb, ne = nb + t.nbytes, ne + W.size
        res["candidates"].append({
            "label": label, "file": path, "file_bytes": f.size, "recoded": len(rows), "other_differing": bad,
            "types": sorted({r["type"] for r in rows}), "bpw": 8.0 * nb / ne if ne else None,
            "rel_rms": (e2 / w2) ** 0.5 if w2 else None, "rel_out": (o2 / x2) ** 0.5 if x2 else None,
            "tensors": rows})
        c = res["candidates"][-1]
        print(f"{label:12s} {','.join(c['types']):8s} {c['recoded']:3d} matrices  bpw {c['bpw'] or 0:7.4f}  "
              f"rel_rms {c['rel_rms'] or 0:.4f}  rel_out {c['rel_out'] or 0:.4f}  other differing: {len(bad)}")
    res["seconds"] = time.time() - t0
    if a.json:
        tmp = a.json + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(res, fh, indent=1)
        os.replace(tmp, a.json)


if __name__ == "__main__":
    main()
