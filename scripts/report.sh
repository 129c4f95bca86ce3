#!/usr/bin/env bash
# report.sh: the whole measured report (issue 4 item 6) in one command (`make report`). Runs the
# stages below, each writing JSON into $RESULTS/<stage>/ with a stamp.json (commit of the source the
# binary was built from, date, machine, load, the exact commands, seconds), then builds
# docs/results.md and the PNGs from the JSON (bench/report_gen.py). A stage whose JSON is already
# there is skipped unless FORCE=1 (quality and memory skip per arm, so an interrupted run resumes).
#   quality     scripts/report_ppl.sh (decode-mode WikiText-2 ppl, ctx 2048, one JSON per arm)
#   memory      bench/report_memory.py: RSS delta vs vq_kv_bytes, one process per arm, ctx to 8192
#   throughput  veloxquant bench (arms interleaved, 5 reps) [+ llama.cpp arms when importable]
#   needle      veloxquant needle --json (skipped with a note when the command is absent)
#   eviction    bench/report_evict.py: every policy x {f16, 4-bit} x kept 75/50/25/12.5 % (decode ppl,
#               ctx 2048), passkey at 1k/2k with 50 % kept, bench + RSS at ctx 8192 with 25 % kept
#   weights     bench/report_weights.py: weight formats (stories260K and SmolLM2 perplexity per weight type,
#               only-ffn_down equal-bits files beside llama.cpp's K-quants, llama.cpp's mixes, matvec
#               speed, bench-share Pss)
#   serve       scripts/bench_serve.py: `veloxquant serve` under 1/4/16 concurrent clients at a 256 MiB KV
#               budget, beside the C++ llama-server at equal memory (its arms skipped with a note when
#               LLAMA_SERVER, default /work/llamacpp/build/bin/llama-server, is absent); ~10 min
#   kernels     veloxquant bench-kernels --json-file
# Knobs (env): BIN, RESULTS (default docs/results), OUTMD (default docs/results.md), STAGES (default
# "quality memory throughput needle eviction weights serve kernels"), FORCE, THREADS; per stage: CTX/MAXTOK (quality, read by
# report_ppl.sh), PPL_ARMS (default: report_ppl.sh's list), MEM_CTX, BENCH_CTX, BENCH_REPS, BENCH_GEN, BENCH_ARMS, BW_MB, LLAMA_KV, NEEDLE_ARGS,
# BK_ARGS, EVICT_ARGS (extra arguments of bench/report_evict.py), EVICT_JOBS, WEIGHTS_ARGS (extra arguments of
# bench/report_weights.py), LLAMA_BIN (llama-quantize's folder), SERVE_ARGS (bench_serve.py's load). Smoke test: RESULTS=/tmp/r OUTMD=/tmp/r/results.md CTX=256 MAXTOK=512 MEM_CTX=128,256
#   BENCH_CTX=128,256 BENCH_REPS=2 BENCH_GEN=8 NEEDLE_ARGS="--ctx 256 --depths 0.5 --trials 1"
#   BK_ARGS="--n 1024 --dims 64 --reps 2 --pool-mb 16" scripts/report.sh
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/veloxquant}
RESULTS=${RESULTS:-docs/results}
OUTMD=${OUTMD:-docs/results.md}
STAGES=${STAGES:-quality memory throughput needle eviction weights serve kernels}
THREADS=${THREADS:-2}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
TEXT=${TEXT:-../shared/data/wikitext-2-raw-test.txt}
BENCH_CTX=${BENCH_CTX:-1024,4096,8192}
BENCH_REPS=${BENCH_REPS:-3}
BENCH_GEN=${BENCH_GEN:-32}
BENCH_ARMS=${BENCH_ARMS:-"f16 q4_0 turboquant_mse:k=4,v=4 kivi:bits=4"}
# the defaults below are what docs/results.md was made with (on its 2-core machine all stages take
# about 2 h 30 min, the quality stage's two batched passes ~1 h 50 min of it)
NEEDLE_ARGS=${NEEDLE_ARGS:-"--kv f16 --kv turboquant_mse:k=4,v=4 --kv q4_0:rotate=1 --ctx 1024,4096,8192 --depths 0,0.5,1 --trials 1"}
BK_ARGS=${BK_ARGS:-"--n 16384,65536 --dims 64,128 --reps 5 --pool-mb 128 --kv q8_0 --kv q4_0 --kv q4_0:rotate=1 --kv q4_0:rotate=1,layout=rows --kv turboquant_mse:k=4,v=4 --kv turboquant_mse:k=3,v=3 --kv turboquant_mse:k=2,v=2 --kv kivi:bits=4 --kv kivi:k=3,v=4,residual=0 --kv kvquant:k=3,v=4 --kv kvquant:k=2,v=4,outliers=0.02 --kv rabitq --kv q4_0:rotate=1;window=64,sink=4,wprec=8 --kv turboquant_mse:k=4,v=4;window=64,sink=4,wprec=8"}
MEM_CTX=${MEM_CTX:-1024,2048,4096,8192}
BW_MB=${BW_MB:-1024}
LLAMA_KV=${LLAMA_KV:-f16}
LLAMA_PY=${LLAMA_PY:-.venv-llamacpp/bin/python}
export BIN MODEL TEXT THREADS
[ -x "$BIN" ] || { echo "report: $BIN not built (make build)" >&2; exit 1; }
[ -f "$TEXT" ] || { echo "report: $TEXT missing (../shared absent?)" >&2; exit 1; }
mkdir -p "$RESULTS"

# stamp DIR STAGE SECONDS CMD...: what produced the stage's JSON
stamp() {
  local dir=$1 stage=$2 secs=$3; shift 3
  python3 - "$dir/stamp.json" "$stage" "$secs" "$BIN" "$@" <<'PY'
import json, os, platform, subprocess, sys, time
out, stage, secs, binp, cmds = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5:]
def sh(*c):
    try: return subprocess.run(c, capture_output=True, text=True).stdout.strip()
    except OSError: return ""
commit = sh("git", "rev-parse", "HEAD")
dirty = sh("git", "status", "--porcelain", "--untracked-files=no", "--", "src", "include", "tools", "CMakeLists.txt")
model = ""
for l in sh("lscpu").splitlines():
    if l.startswith("Model name:"): model = l.split(":", 1)[1].strip()
mem = ""
for l in open("/proc/meminfo"):
    if l.startswith("MemTotal:"): mem = l.split()[1] + " kB"
kept = [k for k in os.environ.get("KEPT", "").split() if k]
json.dump({"stage": stage, "commit": commit, "source_dirty": bool(dirty),
           "kept_from_earlier_runs": kept,
           "binary": binp, "binary_mtime_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(os.path.getmtime(binp))),
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "seconds": secs,
           "commands": cmds, "load1_end": os.getloadavg()[0],
           "machine": {"cpu": model, "cores": os.cpu_count(), "ram": mem, "kernel": platform.release()}},
          open(out, "w"), indent=1)
PY
}

# kept DIR: the per-arm JSON already there before a stage runs (made by an earlier run: their commit
# is not this stamp's, and the report says so)
kept() { (cd "$1" 2>/dev/null && ls -1 -- *.json 2>/dev/null | grep -v -e '^stamp.json$' -e '^summary.json$' | tr '\n' ' '); }
has() { case " $STAGES " in *" $1 "*) return 0;; esac; return 1; }
t_start() { T0=$(date +%s); echo "report: stage $1 ($(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1 /proc/loadavg))" >&2; }
elapsed() { echo $(( $(date +%s) - T0 )); }

if has quality; then
  D=$RESULTS/ppl; t_start quality
  if [ -z "${FORCE:-}" ]; then KEPT=$(kept "$D"); else KEPT=""; fi; export KEPT
  read -r -a pa <<< "${PPL_ARMS:-}"   # empty: report_ppl.sh's own arm list (the issue's)
  C="scripts/report_ppl.sh $D ${PPL_ARMS:-}   # CTX=${CTX:-2048} MAXTOK=${MAXTOK:-18432}"
  if bash scripts/report_ppl.sh "$D" "${pa[@]}"; then stamp "$D" quality "$(elapsed)" "$C"
  else echo "report: quality stage failed (see above); the report marks missing arms" >&2; fi
fi

if has memory; then
  D=$RESULTS/memory; mkdir -p "$D"; t_start memory
  if [ -z "${FORCE:-}" ]; then KEPT=$(kept "$D"); else KEPT=""; fi; export KEPT
  C="python3 bench/report_memory.py --out $D --ctx $MEM_CTX --bin $BIN (every codec but: ${MEM_SKIP-polar})"
  # every codec of the table except those in MEM_SKIP (default polar: its prefill to 8192 takes
  # ~20 min here, ~6x f16's attention cost; docs/results.md says it was not measured)
  ma=(); for c in $("$BIN" bench --list-codecs); do case " ${MEM_SKIP-polar} " in *" $c "*) ;; *) ma+=(--arm "$c");; esac; done
  if python3 bench/report_memory.py --out "$D" --ctx "$MEM_CTX" --bin "$BIN" --model "$MODEL" --text "$TEXT" "${ma[@]}" \
       --threads "$THREADS" | tee "$D.txt.tmp"; then
    mv "$D.txt.tmp" "$D/table.txt"; stamp "$D" memory "$(elapsed)" "$C"
  else echo "report: memory stage failed" >&2; rm -f "$D.txt.tmp"; fi
fi

KEPT=""; export KEPT
if has throughput; then
  D=$RESULTS/throughput; mkdir -p "$D"; t_start throughput
  if [ -s "$D/bench.json" ] && [ -z "${FORCE:-}" ]; then echo "report: throughput: kept $D/bench.json" >&2
  else
    kv=(); for a in $BENCH_ARMS; do kv+=(--kv "$a"); done
    C="$BIN bench -m $MODEL -f $TEXT --ctx $BENCH_CTX ${kv[*]} --reps $BENCH_REPS --gen $BENCH_GEN -t $THREADS --bw-mb $BW_MB --json-file $D/bench.json"
    if "$BIN" bench -m "$MODEL" -f "$TEXT" --ctx "$BENCH_CTX" "${kv[@]}" --reps "$BENCH_REPS" --gen "$BENCH_GEN" \
         -t "$THREADS" --bw-mb "$BW_MB" --json-file "$D/bench.json.tmp" > "$D/bench.txt"; then
      mv "$D/bench.json.tmp" "$D/bench.json"; cat "$D/bench.txt"
      # llama.cpp beside ours (f16 cache, one process per arm and repeat, interleaved)
      rm -f "$D/llamacpp_skipped.txt"
      why=""
      if [ ! -x "$LLAMA_PY" ]; then why="$LLAMA_PY absent (tests/fixtures/README.md says how to make the venv)"
      elif ! "$LLAMA_PY" -c "import llama_cpp" 2>/dev/null; then why="llama_cpp not importable from $LLAMA_PY"; fi
      if [ -z "$why" ]; then
        for k in $LLAMA_KV; do
          LC="$LLAMA_PY bench/decode_vs_llamacpp.py --bin $BIN --model $MODEL --ctx $BENCH_CTX --reps $BENCH_REPS --gen $BENCH_GEN --threads $THREADS --kv $k --json $D/llamacpp_$k.json"
          if $LC > "$D/llamacpp_$k.txt"; then C="$C ; $LC"; cat "$D/llamacpp_$k.txt"
          else echo "llama.cpp arm $k failed: see $D/llamacpp_$k.txt" >> "$D/llamacpp_skipped.txt"; fi
        done
      else echo "llama.cpp arms skipped: $why" > "$D/llamacpp_skipped.txt"; cat "$D/llamacpp_skipped.txt"; fi
      stamp "$D" throughput "$(elapsed)" "$C"
    else echo "report: throughput stage failed" >&2; rm -f "$D/bench.json.tmp"; fi
  fi
fi

if has needle; then
  D=$RESULTS/needle; mkdir -p "$D"; t_start needle
  if [ -s "$D/needle.json" ] && [ -z "${FORCE:-}" ]; then echo "report: needle: kept $D/needle.json" >&2
  elif ! "$BIN" needle --help >/dev/null 2>&1; then
    echo "needle skipped: '$BIN needle --help' failed (command not built in this binary)" > "$D/skipped.txt"; cat "$D/skipped.txt"
  else
    rm -f "$D/skipped.txt"
    kv=(); for a in $BENCH_ARMS; do kv+=(--kv "$a"); done
    # NEEDLE_ARGS replaces the arms and settings (default: the throughput arms, needle's own defaults)
    if [ -n "${NEEDLE_ARGS:-}" ]; then read -r -a na <<< "$NEEDLE_ARGS"; else na=("${kv[@]}"); fi
    C="$BIN needle -m $MODEL -t $THREADS ${na[*]} --json"
    if "$BIN" needle -m "$MODEL" -t "$THREADS" "${na[@]}" --json > "$D/needle.json.tmp"; then
      mv "$D/needle.json.tmp" "$D/needle.json"; stamp "$D" needle "$(elapsed)" "$C"
    else echo "report: needle stage failed" >&2; rm -f "$D/needle.json.tmp"; fi
  fi
fi

if has eviction; then
  D=$RESULTS/eviction; mkdir -p "$D"; t_start eviction
  # a file already there is kept (the stage resumes) unless FORCE=1; EVICT_JOBS processes at a time
  # (each with THREADS threads): on a 2-core machine 1, on a larger one cores / THREADS
  read -r -a ea <<< "${EVICT_ARGS:-}"
  C="python3 bench/report_evict.py --out $D --bin $BIN --model $MODEL --text $TEXT --jobs ${EVICT_JOBS:-1} --threads $THREADS ${EVICT_ARGS:-}${FORCE:+ --force}"
  if python3 bench/report_evict.py --out "$D" --bin "$BIN" --model "$MODEL" --text "$TEXT" --jobs "${EVICT_JOBS:-1}" \
       --threads "$THREADS" "${ea[@]}" ${FORCE:+--force}; then stamp "$D" eviction "$(elapsed)" "$C"
  else echo "report: eviction stage failed (see above); the report shows what was made" >&2; fi
fi

if has weights; then
  D=$RESULTS/weights; mkdir -p "$D"; t_start weights
  if [ -z "${FORCE:-}" ]; then KEPT=$(kept "$D" | sed 's/skipped.json //'); else KEPT=""; fi; export KEPT
  # one JSON per arm, kept unless FORCE=1 (the stage resumes); files made on the way go to $D/files and
  # are deleted after use; llama.cpp's arms are skipped (skipped.json says so) without llama-quantize
  read -r -a wa <<< "${WEIGHTS_ARGS:-}"
  C="python3 bench/report_weights.py --out $D --bin $BIN --threads $THREADS --llama-bin ${LLAMA_BIN:-/work/llamacpp/build/bin} ${WEIGHTS_ARGS:-}${FORCE:+ --force}"
  if python3 bench/report_weights.py --out "$D" --bin "$BIN" --threads "$THREADS" \
       --llama-bin "${LLAMA_BIN:-/work/llamacpp/build/bin}" "${wa[@]}" ${FORCE:+--force}; then stamp "$D" weights "$(elapsed)" "$C"
  else echo "report: weights stage FAILED (see above and $D/skipped.json); the report shows what was made" >&2
       stamp "$D" weights "$(elapsed)" "$C"; FAILED="${FAILED:-}weights "; fi
  KEPT=""; export KEPT
fi

if has serve; then
  D=$RESULTS/serve; mkdir -p "$D"; t_start serve
  if [ -s "$D/serve.json" ] && [ -z "${FORCE:-}" ]; then echo "report: serve: kept $D/serve.json" >&2
  else
    LS=${LLAMA_SERVER:-/work/llamacpp/build/bin/llama-server}
    SERVE_ARGS=${SERVE_ARGS:-"--budget-mb 256 --conv-tokens 2048 --prompt-tokens 128 --gen 64 --conc 1,4,16 --reps 5"}
    read -r -a sa <<< "$SERVE_ARGS"
    la=(); if [ -x "$LS" ]; then la=(--llama-server f16 --llama-server q8_0 --llama-server q4_0 --llama-server-bin "$LS"); rm -f "$D/skipped.txt"
    else echo "serve: the C++ llama-server arms skipped: $LS not found (build it as tests/fixtures/README.md says, or set LLAMA_SERVER)" | tee "$D/skipped.txt" >&2; fi
    C="python3 scripts/bench_serve.py --bin $BIN --model $MODEL --text $TEXT --threads $THREADS ${la[*]} $SERVE_ARGS --json $D/serve.json --plot $D/serve.png"
    if python3 scripts/bench_serve.py --bin "$BIN" --model "$MODEL" --text "$TEXT" --threads "$THREADS" "${la[@]}" "${sa[@]}" \
         --json "$D/serve.json.tmp" --plot "$D/serve.png" > "$D/serve.txt"; then
      mv "$D/serve.json.tmp" "$D/serve.json"; stamp "$D" serve "$(elapsed)" "$C"
    else echo "report: serve stage failed" >&2; rm -f "$D/serve.json.tmp"; FAILED="${FAILED:-}serve "; fi
  fi
fi

# kernels: BK_ARGS (above: the <= 4.6-bit arms of issue 12 and q8_0 at 16k and 64k rows, head_dim 64 and
# 128); then the arms that need calib=FILE, once per head_dim (bench-kernels' 1-layer, 3-query-head,
# 1-KV-head caches fit no model's calibration: scripts/flat_calib.py writes a flat one; speed does not
# depend on the statistics, quality does: never use it for that)
if has kernels; then
  D=$RESULTS/bench-kernels; mkdir -p "$D"; t_start kernels
  if [ -s "$D/bench_kernels.json" ] && [ -s "$D/bench_kernels_cal128.json" ] && [ -z "${FORCE:-}" ]; then
    echo "report: kernels: kept $D/bench_kernels.json" >&2
  else
    read -r -a ba <<< "$BK_ARGS"
    CMDS=("$BIN bench-kernels $BK_ARGS --json-file $D/bench_kernels.json")
    ok=1
    if "$BIN" bench-kernels "${ba[@]}" --json-file "$D/bench_kernels.json.tmp" > "$D/bench_kernels.txt"; then
      mv "$D/bench_kernels.json.tmp" "$D/bench_kernels.json"
    else ok=0; rm -f "$D/bench_kernels.json.tmp"; fi
    CT=$(mktemp -d)
    for d in 64 128; do
      python3 scripts/flat_calib.py --head-dim "$d" -o "$CT/flat$d.vqc" >/dev/null
      F=$CT/flat$d.vqc
      ca=(--n 16384 --dims "$d" --reps 5 --pool-mb 128 --kv turboquant_mse:k=4,v=4
          --kv "turboquant_mse:k=4,v=4;kmean=1,kscale=0.25,sink=4;calib=$F"
          --kv "turboquant_mse:k=4,v=4;kmean=1,kscale=0.25,sink=4,window=64,wprec=8;calib=$F"
          --kv "q4_0:rotate=1;kmean=1,kscale=0.25,sink=4,window=64,wprec=8;calib=$F"
          --kv "k=tq_split:hi=4,lo=1,frac=0.5;v=turboquant_mse:bits=4;calib=$F"
          --kv "k=kvquant:bits=3,qweight=1;v=turboquant_mse:bits=4;calib=$F")
      CMDS+=("scripts/flat_calib.py --head-dim $d -o flat$d.vqc; $BIN bench-kernels ${ca[*]//$CT\//} --json-file $D/bench_kernels_cal$d.json")
      if "$BIN" bench-kernels "${ca[@]}" --json-file "$D/bench_kernels_cal$d.json.tmp" > "$D/bench_kernels_cal$d.txt"; then
        mv "$D/bench_kernels_cal$d.json.tmp" "$D/bench_kernels_cal$d.json"
      else ok=0; rm -f "$D/bench_kernels_cal$d.json.tmp"; fi
    done
    rm -rf "$CT"
    if [ $ok = 1 ]; then stamp "$D" kernels "$(elapsed)" "${CMDS[@]}"
    else echo "report: bench-kernels stage failed" >&2; FAILED="${FAILED:-}kernels "; fi
  fi
fi

python3 bench/report_gen.py --results "$RESULTS" --out "$OUTMD" --command "make report${FORCE:+ FORCE=1}"
if [ -n "${FAILED:-}" ]; then echo "report: stages that failed: $FAILED(the document was written with what they made)" >&2; exit 1; fi
