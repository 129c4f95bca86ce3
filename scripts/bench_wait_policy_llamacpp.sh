#!/usr/bin/env bash
# bench_wait_policy_llamacpp.sh: llama.cpp's llama-bench (tg64, 2 threads; its CPU backend is built
# with OpenMP here) under the same wait settings and machine states as bench_wait_policy.sh: idle
# runs under `chrt -f 1`, loaded ones with one `yes > /dev/null` per core. Prints tok/s per run
# (">TIMEOUT" when it ran past TIMEOUT_S).
#   usage: scripts/bench_wait_policy_llamacpp.sh [REPS] [TIMEOUT_S]   (under flock /tmp/bench.lock)
set -u
reps=${1:-2}
tmo=${2:-30}
lb=${LLAMA_BENCH:-/work/llamacpp/build/bin/llama-bench}
export LD_LIBRARY_PATH=$(dirname "$lb")
model=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
settings=("spin300000:GOMP_SPINCOUNT=300000" "passive:OMP_WAIT_POLICY=passive" "spin1000:GOMP_SPINCOUNT=1000")
one() {   # $1 label, $2 env assignment, $3 state
    local rt=() out
    [ "$3" = idle ] && rt=(chrt -f 1)
    out=$(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT $2 timeout "$tmo" "${rt[@]}" "$lb" -m "$model" -p 0 -n 64 \
          -t 2 -r 1 -o csv 2>/dev/null | tail -1 | awk -F, '{gsub(/"/, "", $(NF-1)); print $(NF-1)}')
    printf '%-12s %-6s %s\n' "$1" "$3" "${out:->$tmo s}"
}
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), llama-bench $lb"
for st in idle loaded; do
    if [ $st = loaded ]; then yes > /dev/null & y1=$!; yes > /dev/null & y2=$!; trap 'kill $y1 $y2 2>/dev/null' EXIT; sleep 1; fi
    for r in $(seq "$reps"); do for s in "${settings[@]}"; do one "${s%%:*}" "${s#*:}" $st; done; done
done
kill $y1 $y2
