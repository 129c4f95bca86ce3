#!/usr/bin/env python3
"""Builds docs/results.md (and the PNG plots beside the JSON) from what scripts/report.sh wrote into
RESULTS/<stage>/: quality (ppl/*.json), memory (memory/summary.json + one JSON per arm), throughput
(throughput/bench.json, llama.cpp arms when present), needle (needle/needle.json), eviction (eviction/:
bench/report_evict.py's files), weights (weights/: bench/report_weights.py's files), serve (serve/serve.json and serve.txt:
scripts/bench_serve.py) and bench-kernels.
Each stage's stamp.json gives the commit, date, machine and exact command. A stage without JSON is
reported as "not run". Standard library only; plots need gnuplot (skipped with a note without it).

  python3 bench/report_gen.py --results docs/results --out docs/results.md
"""
import argparse, glob, json, os, re, shutil, statistics, subprocess, tempfile

MB = 1048576.0
GOALS = {4: 1.0, 3: 3.0, 2: 10.0}     # bits class -> largest ΔPPL vs f16 in %
REF_ARM = "q4_0:rotate=1"


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def stamp_line(d):
    s = load(os.path.join(d, "stamp.json"))
    if not s:
        return "(no stamp.json: commit and command unknown)", None
    dirty = " (+ uncommitted changes in src/tools)" if s.get("source_dirty") else ""
    cmds = "\n".join(s.get("commands", []))
    line = (f"commit `{s.get('commit', '?')[:12]}`{dirty}, {s.get('date_utc', '?')}, {s.get('seconds', 0):.0f} s, "
            f"load at end {s.get('load1_end', 0):.2f}\n\n```\n{cmds}\n```")
    if s.get("note"):
        line += "\n\n" + s["note"]
    if s.get("kept_from_earlier_runs"):
        line += ("\n\nKept from earlier runs (not rerun by this one; their commit is not recorded here, "
                 "FORCE=1 redoes them): " + ", ".join(f"`{k}`" for k in s["kept_from_earlier_runs"]))
    return line, s


def nominal_bits(arm, bpe):
    if re.match(r"^[kv]=", arm):   # K and V with different codecs: a diagnostic arm, no bits class
        return None
    m = re.search(r"bits=(\d+)", arm)
    if m:
        return int(m.group(1))
    k, v = re.search(r"\bk=(\d+)", arm), re.search(r"\bv=(\d+)", arm)
    if k and v:
        return round((int(k.group(1)) + int(v.group(1))) / 2)
    m = re.match(r"(?:q(\d+)_|f(\d+)$)", arm)
    if m:
        return int(m.group(1) or m.group(2))
    return int(round(bpe)) if bpe else None


def gnuplot(out_png, series, xlabel, ylabel, title, logx=False, points=False, logy=False, styles=None):
    """series: [(name, [(x, y), ...])]; one PNG; styles: {name: gnuplot style} overrides the default.
    Returns None or the reason it was not made."""
    if not shutil.which("gnuplot"):
        return "gnuplot absent (scripts/setup-deps.sh installs gnuplot-nox)"
    series = [(n, pts) for n, pts in series if pts]
    if not series:
        return "no data"
    with tempfile.TemporaryDirectory() as td:
        plots = []
        for i, (name, pts) in enumerate(series):
            f = os.path.join(td, f"s{i}.dat")
            with open(f, "w") as fh:
                for x, y in sorted(pts):
                    fh.write(f"{x} {y}\n")
            style = (styles or {}).get(name) or ("points pt 7 ps 1.5" if points else "linespoints pt 7")
            plots.append(f"'{f}' using 1:2 with {style} title '{name.replace(chr(39), '')}'")
        g = [f"set terminal pngcairo noenhanced size 900,560 font ',10'", f"set output '{out_png}'",
             f"set title '{title}'", f"set xlabel '{xlabel}'", f"set ylabel '{ylabel}'", "set grid",
             "set key outside right"]
        if logx:
            g.append("set logscale x 2")
        if logy:
            g.append("set logscale y")
        g.append("plot " + ", ".join(plots))
        r = subprocess.run(["gnuplot"], input="\n".join(g) + "\n", capture_output=True, text=True)
        if r.returncode != 0:
            return "gnuplot failed: " + r.stderr.strip()[-200:]
    return None


def gnuplot_labels(out_png, pts, xlabel, ylabel, title):
    """pts: [(x, y, label)]; one labeled scatter PNG. Returns None or the reason it was not made."""
    if not shutil.which("gnuplot"):
        return "gnuplot absent (scripts/setup-deps.sh installs gnuplot-nox)"
    if not pts:
        return "no data"
    with tempfile.TemporaryDirectory() as td:
        f = os.path.join(td, "p.dat")
        with open(f, "w") as fh:
            for x, y, lab in sorted(pts):
                fh.write(f'{x} {y} "{lab}"\n')
        g = ["set terminal pngcairo noenhanced size 1100,700 font ',10'", f"set output '{out_png}'",
             f"set title '{title}'", f"set xlabel '{xlabel}'", f"set ylabel '{ylabel}'", "set grid",
             "set logscale y", "unset key",
             f"plot '{f}' using 1:2 with points pt 7 ps 1.2, '' using 1:2:3 with labels left offset char 0.8,0 font ',8'"]
        r = subprocess.run(["gnuplot"], input="\n".join(g) + "\n", capture_output=True, text=True)
        if r.returncode != 0:
            return "gnuplot failed: " + r.stderr.strip()[-200:]
    return None


# (folder, section title) of every stage, in the page's order
STAGES = (("ppl", "Quality"), ("memory", "Memory"), ("throughput", "Throughput"), ("needle", "Needle"),
          ("eviction", "Eviction"), ("weights", "Weights"), ("serve", "Server under load"),
          ("bench-kernels", "Decode-attention kernels"))


def _src_commits_since(commit):
    """Commits that changed src/ (the library the figures measure) after `commit`, or None when git
    cannot say (no repository, an unknown commit)."""
    try:
        r = subprocess.run(["git", "rev-list", "--count", f"{commit}..HEAD", "--", "src"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return int(r.stdout.strip()) if r.returncode == 0 and r.stdout.strip().isdigit() else None


def runs_section(results):
    """Which run made which section: the stages are run (or kept) one by one, so one page holds
    figures from several commits, dates and machines; this table says which, from the stamps."""
    rows = []
    for st, title in STAGES:
        s = load(os.path.join(results, st, "stamp.json"))
        if not s:
            continue
        commits = [c for c in str(s.get("commit", "?")).split("/") if c]
        counts = [_src_commits_since(c) for c in commits]
        since = None if not counts or None in counts else " / ".join(str(n) for n in counts)
        m = s.get("machine", {})
        mach = f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores, kernel {m.get('kernel', '?')}"
        if s.get("machine_kx"):
            mk = s["machine_kx"]
            mach += f"; later passes: {mk.get('cpu', '?')}, {mk.get('cores', '?')} cores"
        date = str(s.get("date_utc", "?"))
        kept = len(s.get("kept_from_earlier_runs", []))
        rows.append(f"| {title} | `{'/'.join(c[:7] for c in commits)}` | {date} | {mach} | "
                    f"{'-' if since is None else since} | {kept if kept else '-'} |")
    if not rows:
        return "- machine: unknown (no stage has a stamp.json)\n"
    try:
        head = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        head = ""
    return ("## Which run made which figures\n\n"
            "This page is not one run. Each stage below was run (or kept from an earlier run) on its own, "
            "at the commit, date and machine of this table (from each stage's `stamp.json`; a stage's own "
            "section has its exact commands and notes). Figures of different stages side by side come "
            "from different builds and machines: compare ratios (x f16, delta PPL) within one stage's run, "
            "and read an older stage's figures as those of the code of its commit. `src/ commits since`: "
            "commits that changed the library after each of the stage's commits, up to the commit this page "
            f"was generated at{f', {head}' if head else ''} (`git rev-list --count COMMIT..HEAD -- src`); a "
            "stage run before a layout or kernel change measured the old code (its section and "
            "docs/results/analysis.md say which).\n\n"
            "| stage | commit(s) | date (UTC) | machine | src/ commits since | files kept from earlier runs |\n"
            "|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")


# passes run before q8_0/q4_0 (2026-12-02) and 2-/3-bit turboquant_mse got 16-row key blocks: there
# those stored one row per block (the stamp's note); 4-bit turboquant_mse had them already (2026-11-30)
LEGACY_PASSES = ("arms", "arms_window")


def _side_rpb(codec, legacy=False):
    """K or V rows per block of a codec clause on SmolLM2 (head_dim 64), the implicit window's source:
    rows wait in the store's window ring until a block fills (docs/lowbit-keys.md's table)."""
    name, _, params = codec.partition(":")
    kv = dict(x.split("=", 1) for x in params.split(",") if "=" in x)
    if name in ("f16", "f32"):
        return 1, 1
    if name == "turboquant_mse":
        bits = [int(kv.get(k, kv.get("bits", 4))) for k in ("k", "v")]
        lanes = kv.get("layout", "lanes") != "packed"
        return (16 if lanes and (bits[0] == 4 if legacy else 2 <= bits[0] <= 4) else 1), 1
    if name in ("q8_0", "q4_0", "tq_split"):
        return (1 if kv.get("layout") == "rows" or legacy else 16), 1
    if name in ("kivi", "kvquant"):
        g = int(kv.get("group", 32))
        return g, g
    return 1, 1


def eff_window(arm, legacy=False):
    """The newest rows a spec keeps above its codes' precision in decode mode, as text: explicit
    window= plus the 0..rows_per_block-1 rows a partly filled block holds, at the wprec= precision;
    and the sinks. None for an all-f16/f32 arm."""
    main = arm.split("@")[0]
    parts = [p for p in main.split(";") if p]
    store, codecs = {}, []
    for p in parts:
        if p.startswith("demote="):
            store["demote"] = p[7:]
            continue
        head = p.split("=", 1)[0] if "=" in p.split(":", 1)[0] else None
        if head in ("k", "v"):
            codecs.append((head, p[2:]))
        elif "=" in p.split(":", 1)[0]:
            for kvp in p.split(","):
                if "=" in kvp:
                    k, v = kvp.split("=", 1)
                    store[k] = v
        else:
            codecs.append(("kv", p))
    for _, c in codecs:   # store keys written inside a codec clause (turboquant_mse:bits=4,window=128)
        for kvp in c.partition(":")[2].split(","):
            k, _, v = kvp.partition("=")
            if k in ("window", "sink", "wprec", "page"):
                store[k] = v
    rpb, resid, exact = 1, 0, True
    for side, c in codecs:
        r = _side_rpb(c, legacy)
        name, _, params = c.partition(":")
        kvp = dict(x.split("=", 1) for x in params.split(",") if "=" in x)
        if name not in ("f16", "f32"):
            exact = False
        if name == "kivi":
            resid = max(resid, int(kvp.get("residual", 128)))
        rr = r[0] if side in ("k", "kv") else r[1]
        rpb = max(rpb, rr, r[1] if side == "kv" else 1)
    if exact:
        return None
    w = int(store.get("window", resid))
    prec = {"8": "q8_0", "16": "fp16", "32": "fp32"}[store.get("wprec", "16")]
    rows = f"{w}" if rpb <= 1 else (f"{w}+0–{rpb - 1}" if w else f"0–{rpb - 1}")
    txt = "0" if rows == "0" else f"{rows} {prec}"
    if int(store.get("sink", 0)):
        txt += f", {store['sink']} sinks {prec}"
    if "evict" in store:
        txt += f"; evict={store['evict']}" + (f", demote" if "demote" in store else "")
    return txt


def fp16_window(arm, legacy=False):
    """True when the spec keeps recent rows in fp16/fp32 (explicit or implicit window): the issue 12
    goals ask for none (sinks allowed)."""
    w = eff_window(arm, legacy)
    if not w:
        return True
    head = w.split(",")[0].split(";")[0]
    return head != "0" and ("fp16" in head or "fp32" in head)


ISSUE12_GOALS = [(2.5, 8.0), (3.0, 3.0), (4.6, 1.0)]   # bits/elem (K and V, all metadata) -> ΔPPL %


def quality(results, md, plots):
    d = os.path.join(results, "ppl")
    files = sorted(glob.glob(os.path.join(d, "*.json")))
    files = [f for f in files if not f.endswith("stamp.json")]
    md.append("## Quality: WikiText-2 perplexity (decode mode: every prediction reads the cache)\n")
    if not files:
        md.append("not run\n")
        return
    st, _ = stamp_line(d)
    md.append(st + "\n")
    arms = []
    ctx = None
    for f in files:
        j = load(f)
        if not j:
            continue
        ctx = j.get("ctx", ctx)
        # each pass's arms against that pass's own f16 and REF_ARM (passes may come from different
        # binaries: the same arm can differ between them)
        fa = j.get("arms", [])
        fb = next((a for a in fa if a["kv"] == "f16"), None)
        fr = next((a for a in fa if a["kv"] == REF_ARM), None)
        for a in fa:
            arms.append(dict(a, _base=fb, _ref=fr, _pass=os.path.splitext(os.path.basename(f))[0]))
    base = next((a for a in arms if a["kv"] == "f16"), None)
    ref = next((a for a in arms if a["kv"] == REF_ARM), None)
    md.append(f"ctx {ctx}, scored tokens {base['scored'] if base else '?'}; goals (ΔPPL vs f16): 4-bit ≤ +1%, "
              f"3-bit ≤ +3%, 2-bit ≤ +10%; bits class = the spec's bits= (or the mean of k=/v=, or the N of qN_0/fN), "
              f"else bits/elem rounded; last column: lower PPL than {REF_ARM} at ≤ its bits/elem.\n")
    md.append("Each pass (one `perplexity` process, its arms batched) is its own JSON file; ΔPPL and the last column "
              "compare an arm with the f16 and " + REF_ARM + " arms of its own pass.\n")
    md.append("Issue 12 columns: `KL` = mean KL(f16 ‖ arm) of the next-token distribution (passes run with --kl); "
              "`window` = the newest rows a spec keeps above its codes' precision in decode mode (explicit window= "
              "plus the 0–(rows per block − 1) rows of a partly filled block, at wprec=), and its sinks; "
              "`issue 12 goal` = ≤ 4.6 bits/elem: ≤ +1 %, ≤ 3.0: ≤ +3 %, ≤ 2.5: ≤ +8 %, for arms with no fp16 "
              "window (a q8_0 window, wprec=8, and ≤ 4 sinks are counted in the bits and allowed here; the "
              "note says so); `beats q4_0:rotate=1 (same window)` = lower PPL than the rotated q4_0 arm of the same "
              "pass with the same window and sinks, at ≤ its bits/elem.\n")
    md.append("| KV arm | pass | PPL | ΔPPL vs f16 | KL | bits/elem | window | bits class | goal | issue 12 goal | beats " + REF_ARM +
              " | beats " + REF_ARM + " (same window) |")
    md.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    pts, wins = [], {}
    for a in sorted(arms, key=lambda a: (-a.get("bits_per_elem", 0), a["kv"], a["_pass"])):
        b, r = a["_base"] or base, a["_ref"] or ref
        dp = 100 * (a["ppl"] / b["ppl"] - 1) if b else None
        nb = nominal_bits(a["kv"], a.get("bits_per_elem"))
        goal = "-"
        if dp is not None and nb in GOALS:
            goal = f"{'met' if dp <= GOALS[nb] else 'missed'} (≤ +{GOALS[nb]:g}%)"
        beat = "-"
        if r and a["kv"] != REF_ARM and a.get("bits_per_elem", 99) <= r.get("bits_per_elem", 0) + 1e-9:
            beat = "yes" if a["ppl"] < r["ppl"] else "no"
        legacy = a["_pass"] in LEGACY_PASSES
        win = eff_window(a["kv"], legacy)
        g12 = "-"
        bpe = a.get("bits_per_elem", 99)
        for lim, gp in ISSUE12_GOALS:
            if dp is not None and bpe <= lim:
                g12 = ("n/a (fp16 window)" if fp16_window(a["kv"], legacy) or int(re.search(r"sink=(\d+)", a["kv"]).group(1)
                                                                        if re.search(r"sink=(\d+)", a["kv"]) else 0) > 4
                       else f"{'met' if dp <= gp else 'missed'} (≤ {lim:g} b: ≤ +{gp:g}%)")
                break
        same = "-"
        if a["kv"] != REF_ARM and not a["kv"].startswith(REF_ARM):
            peers = [p for p in arms if p["_pass"] == a["_pass"] and p["kv"].startswith(REF_ARM)
                     and "kmean" not in p["kv"] and "kscale" not in p["kv"] and eff_window(p["kv"], legacy) == win]
            if peers and bpe <= peers[0].get("bits_per_elem", 0) + 1e-9:
                same = "yes" if a["ppl"] < peers[0]["ppl"] else "no"
            elif peers:
                same = "more bits"
        kl = a.get("kl_vs_first")
        md.append(f"| `{CALIB_RE.sub('calib=calib.vqc', a['kv'])}` | {a['_pass']} | {a['ppl']:.4f} | {'' if dp is None else f'{dp:+.2f}%'} | "
                  f"{'' if kl is None else f'{kl:.4f}'} | {bpe:.3f} | {win or '— (exact)'} | {nb if nb else '-'} | {goal} | "
                  f"{g12} | {beat} | {same} |")
        # the plot: codecs with a usable result (ΔPPL <= 60 %), no per-side diagnostics (one side f16), log scale
        if dp is not None and 0 < dp <= 60 and not re.search(r"(^|;)[kv]=f16", a["kv"]) and \
                (a["kv"], a.get("bits_per_elem")) not in [(p[2], p[0]) for p in pts]:
            pts.append((a.get("bits_per_elem", 0), dp, CALIB_RE.sub("calib=calib.vqc", a["kv"])))
            wins[pts[-1][2], pts[-1][0]] = win
    png = os.path.join(results, "ppl_vs_bits.png")
    why = gnuplot_labels(png, pts, "bits per element (K and V, all metadata)", "ΔPPL vs f16 (%, log scale)",
                         "Quality against bits: WikiText-2, SmolLM2-135M, decode, ctx 2048 (arms within +60 %)")
    plots.append(("ΔPPL vs bits/elem", png, why))
    # every codec's frontier: per family (the key codec, + kx for the key pre-transform, and the kind of
    # window it keeps), the arms no other arm of the family beats in both bits and ΔPPL, joined
    fam = {}
    for bpe, dp, kv in pts:
        w = wins.get((kv, bpe))
        wk = "no window" if w and w.split(",")[0].split(";")[0] == "0" else \
             ("q8_0 window" if w and "q8_0" in w.split(",")[0] else "fp16 window")
        first = kv.split(";")[0]
        name = (first[2:] if first.startswith("k=") else first).split(":")[0]
        if "rotate=1" in first:
            name += ":rotate=1"
        if "kmean" in kv or "kscale" in kv:
            name += "+kx"
        if "evict=" in kv:
            name += "+evict"
        fam.setdefault(f"{name}, {wk}", []).append((bpe, dp))
    series, styles = [], {}
    for i, name in enumerate(sorted(fam)):
        front = [(b, d) for b, d in fam[name] if not any(b2 <= b and d2 < d or b2 < b and d2 <= d for b2, d2 in fam[name])]
        series.append((name, front))
        styles[name] = f"linespoints pt {i % 13 + 1} ps 1.4 lc {i + 1} dt {i // 8 + 1}"
    png2 = os.path.join(results, "ppl_vs_bits_frontier.png")
    why2 = gnuplot(png2, series, "bits per element (K and V, all metadata)", "ΔPPL vs f16 (%, log scale)",
                   "The frontier of each codec family: WikiText-2, SmolLM2, decode, ctx 2048", logy=True, styles=styles)
    plots.append(("ΔPPL vs bits/elem, each codec family's frontier (key codec, + kx = key pre-transform, "
                  "window kind)", png2, why2))
    md.append("")


def rss_table(md, s):
    """The table of bench/report_memory.py's summary.json: accounted bytes against measured RSS per arm."""
    md.append("| KV arm | ctx | KV bytes (accounted) | RSS delta (measured) | saving accounted | saving measured | ratio "
              "| ratio after malloc_trim | result |")
    md.append("|---|---|---|---|---|---|---|---|---|")
    for r in s.get("rows", []):
        if "error" in r:
            md.append(f"| `{r['kv']}` | | | | | | | | not run: {r['error'][:80]} |")
            continue
        sa = f"{r['saving_accounted'] / MB:.2f} MB" if "saving_accounted" in r else "-"
        sm = f"{r['saving_measured'] / MB:.2f} MB" if "saving_measured" in r else "-"
        ra = f"{r['ratio']:.4f}" if r.get("ratio") is not None else "-"
        rt = f"{r['ratio_trim']:.4f}" if r.get("ratio_trim") is not None else "-"
        md.append(f"| `{r['kv']}` | {r['ctx']} | {r['kv_bytes'] / MB:.2f} MB | {r['rss_delta'] / MB:.2f} MB | {sa} | "
                  f"{sm} | {ra} | {rt} | {'PASS' if r.get('pass') else 'FAIL'} |")


def memory(results, md, plots):
    d = os.path.join(results, "memory")
    s = load(os.path.join(d, "summary.json"))
    md.append("## Memory: measured resident bytes against the cache's account\n")
    if not s:
        md.append("not run\n")
        return
    st, _ = stamp_line(d)
    md.append(st + "\n")
    md.append("One fresh process per arm (`veloxquant bench --rss-only`): RSS read with the model loaded and "
              "warmed and no cache, then after prefilling real WikiText-2 tokens through the cache. "
              f"Saving ratio = measured RSS saving vs f16 / accounted saving (vq_kv_bytes); PASS within "
              f"{100 * s.get('tolerance', 0.05):.0f}% (f16 row: RSS delta / its own KV bytes). 'After malloc_trim': the "
              "same with RSS read right after malloc_trim(0), which gives back freed scratch the allocator kept "
              "(it cannot give back memory the cache holds); PASS is judged on the raw ratio.\n")
    rss_table(md, s)
    series = []
    for f in sorted(glob.glob(os.path.join(d, "*.json"))):
        j = load(f)
        if not j or "points" not in j:
            continue
        series.append((j["kv"], [(p["ctx"], p["rss"] / MB) for p in j["points"]]))
    png = os.path.join(results, "memory_vs_ctx.png")
    why = gnuplot(png, series, "context (tokens in the cache)", "process resident memory (MB)",
                  "Resident memory against context, one process per arm", logx=True)
    plots.append(("resident MB vs context", png, why))
    md.append("")


def throughput(results, md, plots):
    d = os.path.join(results, "throughput")
    j = load(os.path.join(d, "bench.json"))
    md.append("## Throughput: decode tokens/s against context\n")
    if not j:
        md.append("not run\n")
        return
    st, _ = stamp_line(d)
    md.append(st + "\n")
    bw = j.get("bandwidth", {})
    md.append(f"{j.get('machine', '')}; threads {j.get('threads')}, kernels {j.get('isa')}; {j.get('reps')} repeats, "
              f"arms interleaved (rep outermost); {j.get('gen')} decode tokens timed per repeat; load average "
              f"{j.get('load1_min', 0):.2f}-{j.get('load1_max', 0):.2f}. Read bandwidth measured in the same run: "
              f"{bw.get('median_gbps', 0):.2f} GB/s median [{bw.get('min_gbps', 0):.2f}, {bw.get('max_gbps', 0):.2f}] "
              f"({bw.get('buffer_bytes', 0) / MB:.0f} MiB buffer). Physical limit = bandwidth / (KV bytes held + "
              f"model file bytes {j.get('model_bytes', 0) / MB:.1f} MB, an upper bound of the weights one step "
              f"reads). Noise = the baseline ({j.get('baseline')}) arm's (max-min)/median at that ctx: a ratio "
              f"within 1 ± noise is no result. Peak RSS: VmHWM over that arm's own runs.\n")
    md.append("| KV arm | ctx | decode tok/s med [min, max] | vs f16 [lo, hi] | noise | limit tok/s | of limit | "
              "prefill tok/s med | peak RSS MB | KV MB |")
    md.append("|---|---|---|---|---|---|---|---|---|---|")
    series = {}
    for r in j.get("summary", []):
        dt, v, p = r["decode_tps"], r["vs_baseline"], r["prefill_tps"]
        md.append(f"| `{r['kv']}` | {r['ctx']} | {dt['median']:.1f} [{dt['min']:.1f}, {dt['max']:.1f}] | "
                  f"{v['median']:.3f} [{v['lo']:.3f}, {v['hi']:.3f}] | {100 * r['noise_floor']:.1f}% | "
                  f"{r['max_tps']:.1f} | {100 * r['fraction_of_max']:.0f}% | {p['median']:.1f} | "
                  f"{r['peak_rss'] / MB:.1f} | {r['kv_bytes'] / MB:.2f} |")
        series.setdefault(r["kv"], []).append((r["ctx"], dt["median"]))
    md.append("")
    lc = sorted(glob.glob(os.path.join(d, "llamacpp_*.json")))
    skipped = os.path.join(d, "llamacpp_skipped.txt")
    if lc:
        md.append("llama.cpp beside ours (`bench/decode_vs_llamacpp.py`: one process per engine and repeat, "
                  "alternating):\n")
        md.append("| engine | KV | ctx | decode tok/s med [min, max] | prefill tok/s med | peak RSS MB |")
        md.append("|---|---|---|---|---|---|")
        for f in lc:
            kv = os.path.basename(f)[len("llamacpp_"):-len(".json")]
            raw = (load(f) or {}).get("raw", [])
            for c in sorted({x["ctx"] for x in raw}):
                for eng in ("veloxquant", "llama.cpp"):
                    rs = [x for x in raw if x["ctx"] == c and x["engine"] == eng]
                    if not rs:
                        continue
                    dd = [x["decode_tps"] for x in rs]
                    md.append(f"| {eng} | {kv} | {c} | {statistics.median(dd):.1f} [{min(dd):.1f}, {max(dd):.1f}] | "
                              f"{statistics.median(x['prefill_tps'] for x in rs):.1f} | "
                              f"{max(x['peak_rss'] for x in rs) / MB:.1f} |")
                    if eng == "llama.cpp":
                        series.setdefault(f"llama.cpp {kv}", []).append((c, statistics.median(dd)))
        md.append("")
    if os.path.exists(skipped):
        md.append(open(skipped).read().strip() + "\n")
    png = os.path.join(results, "throughput_vs_ctx.png")
    why = gnuplot(png, list(series.items()), "context (tokens)", "decode tokens/s (median)",
                  "Decode throughput against context", logx=True)
    plots.append(("tokens/s vs context", png, why))


def needle(results, md):
    d = os.path.join(results, "needle")
    j = load(os.path.join(d, "needle.json"))
    md.append("## Needle (passkey retrieval)\n")
    if not j:
        sk = os.path.join(d, "skipped.txt")
        md.append((open(sk).read().strip() if os.path.exists(sk) else "not run") + "\n")
        return
    st, _ = stamp_line(d)
    md.append(st + "\n")
    md.append(f"filler {j.get('filler')}, format {j.get('format')}, {j.get('digits')} digits, seed {j.get('seed')}.\n")
    acc = j.get("accuracy", [])
    ctxs = sorted({a["ctx"] for a in acc})
    arms = list(dict.fromkeys(a["arm"] for a in acc))
    md.append("| KV arm | " + " | ".join(f"ctx {c}" for c in ctxs) + " |")
    md.append("|---|" + "---|" * len(ctxs))
    for arm in arms:
        cells = []
        for c in ctxs:
            a = next((x for x in acc if x["arm"] == arm and x["ctx"] == c), None)
            cells.append(f"{a['correct']}/{a['total']}" if a else "-")
        md.append(f"| `{arm}` | " + " | ".join(cells) + " |")
    md.append("")


CALIB_RE = re.compile(r"calib=[^;]*")   # shown as calib=calib.vqc: the stage's own file, wherever it ran
EVICT_RE = re.compile(r"^(?P<codec>.*?);evict=(?P<policy>\w+),budget=(?P<keep>[0-9.]+)")


def evict_arms(d):
    """Every arm of the eviction stage's perplexity files: dicts with codec, policy (None: no eviction),
    keep, ppl, dppl (vs the file's f16 arm), kl, bpt (KV bytes per token of context), kv."""
    out, ctx, scored = [], None, None
    for f in sorted(glob.glob(os.path.join(d, "ppl_*.json"))):
        j = load(f)
        if not j or not j.get("arms"):
            continue
        ctx = j.get("ctx", ctx)
        base = next((a for a in j["arms"] if a["kv"] == "f16"), None)
        if not base:
            continue
        scored = base.get("scored", scored)
        for a in j["arms"]:
            m = EVICT_RE.match(a["kv"])
            e = {"kv": CALIB_RE.sub("calib=calib.vqc", a["kv"]), "ppl": a["ppl"], "dppl": 100 * (a["ppl"] / base["ppl"] - 1),
                 "kl": a.get("kl_vs_first"), "bpt": a.get("kv_bytes", 0) / ctx, "kv_bytes": a.get("kv_bytes", 0)}
            if m:
                e.update(codec=m["codec"], policy=m["policy"], keep=float(m["keep"]))
            else:
                e.update(codec=a["kv"], policy=None, keep=1.0)
            if not any(x["kv"] == e["kv"] for x in out):
                out.append(e)
    return out, ctx, scored


def eviction(results, md, plots):
    d = os.path.join(results, "eviction")
    md.append("## Eviction: fewer tokens, alone and on top of a codec\n")
    arms, ctx, scored = evict_arms(d)
    if not arms:
        md.append("not run\n")
        return
    st, _ = stamp_line(d)
    md.append(st + "\n")
    if os.path.exists(os.path.join(d, "commands.json")):
        md.append("Every process's exact command line: `eviction/commands.json`.\n")
    md.append(f"Decode-mode WikiText-2 perplexity, ctx {ctx}, {scored} scored tokens; one `perplexity` process per "
              "(codec, kept ratio) with its arms batched; ΔPPL and KL against the f16 arm of the same process "
              "(every process scores the same tokens). Kept = `budget=R` of the positions seen, sinks 4, recent 32, "
              "an eviction step every 16 decode steps (docs/eviction.md); codecs with multi-row blocks (the 4-bit "
              "lanes layout: 16 rows) evict whole blocks. Bytes per context token = the cache's bytes at the end of "
              f"a window (pages, scores and observer buffers included) / {ctx}.\n")
    f16b = next((a["bpt"] for a in arms if a["kv"] == "f16"), None)
    codecs = list(dict.fromkeys(a["codec"] for a in arms))
    for codec in codecs:
        rows = [a for a in arms if a["codec"] == codec]
        keeps = sorted({a["keep"] for a in rows if a["policy"]}, reverse=True)
        if not keeps:
            continue
        md.append(f"`{codec}` (no eviction: ΔPPL " + ", ".join(f"{a['dppl']:+.2f}%" for a in rows if not a["policy"])
                  + "); cells: ΔPPL vs f16 (KL vs f16)\n")
        md.append("| policy | " + " | ".join(f"{100 * k:g} % kept" for k in keeps) + " |")
        md.append("|---|" + "---|" * len(keeps))
        for pol in dict.fromkeys(a["policy"] for a in rows if a["policy"]):
            cells = []
            for k in keeps:
                a = next((x for x in rows if x["policy"] == pol and x["keep"] == k), None)
                cells.append(f"{a['dppl']:+.2f}% ({a['kl']:.3f})" if a and a.get("kl") is not None else
                             (f"{a['dppl']:+.2f}%" if a else "-"))
            md.append(f"| {pol} | " + " | ".join(cells) + " |")
        cells = []
        for k in keeps:
            b = [x["bpt"] for x in rows if x["policy"] and x["keep"] == k]
            cells.append(f"{min(b):.0f}-{max(b):.0f}" + (f" ({f16b / statistics.mean(b):.1f}× less)" if f16b else ""))
        md.append("| bytes/context token | " + " | ".join(cells) + " |")
        md.append("")
    # the issue's goals
    def best(codec, keep):
        c = [a for a in arms if a["codec"] == codec and a["policy"] and abs(a["keep"] - keep) < 1e-9]
        return min(c, key=lambda a: a["ppl"]) if c else None
    goals = []
    b = best("f16", 0.5)
    if b:
        goals.append(f"- best policy at 50 % kept on f16: {b['policy']} {b['dppl']:+.2f}% (goal ≤ +3 %: "
                     f"{'met' if b['dppl'] <= 3 else 'missed'})")
    for codec in codecs:
        if codec == "f16":
            continue
        b = best(codec, 0.5)
        if b:
            ratio = f", {f16b / b['bpt']:.1f}× fewer bytes than f16" if f16b else ""
            goals.append(f"- best policy at 50 % kept on `{codec}`: {b['policy']} {b['dppl']:+.2f}%{ratio} "
                         f"(goal ≤ +5 %: {'met' if b['dppl'] <= 5 else 'missed'})")
    # passkey
    nfiles = sorted(glob.glob(os.path.join(d, "needle_*.json")))
    if nfiles:
        md.append("Passkey retrieval (`veloxquant needle`, classic filler, greedy; correct / trials):\n")
        acc = []
        for f in nfiles:
            acc += (load(f) or {}).get("accuracy", [])
        nctx = sorted({a["ctx"] for a in acc})
        md.append("| KV arm | " + " | ".join(f"ctx {c}" for c in nctx) + " |")
        md.append("|---|" + "---|" * len(nctx))
        seen = []
        for a in acc:
            if a["arm"] in seen:
                continue
            seen.append(a["arm"])
            cells = []
            for c in nctx:
                x = next((y for y in acc if y["arm"] == a["arm"] and y["ctx"] == c), None)
                cells.append(f"{x['correct']}/{x['total']}" if x else "-")
            md.append(f"| `{CALIB_RE.sub('calib=calib.vqc', a['arm'])}` | " + " | ".join(cells) + " |")
        md.append("")
    # long-context throughput and resident memory
    j = load(os.path.join(d, "bench.json"))
    if j:
        md.append(f"Decode at a long context (`veloxquant bench`, run alone after the quality and passkey jobs): "
                  f"threads {j.get('threads')}, kernels {j.get('isa')}, {j.get('reps')} repeats interleaved, "
                  f"{j.get('gen')} decode tokens timed per repeat, load {j.get('load1_min', 0):.2f}-"
                  f"{j.get('load1_max', 0):.2f}; noise = the f16 arm's (max-min)/median.\n")
        md.append("| KV arm | ctx | decode tok/s med [min, max] | vs f16 [lo, hi] | noise | prefill tok/s | KV MB | "
                  "peak RSS MB (in-process) |")
        md.append("|---|---|---|---|---|---|---|---|")
        for r in j.get("summary", []):
            dt, v = r["decode_tps"], r["vs_baseline"]
            md.append(f"| `{CALIB_RE.sub('calib=calib.vqc', r['kv'])}` | {r['ctx']} | {dt['median']:.1f} [{dt['min']:.1f}, {dt['max']:.1f}] | "
                      f"{v['median']:.2f} [{v['lo']:.2f}, {v['hi']:.2f}] | {100 * r['noise_floor']:.1f}% | "
                      f"{r['prefill_tps']['median']:.1f} | {r['kv_bytes'] / MB:.2f} | {r['peak_rss'] / MB:.1f} |")
            m = EVICT_RE.match(r["kv"])
            if m and m["codec"] != "f16":
                goals.append(f"- `{r['kv']}` at ctx {r['ctx']}: {v['median']:.2f}× f16's decode tok/s "
                             f"[{v['lo']:.2f}, {v['hi']:.2f}] (goal ≥ 4×: {'met' if v['median'] >= 4 else 'missed'})")
        md.append("")
    s = load(os.path.join(d, "rss", "summary.json"))
    if s:
        md.append("Resident memory at that context, one fresh process per arm (`bench --rss-only`, "
                  "bench/report_memory.py): the RSS delta of the filled cache against its accounted bytes.\n")
        rss_table(md, s)
        md.append("")
    if goals:
        md.append("Against the issue's goals:\n")
        md += goals
        md.append("")
    # the frontier: every arm of this stage and of the quality stage, ΔPPL against bytes per context token
    quant = []
    qd = os.path.join(results, "ppl")
    for f in sorted(glob.glob(os.path.join(qd, "*.json"))):
        q = load(f)
        if not q or "arms" not in q:
            continue
        qb = next((a for a in q["arms"] if a["kv"] == "f16"), None)
        for a in q["arms"]:
            if qb and a["kv"] != "f16" and not re.search(r"(^|;)[kv]=f16", a["kv"]):
                quant.append({"kv": CALIB_RE.sub("calib=calib.vqc", a["kv"]), "dppl": 100 * (a["ppl"] / qb["ppl"] - 1),
                              "bpt": a.get("kv_bytes", 0) / q.get("ctx", 1)})
    allp = quant + [a for a in arms if a["kv"] != "f16"]
    front, lo = [], float("inf")
    for a in sorted(allp, key=lambda a: (a["bpt"], a["dppl"])):
        if a["dppl"] < lo:
            front.append(a)
            lo = a["dppl"]
    md.append("The frontier (no arm has both fewer bytes per context token and a lower ΔPPL; quantization arms "
              "from the quality stage, whose ΔPPL is against its own f16 run"
              + (f" at {load(os.path.join(qd, 'arms.json')).get('ctx')} ctx" if load(os.path.join(qd, 'arms.json')) else "")
              + "):\n")
    md.append("| arm | bytes/context token | ΔPPL vs f16 |")
    md.append("|---|---|---|")
    for a in front:
        md.append(f"| `{a['kv']}` | {a['bpt']:.0f} | {a['dppl']:+.2f}% |")
    md.append("")
    pos = lambda xs: [(a["bpt"], a["dppl"]) for a in xs if a["dppl"] > 0]
    series = [("quantization only", pos(quant))]
    for codec in codecs:
        series.append((f"eviction on {codec}", pos([a for a in arms if a["codec"] == codec and a["policy"]])))
    series.append(("frontier", pos(front)))
    png = os.path.join(results, "eviction_frontier.png")
    why = gnuplot(png, series, "KV bytes per token of context (log)", "ΔPPL vs f16 (%, log; arms ≤ 0 not drawn)",
                  f"Quantization, eviction and both: WikiText-2, SmolLM2-135M, decode, ctx {ctx}", logx=True,
                  logy=True, styles={n: "points pt 7 ps 1.2" for n, _ in series if n != "frontier"})
    plots.append(("ΔPPL vs KV bytes per context token (the frontier)", png, why))



def weights(results, md):
    """The weights stage (bench/report_weights.py): one JSON per measured arm."""
    d = os.path.join(results, "weights")
    md.append("## Weights: formats' quality, size and speed (issue 11)\n")
    files = {os.path.basename(f)[:-5]: load(f) for f in glob.glob(os.path.join(d, "*.json"))
             if not f.endswith(("stamp.json", "skipped.json"))}
    files = {k: v for k, v in files.items() if v}
    if not files:
        md.append("not run\n")
        return
    st, _ = stamp_line(d)
    md.append(st + "\n")
    md.append("Every arm's exact commands are in its JSON (`weights/<arm>.json`); perplexity does not depend on "
              "load, the matvec and sharing figures do (the stamp's load average).\n")
    pct = lambda x, b: f"{100 * (x / b - 1):+.2f} %" if b else "-"
    # stories260K
    st_rows = [v for k, v in files.items() if k.startswith("stories_")]
    if st_rows:
        base = next((v["ppl"] for v in st_rows if v["weights"] == "fp32"), None)
        md.append(f"stories260K (fp32 weights), TinyStories sample, ctx 256, {st_rows[0]['scored']} tokens scored; "
                  "every matrix re-coded in memory at load (`--weights`) except w2 (172 columns: fp32 in every arm). "
                  "No K-quant can be compared here: the model's matrices have 64 or 172 columns, and K-quants need "
                  "multiples of 256 (llama.cpp falls back to other types for such rows); q8_0 / q4_1 / q4_0 are "
                  "ggml's own reference quantizers (the same bytes as gguf-py's), block 32:\n")
        md.append("| weights | bits/weight | PPL | vs fp32 |")
        md.append("|---|---|---|---|")
        for v in sorted(st_rows, key=lambda v: -(v.get("nominal_bpw") or 0)):
            md.append(f"| {v['weights']} | {v.get('nominal_bpw') or '-'} | {v['ppl']:.4f} | "
                      f"{'—' if v['weights'] == 'fp32' else pct(v['ppl'], base)} |")
        md.append("")
    # SmolLM2 whole files and llama.cpp's mixes
    sm = [v for k, v in files.items() if k.startswith("smol_")] + [v for k, v in files.items() if k.startswith("mix_")]
    if sm:
        base = next((v["ppl"] for v in sm if v["weights"] == "source"), None)
        md.append(f"SmolLM2-135M from its Q4_1 file, WikiText-2 test, ctx 512, {sm[0]['scored']} predictions (positions "
                  "256..510 of each window, as llama-perplexity scores); ours: every matrix re-coded into a reservoir "
                  "file (`veloxquant quantize --weights T`); llama.cpp: its mixes from the same source "
                  "(scripts/make_kquant_models.sh, no importance matrix), perplexity by our engine. Bits per weight: "
                  "8 × bytes / weights over the file's matrices:\n")
        md.append("| file | made by | file MB | bits/weight (matrices) | matrix types | PPL | vs the Q4_1 source |")
        md.append("|---|---|---|---|---|---|---|")
        for v in sorted(sm, key=lambda v: v["ppl"]):
            by = "the source" if v["weights"] == "source" else ("llama.cpp" if v["part"] == "mixes" else "veloxquant")
            ty = ", ".join(f"{t} ×{n}" for t, n in sorted(v.get("matrix_types", {}).items(), key=lambda x: -x[1]))
            md.append(f"| {v['weights']} | {by} | {v['file_bytes'] / 1e6:.2f} | {v['bpw_matrices']:.3f} | {ty} | "
                      f"{v['ppl']:.4f} | {'—' if v['weights'] == 'source' else pct(v['ppl'], base)} |")
        md.append("")
    # only ffn_down re-coded
    for tag in ("smollm2", "gemma3"):
        fd = [v for k, v in files.items() if k.startswith(f"fd_{tag}_") and not k.endswith("_errors")]
        if not fd:
            continue
        er = files.get(f"fd_{tag}_errors") or {}
        ec = {c["label"]: c for c in er.get("candidates", [])}
        src = next((v for v in fd if v["weights"] == "source"), None)
        base = src["ppl"] if src else None
        lay = fd[0].get("layers", [])
        rng, i = [], 0
        while i < len(lay):
            j = i
            while j + 1 < len(lay) and lay[j + 1] == lay[j] + 1:
                j += 1
            rng.append(str(lay[i]) if i == j else f"{lay[i]}-{lay[j]}")
            i = j + 1
        md.append(f"Equal bits per weight on the matrices that can hold K-quants ({tag}): only `ffn_down` of layers "
                  f"{', '.join(rng)} ({len(lay)} matrices, source type {fd[0].get('layers_src_type')}) re-coded, every "
                  f"other tensor byte-identical to the source (checked: column 'elsewhere'). Errors against the source's dequantized floats: relative RMS of the weights, and of the "
                  f"matrices' output on real activations (X from a float64 numpy pass over "
                  f"{er.get('calib_tokens', '?')} tokens of {er.get('calib', '?')}: ‖ΔW·X‖/‖W·X‖, "
                  "tools/reference/weight_errors.py; the same text the importance matrices were made on, so the '+im' "
                  "arms' output errors are in-sample). Perplexity: WikiText-2, ctx 512, "
                  f"{fd[0]['scored']} predictions.\n")
        md.append("| arm | made by | ffn_down type | its bits/weight | elsewhere | weight rel. RMS | output rel. error | "
                  "PPL | vs source |")
        md.append("|---|---|---|---|---|---|---|---|---|")
        for v in sorted(fd, key=lambda v: (-(v.get("recoded_bpw") or 99), v["weights"])):
            e = ec.get(v["weights"], {})
            md.append(f"| {v['weights']} | {v['engine_made_by']} | {', '.join(v.get('recoded_types') or []) or '-'} | "
                      f"{v['recoded_bpw']:.4f} | " if v.get("recoded_bpw") else
                      f"| {v['weights']} | the source | {v.get('layers_src_type')} | - | ")
            md[-1] += (f"{'identical' if v.get('byte_identical_elsewhere') else 'DIFFERS: ' + ' '.join(v.get('other_tensors_differing', [])[:4])} | "
                       f"{e['rel_rms']:.4f} | {e['rel_out']:.4f} | " if e else
                       f"{'identical' if v.get('byte_identical_elsewhere') else 'DIFFERS'} | - | - | ")
            md[-1] += f"{v['ppl']:.4f} | {'—' if v['weights'] == 'source' else pct(v['ppl'], base)} |"
        md.append("")
        md.append("Equal bits, stated: bits per weight count every byte of the re-coded matrices (codes and "
                  "scales). tqw blocks hold 64 weights (two fp16 scales): 4.5 / 3.5 / 2.5 bpw; llama.cpp's "
                  "super-blocks hold 256: Q4_K 4.5, Q3_K 3.4375, Q2_K 2.625; Q4_0 (block 32) 4.5. So tqw4 = Q4_K "
                  "= Q4_0 exactly, tqw3 spends 0.0625 bpw (1.8 %) more than Q3_K, and tqw2 0.125 bpw (4.8 %) less "
                  "than Q2_K (the nearest pairs the formats allow). 'T+im': llama-quantize with an importance "
                  "matrix (llama-imatrix on the calibration text, never the scored text); tqw has none. KL against "
                  "the source is not measured: `perplexity --kl` compares KV arms of one model in one process, "
                  "not two weight files; the output-error column stands in for it.")
        pairs = [("tqw4", "q4_K", "no worse than"), ("tqw3", "q3_K", "better than"), ("tqw2", "q2_K", "vs"),
                 ("tqw4", "q4_K+im", "vs"), ("tqw3", "q3_K+im", "vs"), ("tqw2", "q2_K+im", "vs"), ("tqw4", "q4_0", "vs")]
        byw = {v["weights"]: v for v in fd}
        lines = []
        for ours, theirs, goal in pairs:
            if ours in byw and theirs in byw:
                a_, b_ = byw[ours], byw[theirs]
                ok = a_["ppl"] <= b_["ppl"] if goal == "no worse than" else a_["ppl"] < b_["ppl"]
                verdict = "" if goal == "vs" else (" — goal met" if ok else " — goal missed")
                goal = goal if goal != "vs" else "vs (no goal)"
                ee = ""
                if ours in ec and theirs in ec:
                    ee = (f"; output error {ec[ours]['rel_out']:.4f} vs {ec[theirs]['rel_out']:.4f}, weight error "
                          f"{ec[ours]['rel_rms']:.4f} vs {ec[theirs]['rel_rms']:.4f}")
                lines.append(f"- {ours} ({a_['recoded_bpw']:.4g} bpw) {goal} {theirs} ({b_['recoded_bpw']:.4g} bpw): PPL "
                             f"{a_['ppl']:.4f} vs {b_['ppl']:.4f}{ee}{verdict}")
        if lines:
            md.append("")
            md += lines
        if (fd[0].get("layers_src_type") or "").upper() == "Q4_1":
            md.append("- Caveat: the source's ffn_down is Q4_1, whose values lie on a 16-level affine grid per 32 "
                      "weights; Q4_K (and Q5_K, Q6_K) have that shape per 32 too and nearly reproduce it (see the "
                      "weight errors), so on this model the K-quant arms start from a grid they fit and the comparison "
                      "favours them; the fair source is a float or a type of another shape (Gemma's Q6_K layers).")
        elif (fd[0].get("layers_src_type") or "").upper() == "Q6_K":
            md.append("- The source's ffn_down is Q6_K (6-bit codes per 16 weights, int8 scales): a finer grid than "
                      "any 4-bit type and of no arm's shape, so no arm starts from a grid it reproduces: the fair "
                      "comparison of the two.")
        md.append("")
    sk = files.get("skipped") or load(os.path.join(d, "skipped.json"))
    mv = files.get("matvec")
    if mv:
        md.append(f"Matrix-vector product, one token, one thread, SmolLM2's shapes, arms interleaved, weights streamed "
                  f"from a pool larger than the cache (`{mv['command']}`{', VQ_ISA=' + mv['env_isa'] if mv.get('env_isa') else ''}):\n")
        md.append("```\n" + mv["text"].rstrip() + "\n```\n")
    sh_ = [v for k, v in files.items() if k.startswith("share_")]
    if sh_:
        md.append("Sharing (`veloxquant bench-share`): K processes decode at once; Pss of the weights' mapping summed "
                  "over them against the file's size (goal: at most 1.1×; the copying baseline holds K×):\n")
        md.append("| file | mode | procs | file MB | total weights Pss MB | × file | process Rss / Pss MB (mean) |")
        md.append("|---|---|---|---|---|---|---|")
        for v in sorted(sh_, key=lambda v: v["arm"]):
            r = v["result"]
            pr = r.get("proc", [])
            rs = statistics.mean(p["rss_kb"] for p in pr) / 1024 if pr else 0
            ps = statistics.mean(p["pss_kb"] for p in pr) / 1024 if pr else 0
            md.append(f"| {v['file']} | {r['mode']} | {r['procs']} | {r['file_bytes'] / 1e6:.2f} | "
                      f"{r['total_map_pss_kb'] / 1024:.2f} | {r['map_pss_over_file']:.3f} | {rs:.1f} / {ps:.1f} |")
        md.append("")
    if sk and (sk.get("skipped") or sk.get("failed")):
        md.append("Not measured in this run: " + "; ".join(sk.get("skipped", []) + ["FAILED " + f for f in sk.get("failed", [])]) + "\n")

def serve(results, md, plots, outdir):
    d = os.path.join(results, "serve")
    j = os.path.join(d, "serve.json")
    md.append("## Server under load (`veloxquant serve` beside llama.cpp's server)\n")
    if not os.path.exists(j):
        md.append("not run\n")
        return
    st, _ = stamp_line(d)
    md.append(st + "\n")
    sk = os.path.join(d, "skipped.txt")
    if os.path.exists(sk):
        md.append(open(sk).read().strip() + "\n")
    md.append("Columns and method: docs/serve.md \"Benchmark\". Every conversation reserves its full length; "
              "each client streams --gen tokens, then disconnects; our arms share one server (the spec per "
              "request), llama-server arms run one server per cache type with as many slots as the budget "
              "holds by its logged KV bytes (equal memory).\n")
    t = os.path.join(d, "serve.txt")
    if os.path.exists(t):
        md.append("```\n" + open(t).read().rstrip() + "\n```\n")
    png = os.path.join(d, "serve.png")
    plots.append(("conversations at once and aggregate decode tok/s against concurrency", png,
                  None if os.path.exists(png) else "no serve.png"))
    md.append(f"Every load of every repeat: [{os.path.relpath(j, outdir)}]({os.path.relpath(j, outdir)}).\n")


def kernels(results, md, outdir):
    d = os.path.join(results, "bench-kernels")
    j = os.path.join(d, "bench_kernels.json")
    md.append("## Decode-attention kernels (bench-kernels)\n")
    if not os.path.exists(j):
        md.append("not run\n")
        return
    st, _ = stamp_line(d)
    md.append(st + "\n")
    runs = [j] + sorted(glob.glob(os.path.join(d, "bench_kernels_cal*.json")))
    for jj in runs:
        t = jj[:-5] + ".txt"
        if os.path.exists(t):
            md.append("```\n" + open(t).read().rstrip() + "\n```\n")
        md.append(f"Every raw repeat: [{os.path.relpath(jj, outdir)}]({os.path.relpath(jj, outdir)}).\n")
    # issue 12's kernel goals at 16k rows: every arm <= 4.6 bits/elem >= 2.5x f16 and >= 70 % of memcpy,
    # q8_0 >= 1.6x; medians of the repeats (the run's own f16 and memcpy)
    rows = []
    for jj in runs:
        r = load(jj)
        if not r:
            continue
        cp = statistics.median(r["copy_bps"]) if r.get("copy_bps") else None
        arms = [a for a in r.get("arms", []) if a.get("ok") and a.get("n") == 16384]
        for a in arms:
            f = next((b for b in arms if b["kv"] == "f16" and b["d"] == a["d"]), None)
            if not f or a["kv"] == "f16":
                continue
            t_a, t_f = statistics.median(a["attend_s"]), statistics.median(f["attend_s"])
            bps = a["kv_bytes"] / t_a if t_a > 0 else 0
            x, pc = t_f / t_a, (100 * bps / cp if cp else None)
            cb = a.get("code_bits", a["bits_per_elem"])   # the codec's bits (older runs: the store's)
            low = cb <= 4.6
            if a["kv"].startswith("q8_0") and not low:
                verdict = "met" if x >= 1.6 else f"missed (x {x:.2f} < 1.6)"
            elif low:
                miss = [f"x {x:.2f} < 2.5"] if x < 2.5 else []
                if pc is not None and pc < 70:
                    miss.append(f"{pc:.0f} % < 70 % of memcpy")
                verdict = "met" if not miss else "missed (" + ", ".join(miss) + ")"
            else:
                verdict = "- (above 4.6 bits)"
            run = os.path.basename(jj)[len("bench_kernels"):-5].lstrip("_") or "main"
            rows.append((a["d"], CALIB_RE.sub("calib=flat.vqc", a["kv"]), cb, a["bits_per_elem"], x, pc, verdict, run))
    if rows:
        md.append("Issue 12's kernel goals at 16k rows (medians; × f16 and % of memcpy from the same run: `main` is "
                  "bench_kernels.json, `cal64`/`cal128` the calibrated arms' runs with their own f16 and memcpy; code bits "
                  "= the codecs' block bytes per element, which decide whether an arm is a ≤ 4.6-bit one; store bits "
                  "= the store's count at 16k rows, window and tables included):\n")
        md.append("| head_dim | arm | run | code bits | store bits | × f16 | % of memcpy | goal |")
        md.append("|---|---|---|---|---|---|---|---|")
        for dd, kv, cb, b, x, pc, v, run in sorted(rows, key=lambda r: (r[0], r[2], r[1], r[7])):
            md.append(f"| {dd} | `{kv}` | {run} | {cb:.2f} | {b:.2f} | {x:.2f} | {'' if pc is None else f'{pc:.0f} %'} | {v} |")
        md.append("")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default="docs/results")
    ap.add_argument("--out", default="docs/results.md")
    ap.add_argument("--command", default="make report")
    a = ap.parse_args()
    outdir = os.path.dirname(os.path.abspath(a.out))
    md = ["# VeloxQuant measured results\n",
          f"Generated by `bench/report_gen.py` from the JSON in `{os.path.relpath(a.results, outdir)}/`; "
          f"regenerate everything with `{a.command}` (scripts/report.sh; FORCE=1 reruns stages whose JSON "
          "exists). Each section names the commit, date and exact command of its own run.\n",
          runs_section(a.results)]
    plots = []
    quality(a.results, md, plots)
    memory(a.results, md, plots)
    throughput(a.results, md, plots)
    needle(a.results, md)
    eviction(a.results, md, plots)
    weights(a.results, md)
    serve(a.results, md, plots, outdir)
    kernels(a.results, md, outdir)
    # what the numbers mean and which goals they meet: written by hand after reading this run's
    # tables (docs/results/analysis.md), kept apart from the generated tables and quoted as is
    notes = os.path.join(a.results, "analysis.md")
    if os.path.exists(notes):
        md.append("## Reading of these figures (hand-written, docs/results/analysis.md)\n")
        with open(notes) as f:
            md.append(f.read().strip() + "\n")
    md.append("## Plots\n")
    if not plots:
        md.append("none (no stage with data)")
    for name, png, why in plots:
        rel = os.path.relpath(png, outdir)
        md.append(f"- {name}: " + (f"not made ({why})" if why else f"![{name}]({rel})"))
    with open(a.out, "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"report_gen: wrote {a.out}")


if __name__ == "__main__":
    main()
