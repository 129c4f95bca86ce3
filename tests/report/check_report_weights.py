#!/usr/bin/env python3
"""check_report_weights.py: the report's weights stage tooling (bench/gguf_lite.py, bench/report_weights.py,
bench/report_gen.py's weights section), without running any model.

  1. gguf_lite's tensor table of the SmolLM2 and Gemma 3 GGUF files (when present) equals gguf-py's
     (GGUFReader: names, type ids, shapes, absolute data offsets, byte counts), when --ref-py imports gguf;
     differing() of a file with itself is empty, and a one-byte change in a copy names that tensor only.
  2. report_weights.py refuses an unknown part (non-zero exit, the part named) and, with no llama.cpp
     tools, skips llama.cpp's parts with a printed note and a line in skipped.json (exit 0).
  3. report_gen.py's weights section on synthetic arm JSONs: the goal verdicts follow the perplexities
     (tqw4 no worse than q4_K: met when equal, missed when higher; tqw3 better than q3_K: missed when
     equal), bits per weight are printed as given, a '+im' arm shows as made with an importance matrix.

Usage: check_report_weights.py SOURCE_DIR MODELS_DIR [REF_PY]. Exit 0 pass, 1 fail, 77 when not even
part 3 can run (never in practice: it needs only python3).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

src_dir, models = sys.argv[1], sys.argv[2]
ref_py = sys.argv[3] if len(sys.argv) > 3 else os.path.join(src_dir, ".venv-ref", "bin", "python")
sys.path.insert(0, os.path.join(src_dir, "bench"))
import gguf_lite  # noqa: E402

fails = []


def check(cond, msg):
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond:
        fails.append(msg)


tmp = tempfile.mkdtemp(prefix="vq_report_weights_")
try:
    # 1. gguf_lite against gguf-py
    have_ref = os.path.exists(ref_py) and subprocess.run([ref_py, "-c", "import gguf, numpy"],
                                                         capture_output=True).returncode == 0
    files = [p for p in (os.path.join(models, "SmolLM2-135M-Instruct.Q4_1.gguf"),
                         os.path.join(models, "gemma-3-270m-q4_k_m.gguf")) if os.path.exists(p)]
    if not files:
        print("skip part 1: no model file in " + models)
    for path in files:
        f = gguf_lite.File(path)
        mine = [[t.name, t.type, [int(d) for d in t.shape], t.start, t.nbytes] for t in f.tensors]
        if have_ref:
            code = ("import gguf, json, sys\nr = gguf.GGUFReader(sys.argv[1])\n"
                    "print(json.dumps([[t.name, int(t.tensor_type), [int(d) for d in t.shape], int(t.data_offset), "
                    "int(t.n_bytes)] for t in r.tensors]))")
            out = subprocess.run([ref_py, "-c", code, path], capture_output=True, text=True, check=True).stdout
            ref = json.loads(out)
            check(mine == ref, f"{os.path.basename(path)}: gguf_lite's {len(mine)} tensors (name, type, shape, "
                               f"offset, bytes) equal gguf-py's {len(ref)}")
        else:
            print(f"skip the gguf-py comparison: {ref_py} cannot import gguf")
        check(gguf_lite.differing(f, f) == [], f"{os.path.basename(path)}: differing(file, itself) is empty")
        if path == files[0]:
            t = f.tensors[len(f.tensors) // 2]
            cp = os.path.join(tmp, "copy.gguf")
            shutil.copyfile(path, cp)
            with open(cp, "r+b") as fh:
                fh.seek(t.start + t.nbytes // 2)
                b = fh.read(1)
                fh.seek(t.start + t.nbytes // 2)
                fh.write(bytes([b[0] ^ 1]))
            g = gguf_lite.File(cp)
            d = gguf_lite.differing(f, g)
            check(d == [t.name], f"one flipped bit in {t.name}: differing() names it alone (got {d[:3]})")
            g.close()
            os.unlink(cp)
        f.close()

    # 2. report_weights.py: refusals and skips
    rw = os.path.join(src_dir, "bench", "report_weights.py")
    r = subprocess.run([sys.executable, rw, "--out", os.path.join(tmp, "w"), "--parts", "nosuch"],
                       capture_output=True, text=True)
    check(r.returncode != 0 and "unknown part 'nosuch'" in (r.stderr + r.stdout),
          f"unknown part refused (exit {r.returncode}): {(r.stderr + r.stdout).strip()[-90:]}")
    r = subprocess.run([sys.executable, rw, "--out", os.path.join(tmp, "w"), "--parts", "mixes",
                        "--llama-bin", os.path.join(tmp, "no-llama")], capture_output=True, text=True)
    sk = json.load(open(os.path.join(tmp, "w", "skipped.json")))
    check(r.returncode == 0 and "SKIPPED mixes" in r.stderr and any("llama-quantize absent" in s for s in sk["skipped"]),
          f"no llama.cpp: mixes skipped with a note (exit {r.returncode}, skipped.json {sk})")

    # 3. report_gen.py on synthetic arms
    res = os.path.join(tmp, "results")
    d = os.path.join(res, "weights")
    os.makedirs(d)

    def arm(w, by, typ, bpw, ppl):
        j = {"part": "ffn_down", "model": "gemma3", "weights": w, "engine_made_by": by, "layers": [0, 1, 4],
             "layers_src_type": "Q6_K", "recoded_types": [typ] if typ else [], "recoded_bpw": bpw,
             "byte_identical_elsewhere": True, "other_tensors_differing": [], "ppl": ppl, "scored": 2040}
        with open(os.path.join(d, f"fd_gemma3_{w}.json"), "w") as fh:
            json.dump(j, fh)

    arm("source", "source", None, None, 20.0)
    arm("tqw4", "veloxquant", "tqw4", 4.5, 21.0)
    arm("q4_K", "llama.cpp", "Q4_K", 4.5, 21.0)
    arm("tqw3", "veloxquant", "tqw3", 3.5, 23.0)
    arm("q3_K", "llama.cpp", "Q3_K", 3.4375, 23.0)
    arm("q3_K+im", "llama.cpp, imatrix", "Q3_K", 3.4375, 22.0)
    arm("tqw2", "veloxquant", "tqw2", 2.5, 40.0)
    arm("q2_K", "llama.cpp", "Q2_K", 2.625, 35.0)
    out = os.path.join(res, "results.md")
    r = subprocess.run([sys.executable, os.path.join(src_dir, "bench", "report_gen.py"), "--results", res,
                        "--out", out, "--command", "check"], capture_output=True, text=True)
    check(r.returncode == 0, f"report_gen ran (exit {r.returncode}) {r.stderr.strip()[-200:]}")
    md = open(out).read() if os.path.exists(out) else ""
    lines = md.splitlines()
    find = lambda pre: next((l for l in lines if l.startswith(pre)), "")
    check(find("- tqw4 (4.5 bpw) no worse than q4_K").endswith("goal met"), "tqw4 = q4_K in ppl: goal met")
    check(find("- tqw3 (3.5 bpw) better than q3_K (3.438 bpw)").endswith("goal missed"),
          "tqw3 = q3_K in ppl: 'better than' missed; Q3_K's 3.4375 bpw shown")
    l2 = find("- tqw2 (2.5 bpw) vs (no goal) q2_K (2.625 bpw)")
    check(l2 != "" and "goal met" not in l2 and "goal missed" not in l2, "tqw2 vs q2_K: shown, no verdict")
    check(find("- tqw3 (3.5 bpw) vs (no goal) q3_K+im") != "", "tqw3 vs q3_K+im shown")
    check(any(l.startswith("| q3_K+im | llama.cpp, imatrix | Q3_K | 3.4375 |") for l in lines),
          "the imatrix arm's row: made by, type, bits per weight")
    check("fair comparison" in md, "Q6_K source: the fairness note")
    check("0-1, 4" in md, "layer ranges printed (0-1, 4)")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

print(f"{len(fails)} failed")
sys.exit(1 if fails else 0)
