#!/usr/bin/env python3
"""bench_python_decode.py: one Python arm of scripts/bench_python_overhead.sh: decode tokens/s of greedy
generation through the package, printed as one JSON line, counted as `veloxquant generate --json`
counts its decode_tps (the tokens after the first over the time after the prefill).

  arm generate: Session.generate(), the lazy iterator (one vq_session_generate call per token)
  arm complete: Session.complete(), one vq_session_generate call (text through a ctypes callback)
  arm decode:   a Python loop of Session.decode([tok], out=buf) + numpy argmax (sampling in Python)
"""
import argparse
import json
import time

import numpy as np

import veloxquant as vq
from veloxquant import _lib

# time inside the C calls that do the work, so the Python side's share is measured in-process
# (noise-free: the same wall time split in two), beside the tokens/s that a loaded machine blurs
c_seconds = 0.0


def timed(f):
    def call(*args):
        global c_seconds
        t0 = time.perf_counter()
        try:
            return f(*args)
        finally:
            c_seconds += time.perf_counter() - t0
    return call


_lib.vq_session_generate = timed(_lib.vq_session_generate)
_lib.vq_session_decode = timed(_lib.vq_session_decode)

ap = argparse.ArgumentParser()
ap.add_argument("arm", choices=["generate", "complete", "decode"])
ap.add_argument("-m", "--model", required=True)
ap.add_argument("-p", "--prompt", default="The history of the printing press")
ap.add_argument("-n", type=int, default=128)
ap.add_argument("-c", "--ctx", type=int, default=2048)
ap.add_argument("-t", "--threads", type=int)
ap.add_argument("--kv", default="f16")
a = ap.parse_args()

with vq.Model(a.model, threads=a.threads) as model, \
        model.session(kv=a.kv, n_ctx=a.ctx, allow_ctx_over_train=True) as s:
    t_all = time.perf_counter()
    if a.arm == "generate":
        g = s.generate(a.prompt, max_tokens=a.n, temperature=0)
        for _ in g:
            pass
        n_gen, tps = g.n_generated, g.decode_tokens_per_second
    elif a.arm == "complete":
        c = s.complete(a.prompt, max_tokens=a.n, temperature=0)
        n_gen, tps = c.n_generated, c.decode_tokens_per_second
    else:
        ids = model.encode(a.prompt)
        logits = s.decode(ids)
        buf = np.empty(model.n_vocab, dtype=np.float32)
        tok = int(logits.argmax())
        n_gen = 1
        t0 = time.perf_counter()
        while n_gen < a.n and not model.is_eog(tok):
            tok = int(s.decode([tok], out=buf).argmax())
            n_gen += 1
        dt = time.perf_counter() - t0
        tps = (n_gen - 1) / dt if n_gen > 1 else 0.0
    wall = time.perf_counter() - t_all
# python_share: the fraction of the generation's wall time (prefill included) spent outside the C
# calls (ctypes transitions, the wrapper, the callback, numpy's argmax in the decode arm)
print(json.dumps({"arm": "py-" + a.arm, "generated_tokens": n_gen, "decode_tps": round(tps, 2),
                  "wall_s": round(wall, 4), "c_s": round(c_seconds, 4),
                  "python_share": round(1 - c_seconds / wall, 5)}))
