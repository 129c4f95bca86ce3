#!/usr/bin/env python3
"""Second reference for SmolLM2-135M-Instruct: llama.cpp (through llama-cpp-python) on the same ids.

Reads the numpy fixtures (tests/fixtures/smollm2_logits.txt, smollm2_wikitext_8k_ids.txt), runs
llama.cpp on exactly those ids, and adds 'llamacpp_' lines to the fixtures (old ones are replaced):
top-20 logits and the max |llama.cpp - numpy| difference per checked position, its greedy
continuation, a tokenizer cross-check, and its WikiText-2 perplexity under both conventions.
Run with the venv that has llama-cpp-python (see tests/fixtures/README.md):
  .venv-llamacpp/bin/python tools/reference/llamacpp_reference.py [logits|ppl|all] [--threads 2]
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import llama_cpp

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
FIX = os.path.join(REPO, "tests", "fixtures")
DEFAULT_MODEL = os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_WIKI = os.path.abspath(os.path.join(REPO, "..", "shared", "data", "wikitext-2-raw-test.txt"))
PPL_CTX = 512


def version_line():
    import importlib.metadata as md
    return (f"llama-cpp-python {md.version('llama-cpp-python')} (vendored llama.cpp built from source, "
            f"GGML_NATIVE=ON), numpy {np.__version__}; system_info: "
            f"{llama_cpp.llama_print_system_info().decode().strip()}")


def load(model, threads, n_ctx):
    return llama_cpp.Llama(model_path=model, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx,
                           n_threads=threads, n_threads_batch=threads, logits_all=True,
                           verbose=False, seed=0)


def run_logits(llm, ids):
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[:len(ids)], dtype=np.float64)


def parse_cases(lines):
    """Yield dicts with the line span and the fields the comparison needs."""
    cases, cur = [], None
    for i, ln in enumerate(lines):
        w = ln.split()
        if not w:
            continue
        if w[0] == "case":
            cur = {"name": w[1], "start": i, "pos": {}}
        elif cur is None:
            continue
        elif w[0] == "text":
            cur["text"] = json.loads(ln[5:])
        elif w[0] == "ids":
            cur["ids"] = [int(x) for x in w[2:]]
        elif w[0] == "pos":
            p = int(w[1])
            cur["pos"][p] = {}
            last = p
        elif w[0] in ("top", "samples"):
            k = int(w[1])
            cur["pos"][last][w[0]] = {int(w[2 + 2 * j]): float(w[3 + 2 * j]) for j in range(k)}
        elif w[0] == "greedy":
            cur["greedy"] = [int(x) for x in w[2:]]
        elif w[0] == "end":
            cur["end"] = i
            cases.append(cur)
            cur = None
    return cases


def cmd_logits(a, llm):
    path = os.path.join(FIX, "smollm2_logits.txt")
    with open(path) as f:
        lines = [ln.rstrip("\n") for ln in f if not ln.startswith("llamacpp_")]
    cases = parse_cases(lines)
    extra = {}
    for c in cases:
        ids = c["ids"]
        out = []
        tok_ids = llm.tokenize(c["text"].encode("utf-8"), add_bos=False, special=True)
        out.append(f"llamacpp_tokenize_match {int(tok_ids == ids)}")
        if tok_ids != ids:
            print(f"{c['name']}: llama.cpp tokenizer differs: {tok_ids} vs {ids}", file=sys.stderr)
        z = run_logits(llm, ids)
        worst = 0.0
        for p, ref in sorted(c["pos"].items()):
            zp = z[p]
            order = np.argsort(-zp, kind="stable")[:20]
            both = {**ref["top"], **ref["samples"]}
            d = max(abs(zp[i] - v) for i, v in both.items())
            worst = max(worst, d)
            out.append(f"llamacpp_top20 pos {p} 20 " + " ".join(f"{int(i)} {zp[i]:.6f}" for i in order))
            out.append(f"llamacpp_maxabsdiff pos {p} {d:.6f} over {len(both)} ids (numpy top-50 and samples)")
        seq, gen = list(ids), []
        for _ in range(len(c["greedy"])):
            nxt = int(np.argmax(run_logits(llm, seq)[-1]))
            gen.append(nxt)
            seq.append(nxt)
        out.append(f"llamacpp_greedy {len(gen)} " + " ".join(map(str, gen)))
        agree = 0
        while agree < len(gen) and gen[agree] == c["greedy"][agree]:
            agree += 1
        out.append(f"llamacpp_greedy_agree_prefix {agree}")
        extra[c["end"]] = out
        print(f"{c['name']}: max|llama.cpp - numpy| = {worst:.4f}, greedy agrees on {agree}/{len(gen)}",
              file=sys.stderr)
    res = []
    for i, ln in enumerate(lines):
        res.extend(extra.get(i, []))
        res.append(ln)
    # version line once, right after the header comments
    hdr = f"llamacpp_version {version_line()} threads {a.threads}"
    k = next(i for i, ln in enumerate(res) if ln.startswith("case "))
    res.insert(k, hdr)
    with open(path, "w") as f:
        f.write("\n".join(res) + "\n")
    print(f"updated {path}", file=sys.stderr)


def cmd_ppl(a, llm):
    ids_path = os.path.join(FIX, "smollm2_wikitext_8k_ids.txt")
    with open(ids_path) as f:
        ids = [int(ln) for ln in f if ln.strip() and not ln.startswith("#")]
    path = os.path.join(FIX, "smollm2_wikitext_ppl.txt")
    with open(path) as f:
        lines = [ln.rstrip("\n") for ln in f if not ln.startswith("llamacpp_")]
    out = [f"llamacpp_version {version_line()} threads {a.threads}"]
    # tokenizer cross-check: llama.cpp's own tokenization of the whole file, as llama-perplexity does
    with open(a.text, "rb") as f:       # bytes as they are (CRLF kept), as llama-perplexity reads them
        text = f.read().decode("utf-8")
    t0 = time.time()
    add_bos = llm.metadata.get("tokenizer.ggml.add_bos_token", "false") == "true"   # False for SmolLM2
    lt = llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=False)
    first_diff = next((i for i in range(min(len(lt), len(ids))) if lt[i] != ids[i]), -1)
    out.append(f"llamacpp_tokenize_wikitext n_total {len(lt)} first8192_match {int(lt[:len(ids)] == ids)} first_diff {first_diff}")
    print(f"llama.cpp tokenized wikitext: {len(lt)} tokens, first 8192 equal: {lt[:len(ids)] == ids} ({time.time() - t0:.1f}s)",
          file=sys.stderr)
    n_win = len(ids) // PPL_CTX
    first = PPL_CTX // 2
    tot = {"all": [0.0, 0], "half": [0.0, 0]}
    for w in range(n_win):
        win = ids[w * PPL_CTX:(w + 1) * PPL_CTX]
        z = run_logits(llm, win)
        m = z.max(axis=1, keepdims=True)
        lp = z - (m + np.log(np.exp(z - m).sum(axis=1, keepdims=True)))
        nll = -lp[np.arange(PPL_CTX - 1), np.asarray(win[1:])]
        s_all, s_half = float(nll.sum()), float(nll[first:].sum())
        tot["all"][0] += s_all
        tot["all"][1] += PPL_CTX - 1
        tot["half"][0] += s_half
        tot["half"][1] += PPL_CTX - 1 - first
        out.append(f"llamacpp_window {w} {s_all:.6f} {PPL_CTX - 1} {s_half:.6f} {PPL_CTX - 1 - first}")
        print(f"window {w}: all {math.exp(s_all / (PPL_CTX - 1)):.4f} half {math.exp(s_half / (PPL_CTX - 1 - first)):.4f}",
              file=sys.stderr)
    for conv in ("all", "half"):
        s, n = tot[conv]
        out.append(f"llamacpp_total {conv} {n} {s / n:.6f} {math.exp(s / n):.6f}")
        print(f"llama.cpp {conv}: n={n} mean_nll={s / n:.6f} ppl={math.exp(s / n):.4f}", file=sys.stderr)
    with open(path, "w") as f:
        f.write("\n".join(lines + out) + "\n")
    print(f"updated {path}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["logits", "ppl", "all"], nargs="?", default="all")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--text", default=DEFAULT_WIKI)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    llm = load(a.model, a.threads, PPL_CTX)
    if a.cmd in ("logits", "all"):
        cmd_logits(a, llm)
    if a.cmd in ("ppl", "all"):
        cmd_ppl(a, llm)


if __name__ == "__main__":
    main()
