#!/usr/bin/env bash
# bench_python_overhead.sh [REPS] [N] [KV...]: decode tokens/s of the Python package against the
# CLI on the same model, prompt, KV arm and threads, interleaved (cli, py-generate, py-complete,
# py-decode in an order that rotates with the repeat), each a fresh process; one JSON line per run on stdout. Run it under the
# bench lock on a loaded machine and read ratios of medians:
#   OMP_WAIT_POLICY=passive flock /tmp/bench.lock scripts/bench_python_overhead.sh 5 128 f16 q4_0:rotate=1
# Needs build/veloxquant and the package importable (PYTHON, default .venv-py/bin/python with
# PYTHONPATH=build/python-site as `ctest -R python/` leaves it).
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-5} n=${2:-128}
shift $(( $# > 2 ? 2 : $# )) || true
arms=("$@"); [ ${#arms[@]} -gt 0 ] || arms=(f16)
CLI=${CLI:-build/veloxquant} MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
PYTHON=${PYTHON:-.venv-py/bin/python} THREADS=${THREADS:-2}
PROMPT="The history of the printing press"
export PYTHONPATH=${PYTHONPATH:-build/python-site}
run_arm() {   # run_arm REP KV ARM: one run, one JSON line
  local r=$1 kv=$2 arm=$3 out tps gen line
  if [ "$arm" = cli ]; then
    out=$("$CLI" generate -m "$MODEL" -p "$PROMPT" -n "$n" --temp 0 -t "$THREADS" --kv "$kv" --json | tr -d '\n ')
    tps=$(sed 's/.*"decode_tps":\([0-9.]*\).*/\1/' <<<"$out"); gen=$(sed 's/.*"generated_tokens":\([0-9]*\).*/\1/' <<<"$out")
    echo "{\"rep\": $r, \"kv\": \"$kv\", \"arm\": \"cli\", \"generated_tokens\": $gen, \"decode_tps\": $tps}"
  else
    line=$("$PYTHON" scripts/bench_python_decode.py "$arm" -m "$MODEL" -p "$PROMPT" -n "$n" -t "$THREADS" --kv "$kv")
    echo "{\"rep\": $r, \"kv\": \"$kv\", ${line#\{}"
  fi
}
order=(cli generate complete decode)
for r in $(seq 1 "$reps"); do
  for kv in "${arms[@]}"; do
    for k in 0 1 2 3; do   # the order rotates with the repeat: no arm always runs first
      run_arm "$r" "$kv" "${order[$(( (k + r) % 4 ))]}"
    done
  done
done
