#!/usr/bin/env bash
# report_ppl.sh: the quality stage of the report (issue 4): WikiText-2 perplexity of SmolLM2 in decode
# mode, ctx 2048, 9 windows (18423 scored tokens), one process per KV arm, each arm's --json kept in
# OUT/<slug>.json. An arm whose JSON is already there is skipped (delete it, or FORCE=1, to redo).
# usage: scripts/report_ppl.sh OUT_DIR [ARM...]   (default arms: the issue's list)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/report_ppl.sh OUT_DIR [ARM...]}; shift || true
BIN=${BIN:-build/veloxquant}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
TEXT=${TEXT:-../shared/data/wikitext-2-raw-test.txt}
CTX=${CTX:-2048}; MAXTOK=${MAXTOK:-18432}; THREADS=${THREADS:-2}
ARMS=("$@")
if [ ${#ARMS[@]} -eq 0 ]; then
  ARMS=(f16 q8_0 q4_0 q4_0:rotate=1
        turboquant_mse:bits=4 turboquant_mse:bits=3 turboquant_mse:bits=2
        turboquant_prod:bits=4 turboquant_prod:bits=3 turboquant_rvq:bits=2 turboquant_rvq:bits=1
        qjl polar kivi:bits=4 kivi:bits=2 rabitq rabitq:bits=3)
fi
[ -x "$BIN" ] || { echo "report_ppl: $BIN not built (make build)" >&2; exit 1; }
[ -f "$TEXT" ] || { echo "report_ppl: $TEXT missing (../shared absent?)" >&2; exit 1; }
mkdir -p "$OUT"
for arm in "${ARMS[@]}"; do
  slug=$(printf '%s' "$arm" | tr ':;=,@ ' '______')
  f="$OUT/$slug.json"
  if [ -s "$f" ] && [ -z "${FORCE:-}" ]; then echo "report_ppl: $arm: kept $f"; continue; fi
  echo "report_ppl: $arm ($(date -u +%H:%M:%S))" >&2
  "$BIN" perplexity -m "$MODEL" -f "$TEXT" --ctx "$CTX" --max-tokens "$MAXTOK" --mode decode \
    -t "$THREADS" --kv "$arm" --json > "$f.tmp"
  mv "$f.tmp" "$f"
done
