"""perplexity.py: Model.perplexity(), the CLI's `perplexity` (lab/perplexity.c) over the public API.

The measuring harness is not part of the C library (it is the lab, linked by the CLI only), so
this walks the same protocol on public sessions: the text tokenized without BOS, cut into
non-overlapping windows of n_ctx tokens (n_ctx - 1 + BOS with bos_per_window), each window run
from an empty cache (truncate(0)), one token per forward in decode mode or chunks of n_batch in
prefill mode, every scored prediction's negative log-likelihood in float64. The session is made
as the lab makes it (n_batch 1 in decode mode, the chunk in prefill mode; the CLI's kv_seed), so
the logits, and so the figures, are the CLI's.
"""
from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Callable, Union

import numpy as np

from .errors import RangeError

if TYPE_CHECKING:
    from .core import KVSpec, Model, Perplexity


def _nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """-log softmax(logits)[target] per row, in float64 (the max subtracted first)."""
    x = logits.astype(np.float64)
    mx = x.max(axis=1, keepdims=True)
    lz = np.log(np.exp(x - mx).sum(axis=1)) + mx[:, 0]
    return lz - x[np.arange(x.shape[0]), targets]


def run_perplexity(model: "Model", text: Union[str, bytes, "os.PathLike[str]"], *, kv: Union[str, "KVSpec"], n_ctx: int, mode: str,
                   max_tokens: int | None, score: str, first_scored: int | None, n_batch: int,
                   bos_per_window: bool, kv_seed: int,
                   progress: Callable[[int, int], None] | None) -> "Perplexity":
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
    step = 1 if mode == "decode" else min(n_batch, n_ctx)

    nll_sum, n_scored, n_fed, seconds, kv_bytes, kv_bits = 0.0, 0, 0, 0.0, 0, 0.0
    V = model.n_vocab
    with model.session(kv, n_ctx=n_ctx, n_batch=step, kv_seed=kv_seed, allow_ctx_over_train=True) as s:
        buf = np.empty((step, V), dtype=np.float32)
        for w in range(n_win):
            win = tok[w * per_win:(w + 1) * per_win]
            if bos_per_window:
                win = np.concatenate([np.array([model.bos], dtype=np.int32), win])
            s.truncate(0)
            for i in range(0, n_ctx - 1, step):   # position n_ctx-1 is only a target
                nb = min(step, n_ctx - 1 - i)
                out = buf[:nb]
                t0 = time.perf_counter()
                s.decode(win[i:i + nb], all_logits=True, out=out)
                seconds += time.perf_counter() - t0
                n_fed += nb
                lo = max(first - i, 0)
                if lo < nb:
                    nll_sum += float(_nll(out[lo:], win[i + 1 + lo:i + 1 + nb]).sum())
                    n_scored += nb - lo
            b = s.bytes_held
            if b > kv_bytes:
                kv_bytes, kv_bits = b, s.bits_per_element
            if progress:
                progress(w + 1, n_win)
        spec_text = s.kv
    mean = nll_sum / n_scored if n_scored else 0.0
    return Perplexity(kv=spec_text, ppl=float(np.exp(mean)), mean_nll=mean, n_scored=n_scored, n_tokens=n_fed,
                      n_windows=n_win, n_ctx=n_ctx, mode=mode, bytes_held=kv_bytes, bits_per_element=kv_bits,
                      seconds=seconds)
