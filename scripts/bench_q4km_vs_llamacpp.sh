#!/bin/bash
# Decode tok/s of VeloxQuant against llama.cpp's llama-bench on the same K-quant files, alternating
# one process of each per repeat (docs/weights-kquants.md "Decode speed against llama.cpp").
# Usage: scripts/bench_q4km_vs_llamacpp.sh [MODEL...]   (default: SmolLM2's Q4_K_M, made by
# scripts/make_kquant_models.sh Q4_K_M, and Gemma 3's Q4_K_M); env REPS (5), THREADS (2), GEN (64),
# LLAMA_BIN (folder of llama-bench, default /work/llamacpp/build/bin), BIN (build/veloxquant).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/veloxquant}; LB=${LLAMA_BIN:-/work/llamacpp/build/bin}/llama-bench
REPS=${REPS:-5}; T=${THREADS:-2}; GEN=${GEN:-64}
export OMP_WAIT_POLICY=passive   # both engines: spinning OpenMP waits collapse on a shared machine
models=("$@"); [ ${#models[@]} -gt 0 ] || models=(models/SmolLM2-135M-Instruct.Q4_K_M.gguf models/gemma-3-270m-q4_k_m.gguf)
for f in "$BIN" "$LB"; do [ -x "$f" ] || { echo "bench_q4km: $f not found" >&2; exit 1; }; done
for M in "${models[@]}"; do
  [ -f "$M" ] || { echo "bench_q4km: $M not found" >&2; exit 1; }
  for r in $(seq 1 "$REPS"); do
    o=$("$BIN" bench -m "$M" --ctx 16 --reps 1 --gen "$GEN" --bw-reps 1 --bw-mb 64 -t "$T" --json 2>/dev/null |
        python3 -c "import json,sys; print(json.load(sys.stdin)['summary'][0]['decode_tps']['median'])")
    l=$("$LB" -m "$M" -p 0 -n "$GEN" -t "$T" -r 1 -o csv 2>/dev/null |
        python3 -c "import csv,sys; print(list(csv.DictReader(sys.stdin))[-1]['avg_ts'])")
    echo "$(basename "$M") rep $r veloxquant $o llama.cpp $l load $(cut -d' ' -f1 /proc/loadavg) $(date -u +%H:%M:%S)"
  done
done
