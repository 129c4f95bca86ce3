#!/usr/bin/env bash
# report_ppl.sh: the quality stage of the report (issue 4): WikiText-2 perplexity of SmolLM2 in decode
# mode (every prediction reads the cache), ctx 2048, 8 windows = 16376 scored tokens, every KV arm
# in ONE process: `perplexity --kv A --kv B ...` runs the arms together, one batched forward per
# token with a cache per arm (vq_forward_arms; the weights are read once for all arms). Output:
# OUT/arms.json (kept when present unless FORCE=1).
# usage: scripts/report_ppl.sh OUT_DIR [ARM...]   (default arms: the issue's list + diagnostics)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/report_ppl.sh OUT_DIR [ARM...]}; shift || true
BIN=${BIN:-build/veloxquant}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
TEXT=${TEXT:-../shared/data/wikitext-2-raw-test.txt}
CTX=${CTX:-2048}; MAXTOK=${MAXTOK:-16384}; THREADS=${THREADS:-2}
ARMS=("$@")
if [ ${#ARMS[@]} -eq 0 ]; then
  ARMS=(f16 q8_0 q4_0 q4_0:rotate=1
        turboquant_mse:bits=4 turboquant_mse:bits=3 turboquant_mse:bits=2
        turboquant_prod:bits=4 turboquant_prod:bits=3 turboquant_rvq:bits=2 turboquant_rvq:bits=1
        qjl polar kivi:bits=4 kivi:bits=2 rabitq rabitq:bits=3
        # diagnostics: which of K/V, which layers, how much a recent window buys
        "k=turboquant_mse:bits=4;v=f16" "k=f16;v=turboquant_mse:bits=4"
        "k=turboquant_mse:bits=2;v=f16" "k=f16;v=turboquant_mse:bits=2"
        "turboquant_mse:bits=4@0,-1=f16" "turboquant_mse:bits=4,window=128")
fi
[ -x "$BIN" ] || { echo "report_ppl: $BIN not built (make build)" >&2; exit 1; }
[ -f "$TEXT" ] || { echo "report_ppl: $TEXT missing (../shared absent?)" >&2; exit 1; }
mkdir -p "$OUT"
f="$OUT/arms.json"
if [ -s "$f" ] && [ -z "${FORCE:-}" ]; then echo "report_ppl: kept $f (FORCE=1 to redo)"; exit 0; fi
kv=(); for a in "${ARMS[@]}"; do kv+=(--kv "$a"); done
echo "report_ppl: ${#ARMS[@]} arms, ctx $CTX, $MAXTOK tokens, decode, $(date -u +%H:%M:%S) UTC" >&2
"$BIN" perplexity -m "$MODEL" -f "$TEXT" --ctx "$CTX" --max-tokens "$MAXTOK" --mode decode \
  -t "$THREADS" "${kv[@]}" --json > "$f.tmp"
mv "$f.tmp" "$f"
