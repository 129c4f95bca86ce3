#!/usr/bin/env python3
"""Independent numpy reference for SmolLM2-135M-Instruct (GGUF, llama architecture).

A plain float64 (or float32) Llama forward pass written from the architecture description, plus a
HuggingFace `tokenizers` BPE built from the GGUF vocabulary. It writes the fixtures that the C
engine's tests compare against (tests/fixtures/smollm2_*.txt); see tests/fixtures/README.md.

Usage:
  python3 tools/reference/smollm2_numpy.py logits   [--model M] [--out tests/fixtures/smollm2_logits.txt]
  python3 tools/reference/smollm2_numpy.py ppl      [--model M] [--text WIKITEXT] [--out ...]
  python3 tools/reference/smollm2_numpy.py selfcheck [--model M]
  python3 tools/reference/smollm2_numpy.py tokenize --text "some text"
"""
import argparse
import datetime
import math
import os
import sys
import time

import numpy as np
import gguf

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_MODEL = os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_WIKI = os.path.abspath(os.path.join(REPO, "..", "shared", "data", "wikitext-2-raw-test.txt"))
FIX = os.path.join(REPO, "tests", "fixtures")

# Fixed prompts for the logits fixture. Keep them stable: the C tests read the ids from the fixture.
PROMPTS = [
    ("capital", "The capital of France is"),
    ("long", "In 1905, Albert Einstein published four groundbreaking papers that changed our "
             "understanding of space, time, mass and energy, and his explanation of the "
             "photoelectric effect later earned him the Nobel Prize in Physics."),
    ("chat", "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"),
]
N_TOP = 50          # top-k (id, value) pairs stored per position
SAMPLE_STRIDE = 193  # fixed-index samples: ids 0, 193, 386, ... (< 49152): 255 values
N_GREEDY = 16
PPL_CTX = 512
PPL_CHUNKS = 16


def field(reader, key, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


# ---------------------------------------------------------------- tokenizer (HF `tokenizers`)

def build_tokenizer(reader):
    """ByteLevel BPE equal to llama.cpp's gpt2 vocab with pre='smollm': each digit is split off on
    its own (\\p{N}), then the GPT-2 regex; no prefix space, no BOS (add_bos_token is False)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, AddedToken
    pre = field(reader, "tokenizer.ggml.pre")
    if field(reader, "tokenizer.ggml.model") != "gpt2" or pre != "smollm":
        raise SystemExit(f"tokenizer: expected model gpt2 / pre smollm, got {field(reader, 'tokenizer.ggml.model')} / {pre}")
    toks = field(reader, "tokenizer.ggml.tokens")
    ttype = field(reader, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in field(reader, "tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(toks)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    # control tokens (type 3) are matched as whole special tokens, as llama.cpp does with parse_special
    tok.add_special_tokens([AddedToken(toks[i], special=True, normalized=False)
                            for i in range(len(toks)) if ttype[i] == 3])
    return tok


def tokenize(tok, text):
    return tok.encode(text, add_special_tokens=False).ids


# ---------------------------------------------------------------- model

class Model:
    def __init__(self, path, dtype=np.float64):
        r = gguf.GGUFReader(path)
        self.reader = r
        if field(r, "general.architecture") != "llama":
            raise SystemExit(f"{path}: general.architecture is {field(r, 'general.architecture')}, expected llama")
        self.n_layer = int(field(r, "llama.block_count"))
        self.dim = int(field(r, "llama.embedding_length"))
        self.n_head = int(field(r, "llama.attention.head_count"))
        self.n_kv = int(field(r, "llama.attention.head_count_kv"))
        self.ffn = int(field(r, "llama.feed_forward_length"))
        self.eps = float(field(r, "llama.attention.layer_norm_rms_epsilon"))
        self.rope_base = float(field(r, "llama.rope.freq_base"))
        self.head_dim = self.dim // self.n_head
        self.dtype = dtype
        t = {x.name: x for x in r.tensors}
        self.tensor_types = {x.name: x.tensor_type.name for x in r.tensors}

        def W(name):
            x = t[name]
            return np.ascontiguousarray(gguf.quants.dequantize(x.data, x.tensor_type), dtype=dtype)

        self.tok_embd = W("token_embd.weight")            # (vocab, dim), also the output matrix
        self.out_norm = W("output_norm.weight")
        self.output = W("output.weight") if "output.weight" in t else self.tok_embd
        self.layers = []
        for l in range(self.n_layer):
            p = f"blk.{l}."
            self.layers.append({k: W(p + k + ".weight") for k in (
                "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")})
        self.vocab = self.tok_embd.shape[0]

    def rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos):
        """x: (n, heads, head_dim). Adjacent pairs (x[2i], x[2i+1]) rotate by pos*base^(-2i/head_dim)
        (ggml's 'normal' rope; the GGUF converter permuted Q/K rows for this layout)."""
        hd = self.head_dim
        inv = self.rope_base ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)      # (hd/2,)
        ang = pos[:, None].astype(np.float64) * inv[None, :]                       # (n, hd/2)
        c = np.cos(ang).astype(self.dtype)[:, None, :]
        s = np.sin(ang).astype(self.dtype)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * c - x1 * s
        out[..., 1::2] = x0 * s + x1 * c
        return out

    def forward(self, ids):
        """Causal forward over ids placed at positions 0..n-1; returns logits (n, vocab)."""
        ids = np.asarray(ids, dtype=np.int64)
        n = len(ids)
        hd, nh, nkv = self.head_dim, self.n_head, self.n_kv
        grp = nh // nkv                       # q head h uses kv head h // grp
        pos = np.arange(n)
        mask = np.triu(np.full((n, n), -np.inf, dtype=self.dtype), k=1)
        scale = 1.0 / math.sqrt(hd)
        x = self.tok_embd[ids].copy()
        for L in self.layers:
            h = self.rmsnorm(x, L["attn_norm"])
            q = (h @ L["attn_q"].T).reshape(n, nh, hd)
            k = (h @ L["attn_k"].T).reshape(n, nkv, hd)
            v = (h @ L["attn_v"].T).reshape(n, nkv, hd)
            q = self.rope(q, pos)
            k = self.rope(k, pos)
            att = np.empty((n, nh, hd), dtype=self.dtype)
            for hh in range(nh):
                kh = hh // grp
                s = (q[:, hh, :] @ k[:, kh, :].T) * scale + mask      # (n, n)
                s = s - s.max(axis=1, keepdims=True)
                e = np.exp(s)
                e /= e.sum(axis=1, keepdims=True)
                att[:, hh, :] = e @ v[:, kh, :]
            x = x + att.reshape(n, nh * hd) @ L["attn_output"].T
            h = self.rmsnorm(x, L["ffn_norm"])
            g = h @ L["ffn_gate"].T
            u = h @ L["ffn_up"].T
            x = x + ((g / (1.0 + np.exp(-g))) * u) @ L["ffn_down"].T
        x = self.rmsnorm(x, self.out_norm)
        return x @ self.output.T


def log_softmax(z):
    m = z.max(axis=-1, keepdims=True)
    return z - (m + np.log(np.exp(z - m).sum(axis=-1, keepdims=True)))


def logsumexp(z):
    m = z.max()
    return float(m + np.log(np.exp(z - m).sum()))


def versions():
    import importlib.metadata as md
    out = [f"python {sys.version.split()[0]}", f"numpy {np.__version__}"]
    for p in ("gguf", "tokenizers"):
        try:
            out.append(f"{p} {md.version(p)}")
        except md.PackageNotFoundError:
            out.append(f"{p} ?")
    return ", ".join(out)


# ---------------------------------------------------------------- commands

def fmt(v):
    return f"{v:.6f}"


def cmd_logits(a):
    t0 = time.time()
    m = Model(a.model, np.float64 if a.dtype == "f64" else np.float32)
    tok = build_tokenizer(m.reader)
    lines = [
        "# SmolLM2-135M-Instruct reference logits, independent numpy forward pass (see tests/fixtures/README.md).",
        f"# produced by: python3 tools/reference/smollm2_numpy.py logits --dtype {a.dtype}",
        f"# model: models/SmolLM2-135M-Instruct.Q4_1.gguf (weights dequantized exactly, activations {a.dtype})",
        f"# versions: {versions()}",
        f"# date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        "# format: 'case NAME' starts a case; then 'text' (JSON-escaped), 'ids N id...' (no BOS), then per",
        "# checked position: 'pos P', 'stats mean std max argmax logsumexp', 'top K id value ...' (descending),",
        f"# 'samples K id value ...' (ids 0,{SAMPLE_STRIDE},{2*SAMPLE_STRIDE},...); 'greedy N id...' = greedy continuation",
        "# of the whole prompt (argmax, no sampling), 'greedy_margin' = top1 - top2 logit at each step (a small",
        "# margin may flip under activation quantization); 'end' closes the case. Lines from llama.cpp start 'llamacpp_'.",
    ]
    import json
    for name, text in PROMPTS:
        ids = tokenize(tok, text)
        n = len(ids)
        logits = m.forward(ids)
        lines.append(f"case {name}")
        lines.append("text " + json.dumps(text))
        lines.append(f"ids {n} " + " ".join(map(str, ids)))
        for p in sorted(set([0, n // 2, n - 1])):
            z = logits[p].astype(np.float64)
            order = np.argsort(-z, kind="stable")[:N_TOP]
            lines.append(f"pos {p}")
            lines.append(f"stats {fmt(z.mean())} {fmt(z.std())} {fmt(z.max())} {int(z.argmax())} {fmt(logsumexp(z))}")
            lines.append(f"top {N_TOP} " + " ".join(f"{int(i)} {fmt(z[i])}" for i in order))
            sidx = np.arange(0, m.vocab, SAMPLE_STRIDE)
            lines.append(f"samples {len(sidx)} " + " ".join(f"{int(i)} {fmt(z[i])}" for i in sidx))
        seq = list(ids)
        gen, margin = [], []
        for _ in range(N_GREEDY):
            z = m.forward(seq)[-1]
            two = np.argsort(-z, kind="stable")[:2]
            gen.append(int(two[0]))
            margin.append(float(z[two[0]] - z[two[1]]))
            seq.append(int(two[0]))
        lines.append(f"greedy {N_GREEDY} " + " ".join(map(str, gen)))
        lines.append(f"greedy_margin {N_GREEDY} " + " ".join(fmt(v) for v in margin))
        lines.append("# greedy text: " + json.dumps(tok.decode(gen, skip_special_tokens=False)))
        lines.append("end")
        print(f"{name}: n={n} top1={int(logits[-1].argmax())} greedy={tok.decode(gen)!r}", file=sys.stderr)
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {a.out} in {time.time() - t0:.1f}s", file=sys.stderr)


def wiki_ids(tok, path, n):
    with open(path, "rb") as f:          # bytes as they are: the file has CRLF line ends, keep them
        text = f.read().decode("utf-8")
    ids = tokenize(tok, text)
    if len(ids) < n:
        raise SystemExit(f"{path}: only {len(ids)} tokens, need {n}")
    return ids, len(text)


def cmd_ppl(a):
    t0 = time.time()
    m = Model(a.model, np.float64 if a.dtype == "f64" else np.float32)
    tok = build_tokenizer(m.reader)
    n_need = PPL_CTX * PPL_CHUNKS
    ids, n_chars = wiki_ids(tok, a.text, n_need)
    n_total = len(ids)
    ids = ids[:n_need]
    with open(a.ids_out, "w") as f:
        f.write(f"# WikiText-2 raw test ({os.path.basename(a.text)}, {n_chars} chars, bytes read as is, CRLF kept), tokenized whole\n")
        f.write(f"# with the HF tokenizers BPE built from the GGUF vocab (no BOS, add_bos_token=False): {n_total} tokens;\n")
        f.write(f"# these are the first {n_need}, one per line. Produced by tools/reference/smollm2_numpy.py ppl.\n")
        f.write("\n".join(map(str, ids)) + "\n")
    # per window: all = predictions at positions 0..510 (targets 1..511, 511 per window);
    # half = llama.cpp perplexity convention: positions 256..510 (targets 257..511, 255 per window).
    rows = []
    tot = {"all": [0.0, 0], "half": [0.0, 0]}
    first = PPL_CTX // 2
    for w in range(PPL_CHUNKS):
        win = ids[w * PPL_CTX:(w + 1) * PPL_CTX]
        lp = log_softmax(m.forward(win).astype(np.float64))
        nll = -lp[np.arange(PPL_CTX - 1), np.asarray(win[1:])]      # nll[p] predicts win[p+1]
        s_all, s_half = float(nll.sum()), float(nll[first:].sum())
        tot["all"][0] += s_all
        tot["all"][1] += PPL_CTX - 1
        tot["half"][0] += s_half
        tot["half"][1] += PPL_CTX - 1 - first
        rows.append((w, s_all, PPL_CTX - 1, s_half, PPL_CTX - 1 - first))
        print(f"window {w}: all ppl {math.exp(s_all / (PPL_CTX - 1)):.4f}  half ppl "
              f"{math.exp(s_half / (PPL_CTX - 1 - first)):.4f}  ({time.time() - t0:.0f}s)", file=sys.stderr)
    lines = [
        "# SmolLM2-135M-Instruct WikiText-2 perplexity, independent numpy forward pass (see tests/fixtures/README.md).",
        f"# produced by: python3 tools/reference/smollm2_numpy.py ppl --dtype {a.dtype}",
        f"# versions: {versions()}",
        f"# date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"# ids: tests/fixtures/smollm2_wikitext_8k_ids.txt = first {n_need} of {n_total} tokens of the whole file, no BOS anywhere.",
        f"# windows: {PPL_CHUNKS} disjoint windows of {PPL_CTX}: window w = ids[{PPL_CTX}w .. {PPL_CTX}w+{PPL_CTX - 1}], each evaluated",
        "# from an empty cache at positions 0..511 (token ids unchanged: no BOS substitution since add_bos_token=False).",
        "# nll[p] = -log softmax(logits at window position p)[window token p+1].",
        "# 'all'  = sum over p = 0..510 (511 targets per window).",
        f"# 'half' = llama.cpp llama-perplexity convention: p = {first}..510 (targets {first + 1}..511, {PPL_CTX - 1 - first} per window).",
        "# format: 'window w nll_sum_all n_all nll_sum_half n_half'; 'total CONV n mean_nll ppl'.",
    ]
    for r in rows:
        lines.append(f"window {r[0]} {r[1]:.6f} {r[2]} {r[3]:.6f} {r[4]}")
    for conv in ("all", "half"):
        s, n = tot[conv]
        lines.append(f"total {conv} {n} {s / n:.6f} {math.exp(s / n):.6f}")
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    for conv in ("all", "half"):
        s, n = tot[conv]
        print(f"{conv}: n={n} mean_nll={s / n:.6f} ppl={math.exp(s / n):.4f}", file=sys.stderr)
    print(f"wrote {a.out} and {a.ids_out} in {time.time() - t0:.1f}s", file=sys.stderr)


def own_dequant(x):
    """Second, hand-written decoder for Q4_1 / Q8_0 blocks, to check gguf.quants against the format."""
    raw = np.asarray(x.data, dtype=np.uint8)
    rows = raw.shape[0]
    if x.tensor_type == gguf.GGMLQuantizationType.Q8_0:      # { f16 d; int8 q[32] }
        b = raw.reshape(rows, -1, 34)
        d = b[..., 0:2].copy().view(np.float16).astype(np.float32)
        q = b[..., 2:].view(np.int8).astype(np.float32)
        return (d * q).reshape(rows, -1)
    if x.tensor_type == gguf.GGMLQuantizationType.Q4_1:      # { f16 d; f16 m; u8 qs[16] }: lo nibbles 0..15, hi 16..31
        b = raw.reshape(rows, -1, 20)
        d = b[..., 0:2].copy().view(np.float16).astype(np.float32)
        mn = b[..., 2:4].copy().view(np.float16).astype(np.float32)
        qs = b[..., 4:]
        q = np.concatenate([qs & 15, qs >> 4], axis=-1).astype(np.float32)
        return (d * q + mn).reshape(rows, -1)
    raise ValueError(x.tensor_type)


def cmd_selfcheck(a):
    r = gguf.GGUFReader(a.model)
    t = {x.name: x for x in r.tensors}
    for name in ("token_embd.weight", "blk.0.attn_q.weight", "blk.29.ffn_down.weight"):
        x = t[name]
        ref = gguf.quants.dequantize(x.data, x.tensor_type)
        mine = own_dequant(x)
        print(f"{name} {x.tensor_type.name}: max |gguf - own| = {float(np.abs(ref - mine).max()):.3g}")
        assert np.array_equal(ref, mine), name
    m = Model(a.model, np.float64)
    tok = build_tokenizer(m.reader)
    ids = tokenize(tok, PROMPTS[0][1])
    full = m.forward(ids)
    # causality: the logits of a prefix do not depend on later tokens
    pre = m.forward(ids[:3])
    print(f"prefix consistency max diff = {float(np.abs(full[:3] - pre).max()):.3g}")
    assert np.allclose(full[:3], pre, atol=1e-9)
    m32 = Model(a.model, np.float32)
    d = float(np.abs(m32.forward(ids) - full).max())
    print(f"float32 vs float64 logits max diff = {d:.3g}")
    print("selfcheck ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["logits", "ppl", "selfcheck", "tokenize"])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--dtype", choices=["f64", "f32"], default="f64")
    ap.add_argument("--text", default=None, help="ppl: WikiText file; tokenize: the text")
    ap.add_argument("--out", default=None)
    ap.add_argument("--ids-out", default=os.path.join(FIX, "smollm2_wikitext_8k_ids.txt"))
    a = ap.parse_args()
    if a.cmd == "logits":
        a.out = a.out or os.path.join(FIX, "smollm2_logits.txt")
        cmd_logits(a)
    elif a.cmd == "ppl":
        a.text = a.text or DEFAULT_WIKI
        a.out = a.out or os.path.join(FIX, "smollm2_wikitext_ppl.txt")
        cmd_ppl(a)
    elif a.cmd == "selfcheck":
        cmd_selfcheck(a)
    else:
        tok = build_tokenizer(gguf.GGUFReader(a.model))
        print(tokenize(tok, a.text or ""))


if __name__ == "__main__":
    main()
