#!/usr/bin/env python3
"""synth_activation_rms.py: a plain numpy forward pass of a llama-architecture GGUF (F16/F32 tensors, e.g.
from scripts/make_synthetic_gguf.py) over 16 fixed Llama 3 token ids, printing per layer the attention
score std, each sub-layer's output rms and the residual's rms, then the logits' std and entropy. Checks
the generator's claim that activations stay O(1) through every layer (docs/synthetic-models.md). RoPE
is left out: a rotation of q/k pairs, it changes which scores are large, not their spread nor any rms.
    .venv-ref/bin/python scripts/synth_activation_rms.py MODEL.gguf
"""
import sys

import gguf
import numpy as np

if len(sys.argv) != 2:
    sys.exit("usage: synth_activation_rms.py MODEL.gguf")
r = gguf.GGUFReader(sys.argv[1])
if r.fields["general.architecture"].contents() != "llama":
    sys.exit("synth_activation_rms: llama architecture only")
T = {t.name: t for t in r.tensors}
def kvv(k): f = r.fields[k]; return f.parts[f.data[0]][0]
n_head = int(kvv("llama.attention.head_count")); n_kv = int(kvv("llama.attention.head_count_kv"))
L = int(kvv("llama.block_count")); eps = float(kvv("llama.attention.layer_norm_rms_epsilon"))
def W(n): return np.asarray(T[n].data, dtype=np.float32)
toks = [128000, 791, 3925, 315, 279, 18991, 3577, 374, 264, 1317, 323, 6485, 832, 13, 578, 1176]
E = W("token_embd.weight"); x = E[toks]; n, d = x.shape[1], None
def rms(v): return float(np.sqrt((v ** 2).mean()))
def norm(v, w): return v / np.sqrt((v ** 2).mean(-1, keepdims=True) + eps) * w
print(f"embedding rms {rms(x):.3f}")
S = len(toks)
for l in range(L):
    b = f"blk.{l}."
    h = norm(x, W(b + "attn_norm.weight"))
    q = h @ W(b + "attn_q.weight").T; k = h @ W(b + "attn_k.weight").T; v = h @ W(b + "attn_v.weight").T
    d = q.shape[1] // n_head
    q = q.reshape(S, n_head, d); k = k.reshape(S, n_kv, d); v = v.reshape(S, n_kv, d)
    out = np.zeros_like(q); sstd = []
    for hh in range(n_head):
        kh = hh // (n_head // n_kv)
        s = q[:, hh] @ k[:, kh].T / np.sqrt(d); sstd.append(s[np.tril_indices(S)].std())
        s = np.where(np.tril(np.ones((S, S))) > 0, s, -np.inf); s -= s.max(1, keepdims=True)
        p = np.exp(s); p /= p.sum(1, keepdims=True); out[:, hh] = p @ v[:, kh]
    a = out.reshape(S, -1) @ W(b + "attn_output.weight").T
    x = x + a
    h = norm(x, W(b + "ffn_norm.weight"))
    g = h @ W(b + "ffn_gate.weight").T; u = h @ W(b + "ffn_up.weight").T
    f = (g / (1 + np.exp(-g)) * u) @ W(b + "ffn_down.weight").T
    x = x + f
    print(f"layer {l:2d}: score std {np.mean(sstd):.2f}  attn out rms {rms(a):.3f}  ffn out rms {rms(f):.3f}  residual rms {rms(x):.3f}")
out = W("output.weight") if "output.weight" in T else E
lg = norm(x, W("output_norm.weight")) @ out.T
lg64 = lg.astype(np.float64) - lg.max(1, keepdims=True); p = np.exp(lg64); p /= p.sum(1, keepdims=True)
H = -(p * np.log(np.maximum(p, 1e-300))).sum(1)
print(f"logits std {lg.std(1).mean():.2f}  entropy mean {H.mean():.2f} (min {H.min():.2f}, max {H.max():.2f}) nats")
