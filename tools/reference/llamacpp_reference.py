#!/usr/bin/env python3
"""Second reference: llama.cpp (through llama-cpp-python) on the same ids as ours.

SmolLM2-135M-Instruct (logits, ppl): reads the numpy fixtures (tests/fixtures/smollm2_logits.txt,
smollm2_wikitext_8k_ids.txt), runs llama.cpp on exactly those ids, and adds 'llamacpp_' lines to the
fixtures (old ones are replaced): top-20 logits and the max |llama.cpp - numpy| difference per checked
position, its greedy continuation, a tokenizer cross-check, and its WikiText-2 perplexity under both
conventions.

Gemma 3 270M (gemma-ppl): WikiText-2 perplexity over the windows `veloxquant perplexity --ctx 1024
--max-tokens 2046 --bos-per-window --score second-half` scores (window w = BOS + text ids
[1023w, 1023w + 1023), predictions at window positions 512..1022), for each --kv cache type, plus the
windows llama.cpp's own llama-perplexity would take from the same text (BOS-prefixed token list cut
every 1024, each window's first token replaced by BOS). The text ids are llama.cpp's tokenization of the
whole file, compared with --ids (our `veloxquant tokenize --no-bos` output) when given; with --ids the
given ids are the ones fed. Adds/replaces the 'llamacpp_' lines of tests/fixtures/gemma3_wikitext_ppl.txt
(the numpy script keeps them when it rewrites its own lines).

Run with the venv that has llama-cpp-python (see tests/fixtures/README.md):
  .venv-llamacpp/bin/python tools/reference/llamacpp_reference.py [logits|ppl|all] [--threads 2]
  .venv-llamacpp/bin/python tools/reference/llamacpp_reference.py gemma-ppl [--ids FILE] [--kv f16 --kv q8_0]
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
GEMMA_MODEL = os.path.join(REPO, "models", "gemma-3-270m-q4_k_m.gguf")
DEFAULT_WIKI = os.path.abspath(os.path.join(REPO, "..", "shared", "data", "wikitext-2-raw-test.txt"))
PPL_CTX = 512


def version_line():
    import importlib.metadata as md
    return (f"llama-cpp-python {md.version('llama-cpp-python')} (vendored llama.cpp built from source, "
            f"GGML_NATIVE=ON), numpy {np.__version__}; system_info: "
            f"{llama_cpp.llama_print_system_info().decode().strip()}")


KV_TYPES = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0}


def load(model, threads, n_ctx, **kw):
    return llama_cpp.Llama(model_path=model, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx,
                           n_threads=threads, n_threads_batch=threads, logits_all=True,
                           verbose=False, seed=0, **kw)


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


def read_ids(path):
    """Token ids, the first field of each line (`veloxquant tokenize` prints 'id<TAB>"piece"'); '#' lines skipped."""
    out = []
    with open(path) as f:
        for ln in f:
            w = ln.split()
            if w and not ln.startswith("#"):
                out.append(int(w[0]))
    return out


def half_nll(llm, win, first):
    """Sum of -log p(win[p+1] | win[..p]) over p = first..len(win)-2, float64, one forward over win from an
    empty cache; also the per-position values."""
    llm.reset()
    llm.eval(win)
    n = len(win)
    nll = np.empty(n - 1 - first)
    for j, p in enumerate(range(first, n - 1)):
        z = np.asarray(llm.scores[p], dtype=np.float64)
        m = z.max()
        nll[j] = m + math.log(np.exp(z - m).sum()) - z[win[p + 1]]
    return float(nll.sum()), nll


def cmd_gemma_ppl(a):
    C = a.ctx
    per_win, first = C - 1, C // 2
    path = a.out
    keep = []
    if os.path.exists(path):
        with open(path) as f:
            keep = [ln.rstrip("\n") for ln in f if not ln.startswith("llamacpp_")]
    with open(a.text, "rb") as f:       # bytes as they are (CRLF kept), as llama-perplexity reads them
        text = f.read().decode("utf-8")
    out = []
    res = {}
    for kv in a.kv:
        kw = {"type_k": KV_TYPES[kv], "type_v": KV_TYPES[kv]}
        if kv != "f16":
            kw["flash_attn"] = True     # llama.cpp needs flash attention for a quantized V cache
        llm = load(a.model, a.threads, C, **kw)
        if not out:
            out.append(f"llamacpp_version {version_line()} threads {a.threads} date "
                       f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
            t0 = time.time()
            lt = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
            line = f"llamacpp_tokenize_wikitext n_total {len(lt)}"
            ids = lt
            if a.ids:
                ours = read_ids(a.ids)
                k = min(len(lt), len(ours))
                first_diff = next((i for i in range(k) if lt[i] != ours[i]), -1)
                line += f" ours_n_total {len(ours)} all_equal {int(lt == ours)} first_diff {first_diff}"
                ids = ours
            out.append(line)
            print(f"llama.cpp tokenized wikitext: {line} ({time.time() - t0:.1f}s)", file=sys.stderr)
            bos = llm.token_bos()
            n = min(len(ids), a.max_tokens) if a.max_tokens > 0 else len(ids)
            wins = [[bos] + ids[w * per_win:(w + 1) * per_win] for w in range(n // per_win)]
            # llama-perplexity: tokens = BOS + text ids, cut every C; each window's first token becomes BOS
            full = [bos] + lt
            lp_wins = [[bos] + full[c * C + 1:(c + 1) * C] for c in range(len(wins))]
            lp_text_start = [c * C for c in range(len(wins))]
        for name, ws in (("", wins), ("perplexity_convention_", lp_wins)):
            tot, cnt = 0.0, 0
            for w, win in enumerate(ws):
                t0 = time.time()
                s_, nll = half_nll(llm, win, first)
                tot += s_
                cnt += len(nll)
                if not name and w == 0 and a.dump:
                    np.savetxt(f"{a.dump}.{kv}.w0.txt", nll, fmt="%.6f")
                out.append(f"llamacpp_{name}window {kv} {w} nll_sum_half {s_:.6f} {len(nll)}")
                print(f"{kv} {name or 'ours_'}window {w}: half ppl {math.exp(s_ / len(nll)):.4f} "
                      f"({time.time() - t0:.1f}s)", file=sys.stderr)
            out.append(f"llamacpp_{name}total {kv} half {cnt} {tot / cnt:.6f} {math.exp(tot / cnt):.6f}")
            res[name + kv] = math.exp(tot / cnt)
            print(f"llama.cpp {kv} {name or 'our windows'}: n={cnt} ppl={math.exp(tot / cnt):.4f}", file=sys.stderr)
        del llm
    out.insert(2, "llamacpp_perplexity_convention_windows text_start " + " ".join(map(str, lp_text_start)) +
               " (index into the BOS-less ids of the window's second token)")
    if not keep:
        keep = ["# Gemma 3 270M WikiText-2 perplexity (see tests/fixtures/README.md); llama.cpp lines from",
                "# tools/reference/llamacpp_reference.py gemma-ppl (the numpy lines come from gemma3_numpy.py ppl)."]
    with open(path, "w") as f:
        f.write("\n".join(keep + out) + "\n")
    print(f"updated {path}: " + ", ".join(f"{k} {v:.4f}" for k, v in res.items()), file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["logits", "ppl", "all", "gemma-ppl"], nargs="?", default="all")
    ap.add_argument("--model", default=None, help="default: SmolLM2 (logits, ppl), Gemma 3 270M (gemma-ppl)")
    ap.add_argument("--text", default=DEFAULT_WIKI)
    ap.add_argument("--threads", type=int, default=2)
    g = ap.add_argument_group("gemma-ppl")
    g.add_argument("--ctx", type=int, default=1024)
    g.add_argument("--max-tokens", type=int, default=2046, help="text ids used (2 windows of 1023)")
    g.add_argument("--ids", help="our ids of the whole text (`veloxquant tokenize -f TEXT --no-bos`): "
                                 "compared with llama.cpp's, and fed instead")
    g.add_argument("--kv", action="append", choices=sorted(KV_TYPES), help="KV cache type (repeatable; default f16)")
    g.add_argument("--dump", help="write window 0's per-position NLLs to DUMP.KV.w0.txt")
    g.add_argument("--out", default=os.path.join(FIX, "gemma3_wikitext_ppl.txt"))
    a = ap.parse_args()
    if a.cmd == "gemma-ppl":
        a.model = a.model or GEMMA_MODEL
        a.kv = a.kv or ["f16"]
        cmd_gemma_ppl(a)
        return
    a.model = a.model or DEFAULT_MODEL
    llm = load(a.model, a.threads, PPL_CTX)
    if a.cmd in ("logits", "all"):
        cmd_logits(a, llm)
    if a.cmd in ("ppl", "all"):
        cmd_ppl(a, llm)


if __name__ == "__main__":
    main()
