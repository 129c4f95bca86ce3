# throw-away: quantization error of the activations entering Gemma-3-270M's K-quant matrices
# (attn_output Q4_K, ffn_down Q4_K/Q6_K) under per-32 (q8act), per-256 (ggml Q8_K) and per-256
# with an integer multiplier 1..16 per 32; the float64 forward of tools/reference/gemma3_numpy.py
import sys, math, numpy as np
sys.path.insert(0, "./tools/reference")
import gemma3_numpy as G

def rne(v): return np.round(v)  # numpy rounds half to even
def q32(x):
    b = x.reshape(-1, 32); a = np.abs(b).max(1, keepdims=True); d = a / 127
    with np.errstate(divide='ignore', invalid='ignore'): q = np.clip(rne(np.where(d > 0, b / d, 0)), -127, 127)
    return (q * d).reshape(x.shape)
def q256(x):
    b = x.reshape(-1, 256); i = np.abs(b).argmax(1); mx = b[np.arange(len(b)), i][:, None]
    with np.errstate(divide='ignore', invalid='ignore'):
        isc = np.where(mx != 0, -127 / mx, 0); q = np.minimum(127, rne(isc * b)); d = np.where(mx != 0, 1 / isc, 0)
    return (q * d).reshape(x.shape)
def q256m(x, S=16):
    b = x.reshape(-1, 256); a = np.abs(b).max(1, keepdims=True); D = a / (127 * S)
    aj = np.abs(b.reshape(-1, 8, 32)).max(2)
    with np.errstate(divide='ignore', invalid='ignore'):
        m = np.clip(np.ceil(S * aj / a), 1, S); step = (D * m)[:, :, None]
        q = np.clip(rne(np.where(step > 0, b.reshape(-1, 8, 32) / step, 0)), -127, 127)
    return (q * step).reshape(x.shape)
SCHEMES = {"per32": q32, "q8k256": q256, "q8k256+mul16": q256m}
stats = {}
class Rec:
    __array_ufunc__ = None
    def __init__(self, W, name): self.W, self.name = W, name
    @property
    def T(self): return self
    def __rmatmul__(self, x):
        y = x @ self.W.T
        for k, f in SCHEMES.items():
            e = (f(x) - x) @ self.W.T
            stats.setdefault((self.name, k), []).append((np.sum(e * e), np.sum(y * y)))
        # outlier profile of the input: max|x| per 256 over median |x|
        b = np.abs(x.reshape(-1, 256))
        stats.setdefault((self.name, "ratio"), []).append(np.median(b.max(1) / np.median(b, 1)))
        return y
m = G.Model("./models/gemma-3-270m-q4_k_m.gguf")
for l, L in enumerate(m.layers):
    L["attn_output"] = Rec(L["attn_output"], f"L{l:02d}.attn_output")
    L["ffn_down"] = Rec(L["ffn_down"], f"L{l:02d}.ffn_down")
tok = G.SpmTokenizer(m.reader)
text = open("/work/shared/data/wikitext-2-raw-test.txt", "rb").read().decode("utf-8")[:4000]
ids = tok.encode(text)[:int(sys.argv[1]) if len(sys.argv) > 1 else 128]
m.tok_embd_keep = m.tok_embd
m.forward(ids, want=[len(ids) - 1])
print("tokens", len(ids))
print("%-18s %8s %10s %10s %12s" % ("tensor", "max/med", "per32", "q8k256", "q8k256+mul"))
tot = {k: [0, 0] for k in SCHEMES}
for l in range(m.n_layer):
    for t in ("attn_output", "ffn_down"):
        n = f"L{l:02d}.{t}"
        row = []
        for k in SCHEMES:
            e = sum(a for a, b in stats[(n, k)]); y = sum(b for a, b in stats[(n, k)])
            row.append(math.sqrt(e / y)); tot[k][0] += e / y; tot[k][1] += 1
        print("%-18s %8.1f %10.2e %10.2e %12.2e" % (n, stats[(n, "ratio")][0], *row))
print("rms over tensors", {k: "%.2e" % math.sqrt(v[0] / v[1]) for k, v in tot.items()})
