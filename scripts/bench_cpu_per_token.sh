#!/usr/bin/env bash
# CPU time per token of VeloxQuant against llama.cpp's llama-bench on the same GGUF files, from
# `perf stat -e task-clock` of whole processes (a loaded machine cuts tok/s, much less the CPU
# time a token costs). Each figure is the difference of two processes of one engine that differ
# only in the work measured, so loading, start-up and warm-up cancel:
#   decode (tg): --gen 8 against --gen 40 (llama-bench -n 8 / -n 40), difference / 32;
#   prefill (pp): one timed 512-token prompt against two (veloxquant bench --reps 1 / 2, the
#     prompt in one batch; llama-bench -p 512 -r 1 / -r 2 --no-warmup), difference / 512
#     (ours also decodes one token per repeat: included, < 0.5 % of a 512-token prefill).
# Engines alternate within each repeat, both with OMP_WAIT_POLICY=passive; run it under
# `flock /tmp/bench.lock`. Prints every repeat with the 1-minute load, then per model and test
# the median [min, max] ms/token of each engine and of the per-pair ratio theirs/ours (= our
# speed as a fraction of theirs in CPU time: 1.0 = same cost).
# Usage: scripts/bench_cpu_per_token.sh MODEL...
#   env: REPS (3), TESTS ("tg pp"), T (threads, 2), PP (512), BIN (build/veloxquant),
#        LLAMA_BIN (/work/llamacpp/build/bin), ENGINES ("ours llama"; "ours" alone for A/B of
#        two builds), BIN2 (another veloxquant: adds an arm "ours2", e.g. BIN=the baseline's),
#        VQ_ARGS / VQ_ARGS2 (extra options of the ours / ours2 arm, e.g. VQ_ARGS2="--weights
#        attn=q4_0x16,ffn=q4_0x16" with BIN2=BIN: the same build with weights repacked at load)
set -euo pipefail
REPS=${REPS:-3}; TESTS=${TESTS:-"tg pp"}; T=${T:-2}; PP=${PP:-512}
BIN=${BIN:-build/veloxquant}; LBD=${LLAMA_BIN:-/work/llamacpp/build/bin}; LB=$LBD/llama-bench
ENGINES=${ENGINES:-"ours llama"}; [ -n "${BIN2:-}" ] && ENGINES="$ENGINES ours2"
export OMP_WAIT_POLICY=passive
export LD_LIBRARY_PATH=$LBD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ $# -gt 0 ] || { echo "usage: $0 MODEL..." >&2; exit 2; }
command -v perf >/dev/null || { echo "bench_cpu_per_token: perf not found" >&2; exit 1; }
raw=$(mktemp); trap 'rm -f "$raw"' EXIT
load() { cut -d' ' -f1 /proc/loadavg; }
# task-clock in ms of one command (its output discarded); a failing command stops the script
cpu_ms() {
  local f; f=$(mktemp)
  if ! perf stat -x, -o "$f" -e task-clock -- "$@" >/dev/null 2>&1; then
    echo "bench_cpu_per_token: failed: $*" >&2; rm -f "$f"; kill -TERM $$; exit 1
  fi
  awk -F, '$3 ~ /task-clock/ {print $1}' "$f" | tail -1; rm -f "$f"
}
run() {   # engine test k: k = 1 or 2 (the small and the large process)
  local e=$1 test=$2 k=$3 bin=$BIN xa=${VQ_ARGS:-}
  [ "$e" = ours2 ] && { bin=$BIN2; xa=${VQ_ARGS2:-}; }
  if [ "$test" = tg ]; then
    local n=$(( k == 1 ? 8 : 40 ))
    if [ "$e" = llama ]; then cpu_ms "$LB" -m "$M" -p 0 -n "$n" -t "$T" -r 1
    else cpu_ms "$bin" bench -m "$M" --ctx 16 --reps 1 --gen "$n" --bw-reps 1 --bw-mb 16 -t "$T" $xa; fi
  else
    if [ "$e" = llama ]; then cpu_ms "$LB" -m "$M" -p "$PP" -n 0 -t "$T" -r "$k" --no-warmup
    else cpu_ms "$bin" bench -m "$M" --ctx "$PP" -b "$PP" --reps "$k" --gen 1 --bw-reps 1 --bw-mb 16 -t "$T" $xa; fi
  fi
}
for M in "$@"; do
  [ -f "$M" ] || { echo "bench_cpu_per_token: model $M not found" >&2; exit 1; }
  for test in $TESTS; do
    per=$([ "$test" = tg ] && echo 32 || echo "$PP")
    for r in $(seq 1 "$REPS"); do
      for e in $ENGINES; do
        l0=$(load); a=$(run "$e" "$test" 1); b=$(run "$e" "$test" 2)
        ms=$(python3 -c "print(f'{($b - $a) / $per:.3f}')")
        echo "$(basename "$M") $test rep $r $e small ${a}ms large ${b}ms -> $ms ms/token load $l0-$(load) $(date -u +%H:%M:%S)"
        echo "$(basename "$M") $test $r $e $ms $l0 $(load)" >> "$raw"
      done
    done
  done
done
python3 - "$raw" <<'EOF'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
def f(v): return f"{st.median(v):.2f} [{min(v):.2f}, {max(v):.2f}]"
keys = []
for m, t, *_ in rows:
    if (m, t) not in keys: keys.append((m, t))
print(f"{'model':28} {'test':4} | engine ms/token median [min, max] ... | theirs/ours per pair | load")
for m, t in keys:
    sel = [x for x in rows if x[0] == m and x[1] == t]
    eng = {}
    for x in sel: eng.setdefault(x[3], {})[x[2]] = float(x[4])
    loads = [float(v) for x in sel for v in x[5:7]]
    parts = [f"{e} {f(list(v.values()))}" for e, v in eng.items()]
    ratio = ""
    if "ours" in eng and "llama" in eng:
        rs = [eng["llama"][r] / eng["ours"][r] for r in eng["ours"] if r in eng["llama"]]
        ratio = f" | llama/ours {f(rs)}"
    if "ours2" in eng and "llama" in eng:
        rs = [eng["llama"][r] / eng["ours2"][r] for r in eng["ours2"] if r in eng["llama"]]
        ratio += f" | llama/ours2 {f(rs)}"
    if "ours" in eng and "ours2" in eng:
        rs = [eng["ours"][r] / eng["ours2"][r] for r in eng["ours"] if r in eng["ours2"]]
        ratio += f" | ours/ours2 {f(rs)}"
    print(f"{m:28} {t:4} | {' | '.join(parts)}{ratio} | load {min(loads):.1f}-{max(loads):.1f}")
EOF
