#!/usr/bin/env bash
# gpu_fwd_run.sh: the CUDA forward pass's run on the GPU machine (docs/cuda.md, "The forward pass
# on the GPU"), in one command. Run from a folder that holds (the device tool carries it as
# .devcarry/<name>; scripts/gpu_fwd_pack.sh makes it here):
#   prebuilt/      test_cuda_ops, test_cuda_forward, bench_cuda_fwd (stripped), built here with
#                  VQ_CUDA=ON (the machine's image lacks libpcre2, so the model layers cannot be
#                  configured there), and prebuilt/lib/libpcre2-8.so.0;
#   py/gguf        the gguf package (pure Python; numpy is on the machine);
#   scripts/make_synthetic_gguf.py, models/vocab/ (llama-bpe, llama-spm, templates);
#   synth/mistral-tiny-Q4_K_M.gguf (made here by llama-quantize: K-quants have no quantizer of ours).
# Steps (everything lands in $OUT, at most 8 files):
#   1. card.txt: nvidia-smi, driver, CPU;
#   2. the f16 model made on the machine (over the transfer limit): mistral-7b-tiny (2 layers,
#      n_embd 512, 4/1 heads x 128, vocab 32000; ~5 s; a full-size model takes minutes of Python);
#   3. test.log: test_cuda_ops, test_cuda_forward over the models, each
#      f16 as written and re-coded at load (@q8_0, @q4_0, @q4_1), and the Q4_K_M file;
#   4. bench.log: bench_cuda_fwd on the same tiny model (Q4_K_M, @q4_0, @q8_0, f16): CUDA row vs
#      CPU row (all cores), interleaved, same run;
#   5. memcheck.log: compute-sanitizer memcheck of test_cuda_ops and test_cuda_forward (tiny model);
#   6. bench1b.log (only when STEPS names bench1b): the Llama-3.2-1B shape made on the machine (f16,
#      2.4 GiB, ~40 s of Python), bench_cuda_fwd on the GPU alone (--cpu 0) as f16 and re-coded at
#      load @q8_0 and @q4_0: tok/s and the weights' GB/s at that rate.
# STEPS (default "test bench memcheck") picks the steps after 1-2; REPS (default 5) and TOKENS
# (default 256) size the benchmark. The exit status is that of the first failing step (the later
# ones still run).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
rc=0
step() { echo "== $(date -u +%H:%M:%S) $*"; }
fail() { echo "!! $*"; [ $rc -ne 0 ] || rc=1; }
export LD_LIBRARY_PATH=$PWD/prebuilt/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OMP_WAIT_POLICY=passive
B=prebuilt
M=/tmp/vqm
STEPS=${STEPS:-test bench memcheck}
REPS=${REPS:-5}
TOKENS=${TOKENS:-256}
want() { case " $STEPS " in *" $1 "*) return 0;; esac; return 1; }
mkdir -p $M

step card
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.memory --format=csv
  nvcc --version | tail -1; uname -r; nproc; grep -m1 "model name" /proc/cpuinfo; } > "$OUT/card.txt" 2>&1
cat "$OUT/card.txt"

step models
PYTHONPATH=$PWD/py python3 scripts/make_synthetic_gguf.py mistral-7b-tiny --type f16 -o $M/mistral-tiny-f16.gguf > "$OUT/models.log" 2>&1 || fail "make mistral-7b-tiny"
tail -4 "$OUT/models.log"; ls -la $M

want test && {
step test
{ $B/test_cuda_ops || fail "test_cuda_ops exit $?"
  T=$M/mistral-tiny-f16.gguf
  $B/test_cuda_forward $T $T@q8_0 $T@q4_0 $T@q4_1 synth/mistral-tiny-Q4_K_M.gguf ||
      fail "test_cuda_forward exit $?"
  # coded KV caches on the GPU (docs/cuda.md): the encoder's bytes against the CPU codecs', then
  # q8_0 / q4_0:rotate=1 / turboquant_mse:bits=4 sessions and their state files GPU <-> CPU
  $B/test_cuda_kvenc --device || fail "test_cuda_kvenc --device exit $?"
  $B/test_cuda_kvstate $T || fail "test_cuda_kvstate exit $?"; } > "$OUT/test.log" 2>&1
grep -v "^rope\|^matvec " "$OUT/test.log" | tail -40
}

want bench && {
step bench
T=$M/mistral-tiny-f16.gguf
{ $B/bench_cuda_fwd synth/mistral-tiny-Q4_K_M.gguf --tokens $TOKENS --reps $REPS
  $B/bench_cuda_fwd $T@q4_0 --tokens $TOKENS --reps $REPS
  $B/bench_cuda_fwd $T@q8_0 --tokens $TOKENS --reps $REPS
  $B/bench_cuda_fwd $T --tokens $TOKENS --reps $REPS; } > "$OUT/bench.log" 2>&1 || fail "bench_cuda_fwd exit $?"
cat "$OUT/bench.log"
}
want memcheck && {
step memcheck
{ compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_cuda_ops | tail -3 || fail "memcheck test_cuda_ops exit $?"
  compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_cuda_forward synth/mistral-tiny-Q4_K_M.gguf | tail -4 ||
      fail "memcheck test_cuda_forward exit $?"
  compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_cuda_kvstate $M/mistral-tiny-f16.gguf | tail -3 ||
      fail "memcheck test_cuda_kvstate exit $?"; } > "$OUT/memcheck.log" 2>&1
cat "$OUT/memcheck.log"
}

want bench1b && {
step bench1b
L=$M/llama3.2-1b-f16.gguf
{ PYTHONPATH=$PWD/py python3 scripts/make_synthetic_gguf.py llama3.2-1b --type f16 -o $L 2>&1 | tail -1
  for w in "" @q8_0 @q4_0; do $B/bench_cuda_fwd $L$w --tokens $TOKENS --reps $REPS --cpu 0 || fail "bench_cuda_fwd 1b$w exit $?"; done
  rm -f $L; } > "$OUT/bench1b.log" 2>&1
cat "$OUT/bench1b.log"
}

step done rc=$rc
exit $rc
