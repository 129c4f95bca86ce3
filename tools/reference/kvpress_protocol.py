#!/usr/bin/env python3
"""kvpress 0.5.5 itself on our model and our token ids: the context-compression protocol (issue 33).

For each window w of WikiText-2 (window = 1280 consecutive ids from offset w * 1280, no BOS, no
overlap, exactly the windows `veloxquant perplexity --mode prefill --ctx 1280 -b 1024
--first-scored 1024 --first-window N --windows M` runs):
  1. prefill the first 1024 ids; after each attention layer's forward, the press's own `compress`
     (what kvpress's forward hook calls, on the same arguments) compresses that layer's cache once.
     The prefill's hidden states do not depend on the press (a layer is compressed after its
     attention output exists), so one prefill serves every press and ratio of a window;
  2. feed the next 256 ids with the compressed cache and position ids 1024..1279 (kvpress's
     pipeline passes the context's true length as the position of the first question token),
     each layer's causal mask built from its own row count (PyramidKV keeps different counts);
  3. score the 255 predictions at positions 1024..1278 (targets 1025..1279), NLL in float64.
"none" is the same with no press. Presses and their kvpress defaults: StreamingLLM (n_sink=4),
Knorm, SnapKV (window 64, kernel 5), TOVA, ExpectedAttention (512 future positions, n_sink=4,
covariance, value norm), ObservedAttention, PyramidKV (window 64, kernel 5, beta 20); kept 75 / 50
/ 25 % = compression_ratio 0.25 / 0.5 / 0.75. The model runs with eager attention (Observed
Attention needs the attention weights; SnapKV / TOVA then read the same weights instead of
recomputing them: the same numbers) for the prefill; the continuation's attention is
`causal_attention` below (torch's sdpa with a per-layer causal mask).

The ids are ours: `veloxquant tokenize -f TEXT --no-bos` (what `perplexity` feeds), one per line
(tab and piece allowed after the id). The weights: transformers loads our GGUF
(models/SmolLM2-135M-Instruct.Q4_1.gguf, dequantized by the gguf package to float32).

Needs a venv with torch, transformers, gguf and kvpress==0.5.5 (outside git; see
docs/experiments/2026-12-08-kvpress-parity.md):
  build/veloxquant tokenize -f ../shared/data/wikitext-2-raw-test.txt --no-bos | cut -f1 > /tmp/ids.txt
  /work/kvpress-venv/bin/python tools/reference/kvpress_protocol.py --ids /tmp/ids.txt \
      --windows 0-7 -o docs/experiments/issue33-kvpress-0.5.5-wikitext.json
Writes JSON: per press and kept fraction, every window's nll_sum / ppl and ΔPPL against "none".
"""
import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
DEFAULT_MODEL = os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")

PRESSES = ["streaming_llm", "knorm", "snapkv", "tova", "expected_attention", "observed_attention",
           "pyramidkv"]


def make_press(name, ratio):
    import kvpress
    cls = {
        "streaming_llm": kvpress.StreamingLLMPress,
        "knorm": kvpress.KnormPress,
        "snapkv": kvpress.SnapKVPress,
        "tova": kvpress.TOVAPress,
        "expected_attention": kvpress.ExpectedAttentionPress,
        "observed_attention": kvpress.ObservedAttentionPress,
        "pyramidkv": kvpress.PyramidKVPress,
    }[name]
    return cls(compression_ratio=ratio)


def read_ids(path):
    ids = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                ids.append(int(line.split()[0]))
    return ids


def parse_windows(s):
    out = []
    for part in s.split(","):
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return out


def causal_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """The continuation's attention: the last n of a layer's L rows are the n queries, query i sees
    rows 0 .. L - n + i, whatever L is in that layer. transformers builds one mask from layer 0's
    length, which does not fit layers that kept fewer rows (PyramidKV); this builds its own."""
    from transformers.models.llama.modeling_llama import repeat_kv
    key = repeat_kv(key, module.num_key_value_groups)
    value = repeat_kv(value, module.num_key_value_groups)
    n, L = query.shape[-2], key.shape[-2]
    mask = torch.ones(n, L, dtype=torch.bool).tril(diagonal=L - n)
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling)
    return out.transpose(1, 2).contiguous(), None


@torch.no_grad()
def prefill_all(model, context, arms):
    """One prefill of the context; at every attention layer, after its forward, each arm's press
    compresses that layer's full keys and values (kvpress's own `compress`, on what its own
    forward hook would hand it). The prefill's hidden states do not depend on the press (a layer's
    cache is compressed after its attention output is computed), so one prefill serves every arm.
    Returns {arm: [(keys, values) per layer]}, "none" holding the full cache."""
    from transformers import DynamicCache
    lm = model.model
    store = {name: [None] * len(lm.layers) for name, _ in arms}
    for _, press in arms:
        if press is not None:
            press.post_init_from_model(model)

    def hook(module, args, kwargs, output):
        cache = kwargs["past_key_values"]
        keys = cache.layers[module.layer_idx].keys
        values = cache.layers[module.layer_idx].values
        for name, press in arms:
            if press is None:
                k, v = keys, values
            else:
                k, v = press.compress(module, kwargs["hidden_states"], keys.clone(), values.clone(),
                                      output[1], kwargs)
            store[name][module.layer_idx] = (k.clone(), v.clone())
        return output

    hooks = []
    try:
        for layer in lm.layers:
            layer.self_attn.rotary_emb = lm.rotary_emb   # as kvpress's press(model) sets it
            hooks.append(layer.self_attn.register_forward_hook(hook, with_kwargs=True))
        lm(input_ids=context, past_key_values=DynamicCache())
    finally:
        for h in hooks:
            h.remove()
    return store


@torch.no_grad()
def score_continuation(model, layers, rest, ctx):
    """Feed `rest` after the (compressed) cache at positions ctx.. (kvpress's pipeline gives the
    first question token the context's true length); NLL of the predictions at positions
    ctx .. ctx + n - 2 (targets ctx + 1 .. ctx + n - 1), float64."""
    from transformers import DynamicCache
    cache = DynamicCache()
    for l, (k, v) in enumerate(layers):
        cache.update(k, v, l)
    kept = [int(k.shape[2]) for k, _ in layers]
    pos = torch.arange(ctx, ctx + rest.shape[1], dtype=torch.long).unsqueeze(0)
    model.set_attn_implementation("kvp_causal")
    try:
        logits = model(input_ids=rest, past_key_values=cache, position_ids=pos).logits[0]
    finally:
        model.set_attn_implementation("eager")
    logp = torch.log_softmax(logits[:-1].double(), dim=-1)
    nll = -logp.gather(1, rest[0, 1:].unsqueeze(1)).squeeze(1)
    return float(nll.sum()), int(nll.numel()), kept


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ids", required=True, help="token ids, one per line (veloxquant tokenize --no-bos)")
    ap.add_argument("--model", default=DEFAULT_MODEL, help="GGUF file (default: %(default)s)")
    ap.add_argument("--windows", default="0-7", help="window indices, e.g. 0-7 or 0,3,5")
    ap.add_argument("--ctx", type=int, default=1024, help="context ids prefilled and compressed")
    ap.add_argument("--window", type=int, default=1280, help="ids per window (context + continuation)")
    ap.add_argument("--presses", default=",".join(PRESSES))
    ap.add_argument("--kept", default="0.75,0.5,0.25", help="fractions kept (compression_ratio = 1 - kept)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    import kvpress
    import transformers
    from transformers import AttentionInterface, AutoModelForCausalLM
    transformers.logging.set_verbosity_error()
    AttentionInterface.register("kvp_causal", causal_attention)

    t0 = time.time()
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(os.path.abspath(a.model)),
                                                 gguf_file=os.path.basename(a.model),
                                                 dtype=torch.float32, attn_implementation="eager")
    model.eval()
    print(f"loaded {a.model} in {time.time() - t0:.1f} s", file=sys.stderr)

    ids = read_ids(a.ids)
    wins = parse_windows(a.windows)
    kept_list = [float(x) for x in a.kept.split(",")]
    presses = [p for p in a.presses.split(",") if p]
    cont = a.window - a.ctx

    arms = [("none", 1.0)] + [(p, k) for p in presses for k in kept_list]
    res = {f"{p}@{k}": {"press": p, "kept": k, "windows": []} for p, k in arms}
    for w in wins:
        wid = ids[w * a.window:(w + 1) * a.window]
        if len(wid) < a.window:
            sys.exit(f"window {w} runs past the ids ({len(ids)})")
        t1 = time.time()
        presses_w = [(f"{p}@{k}", None if p == "none" else make_press(p, 1.0 - k)) for p, k in arms]
        store = prefill_all(model, torch.tensor([wid[:a.ctx]], dtype=torch.long), presses_w)
        print(f"window {w}: prefill and {len(arms) - 1} compressions {time.time() - t1:.1f} s",
              file=sys.stderr, flush=True)
        rest = torch.tensor([wid[a.ctx:]], dtype=torch.long)
        for name, _ in presses_w:
            t1 = time.time()
            nll_sum, n, kept = score_continuation(model, store[name], rest, a.ctx)
            res[name]["windows"].append({
                "index": w, "scored": n, "nll_sum": nll_sum, "mean_nll": nll_sum / n,
                "ppl": math.exp(nll_sum / n), "rows_kept_per_layer": kept})
            print(f"window {w} {name}: ppl {math.exp(nll_sum / n):.3f} kept {kept[0]}..{kept[-1]} "
                  f"({time.time() - t1:.1f} s)", file=sys.stderr, flush=True)
        del store

    base = res["none@1.0"]["windows"]
    for arm in res.values():
        ws = arm["windows"]
        nll = sum(x["nll_sum"] for x in ws)
        n = sum(x["scored"] for x in ws)
        arm["nll_sum"] = nll
        arm["scored"] = n
        arm["ppl"] = math.exp(nll / n)
        arm["dppl_pct"] = 100.0 * (arm["ppl"] / math.exp(sum(x["nll_sum"] for x in base) /
                                                          sum(x["scored"] for x in base)) - 1.0)
        for x, b in zip(ws, base):
            x["dppl_pct"] = 100.0 * (x["ppl"] / b["ppl"] - 1.0)

    out = {
        "what": "kvpress context-compression protocol on our ids: prefill ctx ids with the press, "
                "score the next window-ctx-1 predictions against the compressed cache",
        "kvpress": kvpress.__version__ if hasattr(kvpress, "__version__") else "0.5.5",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "model": os.path.basename(a.model), "dtype": "float32 (GGUF dequantized)",
        "attn_implementation": "eager", "ids": os.path.basename(a.ids), "n_ids": len(ids),
        "ctx": a.ctx, "window": a.window, "windows": wins, "threads": a.threads,
        "seconds": round(time.time() - t0, 1),
        "arms": list(res.values()),
    }
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
