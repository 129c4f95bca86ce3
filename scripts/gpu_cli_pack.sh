#!/usr/bin/env bash
# gpu_cli_pack.sh DEST: the folder scripts/gpu_cli_run.sh runs from on the GPU machine (docs/cuda.md,
# "--device cuda on the GPU machine"), made here from a build with VQ_CUDA on (BUILD, default
# build/): the CLI (stripped) and the shared libraries it loads besides glibc (the machine's image
# lacks libpcre2 and the server's libraries; not libstdc++, libgcc_s, zlib, libffi: the image's
# are newer), the gguf package, make_synthetic_gguf.py, the Llama
# SentencePiece vocabulary, tests/cli/cli_cuda.sh; test_cuda_ops and test_cuda_forward when built.
# The device tool carries DEST (well under the 64 MiB limit).
set -euo pipefail
DEST=${1:?usage: gpu_cli_pack.sh DEST}
BUILD=${BUILD:-build}
rm -rf "$DEST"; mkdir -p "$DEST"/{prebuilt/lib,py,scripts,tests/cli,models/vocab}
cp "$BUILD/veloxquant" "$DEST/prebuilt/"
for t in test_cuda_ops test_cuda_forward; do [ -x "$BUILD/$t" ] && cp "$BUILD/$t" "$DEST/prebuilt/"; done
strip "$DEST"/prebuilt/veloxquant "$DEST"/prebuilt/test_cuda_* 2>/dev/null || strip "$DEST"/prebuilt/veloxquant
ldd "$BUILD/veloxquant" | awk '$3 ~ /^\// { print $3 }' | grep -Ev '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libz|libffi|ld-linux[^/]*)\.so' |
    while read -r l; do cp -L "$l" "$DEST/prebuilt/lib/"; done
PY=$(ls -d .venv-ref/lib/python3*/site-packages/gguf)
cp -r "$PY" "$DEST/py/"; find "$DEST/py" -name __pycache__ -prune -exec rm -rf {} +
cp scripts/make_synthetic_gguf.py scripts/gpu_cli_run.sh "$DEST/scripts/"
cp tests/cli/cli_cuda.sh "$DEST/tests/cli/"
cp models/vocab/ggml-vocab-llama-spm.gguf "$DEST/models/vocab/"
cp -r models/vocab/templates "$DEST/models/vocab/"
du -sh "$DEST"
