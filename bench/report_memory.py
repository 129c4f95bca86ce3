#!/usr/bin/env python3
"""Memory that is real (issue 4 item 2): for f16 and every codec of the table (default parameters,
names from `veloxquant bench --list-codecs`), one fresh process per arm runs
`veloxquant bench --rss-only`: model loaded and warmed, RSS read, real WikiText-2 text prefilled
through the cache, RSS read again at each --ctx. Then, at the last ctx (default 8192), per arm:
accounted bytes (vq_kv_bytes), measured RSS delta, the saving vs f16 both ways, their ratio and
PASS/FAIL (measured saving within 5% of the accounted saving; f16 itself: delta within 5% of its
bytes). One JSON per arm in OUT_DIR (kept and skipped next time unless FORCE=1), summary.json beside.

  python3 bench/report_memory.py --out docs/results/memory           # ctx 1024,2048,4096,8192
  python3 bench/report_memory.py --out /tmp/mem --ctx 128,256 --arm f16 --arm q4_0   # smoke test
Standard library only.
"""
import argparse, json, os, re, subprocess, sys, time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def slug(arm):
    return re.sub(r"[:;=,@ ]", "_", arm)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for one JSON per arm + summary.json")
    ap.add_argument("--bin", default=os.environ.get("BIN", os.path.join(REPO, "build", "veloxquant")))
    ap.add_argument("--model", default=os.environ.get("MODEL", os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")))
    ap.add_argument("--text", default=os.environ.get("TEXT", os.path.join(REPO, "..", "shared", "data", "wikitext-2-raw-test.txt")))
    ap.add_argument("--ctx", default="1024,2048,4096,8192", help="RSS read at each; the table uses the last")
    ap.add_argument("--arm", action="append", default=None, help="a KV spec (repeatable); default: f16 + every codec of --list-codecs")
    ap.add_argument("--threads", default=os.environ.get("THREADS", "2"))
    ap.add_argument("--tol", type=float, default=0.05)
    ap.add_argument("--strict", action="store_true", help="exit 1 when an arm fails")
    a = ap.parse_args()
    if not os.access(a.bin, os.X_OK):
        sys.exit(f"report_memory: {a.bin} not built (make build)")
    if a.arm:
        arms = list(a.arm)
    else:
        codecs = subprocess.run([a.bin, "bench", "--list-codecs"], capture_output=True, text=True, check=True).stdout.split()
        arms = ["f16"] + [c for c in codecs if c != "f16"]
    if arms[0] != "f16":
        arms = ["f16"] + [x for x in arms if x != "f16"]
    os.makedirs(a.out, exist_ok=True)
    res = {}
    for arm in arms:
        f = os.path.join(a.out, slug(arm) + ".json")
        if os.path.exists(f) and os.path.getsize(f) > 0 and not os.environ.get("FORCE"):
            print(f"report_memory: {arm}: kept {f}", file=sys.stderr)
            res[arm] = json.load(open(f))
            continue
        print(f"report_memory: {arm} ({time.strftime('%H:%M:%S', time.gmtime())} UTC)", file=sys.stderr)
        cmd = [a.bin, "bench", "--rss-only", "-m", a.model, "-f", a.text, "--ctx", a.ctx, "-t", a.threads,
               "--kv", arm, "--json"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            res[arm] = {"kv": arm, "error": r.stderr.strip()[-500:], "command": " ".join(cmd)}
            print(f"report_memory: {arm}: failed: {res[arm]['error']}", file=sys.stderr)
            continue   # not written: a failed arm is retried next time
        d = json.loads(r.stdout)
        d["load1"] = os.getloadavg()[0]
        with open(f + ".tmp", "w") as fh:
            json.dump(d, fh, indent=1)
        os.replace(f + ".tmp", f)
        res[arm] = d
    base = res.get("f16")
    rows, fails = [], 0
    for arm in arms:
        d = res.get(arm)
        if not d or "error" in d:
            rows.append({"kv": arm, "error": (d or {}).get("error", "not run")})
            fails += 1
            continue
        p = d["points"][-1]
        row = {"kv": arm, "ctx": p["ctx"], "kv_bytes": p["kv_bytes"], "rss_delta": p["rss_delta"],
               "bits_per_elem": p["bits_per_elem"], "fill_s": d["fill_s"],
               "rss_delta_trim": p.get("rss_delta_trim", d["rss_end_trim"] - d["rss_base"])}
        if base and "error" not in base and arm != "f16":
            bp = base["points"][-1]
            row["saving_accounted"] = bp["kv_bytes"] - p["kv_bytes"]
            row["saving_measured"] = bp["rss_delta"] - p["rss_delta"]
            acc = row["saving_accounted"]
            row["ratio"] = row["saving_measured"] / acc if acc else None
            row["saving_measured_trim"] = bp.get("rss_delta_trim", 0) - p.get("rss_delta_trim", 0)
            row["ratio_trim"] = row["saving_measured_trim"] / acc if acc else None
            row["pass"] = acc != 0 and abs(row["saving_measured"] - acc) <= a.tol * abs(acc)
        elif arm == "f16":
            row["ratio"] = p["rss_delta"] / p["kv_bytes"] if p["kv_bytes"] else None
            row["ratio_trim"] = p["rss_delta_trim"] / p["kv_bytes"] if p["kv_bytes"] and "rss_delta_trim" in p else None
            row["pass"] = row["ratio"] is not None and abs(row["ratio"] - 1) <= a.tol
        fails += 0 if row.get("pass") else 1
        rows.append(row)
    summary = {"ctx": a.ctx, "tolerance": a.tol, "baseline": "f16", "rows": rows,
               "command": "python3 bench/report_memory.py " + " ".join(sys.argv[1:]),
               "note": "rss_delta = VmRSS after prefilling ctx real tokens minus VmRSS with the model loaded and "
                       "warmed and no cache (one fresh process per arm); f16 row: ratio = rss_delta / kv_bytes"}
    with open(os.path.join(a.out, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=1)
    MB = 1048576.0
    print(f"{'kv':<18} {'ctx':>5} {'kv MB':>9} {'RSS d MB':>9} {'acc save':>9} {'meas save':>9} {'ratio':>7} "
          f"{'trim ratio':>10}  result")
    for r in rows:
        if "error" in r:
            print(f"{r['kv']:<18} error: {r['error'][:80]}")
            continue
        sa = f"{r['saving_accounted'] / MB:9.2f}" if "saving_accounted" in r else f"{'-':>9}"
        sm = f"{r['saving_measured'] / MB:9.2f}" if "saving_measured" in r else f"{'-':>9}"
        ra = f"{r['ratio']:7.4f}" if r.get("ratio") is not None else f"{'-':>7}"
        rt = f"{r['ratio_trim']:10.4f}" if r.get("ratio_trim") is not None else f"{'-':>10}"
        print(f"{r['kv']:<18} {r['ctx']:>5} {r['kv_bytes'] / MB:9.2f} {r['rss_delta'] / MB:9.2f} {sa} {sm} {ra} {rt}  "
              f"{'PASS' if r.get('pass') else 'FAIL'}")
    print(f"saving ratio = measured RSS saving vs f16 / accounted saving (vq_kv_bytes); PASS: the raw ratio within "
          f"{a.tol:.0%}; trim ratio: the same with RSS read right after malloc_trim(0) (freed scratch given back)")
    sys.exit(1 if (fails and a.strict) else 0)


if __name__ == "__main__":
    main()
