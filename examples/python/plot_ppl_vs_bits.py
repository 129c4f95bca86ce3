#!/usr/bin/env python3
"""plot_ppl_vs_bits.py: perplexity against KV bits per element for several codecs on one model,
from Python, as a PNG (matplotlib: pip install matplotlib). Not run by the tests (minutes of work).

    python examples/python/plot_ppl_vs_bits.py -m models/SmolLM2-135M-Instruct.Q4_1.gguf \\
        -f ../shared/data/wikitext-2-raw-test.txt --ctx 256 --max-tokens 1024 -o ppl_vs_bits.png

The arms go through one model.perplexity(..., kv=[...]) in decode mode (one token per forward: every
prediction reads the compressed cache, as generation does; one batched forward serves all arms),
the same figures as `veloxquant perplexity --kv A --kv B ...`;
bits per element is the cache's own accounting at the end of a window (codes, scales, pages held).
A JSON file beside the PNG keeps the numbers."""
import argparse
import json
import sys
from pathlib import Path

import veloxquant as vq

ARMS = [
    "f16",
    "q8_0",
    "q4_0:rotate=1",
    "turboquant_mse:k=4,v=4",
    "turboquant_mse:k=3,v=3",
    "turboquant_mse:k=2,v=2",
    "kivi:bits=2",
    "polar",
]


def main() -> int:
    ap = argparse.ArgumentParser(prog="plot_ppl_vs_bits.py", description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-f", "--file", required=True, help="the text")
    ap.add_argument("--ctx", type=int, default=256, help="window in tokens (default 256)")
    ap.add_argument("--max-tokens", type=int, default=1024, help="tokens of the text scored (default 1024)")
    ap.add_argument("--mode", default="decode", choices=["decode", "prefill"])
    ap.add_argument("--kv", action="append", help="arms (repeatable; default: a set of codecs)")
    ap.add_argument("-t", "--threads", type=int)
    ap.add_argument("-o", "--out", default="ppl_vs_bits.png")
    a = ap.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = []
    for kv in a.kv or ARMS:   # a spec that does not parse is named and left out
        try:
            vq.KVSpec(kv).close()
            arms.append(kv)
        except vq.VeloxQuantError as e:
            print(f"{kv}: {e}", file=sys.stderr)
    rows = []
    with vq.Model(a.model, threads=a.threads) as model:
        # every arm in one pass: in decode mode one batched forward per token serves them all
        results = model.perplexity(Path(a.file), kv=arms, n_ctx=a.ctx, mode=a.mode, max_tokens=a.max_tokens,
                                   progress=lambda w, n: print(f"window {w}/{n}", file=sys.stderr, flush=True))
    for kv, r in zip(arms, results):
        print(f"{kv:28s} ppl {r.ppl:9.4f}  bits/el {r.bits_per_element:6.3f}", flush=True)
        rows.append({"kv": kv, "spec": r.kv, "ppl": r.ppl, "mean_nll": r.mean_nll,
                     "bits_per_element": r.bits_per_element, "bytes_held": r.bytes_held, "scored": r.n_scored})
    if not rows:
        return 1
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in rows:
        ax.scatter(r["bits_per_element"], r["ppl"], s=30)
        ax.annotate(r["kv"], (r["bits_per_element"], r["ppl"]), textcoords="offset points", xytext=(5, 4),
                    fontsize=8)
    ax.set_xlabel("KV cache bits per element (held)")
    ax.set_ylabel(f"perplexity ({a.mode} mode, ctx {a.ctx}, {rows[0]['scored']} predictions)")
    ax.set_title(f"{Path(a.model).name} on {Path(a.file).name}: veloxquant {vq.__version__}", fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(a.out, dpi=120)
    Path(a.out).with_suffix(".json").write_text(json.dumps(
        {"model": Path(a.model).name, "text": Path(a.file).name, "ctx": a.ctx, "max_tokens": a.max_tokens,
         "mode": a.mode, "version": vq.__version__, "arms": rows}, indent=1) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
