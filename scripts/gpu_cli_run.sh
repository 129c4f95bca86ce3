#!/usr/bin/env bash
# gpu_cli_run.sh: `--device cuda` of the CLI on the GPU machine, one command (docs/cuda.md). Run from
# the folder scripts/gpu_cli_pack.sh makes (the device tool carries it as .devcarry/<name>):
#   cd .devcarry/<name> && OUT=$OUT bash scripts/gpu_cli_run.sh
# Writes into $OUT: card.txt (nvidia-smi, CPU), cli.log (tests/cli/cli_cuda.sh: the refusals,
# then generate and perplexity on cuda against the CPU on mistral-7b-tiny f16, made here by
# make_synthetic_gguf.py), fwd.log (test_cuda_ops, test_cuda_forward on the same file, when
# carried), speed.log (generate --verbose, 256 greedy tokens, cuda then cpu with every core,
# twice each, interleaved). Exit status: the first failing step's.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
rc=0
step() { echo "== $(date -u +%H:%M:%S) $*"; }
fail() { echo "!! $*"; [ $rc -ne 0 ] || rc=1; }
export OMP_WAIT_POLICY=passive
VQ=$PWD/prebuilt/veloxquant
M=/tmp/vqm; mkdir -p $M
step card
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; uname -r; nproc
  grep -m1 "model name" /proc/cpuinfo; } > "$OUT/card.txt" 2>&1
cat "$OUT/card.txt"
step model
PYTHONPATH=$PWD/py python3 scripts/make_synthetic_gguf.py mistral-7b-tiny --type f16 -o $M/mistral-tiny-f16.gguf \
    > "$OUT/model.log" 2>&1 || fail "make mistral-7b-tiny"
T=$M/mistral-tiny-f16.gguf
# the carried libraries, for our binaries only (after the Python step: not over the image's own)
export LD_LIBRARY_PATH=$PWD/prebuilt/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
step cli
VQ_CUDA_CLI_MODEL=$T bash tests/cli/cli_cuda.sh "$VQ" "$PWD" > "$OUT/cli.log" 2>&1 || fail "cli_cuda.sh exit $?"
cat "$OUT/cli.log"
if [ -x prebuilt/test_cuda_ops ]; then
    step fwd
    { prebuilt/test_cuda_ops | tail -5 || fail "test_cuda_ops exit $?"
      prebuilt/test_cuda_forward $T || fail "test_cuda_forward exit $?"; } > "$OUT/fwd.log" 2>&1
    tail -12 "$OUT/fwd.log"
fi
step speed
P="Once upon a time, in a village by the river,"
for r in 1 2; do
    for dev in cuda cpu; do
        echo "rep $r device $dev: $("$VQ" generate --device $dev -m $T -p "$P" -n 256 --temp 0 -c 512 --verbose 2>&1 >/dev/null | tail -1)"
    done
done > "$OUT/speed.log" 2>&1
cat "$OUT/speed.log"
step done rc=$rc
exit $rc
