#!/usr/bin/env python3
"""sdpa_baseline.py: the baseline of the CUDA attention benchmark (bench_cuda_attn.cu), on the same
card in the same run: torch.nn.functional.scaled_dot_product_attention, fp16, FlashAttention backend
only, one decode query per sequence, 32 query heads over 8 KV heads, head_dim 128, contexts 32k and
128k, batch 1 and 64. Two ways of asking for GQA, both timed, the faster kept as the baseline:
  gqa:    q (B, 32, 1, 128), k/v (B, 8, L, 128), enable_gqa=True;
  folded: q viewed as (B, 8, 4, 128) (each KV head's 4 query heads as 4 query rows; no mask, as a
          decode query sees every row): the KV rows are read once per KV head either way.
Timing as the C++ benchmark: CUDA events around each call, warm-up first, the median of many,
inputs rotating among copies at least 3x the L2 cache; bytes = K and V (fp16) + q + out.
With --ours CSV (bench_cuda_attn --csv) it prints the side-by-side table (markdown) and writes --md.
"""
import argparse
import csv
import math
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

H, HKV, D = 32, 8, 128
CTXS, BATCHES = (32768, 131072), (1, 64)


def timed(fn, reps, warm=3):
    for _ in range(warm):
        fn(0)
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for i, (a, b) in enumerate(ev):
        a.record()
        fn(i)
        b.record()
    torch.cuda.synchronize()
    t = sorted(a.elapsed_time(b) for a, b in ev)
    return t[len(t) // 2] * 1e3, t[0] * 1e3  # us


def copy_bw():
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda").random_(0, 255)
    b = torch.empty_like(a)
    med, _ = timed(lambda i: b.copy_(a), 20)
    del a, b
    return 2 * n / (med * 1e-6) / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", help="write the baseline's rows here")
    ap.add_argument("--ours", help="bench_cuda_attn's CSV: print the side-by-side table")
    ap.add_argument("--md", help="write that table (markdown) here")
    args = ap.parse_args()
    prop = torch.cuda.get_device_properties(0)
    l2 = getattr(prop, "L2_cache_size", 50 << 20)
    print(f"device: {prop.name}, {prop.multi_processor_count} SMs, torch {torch.__version__}")
    cbw = copy_bw()
    print(f"copy (device to device, 1 GiB, read + write): {cbw:.1f} GB/s")
    rows = []
    for ctx in CTXS:
        for bsz in BATCHES:
            kv_bytes = 2 * bsz * HKV * ctx * D * 2
            copies = max(1, math.ceil(3 * l2 / kv_bytes))
            data = []
            for c in range(copies):
                k = torch.randn(bsz, HKV, ctx, D, dtype=torch.float16, device="cuda")
                v = torch.randn(bsz, HKV, ctx, D, dtype=torch.float16, device="cuda")
                q = torch.randn(bsz, H, 1, D, dtype=torch.float16, device="cuda")
                data.append((q, k, v))
            nbytes = kv_bytes + 2 * bsz * H * D * 2
            reps = int(min(300, max(15, 0.35 / (kv_bytes / 2.0e12 + 10e-6))))
            outs = {}

            def gqa(i):
                q, k, v = data[i % copies]
                return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

            def folded(i):
                q, k, v = data[i % copies]
                return F.scaled_dot_product_attention(q.view(bsz, HKV, H // HKV, D), k, v)

            for name, fn in (("gqa", gqa), ("folded", folded)):
                try:
                    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                        outs[name] = fn(0).reshape(bsz, H, D).float()
                        med, mn = timed(fn, reps)
                    gbs = nbytes / (med * 1e-6) / 1e9
                    rows.append(dict(variant=name, ctx=ctx, batch=bsz, us_median=med, us_min=mn, GBps=gbs,
                                     pct_copy=100 * gbs / cbw, copy_GBps=cbw))
                    print(f"sdpa flash fp16 {name:6s} ctx {ctx:6d} batch {bsz:2d}: {med:9.1f} us {gbs:8.1f} GB/s "
                          f"{100 * gbs / cbw:5.1f}% of copy", flush=True)
                except Exception as e:  # a variant the backend refuses is reported, not fatal
                    print(f"sdpa flash fp16 {name} ctx {ctx} batch {bsz}: failed: {e}", flush=True)
            if len(outs) == 2:
                d = (outs["gqa"] - outs["folded"]).norm() / outs["gqa"].norm()
                print(f"  gqa vs folded: relative difference {d:.2e}")
            del data, outs
            torch.cuda.empty_cache()
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["device", "variant", "ctx", "batch", "us_median", "us_min", "GBps",
                                              "pct_copy", "copy_GBps"])
            w.writeheader()
            for r in rows:
                w.writerow(dict(device=prop.name, **r))
    if args.ours:
        best = {}
        for r in rows:
            key = (r["ctx"], r["batch"])
            if key not in best or r["us_median"] < best[key]["us_median"]:
                best[key] = r
        lines = ["| codes | ctx | batch | ours (us) | GB/s | % of copy | SDPA fp16 flash (us) | SDPA % of copy | speed-up vs SDPA |",
                 "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        with open(args.ours) as f:
            for r in csv.DictReader(f):
                if "sweep" in r["kind"]:
                    continue
                key = (int(r["ctx"]), int(r["batch"]))
                b = best.get(key)
                ours = float(r["us_median"])
                ratio = f"{b['us_median'] / ours:.2f}x" if b else "n/a"
                lines.append(f"| {r['kind']} | {key[0]} | {key[1]} | {ours:.1f} | {float(r['GBps']):.0f} | "
                             f"{float(r['pct_copy']):.1f} | {b['us_median']:.1f} ({b['variant']}) | {b['pct_copy']:.1f} | {ratio} |"
                             if b else f"| {r['kind']} | {key[0]} | {key[1]} | {ours:.1f} | {float(r['GBps']):.0f} | "
                             f"{float(r['pct_copy']):.1f} | n/a | n/a | n/a |")
        table = "\n".join(lines)
        print(table)
        if args.md:
            with open(args.md, "w") as f:
                f.write(f"{prop.name}; SDPA copy bandwidth {cbw:.0f} GB/s (torch); ours: see the CSV's copy_GBps\n\n")
                f.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
