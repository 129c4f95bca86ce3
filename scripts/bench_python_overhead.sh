#!/usr/bin/env bash
# bench_python_overhead.sh [REPS] [N] [KV...]: decode tokens/s of the Python package against the
# CLI on the same model, prompt, KV arm and threads, interleaved (cli, py-generate, py-complete,
# py-decode, then again), each a fresh process; one JSON line per run on stdout. Run it under the
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
for r in $(seq 1 "$reps"); do
  for kv in "${arms[@]}"; do
    out=$("$CLI" generate -m "$MODEL" -p "$PROMPT" -n "$n" --temp 0 -t "$THREADS" --kv "$kv" --json | tr -d '\n ')
    tps=$(sed 's/.*"decode_tps":\([0-9.]*\).*/\1/' <<<"$out"); gen=$(sed 's/.*"generated_tokens":\([0-9]*\).*/\1/' <<<"$out")
    echo "{\"rep\": $r, \"kv\": \"$kv\", \"arm\": \"cli\", \"generated_tokens\": $gen, \"decode_tps\": $tps}"
    for arm in generate complete decode; do
      line=$("$PYTHON" scripts/bench_python_decode.py "$arm" -m "$MODEL" -p "$PROMPT" -n "$n" -t "$THREADS" --kv "$kv")
      echo "{\"rep\": $r, \"kv\": \"$kv\", ${line#\{}"
    done
  done
done
