#!/bin/sh
# bench_kv.sh: build the decode-attention benchmark without CMake (core, kernels, codec, kv
# sources) and run it single-threaded. Usage: sh tests/kv/bench_kv.sh [spec ...]
set -e
out=${OUT:-/tmp}/bench_kv
cc -O2 -fopenmp -Iinclude -Isrc tests/kv/bench_kv_attend.c src/core/*.c src/kernels/*.c \
   src/codec/*.c src/kv/*.c -lm -o "$out"
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$out" "$@"
