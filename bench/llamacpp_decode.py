#!/usr/bin/env python3
"""llama.cpp throughput baseline (through llama-cpp-python's low-level API): prefill and decode tokens/s.

For a context fill C: prefill C prompt tokens (WikiText-2 ids from tests/fixtures, repeated if C > 8192)
in n_batch chunks, then generate N tokens greedily one at a time; both phases are timed, every repeat
is reported. KV cache type selectable (f16, q8_0, q4_0); a quantized V cache needs flash attention.
Run it with the venv that holds llama-cpp-python (see tests/fixtures/README.md), e.g.
  .venv-llamacpp/bin/python bench/llamacpp_decode.py --ctx 128 --gen 64 --threads 2 --type-k f16 --type-v f16
Prints one JSON object (also written to --json if given).
"""
import argparse
import ctypes
import datetime
import json
import os
import platform
import resource
import statistics
import sys
import time

import numpy as np
import llama_cpp as L

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
DEFAULT_MODEL = os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_IDS = os.path.join(REPO, "tests", "fixtures", "smollm2_wikitext_8k_ids.txt")
KV_TYPES = {"f16": L.GGML_TYPE_F16, "q8_0": L.GGML_TYPE_Q8_0, "q4_0": L.GGML_TYPE_Q4_0}
FA = {"auto": L.LLAMA_FLASH_ATTN_TYPE_AUTO, "on": L.LLAMA_FLASH_ATTN_TYPE_ENABLED,
      "off": L.LLAMA_FLASH_ATTN_TYPE_DISABLED}


_QUIET = L.llama_log_callback(lambda level, text, user: None)   # kept alive for the process


def load_ids(path, n):
    with open(path) as f:
        ids = [int(ln) for ln in f if ln.strip() and not ln.startswith("#")]
    if not ids:
        raise SystemExit(f"{path}: no token ids")
    return [ids[i % len(ids)] for i in range(n)]


def fill_batch(batch, toks, pos0, want_last_logits):
    batch.n_tokens = len(toks)
    for i, t in enumerate(toks):
        batch.token[i] = t
        batch.pos[i] = pos0 + i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = 1 if (want_last_logits and i == len(toks) - 1) else 0


def one_repeat(ctx, batch, prompt, n_gen, n_batch, n_vocab):
    L.llama_memory_clear(L.llama_get_memory(ctx), True)
    L.llama_perf_context_reset(ctx)
    t0 = time.perf_counter()
    for s in range(0, len(prompt), n_batch):
        chunk = prompt[s:s + n_batch]
        fill_batch(batch, chunk, s, s + len(chunk) == len(prompt))
        rc = L.llama_decode(ctx, batch)
        if rc != 0:
            raise SystemExit(f"llama_decode (prefill at {s}) returned {rc}")
    L.llama_synchronize(ctx)
    t1 = time.perf_counter()
    per_tok = []
    pos = len(prompt)
    for _ in range(n_gen):
        ta = time.perf_counter()
        logits = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
        nxt = int(np.argmax(logits))
        fill_batch(batch, [nxt], pos, True)
        rc = L.llama_decode(ctx, batch)
        if rc != 0:
            raise SystemExit(f"llama_decode (decode at pos {pos}) returned {rc}")
        L.llama_synchronize(ctx)
        per_tok.append(time.perf_counter() - ta)
        pos += 1
    t2 = time.perf_counter()
    perf = L.llama_perf_context(ctx)
    return {
        "prefill_tokens": len(prompt),
        "prefill_s": t1 - t0,
        "prefill_tok_s": len(prompt) / (t1 - t0),
        "decode_tokens": n_gen,
        "decode_s": t2 - t1,
        "decode_tok_s": n_gen / (t2 - t1),
        "decode_ms_per_token_median": 1000 * statistics.median(per_tok),
        "llama_perf": {"t_p_eval_ms": perf.t_p_eval_ms, "n_p_eval": perf.n_p_eval,
                       "t_eval_ms": perf.t_eval_ms, "n_eval": perf.n_eval},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--ids", default=DEFAULT_IDS, help="prompt token ids, one per line")
    ap.add_argument("--ctx", type=int, default=128, help="context fill: prompt tokens prefilled before decoding")
    ap.add_argument("--gen", type=int, default=64, help="tokens generated (timed decode steps)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=512, help="n_batch = n_ubatch for the prefill")
    ap.add_argument("--type-k", choices=sorted(KV_TYPES), default="f16")
    ap.add_argument("--type-v", choices=sorted(KV_TYPES), default="f16")
    ap.add_argument("--flash-attn", choices=sorted(FA), default=None,
                    help="default: on when type-v is quantized (required), else off")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="untimed repeats first")
    ap.add_argument("--json", default=None, help="also write the JSON here")
    ap.add_argument("--verbose", action="store_true", help="keep llama.cpp's log on stderr")
    a = ap.parse_args()
    fa = a.flash_attn or ("on" if a.type_v != "f16" else "off")
    if a.type_v != "f16" and fa == "off":
        raise SystemExit("--type-v quantized needs --flash-attn on (llama.cpp refuses a quantized V cache without it)")

    L.llama_backend_init()
    if not a.verbose:
        L.llama_log_set(_QUIET, ctypes.c_void_p(0))
    mp = L.llama_model_default_params()
    model = L.llama_model_load_from_file(a.model.encode(), mp)
    if not model:
        raise SystemExit(f"{a.model}: llama.cpp could not load the model")
    cp = L.llama_context_default_params()
    cp.n_ctx = a.ctx + a.gen + 8
    cp.n_batch = a.batch
    cp.n_ubatch = a.batch
    cp.n_threads = a.threads
    cp.n_threads_batch = a.threads
    cp.type_k = KV_TYPES[a.type_k]
    cp.type_v = KV_TYPES[a.type_v]
    cp.flash_attn_type = FA[fa]
    cp.no_perf = False
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        raise SystemExit(f"llama.cpp refused the context (ctx {cp.n_ctx}, type_k {a.type_k}, type_v {a.type_v}, flash_attn {fa})")
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    batch = L.llama_batch_init(a.batch, 0, 1)
    prompt = load_ids(a.ids, a.ctx)

    for _ in range(a.warmup):
        one_repeat(ctx, batch, prompt, min(a.gen, 8), a.batch, n_vocab)
    reps = [one_repeat(ctx, batch, prompt, a.gen, a.batch, n_vocab) for _ in range(a.repeats)]

    import importlib.metadata as md
    out = {
        "engine": "llama.cpp",
        "llama_cpp_python": md.version("llama-cpp-python"),
        "system_info": L.llama_print_system_info().decode().strip(),
        "model": os.path.basename(a.model),
        "ctx_fill": a.ctx, "gen": a.gen, "threads": a.threads, "n_batch": a.batch,
        "type_k": a.type_k, "type_v": a.type_v, "flash_attn": fa,
        "repeats": reps,
        "median_decode_tok_s": statistics.median(r["decode_tok_s"] for r in reps),
        "median_prefill_tok_s": statistics.median(r["prefill_tok_s"] for r in reps),
        "host": platform.node(), "cpu_count": os.cpu_count(),
        "loadavg_1m": os.getloadavg()[0],
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)
    s = json.dumps(out, indent=1)
    print(s)
    if a.json:
        with open(a.json, "w") as f:
            f.write(s + "\n")


if __name__ == "__main__":
    main()
