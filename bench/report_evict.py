#!/usr/bin/env python3
"""The eviction stage of the report (issue 10; scripts/report.sh runs it, docs/report-tooling.md):

  1. calibrate: `veloxquant calibrate` writes OUT/calib.vqc (Q-Filters and query statistics for the
     qfilters and expected_attention rows) from the calibration text;
  2. quality: decode-mode WikiText-2 perplexity at --ctx (default 2048) for every policy x every
     codec x every kept ratio. One `perplexity` process per (codec, ratio), its arms batched: f16
     first (KL is against it), then the codec without eviction, then one arm per policy
     -> OUT/ppl_<codec>_<ratio>.json;
  3. passkey: `veloxquant needle` at ctx 1024 and 2048 with --needle-keep of the tokens kept, every
     policy, one process per codec -> OUT/needle_<codec>.json;
  4. throughput at a long context, alone on the machine after the pool: `veloxquant bench` at
     --bench-ctx (default 8192), f16 and every codec, with and without --bench-policies at
     --bench-keep (default 0.25) -> OUT/bench.json; then peak RSS, one fresh process per arm
     (bench/report_memory.py) -> OUT/rss/.

Steps 2 and 3 run as a pool of --jobs processes (each with --threads). A file already there is
kept unless --force (an interrupted run resumes). Standard library only.

  python3 bench/report_evict.py --out docs/results/eviction --jobs 1 --threads 2
"""
import argparse, concurrent.futures as cf, json, os, re, subprocess, sys, time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLICIES = "streaming_llm,h2o,tova,snapkv,pyramidkv,knorm,keyformer,qfilters,expected_attention"
NEEDS_CALIB = {"qfilters", "expected_attention"}


def slug(s):
    return re.sub(r"[^A-Za-z0-9.]+", "_", s).strip("_")


def arm(codec, policy, keep, calib):
    s = f"{codec};evict={policy},budget={keep}"
    return s + (f";calib={calib}" if policy in NEEDS_CALIB else "")


def log(msg):
    print(f"report_evict: {time.strftime('%H:%M:%S', time.gmtime())} UTC {msg}", file=sys.stderr, flush=True)


def shell_line(cmd):
    """cmd as one shell line (specs holding ';' quoted)."""
    return " ".join(f"'{x}'" if ";" in x else x for x in cmd)


def run(cmd, out_path, force):
    """Runs cmd, its stdout to out_path (atomically); returns (out_path, seconds, error or None)."""
    if os.path.exists(out_path) and os.path.getsize(out_path) > 0 and not force:
        return out_path, 0.0, None
    t0 = time.time()
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        os.unlink(tmp)
        return out_path, time.time() - t0, f"exit {r.returncode}: {r.stderr.strip()[-400:]}"
    os.replace(tmp, out_path)
    return out_path, time.time() - t0, None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    env = os.environ.get
    ap.add_argument("--out", required=True)
    ap.add_argument("--bin", default=env("BIN", os.path.join(REPO, "build", "veloxquant")))
    ap.add_argument("--model", default=env("MODEL", os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")))
    ap.add_argument("--text", default=env("TEXT", os.path.join(REPO, "..", "shared", "data", "wikitext-2-raw-test.txt")))
    ap.add_argument("--calib-text", default=os.path.join(REPO, "..", "shared", "data", "calibration-moby-dick.txt"))
    ap.add_argument("--calib-tokens", type=int, default=16384)
    ap.add_argument("--policies", default=POLICIES, help="comma-separated rows of the policy table")
    ap.add_argument("--codecs", default="f16,turboquant_mse:k=4,v=4", help="comma-separated; a codec's own commas "
                    "stay with it when the next part has no ':' (f16,turboquant_mse:k=4,v=4 is two codecs)")
    ap.add_argument("--keeps", default="0.75,0.5,0.25,0.125", help="kept ratios (budget=R of the positions seen)")
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--max-tokens", type=int, default=16384)
    ap.add_argument("--needle-ctx", default="1024,2048")
    ap.add_argument("--needle-keep", default="0.5")
    ap.add_argument("--needle-depths", default="0,0.25,0.5,0.75,1")
    ap.add_argument("--needle-trials", default="2")
    ap.add_argument("--bench-ctx", default="8192")
    ap.add_argument("--bench-keep", default="0.25")
    ap.add_argument("--bench-policies", default="snapkv", help="comma-separated")
    ap.add_argument("--bench-reps", default="3")
    ap.add_argument("--bench-gen", default="32")
    ap.add_argument("--bench-threads", default=None, help="default: --threads")
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--threads", default=env("THREADS", "2"))
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    codecs = []
    for part in a.codecs.split(","):   # "turboquant_mse:k=4,v=4" keeps its comma
        if codecs and ":" not in part and "=" in part:
            codecs[-1] += "," + part
        else:
            codecs.append(part)
    policies, keeps = a.policies.split(","), a.keeps.split(",")
    commands, failed = [], []

    calib = os.path.join(a.out, "calib.vqc")
    if NEEDS_CALIB & set(policies):
        c = [a.bin, "calibrate", "-m", a.model, "-f", a.calib_text, "-o", calib, "--tokens", str(a.calib_tokens),
             "-t", a.threads, "--json"]
        commands.append(" ".join(c) + f" > {a.out}/calib.json")
        log("calibrate")
        _, s, err = run(c, os.path.join(a.out, "calib.json"), a.force)
        if err:
            sys.exit(f"report_evict: calibrate failed: {err}")

    jobs = []
    for codec in codecs:
        for keep in keeps:
            arms = ["f16"] + ([codec] if codec != "f16" else []) + [arm(codec, p, keep, calib) for p in policies]
            c = [a.bin, "perplexity", "-m", a.model, "-f", a.text, "--ctx", str(a.ctx), "--max-tokens",
                 str(a.max_tokens), "--mode", "decode", "--kl", "-t", a.threads, "--json"]
            for x in arms:
                c += ["--kv", x]
            jobs.append((c, os.path.join(a.out, f"ppl_{slug(codec)}_{keep}.json")))
        arms = ["f16"] + ([codec] if codec != "f16" else []) + [arm(codec, p, a.needle_keep, calib) for p in policies]
        c = [a.bin, "needle", "-m", a.model, "-t", a.threads, "--ctx", a.needle_ctx] + ["--depths", a.needle_depths, "--trials", a.needle_trials, "--json"]
        for x in arms:
            c += ["--kv", x]
        jobs.append((c, os.path.join(a.out, f"needle_{slug(codec)}.json")))
    for c, o in jobs:
        commands.append(shell_line(c) + f" > {o}")
    log(f"{len(jobs)} jobs, {a.jobs} at a time, {a.threads} threads each")
    with cf.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex:
        futs = [ex.submit(run, c, o, a.force) for c, o in jobs]
        for f in cf.as_completed(futs):
            o, s, err = f.result()
            log(f"{os.path.basename(o)}: " + (f"FAILED {err}" if err else f"{s:.0f} s"))
            if err:
                failed.append(o)

    if not a.no_bench:
        bt = a.bench_threads or a.threads
        arms = []
        for codec in codecs:
            arms.append(codec)
            arms += [arm(codec, p, a.bench_keep, calib) for p in a.bench_policies.split(",") if p]
        c = [a.bin, "bench", "-m", a.model, "-f", a.text, "--ctx", a.bench_ctx, "--reps", a.bench_reps,
             "--gen", a.bench_gen, "-t", bt, "--json"]
        for x in arms:
            c += ["--kv", x]
        o = os.path.join(a.out, "bench.json")
        commands.append(shell_line(c) + f" > {o}")
        log("bench (alone)")
        _, s, err = run(c, o, a.force)
        log(f"bench: " + (f"FAILED {err}" if err else f"{s:.0f} s"))
        if err:
            failed.append(o)
        rss = os.path.join(a.out, "rss")
        c = [sys.executable, os.path.join(REPO, "bench", "report_memory.py"), "--out", rss, "--bin", a.bin,
             "--model", a.model, "--text", a.text, "--ctx", a.bench_ctx.split(",")[-1], "--threads", bt]
        for x in arms:
            c += ["--arm", x]
        commands.append(shell_line(c))
        if os.path.exists(os.path.join(rss, "summary.json")) and not a.force:
            log("rss: kept")
        else:
            log("rss (one process per arm)")
            r = subprocess.run(c, stdout=subprocess.DEVNULL)
            if r.returncode != 0:
                failed.append(rss)
    with open(os.path.join(a.out, "commands.json"), "w") as f:
        json.dump({"commands": commands, "failed": failed}, f, indent=1)
    if failed:
        sys.exit(f"report_evict: {len(failed)} failed: " + ", ".join(failed))


if __name__ == "__main__":
    main()
