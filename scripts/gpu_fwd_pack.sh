#!/usr/bin/env bash
# gpu_fwd_pack.sh DEST: the folder scripts/gpu_fwd_run.sh runs from (docs/cuda.md), made here from
# a build with VQ_CUDA on (BUILD, default build/) and a K-quant model file (KQ, default
# /work/synth/cudafwd/mistral-tiny-Q4_K_M.gguf: llama-quantize of make_synthetic_gguf.py's
# mistral-7b-tiny f16). The device tool carries DEST (under 64 MiB with the checkout).
set -euo pipefail
DEST=${1:?usage: gpu_fwd_pack.sh DEST}
BUILD=${BUILD:-build}
KQ=${KQ:-/work/synth/cudafwd/mistral-tiny-Q4_K_M.gguf}
rm -rf "$DEST"; mkdir -p "$DEST"/{prebuilt/lib,py,scripts,models/vocab,synth}
cp "$BUILD"/{test_cuda_ops,test_cuda_forward,bench_cuda_fwd,test_cuda_kvenc,test_cuda_kvstate} "$DEST/prebuilt/"
strip "$DEST"/prebuilt/test_cuda_* "$DEST"/prebuilt/bench_cuda_fwd
cp -L "$(ldconfig -p | awk '/libpcre2-8.so.0 /{print $NF; exit}')" "$DEST/prebuilt/lib/libpcre2-8.so.0"
PY=$(ls -d .venv-ref/lib/python3*/site-packages/gguf)
cp -r "$PY" "$DEST/py/"; find "$DEST/py" -name __pycache__ -prune -exec rm -rf {} +
cp scripts/make_synthetic_gguf.py scripts/gpu_fwd_run.sh "$DEST/scripts/"
cp models/vocab/ggml-vocab-llama-bpe.gguf models/vocab/ggml-vocab-llama-spm.gguf "$DEST/models/vocab/"
cp -r models/vocab/templates "$DEST/models/vocab/"
cp "$KQ" "$DEST/synth/mistral-tiny-Q4_K_M.gguf"
du -sh "$DEST"
