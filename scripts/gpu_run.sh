#!/usr/bin/env bash
# gpu_run.sh: the CUDA backend's run on the GPU machine (docs/cuda.md), in one command: build,
# test, sanitize, benchmark, baseline. Run from the repository root (or a copy of it) on a machine
# with an NVIDIA GPU, nvcc, CMake and PyTorch (the device machine's image has them):
#     OUT=/some/dir scripts/gpu_run.sh
# What it needs from here: the source tree only (no model files); prebuilt/ (optional: binaries
# built elsewhere with -DVQ_CUDA=ON, used only when no build works on the machine itself).
# Steps:
#   1. the card (nvidia-smi, nvcc, cmake, torch versions: the head of build.log);
#   2. build (build.log): cmake -DVQ_CUDA=ON, targets test_cuda_attn and bench_cuda_attn; if the
#      full configure fails (the image lacks the server's libraries), -DVQ_CUDA_ONLY=ON; if that
#      fails too, prebuilt/ binaries;
#   3. test.log: test_cuda_attn (every codec x shape, float64 reference, derived bound);
#   4. memcheck.log: compute-sanitizer --tool memcheck test_cuda_attn --small;
#   5. bench.log + bench.csv: bench_cuda_attn (our kernels, copy bandwidth);
#   6. sdpa.log + sdpa.csv + table.md: bench/cuda/sdpa_baseline.py (torch SDPA fp16 flash on the
#      same shapes, same card, same run) and the side-by-side table.
# Knobs: VQ_PREBUILT=1 runs prebuilt/ binaries (built elsewhere with -DVQ_CUDA=ON) without building;
# BENCH_ARGS are passed to bench_cuda_attn (--quick, --no-sweep); memcheck runs last, under
# MEMCHECK_TIMEOUT seconds (default 300).
# Everything lands in $OUT (8 files: the device tool brings back at most 8); commit it under docs/results/cuda/<date>-<card>/ and summarise it in
# docs/cuda.md. The exit status is that of the first failing step (the later ones still run).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
rc=0
step() { echo "== $(date -u +%H:%M:%S) $*"; }
fail() { echo "!! $*"; [ $rc -ne 0 ] || rc=1; }

step card
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.memory --format=csv
  nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  nvcc --version | tail -2; cmake --version | head -1; python3 -c 'import torch; print("torch", torch.__version__)'
  uname -r; } > "$OUT/build.log" 2>&1
cat "$OUT/build.log"

step build
J=$(nproc)
GEN=""; command -v ninja >/dev/null && GEN="-G Ninja"
BIN=""
if [ "${VQ_PREBUILT:-0}" = 1 ] && [ -x prebuilt/test_cuda_attn ]; then
    BIN=prebuilt; echo "prebuilt/ binaries (VQ_PREBUILT=1)" | tee -a "$OUT/build.log"
elif cmake -S . -B build-gpu $GEN -DCMAKE_BUILD_TYPE=Release -DVQ_CUDA=ON >> "$OUT/build.log" 2>&1 &&
   cmake --build build-gpu -j "$J" --target test_cuda_attn bench_cuda_attn >> "$OUT/build.log" 2>&1; then
    BIN=build-gpu; echo "built with the full configure"
else
    echo "full configure/build failed (tail of build.log below); trying -DVQ_CUDA_ONLY=ON"; tail -5 "$OUT/build.log"
    # -Werror off here: the CPU code is held to zero warnings by CI's compiler; another gcc (the
    # image's) may warn where that one does not (seen: maybe-uninitialized in codec_polar.c)
    if cmake -S . -B build-gpu-only $GEN -DCMAKE_BUILD_TYPE=Release -DVQ_CUDA=ON -DVQ_CUDA_ONLY=ON -DVQ_WERROR=OFF >> "$OUT/build.log" 2>&1 &&
       cmake --build build-gpu-only -j "$J" >> "$OUT/build.log" 2>&1; then
        BIN=build-gpu-only; echo "built with VQ_CUDA_ONLY"
    elif [ -x prebuilt/test_cuda_attn ]; then
        BIN=prebuilt; fail "no build on the machine: using prebuilt/ binaries"; tail -20 "$OUT/build.log"
    else
        fail "no build and no prebuilt binaries"; tail -40 "$OUT/build.log"; exit 1
    fi
fi
grep -E "registers|spill" "$OUT/build.log" | head -5

step test
"$BIN/test_cuda_attn" > "$OUT/test.log" 2>&1 || fail "test_cuda_attn exit $?"
tail -50 "$OUT/test.log"

step bench
"$BIN/bench_cuda_attn" ${BENCH_ARGS:-} --csv "$OUT/bench.csv" > "$OUT/bench.log" 2>&1 || fail "bench_cuda_attn exit $?"
cat "$OUT/bench.log"

step sdpa
PYTHONUNBUFFERED=1 python3 bench/cuda/sdpa_baseline.py --csv "$OUT/sdpa.csv" --ours "$OUT/bench.csv" --md "$OUT/table.md" \
    > "$OUT/sdpa.log" 2>&1 || fail "sdpa_baseline exit $?"
cat "$OUT/sdpa.log"
step memcheck
if command -v compute-sanitizer >/dev/null; then
    timeout "${MEMCHECK_TIMEOUT:-300}" compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/test_cuda_attn" --small > "$OUT/memcheck.log" 2>&1 ||
        fail "compute-sanitizer memcheck exit $?"
    tail -6 "$OUT/memcheck.log"
else
    fail "compute-sanitizer not found"
fi

step done rc=$rc
exit $rc
