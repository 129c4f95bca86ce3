#!/usr/bin/env bash
# bench_wait_policy.sh: OpenMP wait settings on an idle and on a loaded machine. For each repeat
# and each setting (interleaved), `veloxquant generate -n 64 -t 2` on SmolLM2 (decode tok/s and
# the command's wall seconds), then the same with one busy loop (`yes > /dev/null`) per core.
#   usage: scripts/bench_wait_policy.sh [BIN] [REPS] [TIMEOUT_S]   (run under flock /tmp/bench.lock)
# Environment: MODEL (default SmolLM2 Q4_1), MODEL_ARGS (e.g. "--tokenizer tok512.bin"), CPUS (e.g.
# "0,1": everything, the busy loops too, pinned there with taskset), SETTINGS (space-separated
# label:VAR=VALUE items replacing the default list), IDLE_RT=1 (the idle runs under `chrt -f 1`:
# on a machine other people's processes keep busy, a real-time process runs as on an idle one).
# A setting is an environment: "spin300000" is libgomp's own default (no variable set: 300000 spins
# before sleeping), "passive" OMP_WAIT_POLICY=passive, "cli" nothing set (the CLI's own default).
# A run that exceeds TIMEOUT_S (default 30) prints ">TIMEOUT".
set -u
bin=${1:-build/veloxquant}
reps=${2:-3}
tmo=${3:-30}
model=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
read -r -a margs <<< "${MODEL_ARGS:-}"
pin=()
[ -n "${CPUS:-}" ] && pin=(taskset -c "$CPUS")
read -r -a settings <<< "${SETTINGS:-spin300000:GOMP_SPINCOUNT=300000 passive:OMP_WAIT_POLICY=passive cli:}"
one() {   # $1 label, $2 env assignment (or empty), $3 machine state
    local t0 t1 out
    t0=$(date +%s.%N)
    local rt=()
    [ "$3" = idle ] && [ "${IDLE_RT:-0}" = 1 ] && rt=(chrt -f 1)
    out=$(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT $2 timeout "$tmo" "${rt[@]}" "${pin[@]}" "$bin" generate -m "$model" \
          "${margs[@]}" -p "Once upon a time" -n 64 --temp 0 -t 2 --json 2>/dev/null | grep -o '"decode_tps": [0-9.]*')
    t1=$(date +%s.%N)
    if [ -z "$out" ]; then printf '%-12s %-6s >%s s\n' "$1" "$3" "$tmo"; return; fi
    printf '%-12s %-6s %6.2f s  %s\n' "$1" "$3" "$(echo "$t1 - $t0" | bc)" "$out"
}
run_all() {   # $1 machine state label
    for r in $(seq "$reps"); do
        for s in "${settings[@]}"; do one "${s%%:*}" "${s#*:}" "$1"; done
    done
}
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $("$bin" --version)"
run_all idle
"${pin[@]}" yes > /dev/null & y1=$!
"${pin[@]}" yes > /dev/null & y2=$!
trap 'kill $y1 $y2 2>/dev/null' EXIT
sleep 1
run_all loaded
kill $y1 $y2
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
