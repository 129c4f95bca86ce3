#!/usr/bin/env python3
"""Decode and prefill throughput of VeloxQuant against llama.cpp on the same model file, thread
count and machine, in one run: for each repeat, for each context fill, one VeloxQuant process and
one llama.cpp process, alternating (arms interleaved, BENCHMARKING.md). Prints a table of
median [min, max] per arm and context, peak RSS, the machine and the load, and writes every raw
repeat as JSON.

  .venv-llamacpp/bin/python bench/decode_vs_llamacpp.py --ctx 128,2048,8192 --reps 5 --threads 2 \
      --json docs/results/benchmarks/bench-decode.json
The llama.cpp venv: see tests/fixtures/README.md. Without it, --no-llamacpp measures ours only.
"""
import argparse, json, os, platform, statistics, subprocess, sys, tempfile, time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ctx", default="128,2048,8192")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv", default="f16", help="KV type for both engines (f16, q8_0, q4_0)")
    ap.add_argument("--model", default=os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "veloxquant"))
    ap.add_argument("--no-llamacpp", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    ctxs = [int(c) for c in a.ctx.split(",")]
    ids = os.path.join(REPO, "tests", "fixtures", "smollm2_wikitext_8k_ids.txt")
    text = os.path.join(REPO, "..", "shared", "data", "wikitext-2-raw-test.txt")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    raw = []
    for rep in range(a.reps):
        for c in ctxs:
            load = os.getloadavg()[0]
            out = json.loads(run([a.bin, "bench", "-m", a.model, "-f", text, "--ctx", str(c), "--kv", a.kv,
                                  "--reps", "1", "--gen", str(a.gen), "-t", str(a.threads), "--json"], env))
            s = out["samples"][0]
            raw.append({"engine": "veloxquant", "ctx": c, "rep": rep, "decode_tps": s["decode_tps"],
                        "prefill_tps": s["prefill_tps"], "peak_rss": out["peak_rss"], "kv_bytes": s["kv_bytes"],
                        "load": load, "machine": out["machine"], "isa": out["isa"]})
            print(f"rep {rep} ctx {c} veloxquant decode {s['decode_tps']:.1f} tok/s", file=sys.stderr)
            if a.no_llamacpp:
                continue
            with tempfile.NamedTemporaryFile(suffix=".json") as tf:
                run([sys.executable, os.path.join(REPO, "bench", "llamacpp_decode.py"), "--model", a.model,
                     "--ids", ids, "--ctx", str(c), "--gen", str(a.gen), "--threads", str(a.threads),
                     "--type-k", a.kv, "--type-v", a.kv, "--repeats", "1", "--warmup", "0", "--json", tf.name], env)
                lo = json.load(open(tf.name))
            r = lo["repeats"][0]
            raw.append({"engine": "llama.cpp", "ctx": c, "rep": rep, "decode_tps": r["decode_tok_s"],
                        "prefill_tps": r["prefill_tok_s"], "peak_rss": lo["peak_rss_bytes"], "load": load,
                        "version": lo["llama_cpp_python"]})
            print(f"rep {rep} ctx {c} llama.cpp  decode {r['decode_tok_s']:.1f} tok/s", file=sys.stderr)
    model_mb = os.path.getsize(a.model) / 2**20
    print(f"machine: {raw[0]['machine']}; threads {a.threads}; kv {a.kv}; {a.reps} repeats interleaved; "
          f"{a.gen} decode tokens each; model {model_mb:.1f} MB; load avg during run "
          f"{min(r['load'] for r in raw):.2f}-{max(r['load'] for r in raw):.2f}")
    print("| engine | ctx | decode tok/s median [min, max] | prefill tok/s median [min, max] | peak RSS MB | KV MB |")
    print("|---|---|---|---|---|---|")
    for c in ctxs:
        for eng in ("veloxquant", "llama.cpp"):
            rs = [r for r in raw if r["ctx"] == c and r["engine"] == eng]
            if not rs:
                continue
            d = sorted(r["decode_tps"] for r in rs); p = sorted(r["prefill_tps"] for r in rs)
            kv = f"{rs[0]['kv_bytes'] / 2**20:.1f}" if "kv_bytes" in rs[0] else "-"
            print(f"| {eng} | {c} | {statistics.median(d):.1f} [{d[0]:.1f}, {d[-1]:.1f}] | "
                  f"{statistics.median(p):.1f} [{p[0]:.1f}, {p[-1]:.1f}] | "
                  f"{max(r['peak_rss'] for r in rs) / 2**20:.1f} | {kv} |")
        v = [r["decode_tps"] for r in raw if r["ctx"] == c and r["engine"] == "veloxquant"]
        l = [r["decode_tps"] for r in raw if r["ctx"] == c and r["engine"] == "llama.cpp"]
        if v and l:
            print(f"ctx {c}: decode ratio veloxquant/llama.cpp (medians) {statistics.median(v) / statistics.median(l):.3f}; "
                  f"veloxquant spread {100 * (max(v) - min(v)) / statistics.median(v):.1f}%, "
                  f"llama.cpp spread {100 * (max(l) - min(l)) / statistics.median(l):.1f}%")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"argv": sys.argv, "host": platform.node(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "raw": raw}, f, indent=1)


if __name__ == "__main__":
    main()
