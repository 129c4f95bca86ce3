#!/usr/bin/env bash
# Makes K-quant (and IQ4) SmolLM2-135M files from the default Q4_1 file with llama.cpp's
# llama-quantize (--allow-requantize, no importance matrix), into models/ (ignored by git).
# Usage: scripts/make_kquant_models.sh [TYPE...]
#   (default: Q4_K_M Q5_K_M Q6_K Q3_K_M Q2_K IQ4_NL IQ4_XS Q2_K-pure; NAME-pure = llama-quantize --pure NAME,
#   every tensor that can be NAME is: the Q2_K mix itself puts no tensor of SmolLM2 in Q2_K)
# LLAMA_BIN (default /work/llamacpp/build/bin) names the folder holding llama-quantize; MODELS_OUT
# (default models/) the folder the files go to.
# SmolLM2's width 576 is no multiple of 256, so llama-quantize falls back to Q5_0/Q5_1/Q8_0/IQ4_NL
# for every matrix with 576 columns; only ffn_down (1536 columns) gets the K-quant type itself.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bin="${LLAMA_BIN:-/work/llamacpp/build/bin}"
src="$here/models/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -x "$bin/llama-quantize" ] || { echo "make_kquant_models: $bin/llama-quantize not found (set LLAMA_BIN)" >&2; exit 1; }
[ -f "$src" ] || { echo "make_kquant_models: $src missing: run scripts/fetch_model.sh" >&2; exit 1; }
types=("$@")
[ ${#types[@]} -gt 0 ] || types=(Q4_K_M Q5_K_M Q6_K Q3_K_M Q2_K IQ4_NL IQ4_XS Q2_K-pure)
for t in "${types[@]}"; do
  out="${MODELS_OUT:-$here/models}/SmolLM2-135M-Instruct.$t.gguf"
  if [ -f "$out" ]; then echo "make_kquant_models: $out present"; continue; fi
  flags=(--allow-requantize); q="$t"
  case "$t" in *-pure) flags+=(--pure); q="${t%-pure}";; esac
  "$bin/llama-quantize" "${flags[@]}" "$src" "$out.tmp" "$q" 2 > "$out.log" 2>&1 \
    || { echo "make_kquant_models: llama-quantize $t failed, see $out.log" >&2; rm -f "$out.tmp"; exit 1; }
  mv "$out.tmp" "$out"
  echo "make_kquant_models: $out ($(stat -c %s "$out") bytes)"
done
