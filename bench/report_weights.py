#!/usr/bin/env python3
"""The weights stage of the report (issue 11; scripts/report.sh runs it, docs/report-tooling.md): weight
formats' quality, size and speed, each result in its own JSON under OUT with the exact commands.

  stories   stories260K (fp32: the one float source here), TinyStories perplexity per weight type,
            the matrices re-coded in memory at load (`perplexity --weights T`) -> stories_<T>.json
  smollm2   SmolLM2-135M, WikiText-2 perplexity (the K-quant protocol of docs/weights-kquants.md: ctx
            512, positions 256..510 of each window scored) of the Q4_1 source file and of reservoir
            files re-coded from it (`veloxquant quantize --weights T`) -> smol_<T>.json
  ffn_down  the equal-bits comparison on the matrices that can hold K-quants: only ffn_down re-coded,
            every other tensor byte-identical to the source (checked): ours with `quantize --weights
            keep,blk.L.ffn_down=T`, llama.cpp's with llama-quantize --allow-requantize (each other
            tensor pinned to its own type, so it is copied) -> fd_<model>_<T>.json; an arm named T+im is
            llama-quantize with an importance matrix (llama-imatrix over --imatrix-chunks chunks of 512
            tokens of the calibration text, Moby Dick: not the scored text); the weight errors
            (relative RMS, and of the matrix's output on real activations) by
            tools/reference/weight_errors.py when --ref-py imports numpy and gguf -> fd_<model>_errors.json
  mixes     llama.cpp's own mixes of SmolLM2 (scripts/make_kquant_models.sh) -> mix_<T>.json
  matvec    build/bench_tqw (one token, one thread, SmolLM2 shapes) -> matvec.json, matvec.txt
  share     `veloxquant bench-share -k K` on the GGUF (mapped, copied) and a tqw4 reservoir -> share_<arm>.json

Files made on the way go to --work (default OUT/files) and are deleted after use unless --keep-files.
A result already there is kept unless --force (an interrupted run resumes); every JSON is written to a
temporary file and renamed. llama.cpp's parts are skipped, with a note in skipped.json, when
llama-quantize is absent. Standard library only (the weight errors run in --ref-py's interpreter).

  python3 bench/report_weights.py --out docs/results/weights --threads 2
"""
import argparse, json, os, re, shutil, subprocess, sys, time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
import gguf_lite  # noqa: E402

SHARED = os.path.join(REPO, "..", "shared", "data")
SMOL = os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
GEMMA = os.path.join(REPO, "models", "gemma-3-270m-q4_k_m.gguf")
WIKI = os.path.join(SHARED, "wikitext-2-raw-test.txt")
NOMINAL_BPW = {"fp32": 32.0, "f16": 16.0, "q8_0": 8.5, "q4_1": 5.0, "q4_0": 4.5, "tqw4": 4.5, "tqw3": 3.5, "tqw2": 2.5,
               "q2_K": 2.625, "q3_K": 3.4375, "q4_K": 4.5, "q5_K": 5.5, "q6_K": 6.5625}


def log(msg):
    print(f"report_weights: {time.strftime('%H:%M:%S', time.gmtime())} UTC {msg}", file=sys.stderr, flush=True)


def rel(p):
    """p as the commands show it: relative to the repository when inside it or in ../shared, else absolute"""
    if not os.path.isabs(p):
        return p
    r = os.path.relpath(p, REPO)
    return p if r.startswith("..") and not r.startswith(os.path.join("..", "shared")) else r


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def have(path, force):
    return not force and os.path.exists(path) and os.path.getsize(path) > 0


def sh(cmd, **kw):
    """Runs cmd (a list); returns (stdout, seconds); raises RuntimeError naming the command on failure."""
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()[-600:]}")
    return r.stdout, time.time() - t0


def cmdline(cmd):
    return " ".join(rel(x) if os.path.isabs(x) and os.path.exists(x) else (f"'{x}'" if re.search(r"[\s;|*()]", x) else x)
                    for x in cmd)


def file_stats(path):
    """bytes, weights and bits per weight of the file's matrices (2-D tensors) and of all its tensors."""
    f = gguf_lite.File(path)
    mat_b = mat_n = all_b = all_n = 0
    types = {}
    for t in f.tensors:
        n = 1
        for d in t.shape:
            n *= d
        all_b, all_n = all_b + t.nbytes, all_n + n
        if len(t.shape) == 2:
            mat_b, mat_n = mat_b + t.nbytes, mat_n + n
            types[t.type_name] = types.get(t.type_name, 0) + 1
    out = {"file_bytes": f.size, "tensor_bytes": all_b, "bpw_all": 8.0 * all_b / all_n,
           "bpw_matrices": 8.0 * mat_b / mat_n, "matrix_types": types}
    f.close()
    return out


def perplexity(a, model, extra, ctx, max_tokens, first_scored=None, text=WIKI):
    cmd = [a.bin, "perplexity", "-m", model] + extra + ["-f", text, "--ctx", str(ctx), "--mode", "prefill",
                                                         "-t", str(a.threads), "--json"]
    if max_tokens:
        cmd += ["--max-tokens", str(max_tokens)]
    if first_scored is not None:
        cmd += ["--first-scored", str(first_scored)]
    out, secs = sh(cmd)
    j = json.loads(out)
    arm = j["arms"][0]
    return {"ppl": arm["ppl"], "mean_nll": arm["mean_nll"], "scored": arm["scored"], "ctx": j.get("ctx"),
            "seconds": secs}, cmdline(cmd)


# ---------------------------------------------------------------- stories260K

def part_stories(a, out, skipped):
    model, tok = os.path.join(SHARED, "stories260K.bin"), os.path.join(SHARED, "tok512.bin")
    text = os.path.join(SHARED, "tinystories-valid-sample.txt")
    if not os.path.exists(model):
        skipped.append(f"stories: {rel(model)} absent (../shared)")
        return
    for w in a.stories_weights.split(","):
        p = os.path.join(out, f"stories_{w}.json")
        if have(p, a.force):
            continue
        extra = ["--tokenizer", tok] + ([] if w == "fp32" else ["--weights", w])
        log(f"stories260K {w}")
        r, cmd = perplexity(a, model, extra, 256, a.stories_tokens, text=text)
        write_json(p, {"part": "stories", "weights": w, "nominal_bpw": NOMINAL_BPW.get(w), "command": cmd, **r,
                       "note": "w2 (172 columns, no multiple of 32 or 64) stays fp32 in every arm"})


# ---------------------------------------------------------------- SmolLM2, whole files

def quantize(a, src, dst, spec):
    cmd = [a.bin, "quantize", "-m", src, "-o", dst, "--weights", spec, "-t", str(a.threads), "--json"]
    out, secs = sh(cmd)
    j = json.loads(out)
    j.pop("tensors", None)
    j.pop("tensor", None)         # one row per tensor: in the file itself, not needed here
    return {"summary": j, "seconds": secs}, cmdline(cmd)


def part_smollm2(a, out, work):
    for w in a.smol_weights.split(","):
        p = os.path.join(out, f"smol_{w}.json")
        if have(p, a.force):
            continue
        cmds = []
        if w == "source":
            f, q = SMOL, None
        else:
            f = os.path.join(work, f"smol-{w}.vqr")
            log(f"SmolLM2 quantize {w}")
            q, c = quantize(a, SMOL, f, w)
            cmds.append(c)
        log(f"SmolLM2 perplexity {w}")
        r, c = perplexity(a, f, [], 512, a.smol_tokens, first_scored=256)
        cmds.append(c)
        write_json(p, {"part": "smollm2", "weights": w, "file": rel(f), "commands": cmds, **file_stats(f), **r,
                       "quantize": q})
        if f != SMOL and not a.keep_files:
            os.unlink(f)


# ---------------------------------------------------------------- only ffn_down re-coded

def layer_ranges(layers):
    """[0,1,4,5,6] -> ['0-1', '4-6']"""
    out, i = [], 0
    while i < len(layers):
        j = i
        while j + 1 < len(layers) and layers[j + 1] == layers[j] + 1:
            j += 1
        out.append(str(layers[i]) if i == j else f"{layers[i]}-{layers[j]}")
        i = j + 1
    return out


def fd_targets(src, src_type):
    """layers whose ffn_down is of src_type (all when None)."""
    f = gguf_lite.File(src)
    ls = sorted(int(t.name.split(".")[1]) for t in f.tensors
                if t.name.endswith(".ffn_down.weight") and (src_type is None or t.type_name == src_type))
    f.close()
    return ls


def imatrix_for(a, tag, src, work):
    """llama-imatrix of src over the calibration text (made once per model into work); returns (path,
    command as shown)."""
    dst = os.path.join(work, f"imatrix-{tag}.gguf")
    cmd = [os.path.join(a.llama_bin, "llama-imatrix"), "-m", src, "-f", a.calib, "-o", dst + ".tmp.gguf", "-c", "512",
           "--chunks", str(a.imatrix_chunks), "-t", str(a.threads), "--no-ppl"]
    shown = cmdline(cmd).replace(rel(dst) + ".tmp.gguf", "IMATRIX.gguf")
    if not os.path.exists(dst):
        log(f"ffn_down {tag}: llama-imatrix ({a.imatrix_chunks} chunks of 512 tokens of {os.path.basename(a.calib)})")
        sh(cmd)
        os.replace(dst + ".tmp.gguf", dst)
    return dst, shown


def llama_fd(a, src, dst, layers, qtype, work, imatrix=None):
    """llama-quantize re-coding only the ffn_down of `layers` to qtype (with an importance matrix when
    imatrix names one); every other tensor is pinned to its own type (one exact-name pattern each in a
    --tensor-type-file), which llama-quantize copies."""
    f = gguf_lite.File(src)
    tgt = {f"blk.{l}.ffn_down.weight" for l in layers}
    pats = [r"^blk\.(" + "|".join(map(str, layers)) + r")\.ffn_down\.weight$=" + qtype.lower()]
    embd = None
    for t in f.tensors:
        if t.name in tgt or len(t.shape) != 2:
            continue
        if t.name == "token_embd.weight":
            embd = t.type_name.lower()
        else:
            pats.append("^" + re.escape(t.name) + "$=" + t.type_name.lower())
    f.close()
    tf = os.path.join(work, os.path.basename(dst) + ".types.txt")
    with open(tf, "w") as fh:
        fh.write("\n".join(pats) + "\n")
    cmd = [os.path.join(a.llama_bin, "llama-quantize"), "--allow-requantize", "--pure", "--tensor-type-file", tf]
    if imatrix:
        cmd += ["--imatrix", imatrix]
    if embd:
        cmd += ["--token-embedding-type", embd]
    cmd += [src, dst + ".tmp", "Q8_0", str(a.threads)]
    _, secs = sh(cmd)
    os.replace(dst + ".tmp", dst)
    shown = cmdline(cmd).replace(rel(tf), "TYPES.txt")
    if imatrix:
        shown = shown.replace(rel(imatrix), "IMATRIX.gguf")
    return shown + f"   # TYPES.txt: '{pats[0]}', then one '^NAME$=its own " \
        f"type' line per other matrix ({len(pats) - 1} lines)", secs


def part_ffn_down(a, out, work, skipped, tag, src, src_type, max_tokens):
    if not os.path.exists(src):
        skipped.append(f"ffn_down {tag}: {rel(src)} absent")
        return
    layers = fd_targets(src, src_type)
    if not layers:
        skipped.append(f"ffn_down {tag}: no ffn_down of type {src_type}")
        return
    lq = os.path.join(a.llama_bin, "llama-quantize")
    li = os.path.join(a.llama_bin, "llama-imatrix")
    pe = os.path.join(out, f"fd_{tag}_errors.json")
    need_files = a.errors and not have(pe, a.force)
    files = {}
    arms = ["source"] + a.fd_ours.split(",") + a.fd_llama.split(",")
    for w in arms:
        p = os.path.join(out, f"fd_{tag}_{w}.json")
        ours = w == "source" or w in a.fd_ours.split(",")
        if w != "source" and src_type and w.lower() == src_type.lower():
            skipped.append(f"ffn_down {tag} {w}: the source's own type (llama-quantize would copy it)")
            continue
        if not ours and not os.access(lq, os.X_OK):
            skipped.append(f"ffn_down {tag} {w}: {lq} absent")
            log(f"SKIPPED ffn_down {tag} {w}: {lq} absent (LLAMA_BIN names its folder)")
            continue
        im = not ours and w.endswith("+im")
        if im and not os.access(li, os.X_OK):
            skipped.append(f"ffn_down {tag} {w}: {li} absent")
            log(f"SKIPPED ffn_down {tag} {w}: {li} absent (LLAMA_BIN names its folder)")
            continue
        f = src if w == "source" else os.path.join(work, f"fd-{tag}-{w}" + (".vqr" if ours else ".gguf"))
        files[w] = f
        if have(p, a.force) and not need_files:
            continue
        cmds, made = [], None
        if w != "source" and not os.path.exists(f):
            log(f"ffn_down {tag}: make {w}")
            if ours:
                spec = "keep," + ",".join(f"blk.{r}.ffn_down={w}" for r in layer_ranges(layers))
                made, c = quantize(a, src, f, spec)
            elif im:
                imf, ic = imatrix_for(a, tag, src, work)
                c, secs = llama_fd(a, src, f, layers, w[:-3], work, imatrix=imf)
                made = {"seconds": secs, "imatrix_command": ic}
            else:
                c, secs = llama_fd(a, src, f, layers, w, work)
                made = {"seconds": secs}
            cmds.append(c)
        if have(p, a.force):
            continue
        g, s = gguf_lite.File(src), gguf_lite.File(f)
        diff = gguf_lite.differing(g, s)
        want = {f"blk.{l}.ffn_down.weight" for l in layers} if w != "source" else set()
        other = sorted(set(diff) - want)
        same_target = sorted(want - set(diff))
        rec = [s.by_name[n] for n in sorted(want)]
        nb = sum(t.nbytes for t in rec)
        ne = sum(t.shape[0] * t.shape[1] for t in rec)
        g.close()
        s.close()
        log(f"ffn_down {tag}: perplexity {w}")
        r, c = perplexity(a, f, [], 512, max_tokens, first_scored=256)
        cmds.append(c)
        write_json(p, {"part": "ffn_down", "model": tag, "source": rel(src), "weights": w,
                       "engine_made_by": "source" if w == "source" else ("veloxquant" if ours else
                                                                          "llama.cpp, imatrix" if im else "llama.cpp"),
                       "imatrix": {"calib": rel(a.calib), "chunks": a.imatrix_chunks, "ctx": 512} if im else None,
                       "layers": layers, "layers_src_type": src_type, "file": rel(f), "commands": cmds,
                       "recoded_types": sorted({t.type_name for t in rec}), "recoded_bpw": 8.0 * nb / ne if ne else None,
                       "other_tensors_differing": other, "targets_unchanged": same_target,
                       "byte_identical_elsewhere": not other, **file_stats(f), **r, "make": made})
    # the weight errors of every arm, in the reference interpreter
    cands = [f"{w}={f}" for w, f in files.items() if w != "source" and os.path.exists(f)]
    if need_files and cands:
        ok = subprocess.run([a.ref_py, "-c", "import numpy, gguf"], capture_output=True).returncode == 0 \
            if os.path.exists(a.ref_py) else False
        if not ok:
            skipped.append(f"ffn_down {tag} errors: {a.ref_py} cannot import numpy and gguf "
                           "(python3 -m venv .venv-ref && .venv-ref/bin/pip install numpy gguf)")
        else:
            log(f"ffn_down {tag}: weight errors of {len(cands)} files")
            sh([a.ref_py, os.path.join(REPO, "tools", "reference", "weight_errors.py"), "--source", src,
                "--calib", a.calib, "--calib-tokens", str(a.calib_tokens), "--bin", a.bin, "--json", pe] + cands)
    if not a.keep_files:
        for f in list(files.values()) + [os.path.join(work, f"imatrix-{tag}.gguf")]:
            if f != src and os.path.exists(f):
                os.unlink(f)


# ---------------------------------------------------------------- llama.cpp's mixes of SmolLM2

def part_mixes(a, out, work, skipped):
    lq = os.path.join(a.llama_bin, "llama-quantize")
    if not os.access(lq, os.X_OK):
        skipped.append(f"mixes: {lq} absent")
        log(f"SKIPPED mixes: {lq} absent (LLAMA_BIN names its folder)")
        return
    for t in a.mixes.split(","):
        p = os.path.join(out, f"mix_{t}.json")
        if have(p, a.force):
            continue
        f = os.path.join(work, f"SmolLM2-135M-Instruct.{t}.gguf")
        cmds = []
        if not os.path.exists(f):
            log(f"mix {t}: llama-quantize")
            cmd = ["bash", os.path.join(REPO, "scripts", "make_kquant_models.sh"), t]
            sh(cmd, env={**os.environ, "LLAMA_BIN": a.llama_bin, "MODELS_OUT": work})
            cmds.append(f"LLAMA_BIN={rel(a.llama_bin)} MODELS_OUT=WORK scripts/make_kquant_models.sh {t}")
        log(f"mix {t}: perplexity")
        r, c = perplexity(a, f, [], 512, a.smol_tokens, first_scored=256)
        cmds.append(c.replace(rel(f), f"WORK/{os.path.basename(f)}"))
        write_json(p, {"part": "mixes", "weights": t, "commands": cmds, **file_stats(f), **r})
        if not a.keep_files:
            os.unlink(f)


# ---------------------------------------------------------------- speed and sharing

def part_matvec(a, out, skipped):
    p = os.path.join(out, "matvec.json")
    if have(p, a.force):
        return
    if not os.access(a.bench_tqw, os.X_OK):
        skipped.append(f"matvec: {a.bench_tqw} not built")
        return
    log("matvec: bench_tqw")
    cmd = [a.bench_tqw, "--reps", str(a.matvec_reps), "--pool-mib", str(a.pool_mib)]
    txt, secs = sh(cmd)
    rows = []
    for l in txt.splitlines():
        m = re.match(r"\s*(\d+)x(\d+)\s+(\S+)\s+([\d.]+) bpw\s+median\s+([\d.]+) us\s+min\s+([\d.]+)\s+max\s+([\d.]+)\s+"
                     r"([\d.]+) GB/s\s+([\d.]+)x", l)
        if m:
            rows.append({"rows": int(m[1]), "cols": int(m[2]), "type": m[3], "bpw": float(m[4]), "median_us": float(m[5]),
                         "min_us": float(m[6]), "max_us": float(m[7]), "gbps": float(m[8]), "vs_q4_0": float(m[9])})
    with open(os.path.join(out, "matvec.txt"), "w") as f:
        f.write(txt)
    write_json(p, {"part": "matvec", "command": cmdline(cmd), "seconds": secs, "text": txt, "rows": rows,
                   "env_isa": os.environ.get("VQ_ISA", "")})


def part_share(a, out, work):
    arms = [("gguf_mapped", SMOL, []), ("gguf_copied", SMOL, ["--copy-weights"]), ("reservoir_tqw4_mapped", None, [])]
    for name, f, extra in arms:
        p = os.path.join(out, f"share_{name}.json")
        if have(p, a.force):
            continue
        cmds = []
        if f is None:
            f = os.path.join(work, "share-tqw4.vqr")
            _, c = quantize(a, SMOL, f, "tqw4")
            cmds.append(c)
        log(f"share: {name}")
        cmd = [a.bin, "bench-share", "-m", f, "-k", str(a.share_procs), "--json"] + extra
        txt, secs = sh(cmd)
        cmds.append(cmdline(cmd))
        write_json(p, {"part": "share", "arm": name, "file": rel(f), "commands": cmds, "seconds": secs,
                       "result": json.loads(txt)})
        if f != SMOL and not a.keep_files:
            os.unlink(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    env = os.environ.get
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", help="where files are made (default OUT/files)")
    ap.add_argument("--bin", default=env("BIN", os.path.join(REPO, "build", "veloxquant")))
    ap.add_argument("--bench-tqw", default=os.path.join(REPO, "build", "bench_tqw"))
    ap.add_argument("--llama-bin", default=env("LLAMA_BIN", "/work/llamacpp/build/bin"))
    ap.add_argument("--ref-py", default=os.path.join(REPO, ".venv-ref", "bin", "python"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parts", default="ffn_down,ffn_down_gemma,stories,smollm2,mixes,matvec,share",
                    help="comma-separated: stories smollm2 ffn_down ffn_down_gemma mixes matvec share")
    ap.add_argument("--stories-weights", default="fp32,q8_0,q4_1,q4_0,tqw4,tqw3,tqw2")
    ap.add_argument("--stories-tokens", type=int, default=65536, help="0: the whole sample (267750 tokens)")
    ap.add_argument("--smol-weights", default="source,q4_0,tqw4,tqw3")
    ap.add_argument("--smol-tokens", type=int, default=4096, help="WikiText-2 tokens per SmolLM2 arm (0: all)")
    ap.add_argument("--gemma-tokens", type=int, default=4096, help="WikiText-2 tokens per Gemma 3 arm (0: all)")
    ap.add_argument("--fd-ours", default="tqw4,tqw3,tqw2,q4_0")
    ap.add_argument("--fd-llama", default="q4_K,q3_K,q2_K,q4_K+im,q3_K+im,q2_K+im",
                    help="llama.cpp's types for the ffn_down arms; T+im: with an importance matrix")
    ap.add_argument("--calib", default=os.path.join(SHARED, "calibration-moby-dick.txt"),
                    help="the importance matrix's text (and the weight errors' activations)")
    ap.add_argument("--imatrix-chunks", type=int, default=16)
    ap.add_argument("--no-errors", dest="errors", action="store_false", help="skip the weight errors (numpy)")
    ap.add_argument("--calib-tokens", type=int, default=1024)
    ap.add_argument("--mixes", default="Q4_K_M,Q3_K_M,Q2_K")
    ap.add_argument("--matvec-reps", type=int, default=9)
    ap.add_argument("--pool-mib", type=int, default=96)
    ap.add_argument("--share-procs", type=int, default=4)
    ap.add_argument("--keep-files", action="store_true")
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    work = a.work or os.path.join(a.out, "files")
    os.makedirs(work, exist_ok=True)
    skipped, failed = [], []
    parts = a.parts.split(",")
    t0 = time.time()
    steps = {
        "stories": lambda: part_stories(a, a.out, skipped),
        "smollm2": lambda: part_smollm2(a, a.out, work),
        "ffn_down": lambda: part_ffn_down(a, a.out, work, skipped, "smollm2", SMOL, "Q4_1", a.smol_tokens),
        "ffn_down_gemma": lambda: part_ffn_down(a, a.out, work, skipped, "gemma3", GEMMA, "Q6_K", a.gemma_tokens),
        "mixes": lambda: part_mixes(a, a.out, work, skipped),
        "matvec": lambda: part_matvec(a, a.out, skipped),
        "share": lambda: part_share(a, a.out, work),
    }
    for p in parts:
        if p not in steps:
            sys.exit(f"report_weights: unknown part '{p}' (known: {', '.join(steps)})")
    for p in parts:
        try:
            steps[p]()
        except (RuntimeError, OSError, ValueError, KeyError) as e:
            failed.append(f"{p}: {e}")
            log(f"part {p} failed: {e}")
    write_json(os.path.join(a.out, "skipped.json"), {"skipped": skipped, "failed": failed})
    for s in skipped:
        log("skipped: " + s)
    if not a.keep_files and os.path.isdir(work) and not os.listdir(work):
        os.rmdir(work)
    log(f"done in {time.time() - t0:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
