#!/usr/bin/env python3
"""Ours against kvpress on the same windows: one table per policy x kept fraction (issue 33).

Reads kvpress_protocol.py's JSON and one or more `veloxquant perplexity --json` outputs (windows
may be split across files: their arms are joined by window index), matches each kvpress press to
our spec by the MAP below, and prints a markdown table. Per window w and engine, r(w) = mean NLL
of the arm - mean NLL of the same engine's full cache (a log-ppl ratio: each engine against its
own baseline); the figure is exp(mean_w r) - 1 (every window scores 255, so this is the ΔPPL over
all scored tokens). Noise: the window-to-window spread, as the standard error over windows of
kvpress's own r (se_kvp: the noise of kvpress's figure) and of the paired difference
r_ours - r_kvpress (se_diff: how well the difference itself is known); both shown in points of ΔPPL %. "within the noise" when
|ours - kvpress| <= se_kvp; "systematic" when |mean difference| > 2 se_diff (a small difference can
be both: well measured, and still smaller than kvpress's own window-to-window spread).

  python3 tools/reference/kvpress_compare.py --kvpress K.json --ours A.json [B.json] [--json OUT]
"""
import argparse
import json
import math
import sys

# kvpress press -> our spec, budget written as {b}
MAP = {
    "streaming_llm": "f16;evict=streaming_llm,budget={b},sinks=4,recent=0",
    "knorm": "f16;evict=knorm,budget={b},sinks=0,recent=0,heads=ada,floor=1",
    "snapkv": "f16;evict=snapkv,budget={b},sinks=0,obs=64,pool=5,poolfn=avg,recent=64,heads=ada,floor=1",
    "tova": "f16;evict=tova,budget={b},sinks=0,recent=1",
    "expected_attention": "f16;evict=expected_attention_prompt,budget={b},sinks=4,recent=0,heads=ada,floor=1",
    "observed_attention": "f16;evict=h2o,budget={b},acc=mean,sinks=0,recent=0,heads=ada,floor=1",
    "pyramidkv": "f16;evict=pyramidkv,budget={b},sinks=0,obs=64,pool=5,poolfn=avg,recent=64,beta=20,"
                 "heads=ada,floor=1",
}
ORDER = ["streaming_llm", "knorm", "snapkv", "tova", "expected_attention", "observed_attention", "pyramidkv"]


def ours_windows(paths):
    """{spec: {window index: mean_nll}} from one or more perplexity --json files."""
    out = {}
    for p in paths:
        with open(p) as f:
            d = json.load(f)
        for arm in d["arms"]:
            for w in arm["windows"]:
                out.setdefault(arm["kv"], {})[w["index"]] = w["mean_nll"]
    return out


def stats(r):
    n = len(r)
    m = sum(r) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in r) / (n - 1)) if n > 1 else float("nan")
    return m, sd / math.sqrt(n)


def pct(x):
    return 100.0 * (math.exp(x) - 1.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvpress", required=True)
    ap.add_argument("--ours", nargs="+", required=True)
    ap.add_argument("--base", default="f16", help="our full-cache arm (default f16)")
    ap.add_argument("--json", help="also write the rows as JSON")
    a = ap.parse_args()

    with open(a.kvpress) as f:
        kv = json.load(f)
    karms = {(x["press"], x["kept"]): {w["index"]: w["mean_nll"] for w in x["windows"]} for x in kv["arms"]}
    kbase = karms[("none", 1.0)]
    ours = ours_windows(a.ours)
    obase = ours[a.base]
    wins = sorted(set(kbase) & set(obase))
    rows = []
    print(f"windows {wins[0]}..{wins[-1]} ({len(wins)}); full cache ppl: kvpress "
          f"{math.exp(sum(kbase[w] for w in wins) / len(wins)):.3f}, ours "
          f"{math.exp(sum(obase[w] for w in wins) / len(wins)):.3f}\n")
    print("| press | kept | kvpress ΔPPL | ± se_kvp | ours ΔPPL | ours − kvpress (points) | ± se_diff | within the noise | systematic |")
    print("|---|---|---|---|---|---|---|---|---|")
    for press in ORDER:
        for kept in sorted({k for p, k in karms if p == press}, reverse=True):
            spec = MAP[press].format(b=kept)
            if spec not in ours:
                print(f"| {press} | {kept:.0%} | (our arm missing: {spec}) |", file=sys.stderr)
                continue
            kw = karms[(press, kept)]
            ow = ours[spec]
            rk = [kw[w] - kbase[w] for w in wins]
            ro = [ow[w] - obase[w] for w in wins]
            d = [o - k for o, k in zip(ro, rk)]
            mk, sek = stats(rk)
            mo, _ = stats(ro)
            md, sed = stats(d)
            within = abs(pct(mo) - pct(mk)) <= 100 * sek * math.exp(mk)
            systematic = abs(md) > 2 * sed
            rows.append({"press": press, "kept": kept, "spec": spec, "kvpress_dppl_pct": pct(mk),
                         "kvpress_se_pts": 100 * sek * math.exp(mk), "ours_dppl_pct": pct(mo), "diff_pts": pct(mo) - pct(mk),
                         "diff_se_pts": 100 * sed * math.exp(mk), "within_noise": within, "systematic": systematic,
                         "windows": wins,
                         "kvpress_window_dppl_pct": [pct(x) for x in rk],
                         "ours_window_dppl_pct": [pct(x) for x in ro]})
            print(f"| {press} | {kept:.0%} | {pct(mk):+.1f} % | {100 * sek * math.exp(mk):.1f} | {pct(mo):+.1f} % | "
                  f"{pct(mo) - pct(mk):+.1f} | {100 * sed * math.exp(mk):.1f} | {'yes' if within else '**no**'} | "
                  f"{'yes' if systematic else 'no'} |")
    print("\nPer window ΔPPL % (kvpress / ours):\n")
    print("| press | kept | " + " | ".join(f"w{w}" for w in wins) + " |")
    print("|---|---|" + "---|" * len(wins))
    for r in rows:
        cells = [f"{k:+.0f}/{o:+.0f}" for k, o in zip(r["kvpress_window_dppl_pct"], r["ours_window_dppl_pct"])]
        print(f"| {r['press']} | {r['kept']:.0%} | " + " | ".join(cells) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"windows": wins, "rows": rows}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
