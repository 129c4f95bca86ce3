#!/usr/bin/env python3
"""synth_logit_stats.py: next-token statistics of a (synthetic) GGUF as llama.cpp computes them: mean/min/max
entropy of the next-token distribution, std of the logits, mean top probability, how often the argmax repeats
the input token, and the NLL of the text. Checks that scripts/make_synthetic_gguf.py's weight scales give a
distribution neither flat nor one-hot (docs/synthetic-models.md).

Needs llama-cpp-python's package on PYTHONPATH and its library (e.g. the reference build):
    PYTHONPATH=/work/llamacpp/llama_cpp_python-0.3.36 LLAMA_CPP_LIB_PATH=/work/llamacpp/build/bin \\
        PY scripts/synth_logit_stats.py MODEL.gguf [--text FILE] [--tokens 96] [--offset 2000]
with PY a Python holding numpy, typing_extensions, diskcache and jinja2 (llama_cpp's imports).
"""
import argparse
import os
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--text", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data",
                                                   "wikitext-2-raw-test.txt"))
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--offset", type=int, default=2000, help="first character of the text used")
    a = ap.parse_args()
    try:
        from llama_cpp import Llama
    except ImportError as e:
        sys.exit(f"synth_logit_stats: cannot import llama_cpp ({e}); see the docstring")
    with open(a.text, encoding="utf-8") as f:
        text = f.read()[a.offset:a.offset + 8 * a.tokens]
    llm = Llama(model_path=a.model, n_ctx=max(256, a.tokens), n_threads=2, logits_all=True, verbose=False)
    toks = llm.tokenize(text.encode(), add_bos=True)[:a.tokens]
    llm.eval(toks)
    raw = np.array(llm.scores[:len(toks)], dtype=np.float64)
    lg = raw - raw.max(axis=1, keepdims=True)
    p = np.exp(lg)
    p /= p.sum(axis=1, keepdims=True)
    ent = -(p * np.log(np.maximum(p, 1e-300))).sum(axis=1)
    nll = -np.log(p[np.arange(len(toks) - 1), toks[1:]])
    echo = np.mean(np.argmax(raw, axis=1) == np.array(toks))
    print(f"{os.path.basename(a.model)}: {len(toks)} tokens: entropy mean {ent.mean():.2f} min {ent.min():.2f} "
          f"max {ent.max():.2f} nats; logit std {raw.std(axis=1).mean():.2f}; top p mean {p.max(axis=1).mean():.3f}; "
          f"argmax==input {echo:.2f}; NLL {nll.mean():.2f} nats")
    return 0


if __name__ == "__main__":
    sys.exit(main())
