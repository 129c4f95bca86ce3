"""perplexity.py: Model.perplexity(), the CLI's `perplexity` (lab/perplexity.c) over the public API.

The measuring harness is not part of the C library (it is the lab, linked by the CLI only), so
this walks the same protocol on public sessions: the text tokenized without BOS, cut into
non-overlapping windows of n_ctx tokens (n_ctx - 1 + BOS with bos_per_window), each window run
from an empty cache (truncate(0)), one token per forward in decode mode or chunks of n_batch in
prefill mode, every scored prediction's negative log-likelihood in float64. Several KV arms walk
the text together, each in a session of its own; in decode mode one batched forward per token
serves them all (vq_decode_batch), as the CLI's default. Sessions are made as the lab makes them
(n_batch: 1 or the number of arms in decode mode, the chunk in prefill mode; the CLI's kv_seed),
so the logits, and so the figures, are the CLI's.
"""
from __future__ import annotations

import ctypes
import os
import time
from contextlib import ExitStack
from typing import TYPE_CHECKING, Callable, Sequence, Union

import numpy as np

from . import _lib
from .errors import RangeError, raise_for

if TYPE_CHECKING:
    from .core import KVSpec, Model, Perplexity


def _nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """-log softmax(logits)[target] per row, in float64 (the max subtracted first)."""
    x = logits.astype(np.float64)
    mx = x.max(axis=1, keepdims=True)
    lz = np.log(np.exp(x - mx).sum(axis=1)) + mx[:, 0]
    return lz - x[np.arange(x.shape[0]), targets]


def run_perplexity(model: "Model", text: Union[str, bytes, "os.PathLike[str]"], *,
                   kv: Union[str, "KVSpec", Sequence[Union[str, "KVSpec"]]], n_ctx: int, mode: str,
                   max_tokens: int | None, score: str, first_scored: int | None, n_batch: int,
                   bos_per_window: bool, kv_seed: int,
                   progress: Callable[[int, int], None] | None) -> Union["Perplexity", list["Perplexity"]]:
    from .core import Perplexity

    if isinstance(text, os.PathLike):
        with open(text, "rb") as f:   # the bytes as the CLI reads them (no newline translation)
            data = f.read()
    elif isinstance(text, str):
        data = text.encode("utf-8")
    elif isinstance(text, (bytes, bytearray)):
        data = bytes(text)
    else:
        raise TypeError(f"text must be a str, bytes or a path (os.PathLike), got {type(text).__name__}")
    if mode not in ("decode", "prefill"):
        raise ValueError(f"mode {mode!r} is unknown (known: decode, prefill)")
    if score not in ("all", "second-half"):
        raise ValueError(f"score {score!r} is unknown (known: all, second-half)")
    if not isinstance(n_ctx, int) or not 2 <= n_ctx <= (1 << 24):
        raise ValueError(f"n_ctx {n_ctx!r} is out of range (2..16777216)")
    if not isinstance(n_batch, int) or not 1 <= n_batch <= 4096:
        raise ValueError(f"n_batch {n_batch!r} is out of range (1..4096)")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 2):
        raise ValueError(f"max_tokens must be an int >= 2, got {max_tokens!r}")
    first = first_scored if first_scored else (n_ctx // 2 if score == "second-half" else 0)
    if not 0 <= first <= n_ctx - 2:
        raise ValueError(f"first scored position {first} is out of range for windows of {n_ctx} (0..{n_ctx - 2})")

    tok = model._encode_bytes(data, 0, False)
    if max_tokens is not None:
        tok = tok[:max_tokens]
    per_win = n_ctx - 1 if bos_per_window else n_ctx
    n_win = tok.size // per_win
    if n_win < 1:
        raise RangeError(f"perplexity: the text has {tok.size} tokens, fewer than one window of {per_win}")
    if bos_per_window and model.bos < 0:
        raise ValueError("perplexity: the model has no BOS token for bos_per_window")
    arms = list(kv) if isinstance(kv, (list, tuple)) else [kv]
    if not arms or len(arms) > 256:
        raise ValueError(f"perplexity needs 1..256 KV arms, got {len(arms)}")
    A = len(arms)
    # decode mode with several arms: one batched forward per token for all of them (vq_decode_batch:
    # the weights read once), each arm its own cache, as the CLI runs them; its sessions run
    # every arm through arm 0's scratch, so they are made with n_batch = the number of arms
    batched = mode == "decode" and A > 1
    step = 1 if mode == "decode" else min(n_batch, n_ctx)

    nll = [0.0] * A
    n_scored = n_fed = 0
    seconds = [0.0] * A
    kv_bytes, kv_bits = [0] * A, [0.0] * A
    V = model.n_vocab
    sessions: list = []
    try:
        for k in arms:
            sessions.append(model.session(k, n_ctx=n_ctx, n_batch=A if batched else step, kv_seed=kv_seed,
                                          allow_ctx_over_train=True))
        buf = np.empty((A, step, V), dtype=np.float32)
        handles = (ctypes.c_void_p * A)()
        same = np.empty(A, dtype=np.int32)
        for w in range(n_win):
            win = tok[w * per_win:(w + 1) * per_win]
            if bos_per_window:
                win = np.concatenate([np.array([model.bos], dtype=np.int32), win])
            for s in sessions:
                s.truncate(0)
            for i in range(0, n_ctx - 1, step):   # position n_ctx-1 is only a target
                nb = min(step, n_ctx - 1 - i)
                if batched:
                    same[:] = win[i]
                    t0 = time.perf_counter()
                    _decode_batch(sessions, handles, same, buf)
                    dt = time.perf_counter() - t0
                    for a in range(A):
                        seconds[a] += dt
                else:
                    for a, s in enumerate(sessions):
                        t0 = time.perf_counter()
                        s.decode(win[i:i + nb], all_logits=True, out=buf[a, :nb])
                        seconds[a] += time.perf_counter() - t0
                n_fed += nb
                lo = max(first - i, 0)
                if lo < nb:
                    for a in range(A):
                        nll[a] += float(_nll(buf[a, lo:nb], win[i + 1 + lo:i + 1 + nb]).sum())
                    n_scored += nb - lo
            for a, s in enumerate(sessions):
                b = s.bytes_held
                if b > kv_bytes[a]:
                    kv_bytes[a], kv_bits[a] = b, s.bits_per_element
            if progress:
                progress(w + 1, n_win)
        specs = [s.kv for s in sessions]
    finally:
        for s in sessions:
            s.close()
    out = []
    for a in range(A):
        mean = nll[a] / n_scored if n_scored else 0.0
        out.append(Perplexity(kv=specs[a], ppl=float(np.exp(mean)), mean_nll=mean, n_scored=n_scored,
                              n_tokens=n_fed, n_windows=n_win, n_ctx=n_ctx, mode=mode, bytes_held=kv_bytes[a],
                              bits_per_element=kv_bits[a], seconds=seconds[a]))
    return out if isinstance(kv, (list, tuple)) else out[0]


def _decode_batch(sessions, handles, tokens: np.ndarray, buf: np.ndarray) -> None:
    """One token for each session in one forward pass (vq_decode_batch), logits into buf[a, 0]."""
    with ExitStack() as stack:
        for a, s in enumerate(sessions):
            handles[a] = stack.enter_context(s._use())
        sessions[0].model._threads_here()
        err = _lib.vq_err()
        V = buf.shape[2]
        rows = buf[:, 0, :]
        # buf is (A, step=1, V) in decode mode: its rows are contiguous, A x V as the C call wants
        assert buf.shape[1] == 1 and rows.flags.c_contiguous and rows.shape[1] == V
        st = _lib.vq_decode_batch(handles, len(sessions), tokens.ctypes.data_as(_lib.P_int),
                                  rows.ctypes.data_as(_lib.P_float), ctypes.byref(err))
    if st:
        raise_for(err, st)
