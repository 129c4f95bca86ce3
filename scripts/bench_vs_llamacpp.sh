#!/bin/bash
# Decode and prefill tok/s of VeloxQuant against llama.cpp's llama-bench on the same GGUF files,
# one process of each engine per repeat, alternating (docs/weights-kquants.md "Speed against
# llama.cpp"). Decode: GEN tokens from an empty cache (depth 0; ours after a 16-token prefill) or
# after DEPTH prompt tokens (llama-bench -d); prefill: a PP-token prompt in one batch (pp512).
# Prints one line per repeat, then per model/test/depth the median [min, max] of each engine,
# the per-pair ratio ours/theirs, the load, and decode's fraction of the bandwidth bound
# (tok/s x weight bytes per token / read bandwidth measured by `veloxquant bench` in that run).
# Usage: scripts/bench_vs_llamacpp.sh [MODEL...]
#   default models: /work/synth/llama3.2-1b-{Q4_0,Q4_K_M,Q8_0}.gguf (scripts/make_synthetic_gguf.py)
#   env: REPS (5), THREADS (2), GEN (32), PP (512), DEPTHS ("0 4096"), TESTS ("tg pp"),
#        KV (our cache spec for decode, default f16), LLAMA_BIN (/work/llamacpp/build/bin),
#        BIN (build/veloxquant), JSON (file for every raw repeat; default none)
# Run under `flock /tmp/bench.lock` on a shared machine; each line carries the 1-minute load.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/veloxquant}; LBD=${LLAMA_BIN:-/work/llamacpp/build/bin}; LB=$LBD/llama-bench
REPS=${REPS:-5}; T=${THREADS:-2}; GEN=${GEN:-32}; PP=${PP:-512}; DEPTHS=${DEPTHS:-"0 4096"}
TESTS=${TESTS:-"tg pp"}; KV=${KV:-f16}; JSON=${JSON:-}
export OMP_WAIT_POLICY=passive   # both engines: spinning OpenMP waits collapse on a shared machine
export LD_LIBRARY_PATH=$LBD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(/work/synth/llama3.2-1b-Q4_0.gguf /work/synth/llama3.2-1b-Q4_K_M.gguf /work/synth/llama3.2-1b-Q8_0.gguf)
for f in "$BIN" "$LB"; do [ -x "$f" ] || { echo "bench_vs_llamacpp: $f not found" >&2; exit 1; }; done
for M in "${models[@]}"; do [ -f "$M" ] || { echo "bench_vs_llamacpp: model $M not found" >&2; exit 1; }; done
raw=$(mktemp); trap 'rm -f "$raw"' EXIT
commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src || echo +)   # the checkout at the start (BIN may be another build)
load() { cut -d' ' -f1 /proc/loadavg; }

for M in "${models[@]}"; do
  for test in $TESTS; do
    if [ "$test" = pp ]; then depths=0; else depths=$DEPTHS; fi
    for D in $depths; do
      for r in $(seq 1 "$REPS"); do
        l0=$(load)
        if [ "$test" = tg ]; then
          ctx=$(( D > 0 ? D : 16 ))
          o=$("$BIN" bench -m "$M" --ctx "$ctx" --kv "$KV" -b "$PP" --reps 1 --gen "$GEN" --bw-reps 1 \
                --bw-mb 256 -t "$T" --json 2>/dev/null |
              python3 -c "import json,sys; d=json.load(sys.stdin); s=d['summary'][0]; print(s['decode_tps']['median'], s['max_tps'])")
          l=$("$LB" -m "$M" -p 0 -n "$GEN" -d "$D" -t "$T" -r 1 -o csv 2>/dev/null |
              python3 -c "import csv,sys; print(list(csv.DictReader(sys.stdin))[-1]['avg_ts'])")
        else
          o=$("$BIN" bench -m "$M" --ctx "$PP" -b "$PP" --reps 1 --gen 1 --bw-reps 1 --bw-mb 64 \
                -t "$T" --json 2>/dev/null |
              python3 -c "import json,sys; d=json.load(sys.stdin); s=d['summary'][0]; print(s['prefill_tps']['median'], 0)")
          l=$("$LB" -m "$M" -p "$PP" -n 0 -t "$T" -r 1 -o csv 2>/dev/null |
              python3 -c "import csv,sys; print(list(csv.DictReader(sys.stdin))[-1]['avg_ts'])")
        fi
        set -- $o
        echo "$(basename "$M") $test$([ "$test" = pp ] && echo "$PP" || echo "$GEN") depth $D rep $r veloxquant $1 llama.cpp $l load $l0-$(load) $(date -u +%H:%M:%S)"
        echo "$(basename "$M") $test $D $r $1 $l $2 $l0 $(load)" >> "$raw"
      done
    done
  done
done

python3 - "$raw" "$JSON" "$T" "$commit" "$BIN" <<'EOF'
import json, statistics as st, sys
raw, jf, threads, commit, binp = sys.argv[1:6]
rows = [l.split() for l in open(raw)]
groups = {}
for m, test, d, r, ours, theirs, mx, la, lb in rows:
    groups.setdefault((m, test, int(d)), []).append((float(ours), float(theirs), float(mx), float(la), float(lb)))
def mmm(v): return f"{st.median(v):7.2f} [{min(v):.2f}, {max(v):.2f}]"
print(f"\nsummary (checkout {commit}, binary {binp}, {threads} threads; median [min, max] over repeats; ratio per pair)")
print(f"{'model':28} {'test':4} {'depth':>5} | {'veloxquant tok/s':>24} | {'llama.cpp tok/s':>24} | {'ours/theirs':>22} | bw frac ours/theirs | load")
out = []
for (m, test, d), v in groups.items():
    o = [x[0] for x in v]; t = [x[1] for x in v]; rat = [a / b for a, b, *_ in v if b > 0]
    fr = ""
    if test == "tg" and all(x[2] > 0 for x in v):
        fo = [x[0] / x[2] for x in v]; ft = [x[1] / x[2] for x in v]
        fr = f"{st.median(fo):.2f} / {st.median(ft):.2f}"
    ld = [x[3] for x in v] + [x[4] for x in v]
    print(f"{m:28} {test:4} {d:5} | {mmm(o):>24} | {mmm(t):>24} | {mmm(rat):>22} | {fr:19} | {min(ld):.1f}-{max(ld):.1f}")
    out.append({"model": m, "test": test, "depth": d, "veloxquant_tps": o, "llamacpp_tps": t, "ratio": rat,
                "bound_tps": [x[2] for x in v], "load": [[x[3], x[4]] for x in v]})
if jf:
    json.dump({"commit": commit, "binary": binp, "threads": int(threads), "results": out}, open(jf, "w"), indent=1)
EOF
