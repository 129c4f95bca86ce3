#!/usr/bin/env bash
# report_ppl.sh: the quality stage of the report (issue 4): WikiText-2 perplexity of SmolLM2 in decode
# mode (every prediction reads the cache), ctx 2048, 8 windows = 16376 scored tokens, the KV arms of
# a pass in ONE process: `perplexity --kv A --kv B ...` runs them together, one batched forward per
# token with a cache per arm (vq_forward_arms; the weights are read once for all arms).
# Two passes: OUT/arms.json (the issue's list at defaults + K/V, layer and window diagnostics) and
# OUT/arms_window.json (4/3/2-bit codecs with a recent full-precision window and an attention sink,
# against q4_0:rotate=1 with the same; q4_0:rotate=1,layout=rows is llama.cpp's rotated q4_0). f16 is in both passes (same arithmetic: equal figures).
# A third, OUT/arms_lowbit.json (issue 12): the low-bit key formats (3-bit kivi keys, kvquant with and
# without query-weighted outliers, tq_split) over 4-bit turboquant_mse values, beside q4_0:rotate=1;
# the calibrated ones read OUT/calib.vqc (`veloxquant calibrate` on the Moby-Dick calibration text,
# 16384 tokens, made here when absent).
# A fourth, OUT/arms_kx.json (issue 12): the key pre-transform (kmean=1,kscale=0.25 from OUT/calib.vqc)
# and an 8-bit recent window (window=64,wprec=8) at equal windows against rotated q4_0: every arm
# codes every row (row layouts: no implicit window) but 4 fp16 sinks and, where named, the q8_0 window.
# Every pass reports KL(f16 || arm) of the next-token distribution (--kl; f16 is each pass's first arm).
# A pass whose JSON is there is kept unless FORCE=1.
# usage: scripts/report_ppl.sh OUT_DIR [ARM...]   (arms given: one pass, OUT/arms_custom.json)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/report_ppl.sh OUT_DIR [ARM...]}; shift || true
BIN=${BIN:-build/veloxquant}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
TEXT=${TEXT:-../shared/data/wikitext-2-raw-test.txt}
CTX=${CTX:-2048}; MAXTOK=${MAXTOK:-16384}; THREADS=${THREADS:-2}
[ -x "$BIN" ] || { echo "report_ppl: $BIN not built (make build)" >&2; exit 1; }
[ -f "$TEXT" ] || { echo "report_ppl: $TEXT missing (../shared absent?)" >&2; exit 1; }
mkdir -p "$OUT"

pass() {   # pass NAME ARM...
  local f="$OUT/$1.json"; shift
  if [ -s "$f" ] && [ -z "${FORCE:-}" ]; then echo "report_ppl: kept $f (FORCE=1 to redo)"; return 0; fi
  local kv=(); for a in "$@"; do kv+=(--kv "$a"); done
  echo "report_ppl: $f: $# arms, ctx $CTX, $MAXTOK tokens, decode, $(date -u +%H:%M:%S) UTC" >&2
  "$BIN" perplexity -m "$MODEL" -f "$TEXT" --ctx "$CTX" --max-tokens "$MAXTOK" --mode decode \
    -t "$THREADS" --kl "${kv[@]}" --json > "$f.tmp"
  mv "$f.tmp" "$f"
}

if [ $# -gt 0 ]; then pass arms_custom "$@"; exit 0; fi
# q8_0 and q4_0 keys default to the lanes layout (16 rows a block: 0-15 newest rows exact in decode
# mode, docs/lowbit-keys.md); layout=rows is llama.cpp's cache (no such window), the like-for-like bar
pass arms f16 q8_0 q4_0 q4_0:rotate=1 q8_0:layout=rows q4_0:rotate=1,layout=rows \
  turboquant_mse:bits=4 turboquant_mse:bits=3 turboquant_mse:bits=2 \
  turboquant_prod:bits=4 turboquant_prod:bits=3 turboquant_rvq:bits=2 turboquant_rvq:bits=1 \
  qjl polar kivi:bits=4 kivi:bits=2 rabitq rabitq:bits=3 \
  "k=turboquant_mse:bits=4;v=f16" "k=f16;v=turboquant_mse:bits=4" \
  "k=turboquant_mse:bits=2;v=f16" "k=f16;v=turboquant_mse:bits=2" \
  "turboquant_mse:bits=4@0,-1=f16" "turboquant_mse:bits=4,window=128"
pass arms_window f16 \
  "turboquant_mse:bits=4;window=128" "turboquant_mse:bits=3;window=128" "turboquant_mse:bits=2;window=128" \
  "q4_0:rotate=1;window=128" "turboquant_prod:bits=3;window=128" "turboquant_rvq:bits=1;window=128" \
  "turboquant_mse:bits=4;window=32,sink=4" "turboquant_mse:bits=3;window=32,sink=4" \
  "turboquant_mse:bits=2;window=32,sink=4" "q4_0:rotate=1;window=32,sink=4"
CAL=$OUT/calib.vqc
if [ ! -s "$OUT/arms_lowbit.json" ] || [ -n "${FORCE:-}" ]; then
  if [ ! -s "$CAL" ]; then
    "$BIN" calibrate -m "$MODEL" -f "${CALIB_TEXT:-../shared/data/calibration-moby-dick.txt}" -o "$CAL.tmp" \
      --tokens 16384 --ctx 2048 -t "$THREADS" && mv "$CAL.tmp" "$CAL"
  fi
fi
V=turboquant_mse:bits=4
pass arms_lowbit f16 "q4_0:rotate=1" "k=kivi:bits=3,residual=0;v=$V" "k=kvquant:bits=3;v=$V" \
  "k=kvquant:bits=3,qweight=1;v=$V;calib=$CAL" "k=kvquant:bits=2,outliers=0.02,qweight=1;v=$V;sink=4;calib=$CAL" \
  "k=tq_split:hi=4,lo=1,frac=0.5;v=$V;calib=$CAL"
X="kmean=1,kscale=0.25,sink=4"; W="window=64,wprec=8"; P=layout=packed; Q="q4_0:rotate=1,layout=rows"
pass arms_kx f16 "$Q" "q8_0:layout=rows" "$Q;sink=4" "turboquant_mse:k=4,v=4,$P;$X;calib=$CAL" \
  "$Q;sink=4,$W" "$Q;$X,$W;calib=$CAL" "turboquant_mse:k=4,v=4,$P;$X,$W;calib=$CAL" \
  "turboquant_mse:k=4,v=4;$X,$W;calib=$CAL" "turboquant_mse:k=4,v=3,$P;$X,$W;calib=$CAL" \
  "turboquant_mse:k=3,v=3,$P;$X,$W;calib=$CAL" "turboquant_mse:k=3,v=2,$P;$X,$W;calib=$CAL"
# A fifth, OUT/arms_kx2.json: the ≤ 4.6-bit budget (page=64: a smaller last page), windows of 16-64 q8_0
# rows, equal-window rotated q4_0 bars, and 4-bit TurboQuant keys over rotated q4_0 values
G="page=64"; T="turboquant_mse:k=4,v=4,$P"
pass arms_kx2 f16 "$T;$X,window=32,wprec=8,$G;calib=$CAL" "$T;sink=4,window=32,wprec=8,$G" \
  "$Q;sink=4,window=32,wprec=8,$G" "$T;$X,window=64,wprec=8,$G;calib=$CAL" "$Q;$X,window=16,wprec=8,$G;calib=$CAL" \
  "$Q;sink=4,window=16,wprec=8,$G" "k=turboquant_mse:bits=4,$P;v=$Q;$X,window=32,wprec=8,$G;calib=$CAL" \
  "k=turboquant_mse:bits=4,$P;v=$Q;$X,window=64,wprec=8,$G;calib=$CAL" "turboquant_mse:k=4,v=3,$P;$X,window=64,wprec=8,$G;calib=$CAL" \
  "k=turboquant_mse:bits=3,$P;v=$Q;$X,window=64,wprec=8,$G;calib=$CAL"
