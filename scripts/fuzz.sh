#!/usr/bin/env bash
# fuzz.sh: fuzz the GGUF reader. Builds the libFuzzer targets with clang + ASan/UBSan in build-fuzz,
# seeds a corpus with small valid GGUF files (written by tests/fuzz/gen_fuzz_seeds.c; plus the first
# 4 KiB of the SmolLM2 model when it was fetched) and runs for FUZZ_SECONDS (default 60).
# Exit status is nonzero when the fuzzer finds a crash, a leak or a huge allocation; the input that
# did it is kept in fuzz-corpus/crashes/ (reproduce: build-fuzz/fuzz_gguf <that file>).
# Environment: FUZZ_SECONDS (60), FUZZ_JOBS (1 parallel fuzzer process), FUZZ_BUILD (build-fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-1}
build=${FUZZ_BUILD:-build-fuzz}
corpus=fuzz-corpus/gguf          # grows between runs (git-ignored)
seeds=fuzz-corpus/gguf-seeds     # rewritten each run
crashes=fuzz-corpus/crashes

command -v clang >/dev/null || { echo "fuzz.sh: clang not found (apt-get install clang)" >&2; exit 2; }
CC=clang CXX=clang++ cmake -S . -B "$build" -DVQ_FUZZ=ON -DVQ_SANITIZE=ON \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="-g" >/dev/null
cmake --build "$build" -j2 --target fuzz_gguf gen_fuzz_seeds

mkdir -p "$corpus" "$seeds" "$crashes"
rm -f "$seeds"/*
"$build/gen_fuzz_seeds" "$seeds"
model=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -r "$model" ]; then
    head -c 4096 "$model" > "$seeds/smollm2_head4k.gguf"
fi

echo "fuzz.sh: fuzzing fuzz_gguf for ${secs}s with ${jobs} job(s)"
set +e
par=()
if [ "$jobs" -gt 1 ]; then par=(-jobs="$jobs" -workers="$jobs"); fi   # libFuzzer then logs to fuzz-N.log
"$build/fuzz_gguf" -max_total_time="$secs" "${par[@]}" \
    -dict=tests/fuzz/gguf.dict -max_len=8192 -malloc_limit_mb=128 -timeout=10 \
    -artifact_prefix="$crashes/" -print_final_stats=1 "$corpus" "$seeds"
rc=$?
set -e
if [ $rc -ne 0 ]; then
    echo "fuzz.sh: fuzz_gguf failed (exit $rc); inputs in $crashes/" >&2
    exit $rc
fi
echo "fuzz.sh: no crash in ${secs}s; corpus: $(ls "$corpus" | wc -l) inputs"
