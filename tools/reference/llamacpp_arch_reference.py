#!/usr/bin/env python3
"""llama.cpp's next-token log-probabilities at every position of a 512-token prefill, for one synthetic
model file (scripts/make_synthetic_gguf.py), written as a compact fixture (tests/fixtures/arch/*.txt)
that tests/eval/test_arch_ref.c compares our forward pass with.

The ids: the first bytes of WikiText-2's test file (../shared/data/wikitext-2-raw-test.txt, read as bytes,
CRLF kept), cut after a line end well past 512 tokens, tokenized by llama.cpp itself (the file's own
vocabulary; BOS first when the vocabulary adds one), the first 512 ids kept. They are fed to llama.cpp
in ONE batch (n_ctx = n_batch = n_ubatch = 512, every position's logits), from an empty F32 KV cache,
flash attention off, so that the cache adds no rounding of its own. Per position P the fixture holds
the logsumexp of the logits, the top-8 ids with their log-probabilities (logit - logsumexp), the
log-probabilities of 16 fixed ids spread over the vocabulary, and the log-probability of the next id
(P < 511); then the perplexity over the 511 predictions. Everything is float64 from llama.cpp's float32
logits.

Run (llama-cpp-python 0.3.36 built as tests/fixtures/README.md says; numpy):
  PYTHONPATH=/work/llamacpp/llama_cpp_python-0.3.36 LLAMA_CPP_LIB_PATH=/work/llamacpp/build/bin \\
    /work/venv-ref/bin/python tools/reference/llamacpp_arch_reference.py MODEL.gguf -o FIXTURE \\
    --preset NAME [--preset-args "..."]
"""
import argparse
import hashlib
import math
import os
import sys

import numpy as np
import llama_cpp

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
WIKI = os.path.abspath(os.path.join(REPO, "..", "shared", "data", "wikitext-2-raw-test.txt"))
N = 512
TOPK = 8
NSAMP = 16


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--preset", required=True, help="the make_synthetic_gguf.py preset (recorded)")
    ap.add_argument("--preset-args", default="", help="its extra arguments (recorded)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--wiki", default=WIKI)
    a = ap.parse_args()

    llm = llama_cpp.Llama(model_path=a.model, n_ctx=N, n_batch=N, n_ubatch=N, n_threads=a.threads,
                          n_threads_batch=a.threads, logits_all=True, verbose=False, seed=0,
                          type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32, flash_attn=False)
    raw = open(a.wiki, "rb").read(20000)
    raw = raw[:raw.rfind(b"\n") + 1]
    ids = llm.tokenize(raw, add_bos=True, special=False)
    assert len(ids) > N + 64, len(ids)
    ids = ids[:N]
    V = llm.n_vocab()
    samples = [round(j * (V - 1) / (NSAMP - 1)) for j in range(NSAMP)]
    llm.reset()
    llm.eval(ids)
    out = [f"# llama.cpp next-token log-probabilities at every position of a {N}-token prefill "
           f"(tools/reference/llamacpp_arch_reference.py; tests/fixtures/README.md)",
           f"llamacpp_version llama-cpp-python {llama_cpp.__version__} (vendored llama.cpp built from source); "
           f"{llama_cpp.llama_print_system_info().decode().strip()}",
           f"preset {a.preset} {a.preset_args}".rstrip(),
           f"sha256 {sha256(a.model)}",
           "kv f32",
           f"vocab {V}",
           f"ids {N} " + " ".join(map(str, ids)),
           f"samples {NSAMP} " + " ".join(map(str, samples))]
    nll = []
    for p in range(N):
        z = np.asarray(llm.scores[p], dtype=np.float64)
        m = z.max()
        lse = m + math.log(np.exp(z - m).sum())
        lp = z - lse
        top = np.argsort(-z, kind="stable")[:TOPK]
        line = f"pos {p} lse {lse:.6f} top {TOPK} " + " ".join(f"{int(i)} {lp[i]:.6f}" for i in top)
        line += " samp " + " ".join(f"{lp[i]:.6f}" for i in samples)
        if p + 1 < N:
            line += f" next {lp[ids[p + 1]]:.6f}"
            nll.append(-lp[ids[p + 1]])
        out.append(line)
    mean = float(np.mean(nll))
    out.append(f"ppl {len(nll)} {mean:.6f} {math.exp(mean):.6f}")
    with open(a.output, "w") as f:
        f.write("\n".join(out) + "\n")
    print(f"{a.preset}: {len(nll)} predictions, mean nll {mean:.6f}, ppl {math.exp(mean):.4f} -> {a.output}")


if __name__ == "__main__":
    sys.exit(main())
