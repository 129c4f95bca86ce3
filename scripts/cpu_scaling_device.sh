#!/usr/bin/env bash
# cpu_scaling_device.sh: thread scaling 1..N of decode and prefill, ours against llama.cpp's
# llama-bench, on a many-core machine that cannot fetch anything (the GPU machine's 16-core CPU:
# docs/weights-kquants.md "Thread scaling"). Run from the repository root of a copy of the tree:
#     OUT=dir LLAMA_SRC=dir VQ_BIN_DIR=dir [PYLIB=dir] scripts/cpu_scaling_device.sh
# What it needs, carried beside the tree:
#   LLAMA_SRC   llama.cpp's source (llama-cpp-python 0.3.36's vendor/llama.cpp, trimmed to CMakeLists.txt,
#               cmake/, ggml/ (CPU backend), src/, include/, common/, vendor/, tools/{llama-bench,
#               perplexity,quantize} with a tools/CMakeLists.txt adding only those); built here with
#               GGML_NATIVE=ON and AMX off (as on the development machine);
#   VQ_BIN_DIR  our `veloxquant` built elsewhere (Release, no -march: the kernels dispatch at run time)
#               and the shared libraries `ldd` lists beyond libc (the image lacks PCRE2, libmicrohttpd);
#   PYLIB       a folder holding the `gguf` Python package (scripts/make_synthetic_gguf.py needs it);
#   models/vocab/ggml-vocab-llama-bpe.gguf and models/vocab/templates (scripts/fetch_vocabs.sh);
#   TEXT        a real text for our bench's prefill (../shared is not there: carry a copy, never commit it).
# Env: PRESET (llama3.2-1b), TYPES ("Q4_K_M Q4_0"), THREADS ("1 2 4 8 16"), REPS (3), GEN (32).
# Writes to $OUT: machine.txt (CPU, memory), build.log, and bench_threads.{txt,jsonl} (scripts/bench_threads.sh).
set -uo pipefail
OUT=${OUT:?set OUT}; LLAMA_SRC=${LLAMA_SRC:?set LLAMA_SRC}; VQ_BIN_DIR=${VQ_BIN_DIR:?set VQ_BIN_DIR}
PRESET=${PRESET:-llama3.2-1b}; TYPES=${TYPES:-"Q4_K_M Q4_0"}
export THREADS=${THREADS:-"1 2 4 8 16"} REPS=${REPS:-3} GEN=${GEN:-32}
[ -n "${PYLIB:-}" ] && export PYTHONPATH=$PYLIB${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$OUT"; W=$(mktemp -d)
step() { echo "== $(date -u +%H:%M:%S) $*"; }

step machine
{ lscpu | sed -n '1,25p'; free -g; nproc; } > "$OUT/machine.txt" 2>&1
head -20 "$OUT/machine.txt"

step "build llama.cpp (CPU, AMX off)"
F="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
{ cmake -S "$LLAMA_SRC" -B "$W/lb" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_AMX_TILE=OFF \
    -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    -DBUILD_SHARED_LIBS=ON -DCMAKE_C_FLAGS="$F" -DCMAKE_CXX_FLAGS="$F" &&
  cmake --build "$W/lb" -j"$(nproc)" --target llama-bench llama-quantize; } > "$OUT/build.log" 2>&1 ||
  { tail -30 "$OUT/build.log"; echo "cpu_scaling_device: llama.cpp build failed"; exit 1; }
LBIN=$W/lb/bin
export LD_LIBRARY_PATH=$VQ_BIN_DIR:$LBIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
"$VQ_BIN_DIR/veloxquant" info -m /dev/null 2>&1 | head -3   # the libraries resolve (the error names the file)

step "models ($PRESET: F16, then ${TYPES})"
python3 scripts/make_synthetic_gguf.py "$PRESET" -o "$W/$PRESET-F16.gguf" || exit 1
models=()
for t in $TYPES; do
  "$LBIN/llama-quantize" "$W/$PRESET-F16.gguf" "$W/$PRESET-$t.gguf" "$t" "$(nproc)" > "$W/q.log" 2>&1 ||
    { tail -5 "$W/q.log"; exit 1; }
  models+=("$W/$PRESET-$t.gguf")
done
rm -f "$W/$PRESET-F16.gguf"
ls -la "$W"/*.gguf

step "scaling: THREADS=$THREADS REPS=$REPS GEN=$GEN"
BIN=$VQ_BIN_DIR/veloxquant LLAMA_BIN=$LBIN OUT=$OUT scripts/bench_threads.sh "${models[@]}"
step done
