# throw-away: are the per-256 patch's activation codes ggml's Q8_K codes? float32 arithmetic of both
# conventions on the inputs of Gemma-3-270M's attn_output / ffn_down (float64 forward, cast to f32)
import sys, numpy as np
sys.path.insert(0, "./tools/reference")
import gemma3_numpy as G
f32 = np.float32
tot = [0, 0, 0]
def ours(b):  # vq_q8k_quantize of the patch: d = amax/127, id = 1/d, v = x*id, rne, clamp
    a = np.abs(b).max(1, keepdims=True); d = (a / f32(127)).astype(f32)
    idd = np.where(d > 0, f32(1) / np.where(d > 0, d, f32(1)), f32(0)).astype(f32)
    return np.clip(np.rint((b * idd).astype(f32)), -127, 127), d[:, 0]
def ggml(b):  # quantize_row_q8_K_ref: max = signed value of largest |x|, iscale = -127/max, nearest_int, MIN 127; d = 1/iscale
    i = np.abs(b).argmax(1); mx = b[np.arange(len(b)), i][:, None]
    isc = (f32(-127) / mx).astype(f32)
    q = np.minimum(127, np.rint((isc * b).astype(f32))); return q, (f32(1) / isc[:, 0]).astype(f32)
class Rec:
    __array_ufunc__ = None
    def __init__(self, W): self.W = W
    @property
    def T(self): return self
    def __rmatmul__(self, x):
        b = x.astype(f32).reshape(-1, 256)
        qo, do = ours(b); qg, dg = ggml(b)
        # ggml's codes carry the opposite sign of its d: compare the dequantized values' codes
        same = (qo * np.sign(do)[:, None]) == (qg * np.sign(dg)[:, None])
        tot[0] += same.size; tot[1] += (~same).sum(); tot[2] += np.sum(np.abs(do) != np.abs(dg))
        return x @ self.W.T
m = G.Model("./models/gemma-3-270m-q4_k_m.gguf")
for L in m.layers:
    L["attn_output"] = Rec(L["attn_output"]); L["ffn_down"] = Rec(L["ffn_down"])
tok = G.SpmTokenizer(m.reader)
text = open("/work/shared/data/wikitext-2-raw-test.txt", "rb").read().decode("utf-8")[:4000]
ids = tok.encode(text)[:64]
m.forward(ids, want=[len(ids) - 1])
print(f"{len(ids)} tokens: {tot[0]} codes, {tot[1]} differ between the patch's and ggml's Q8_K convention; |d| differs in {tot[2]} of {tot[0] // 256} super-blocks")
