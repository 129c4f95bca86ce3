#!/usr/bin/env bash
# gpu_all_run.sh: the GPU machine's command for the folder scripts/gpu_all_pack.sh makes (carried as
# .devcarry/<name>):  cd .devcarry/<name> && OUT=$OUT bash gpu_all_run.sh
# Runs, in this order (the most informative first, each under its own time limit so the call ends
# inside the tool's 10 minutes): the attention kernels (test, bench, SDPA, memcheck), the forward
# pass (tests + memcheck), the CLI (--device cuda), the 1B-shape decode. The tool brings back at
# most 8 files: everything is packed into $OUT/all.tgz (attn/, fwd/, cli/, fwd1b/), plus run.log.
set -uo pipefail
OUT=${OUT:?set OUT}
find . -name '*.gz' -exec gunzip {} +
chmod +x */prebuilt/* 2>/dev/null
cp -r fwd/py fwd/models cli/
W=$(mktemp -d)
rc=0
( cd attn && { ldconfig -p | grep -q libgomp.so.1 || export LD_LIBRARY_PATH=$PWD/prebuilt/lib; }
  VQ_PREBUILT=1 BENCH_ARGS=--no-sweep MEMCHECK_TIMEOUT=${MEMCHECK_TIMEOUT:-60} OUT=$W/attn \
      timeout ${ATTN_S:-200} bash scripts/gpu_run.sh ) || rc=1
( cd fwd && OUT=$W/fwd STEPS="test memcheck" timeout ${FWD_S:-90} bash scripts/gpu_fwd_run.sh ) || rc=1
( cd cli && OUT=$W/cli timeout ${CLI_S:-90} bash scripts/gpu_cli_run.sh ) || rc=1
( cd fwd && OUT=$W/fwd1b REPS=3 TOKENS=128 STEPS=bench1b timeout ${B1_S:-120} bash scripts/gpu_fwd_run.sh ) || rc=1
tar czf "$OUT/all.tgz" -C "$W" .
echo "gpu_all_run: rc=$rc ($(cat COMMIT 2>/dev/null))"
exit $rc
