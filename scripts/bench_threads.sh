#!/usr/bin/env bash
# Thread scaling of decode and prefill (pp512), VeloxQuant against llama.cpp's llama-bench on the
# same GGUF files, engines alternated per repeat (docs/weights-kquants.md "Thread scaling").
# Usage: scripts/bench_threads.sh MODEL... ; env THREADS ("1 2 4 8 16"), REPS (3), GEN (32),
# DEPTH (0: decode right after the prompt; N: decode at depth N, as llama-bench -d N), LLAMA_BIN
# (folder of llama-bench), BIN (build/veloxquant), OUT (where the table and JSON go; default .),
# BW_MB (64: the read-bandwidth buffer of our bench, whose bound -- bandwidth / bytes read per token --
# is recorded as decode_bound; make it larger than the last-level cache for a DRAM figure), TEXT (the text our
# bench prefills; default its own, ../shared/data/wikitext-2-raw-test.txt).
# Prints one line per repeat and writes $OUT/bench_threads.jsonl (every repeat) and the medians
# with min/max to $OUT/bench_threads.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/veloxquant}; LB=${LLAMA_BIN:-/work/llamacpp/build/bin}/llama-bench
REPS=${REPS:-3}; GEN=${GEN:-32}; DEPTH=${DEPTH:-0}; OUT=${OUT:-.}; BW_MB=${BW_MB:-64}
text=(); [ -n "${TEXT:-}" ] && text=(-f "$TEXT")
THREADS=${THREADS:-"1 2 4 8 16"}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
[ $# -gt 0 ] || { echo "usage: $0 MODEL..." >&2; exit 2; }
for f in "$BIN" "$LB"; do [ -x "$f" ] || { echo "bench_threads: $f not found" >&2; exit 1; }; done
mkdir -p "$OUT"; J="$OUT/bench_threads.jsonl"; : > "$J"
ctx=$((DEPTH > 0 ? DEPTH : 16))
for M in "$@"; do
  [ -f "$M" ] || { echo "bench_threads: $M not found" >&2; exit 1; }
  for t in $THREADS; do
    for r in $(seq 1 "$REPS"); do
      # ours: decode at depth ctx (the prompt fill), then pp512 as a 512-token prefill in one chunk
      ob=$("$BIN" bench "${text[@]}" -m "$M" --ctx "$ctx" --reps 1 --gen "$GEN" --bw-reps 1 --bw-mb "$BW_MB" -t "$t" --json 2>/dev/null |
           python3 -c "import json,sys; s=json.load(sys.stdin)['summary'][0]; print(s['decode_tps']['median'], s['max_tps'])")
      od=${ob% *}; bound=${ob#* }
      op=$("$BIN" bench "${text[@]}" -m "$M" --ctx 512 -b 512 --reps 1 --gen 1 --bw-reps 1 --bw-mb 64 -t "$t" --json 2>/dev/null |
           python3 -c "import json,sys; s=json.load(sys.stdin)['summary'][0]; print(s['prefill_tps']['median'])")
      dflag=(); [ "$DEPTH" -gt 0 ] && dflag=(-d "$DEPTH")
      l=$("$LB" -m "$M" -p 512 -n "$GEN" -t "$t" -r 1 "${dflag[@]}" -o csv 2>/dev/null |
          python3 -c "
import csv,sys
rows=list(csv.DictReader(sys.stdin)); pp=[r for r in rows if int(r['n_prompt'])>0 and int(r['n_gen'])==0]
tg=[r for r in rows if int(r['n_gen'])>0]; print(pp[-1]['avg_ts'], tg[-1]['avg_ts'])")
      lp=${l% *}; ld=${l#* }
      load=$(cut -d' ' -f1 /proc/loadavg)
      echo "$(basename "$M") t=$t rep $r  decode ours $od llama.cpp $ld (bound $bound)   pp512 ours $op llama.cpp $lp   load $load"
      printf '{"model":"%s","threads":%d,"rep":%d,"depth":%d,"decode_ours":%s,"decode_llamacpp":%s,"decode_bound":%s,"pp512_ours":%s,"pp512_llamacpp":%s,"load1":%s}\n' \
        "$(basename "$M")" "$t" "$r" "$DEPTH" "$od" "$ld" "$bound" "$op" "$lp" "$load" >> "$J"
    done
  done
done
python3 - "$J" > "$OUT/bench_threads.txt" <<'PY'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = sorted({(r["model"], r["threads"]) for r in rows}, key=lambda k: (k[0], k[1]))
print(f"{'model':34s} {'t':>3s} | {'decode ours':>20s} {'llama.cpp':>20s} {'ratio':>6s} {'of bound o/l':>12s} | {'pp512 ours':>20s} {'llama.cpp':>20s} {'ratio':>6s}")
def f(v): return f"{st.median(v):7.2f} [{min(v):6.2f},{max(v):6.2f}]"
for m, t in keys:
    rs = [r for r in rows if r["model"] == m and r["threads"] == t]
    g = lambda k: [r[k] for r in rs]
    b = st.median(g('decode_bound')) if all('decode_bound' in r for r in rs) else float('nan')
    fr = f"{st.median(g('decode_ours'))/b:.2f}/{st.median(g('decode_llamacpp'))/b:.2f}"
    print(f"{m:34s} {t:3d} | {f(g('decode_ours'))} {f(g('decode_llamacpp'))} {st.median(g('decode_ours'))/st.median(g('decode_llamacpp')):6.2f} {fr:>12s} | "
          f"{f(g('pp512_ours'))} {f(g('pp512_llamacpp'))} {st.median(g('pp512_ours'))/st.median(g('pp512_llamacpp')):6.2f}")
PY
cat "$OUT/bench_threads.txt"
