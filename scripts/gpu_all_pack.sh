#!/usr/bin/env bash
# gpu_all_pack.sh DEST: every GPU run of docs/cuda.md in one carried folder, so one start of the GPU
# machine (several minutes of the session's device time each) runs them all:
#   DEST/attn  the attention kernels' run (scripts/gpu_run.sh with VQ_PREBUILT=1: test_cuda_attn,
#              bench_cuda_attn, torch SDPA baseline, memcheck);
#   DEST/fwd   the forward pass's run (scripts/gpu_fwd_pack.sh: test_cuda_ops, test_cuda_forward
#              over f16/@q8_0/@q4_0/@q4_1/Q4_K_M, bench_cuda_fwd, memcheck, the 1B shape);
#   DEST/cli   the CLI's run (scripts/gpu_cli_pack.sh: --device cuda against the CPU).
# Binaries are gzipped (the tree and DEST must stay under the tool's 64 MiB); the command that
# runs it all is scripts/gpu_all_run.sh (copied into DEST). Made from a build with VQ_CUDA on
# (BUILD, default build/); KQ as for gpu_fwd_pack.sh.
set -euo pipefail
DEST=${1:?usage: gpu_all_pack.sh DEST}
BUILD=${BUILD:-build}
rm -rf "$DEST"; mkdir -p "$DEST/attn/prebuilt/lib" "$DEST/attn/bench" "$DEST/attn/scripts"
cp "$BUILD/test_cuda_attn" "$BUILD/bench_cuda_attn" "$DEST/attn/prebuilt/"
strip "$DEST"/attn/prebuilt/*_cuda_attn
cp -L "$(ldconfig -p | awk '/libgomp.so.1 /{print $NF; exit}')" "$DEST/attn/prebuilt/lib/"
cp scripts/gpu_run.sh "$DEST/attn/scripts/"
cp -r bench/cuda "$DEST/attn/bench/"
BUILD=$BUILD bash scripts/gpu_fwd_pack.sh "$DEST/fwd" > /dev/null
BUILD=$BUILD bash scripts/gpu_cli_pack.sh "$DEST/cli" > /dev/null
rm -f "$DEST"/cli/prebuilt/test_cuda_*   # the fwd folder runs those
rm -rf "$DEST/cli/py" "$DEST/cli/models"   # the same as fwd's: gpu_all_run.sh copies them over
cp scripts/gpu_all_run.sh "$DEST/"
find "$DEST" \( -path '*/prebuilt/*' -o -name '*.gguf' -path '*/vocab/*' \) -type f -exec gzip -9 {} +
git rev-parse --short HEAD > "$DEST/COMMIT"
du -sh "$DEST"
