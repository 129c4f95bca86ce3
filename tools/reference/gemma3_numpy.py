#!/usr/bin/env python3
"""Independent numpy reference for Gemma 3 270M (GGUF, gemma3 architecture, Q4_K_M).

A float64 forward pass written from the architecture (Gemma 3 technical report and the GGUF tensor
layout), with weights dequantized by the `gguf` Python package, plus a small SentencePiece-BPE
tokenizer written here from the GGUF vocabulary and scores. It writes tests/fixtures/gemma3_logits.txt
(same record format as smollm2_logits.txt; see tests/fixtures/README.md) and, with `ppl`,
tests/fixtures/gemma3_wikitext_ppl.txt.

Usage:
  python3 tools/reference/gemma3_numpy.py logits [--model M] [--out tests/fixtures/gemma3_logits.txt]
  python3 tools/reference/gemma3_numpy.py ppl    [--model M] [--windows 2] [--ctx 1024] [--dump PREFIX]
  python3 tools/reference/gemma3_numpy.py tokenize --text "some text"

The model, as written here:
  x = token_embd[ids] * sqrt(640)
  per layer l (18): h = rms(x) * attn_norm; q, k, v = h Wq, h Wk, h Wv (4 query heads, 1 KV head, 256 wide);
    q, k: each head RMS-normalized with attn_q_norm / attn_k_norm; RoPE on halves (x[i], x[i+128]) with
    base 10000 on sliding-window layers (l % 6 != 5) and 1e6 on the global layers 5, 11, 17;
    softmax(q.k / 16) causal, and on sliding-window layers only keys with q_pos - k_pos < 512;
    o = att Wo; x += rms(o) * post_attention_norm
    h = rms(x) * ffn_norm; x += rms((gelu_tanh(h Wg) * (h Wu)) Wd) * post_ffw_norm
  logits = (rms(x) * output_norm) token_embd^T.   rms(x) = x / sqrt(mean(x^2) + 1e-6).
  (The GGUF converter stores Gemma's norm weights with the +1 already added.)
"""
import argparse
import datetime
import json
import math
import os
import sys
import time

import numpy as np
import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from smollm2_numpy import field, fmt, log_softmax, logsumexp  # noqa: E402 (the shared helpers)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_MODEL = os.path.join(REPO, "models", "gemma-3-270m-q4_k_m.gguf")
DEFAULT_WIKI = os.path.abspath(os.path.join(REPO, "..", "shared", "data", "wikitext-2-raw-test.txt"))
FIX = os.path.join(REPO, "tests", "fixtures")

PROMPTS = [
    ("capital", "The capital of France is"),
    ("long", "In 1905, Albert Einstein published four groundbreaking papers that changed our "
             "understanding of space, time, mass and energy, and his explanation of the "
             "photoelectric effect later earned him the Nobel Prize in Physics."),
    ("chat", "<start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n"),
]
N_TOP = 50
SAMPLE_STRIDE = 1031   # ids 0, 1031, ... (< 262144): 255 values
N_GREEDY = 16
LONG_TOKENS = 700      # the 'window' case: past the 512-token sliding window


# ---------------------------------------------------------------- tokenizer (SentencePiece BPE)

class SpmTokenizer:
    """SentencePiece BPE from the GGUF's tokens and scores: spaces become U+2581 (no prefix space:
    add_space_prefix is false), the text is split into UTF-8 characters, and the adjacent pair whose
    concatenation is a vocabulary token with the highest score is merged first (leftmost on ties),
    until no pair merges; characters the vocabulary lacks become <0xXX> byte tokens. Before that, the
    raw text is cut at user-defined tokens (type 4: runs of spaces, newlines, tabs; always) and control
    tokens (type 3, e.g. <start_of_turn>; matched because the prompts are parsed with specials on),
    leftmost match first, the longest at a position (as llama.cpp's special-token partition does for
    these vocabularies). BOS (id 2) is prepended (add_bos_token)."""

    def __init__(self, reader):
        if field(reader, "tokenizer.ggml.model") != "llama":
            raise SystemExit("tokenizer: expected tokenizer.ggml.model = llama (SentencePiece)")
        self.toks = field(reader, "tokenizer.ggml.tokens")
        self.scores = field(reader, "tokenizer.ggml.scores")
        self.types = field(reader, "tokenizer.ggml.token_type")
        self.bos = int(field(reader, "tokenizer.ggml.bos_token_id"))
        self.vocab = {t: i for i, t in enumerate(self.toks)}
        self.specials = sorted((t for i, t in enumerate(self.toks) if self.types[i] in (3, 4) and t),
                               key=len, reverse=True)
        self.first = set(t[0] for t in self.specials)

    def _bpe(self, text):
        syms = list(text.replace(" ", "\u2581"))
        while len(syms) > 1:
            best, bi = None, -1
            for i in range(len(syms) - 1):
                j = self.vocab.get(syms[i] + syms[i + 1])
                if j is not None and (best is None or self.scores[j] > best):
                    best, bi = self.scores[j], i
            if bi < 0:
                break
            syms[bi:bi + 2] = [syms[bi] + syms[bi + 1]]
        out = []
        for s in syms:
            if s in self.vocab:
                out.append(self.vocab[s])
            else:
                out.extend(self.vocab[f"<0x{b:02X}>"] for b in s.encode("utf-8"))
        return out

    def encode(self, text, add_bos=True):
        ids = [self.bos] if add_bos else []
        i, start = 0, 0
        while i < len(text):
            hit = next((s for s in self.specials if text.startswith(s, i)), None) if text[i] in self.first else None
            if hit:
                if start < i:
                    ids += self._bpe(text[start:i])
                ids.append(self.vocab[hit])
                i += len(hit)
                start = i
            else:
                i += 1
        if start < len(text):
            ids += self._bpe(text[start:])
        return ids

    def decode(self, ids):
        return "".join(self.toks[i] for i in ids).replace("\u2581", " ")


# ---------------------------------------------------------------- model

class Model:
    def __init__(self, path):
        r = gguf.GGUFReader(path)
        self.reader = r
        if field(r, "general.architecture") != "gemma3":
            raise SystemExit(f"{path}: general.architecture is {field(r, 'general.architecture')}, expected gemma3")
        g = lambda k: field(r, "gemma3." + k)
        self.n_layer = int(g("block_count"))
        self.dim = int(g("embedding_length"))
        self.n_head = int(g("attention.head_count"))
        self.n_kv = int(g("attention.head_count_kv"))
        self.head_dim = int(g("attention.key_length"))
        self.eps = float(g("attention.layer_norm_rms_epsilon"))
        self.rope_global = float(g("rope.freq_base"))
        self.rope_local = 10000.0
        self.window = int(g("attention.sliding_window"))
        t = {x.name: x for x in r.tensors}

        def W(name):
            x = t[name]
            return np.ascontiguousarray(gguf.quants.dequantize(x.data, x.tensor_type), dtype=np.float64)

        self.tok_embd = W("token_embd.weight")
        self.out_norm = W("output_norm.weight")
        self.layers = []
        for l in range(self.n_layer):
            p = f"blk.{l}."
            self.layers.append({k: W(p + k + ".weight") for k in (
                "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm",
                "post_attention_norm", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "post_ffw_norm")})
        self.vocab = self.tok_embd.shape[0]

    def rms(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos, base):
        """x: (n, heads, hd); pairs (x[i], x[i + hd/2]) rotate by pos * base^(-2i/hd)."""
        hd = self.head_dim
        inv = base ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
        ang = pos[:, None].astype(np.float64) * inv[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x0, x1 = x[..., : hd // 2], x[..., hd // 2:]
        return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)

    def forward(self, ids, want=None):
        """Causal forward over ids at positions 0..n-1; logits (len(want), vocab) for positions want
        (default: all)."""
        ids = np.asarray(ids, dtype=np.int64)
        n = len(ids)
        hd, nh, nkv = self.head_dim, self.n_head, self.n_kv
        grp = nh // nkv
        pos = np.arange(n)
        diff = pos[:, None] - pos[None, :]                     # q_pos - k_pos
        causal = np.where(diff < 0, -np.inf, 0.0)
        sliding = np.where((diff < 0) | (diff >= self.window), -np.inf, 0.0)
        scale = 1.0 / math.sqrt(hd)
        x = self.tok_embd[ids] * math.sqrt(self.dim)
        for l, L in enumerate(self.layers):
            swa = l % 6 != 5
            h = self.rms(x, L["attn_norm"])
            q = self.rms((h @ L["attn_q"].T).reshape(n, nh, hd), L["attn_q_norm"])
            k = self.rms((h @ L["attn_k"].T).reshape(n, nkv, hd), L["attn_k_norm"])
            v = (h @ L["attn_v"].T).reshape(n, nkv, hd)
            base = self.rope_local if swa else self.rope_global
            q, k = self.rope(q, pos, base), self.rope(k, pos, base)
            mask = sliding if swa else causal
            att = np.empty((n, nh, hd))
            for hh in range(nh):
                kh = hh // grp
                s = (q[:, hh, :] @ k[:, kh, :].T) * scale + mask
                s = s - s.max(axis=1, keepdims=True)
                e = np.exp(s)
                e /= e.sum(axis=1, keepdims=True)
                att[:, hh, :] = e @ v[:, kh, :]
            x = x + self.rms(att.reshape(n, nh * hd) @ L["attn_output"].T, L["post_attention_norm"])
            h = self.rms(x, L["ffn_norm"])
            gt = h @ L["ffn_gate"].T
            gelu = 0.5 * gt * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (gt + 0.044715 * gt ** 3)))
            x = x + self.rms((gelu * (h @ L["ffn_up"].T)) @ L["ffn_down"].T, L["post_ffw_norm"])
        xs = x if want is None else x[np.asarray(want)]
        return self.rms(xs, self.out_norm) @ self.tok_embd.T


def versions():
    import importlib.metadata as md
    out = [f"python {sys.version.split()[0]}", f"numpy {np.__version__}"]
    try:
        out.append(f"gguf {md.version('gguf')}")
    except md.PackageNotFoundError:
        out.append("gguf ?")
    return ", ".join(out)


def wiki_text(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8")


def cmd_logits(a):
    t0 = time.time()
    m = Model(a.model)
    tok = SpmTokenizer(m.reader)
    lines = [
        "# Gemma 3 270M (Q4_K_M) reference logits, independent numpy float64 forward pass (see tests/fixtures/README.md).",
        "# produced by: python3 tools/reference/gemma3_numpy.py logits",
        "# model: models/gemma-3-270m-q4_k_m.gguf (weights dequantized by gguf.quants.dequantize, activations f64)",
        f"# versions: {versions()}",
        f"# date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        "# format as smollm2_logits.txt: 'case', 'text' (JSON), 'ids N id...' (BOS 2 first, from the SentencePiece",
        "# tokenizer in the script), per checked position 'pos P', 'stats mean std max argmax logsumexp',",
        f"# 'top {N_TOP} id value ...', 'samples K id value ...' (ids 0,{SAMPLE_STRIDE},...); 'greedy N id...',",
        "# 'greedy_margin N m...'; 'end'. Case 'window' is the first 700 tokens of WikiText-2 (past the 512-token",
        "# sliding window): positions 0, 511, 512, 699 are checked, no greedy continuation.",
    ]
    cases = [(n, t, True) for n, t in PROMPTS]
    wiki = wiki_text(a.text)
    cases.append(("window", None, False))
    for name, text, greedy in cases:
        if text is None:
            ids = tok.encode(wiki[:20000])[:LONG_TOKENS]
            checks = [0, 511, 512, LONG_TOKENS - 1]
        else:
            ids = tok.encode(text)
            n = len(ids)
            checks = sorted(set([0, n // 2, n - 1]))
        n = len(ids)
        logits = m.forward(ids, checks)
        lines.append(f"case {name}")
        lines.append("text " + json.dumps(text if text is not None else "(WikiText-2 test, first 700 tokens)"))
        lines.append(f"ids {n} " + " ".join(map(str, ids)))
        for ci, p in enumerate(checks):
            z = logits[ci]
            order = np.argsort(-z, kind="stable")[:N_TOP]
            lines.append(f"pos {p}")
            lines.append(f"stats {fmt(z.mean())} {fmt(z.std())} {fmt(z.max())} {int(z.argmax())} {fmt(logsumexp(z))}")
            lines.append(f"top {N_TOP} " + " ".join(f"{int(i)} {fmt(z[i])}" for i in order))
            sidx = np.arange(0, m.vocab, SAMPLE_STRIDE)
            lines.append(f"samples {len(sidx)} " + " ".join(f"{int(i)} {fmt(z[i])}" for i in sidx))
        if greedy:
            seq = list(ids)
            gen, margin = [], []
            for _ in range(N_GREEDY):
                z = m.forward(seq, [len(seq) - 1])[0]
                two = np.argsort(-z, kind="stable")[:2]
                gen.append(int(two[0]))
                margin.append(float(z[two[0]] - z[two[1]]))
                seq.append(int(two[0]))
            lines.append(f"greedy {N_GREEDY} " + " ".join(map(str, gen)))
            lines.append(f"greedy_margin {N_GREEDY} " + " ".join(fmt(v) for v in margin))
            lines.append("# greedy text: " + json.dumps(tok.decode(gen)))
            print(f"{name}: n={n} greedy={tok.decode(gen)!r} ({time.time() - t0:.0f}s)", file=sys.stderr)
        lines.append("end")
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {a.out} in {time.time() - t0:.1f}s", file=sys.stderr)


def text_ids(tok, text, need):
    """The first `need` ids of the whole text, without tokenizing all of it (the Python BPE takes minutes
    on the whole file): a prefix cut after a line end is tokenized, and the ids after the last user-defined
    or control token are dropped. The tokenizer cuts the text at those tokens first and BPE never merges
    across a cut, so every id before the prefix's last such token is what the whole text gives."""
    cuts = {tok.vocab[t] for t in tok.specials}
    n = max(4 * need, 4096)
    while True:
        end = text.find("\n", n)
        end = len(text) if end < 0 else end + 1
        ids = tok.encode(text[:end], add_bos=False)
        if end < len(text):
            last = max((i for i, t in enumerate(ids) if t in cuts), default=-1)
            ids = ids[:last]        # an id just before a cut may still join text after the prefix
        if len(ids) >= need or end == len(text):
            return ids[:need]
        n *= 2


def cmd_ppl(a):
    t0 = time.time()
    m = Model(a.model)
    tok = SpmTokenizer(m.reader)
    C, first = a.ctx, a.ctx // 2
    ids = text_ids(tok, wiki_text(a.text), a.windows * (C - 1))
    if len(ids) < a.windows * (C - 1):
        raise SystemExit(f"the text has {len(ids)} tokens, fewer than {a.windows} windows of {C - 1}")
    fnv = 0xcbf29ce484222325
    for t in ids:
        for b in int(t).to_bytes(4, "little"):
            fnv = ((fnv ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    print(f"tokenized: {len(ids)} ids ({time.time() - t0:.0f}s)", file=sys.stderr)
    lines = [
        "# Gemma 3 270M WikiText-2 perplexity, independent numpy float64 forward pass (see tests/fixtures/README.md).",
        f"# produced by: python3 tools/reference/gemma3_numpy.py ppl --ctx {C} --windows {a.windows}",
        f"# versions: {versions()}",
        f"# date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"# text: WikiText-2 raw test tokenized whole without BOS (the first {len(ids)} ids); window w = BOS followed by",
        f"# ids[{C - 1}w .. {C - 1}w+{C - 2}] at positions 0..{C - 1} (as `veloxquant perplexity --ctx {C} --bos-per-window",
        f"# --max-tokens {a.windows * (C - 1)}` builds them). nll[p] = -log softmax(logits at p)[window token p+1];",
        f"# 'half' = p = {first}..{C - 2} (the second half of each window, as `--score second-half` and llama.cpp).",
        f"# The 'llamacpp_' lines come from tools/reference/llamacpp_reference.py gemma-ppl and are kept on rewrite.",
        f"ids {len(ids)} fnv1a64 {fnv:016x} first {' '.join(map(str, ids[:8]))}",
    ]
    tot, cnt = 0.0, 0
    for w in range(a.windows):
        win = [tok.bos] + ids[w * (C - 1):(w + 1) * (C - 1)]
        want = list(range(first, C - 1))
        lp = log_softmax(m.forward(win, want))
        nll = -lp[np.arange(len(want)), np.asarray(win[first + 1:])]
        tot += float(nll.sum())
        cnt += len(want)
        lines.append(f"window {w} nll_sum_half {float(nll.sum()):.6f} {len(want)}")
        if a.dump:
            np.savetxt(f"{a.dump}.w{w}.txt", nll, fmt="%.6f")
        print(f"window {w}: half ppl {math.exp(nll.sum() / len(want)):.4f} ({time.time() - t0:.0f}s)", file=sys.stderr)
    lines.append(f"total half {cnt} {tot / cnt:.6f} {math.exp(tot / cnt):.4f}")
    keep = []
    if os.path.exists(a.out):
        with open(a.out) as f:
            keep = [ln.rstrip("\n") for ln in f if ln.startswith("llamacpp_")]
    with open(a.out, "w") as f:
        f.write("\n".join(lines + keep) + "\n")
    print(f"wrote {a.out}: ppl {math.exp(tot / cnt):.4f} ({time.time() - t0:.0f}s)", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("logits", "ppl", "tokenize"):
        p = sub.add_parser(name)
        p.add_argument("--model", default=DEFAULT_MODEL)
        p.add_argument("--text", default=DEFAULT_WIKI)
        if name == "logits":
            p.add_argument("--out", default=os.path.join(FIX, "gemma3_logits.txt"))
        if name == "ppl":
            p.add_argument("--out", default=os.path.join(FIX, "gemma3_wikitext_ppl.txt"))
            p.add_argument("--ctx", type=int, default=1024)
            p.add_argument("--windows", type=int, default=2)
            p.add_argument("--dump", help="write each window's per-position NLLs to DUMP.wW.txt")
    a = ap.parse_args()
    if a.cmd == "logits":
        cmd_logits(a)
    elif a.cmd == "ppl":
        cmd_ppl(a)
    else:
        r = gguf.GGUFReader(a.model)
        print(" ".join(map(str, SpmTokenizer(r).encode(a.text))))


if __name__ == "__main__":
    main()
