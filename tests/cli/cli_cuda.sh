#!/usr/bin/env bash
# cli_cuda.sh VELOXQUANT SOURCE_DIR: `--device` of generate, perplexity, bench and serve (docs/cuda.md).
#   Part 1, everywhere (CI too): the refusals. A KV spec the GPU's store cannot hold (kivi,
#   3-bit TurboQuant, a window, a sink, eviction; serve's --kv too) is refused naming the spec,
#   before anything is loaded; `--device cuda` on a build
#   without CUDA or a machine without a usable GPU is refused naming why, exit != 0, and nothing is
#   generated (never a silent run on the CPU); a bad device name and a command without --device
#   are refused.
#   Part 2, only where a GPU answers (else exit 77 after part 1): a synthetic llama-family file
#   (VQ_CUDA_CLI_MODEL, or mistral-7b-tiny f16 made with scripts/make_synthetic_gguf.py by
#   VQ_PYTHON, default SOURCE_DIR/.venv-ref/bin/python) through generate (greedy, 24 tokens) and
#   perplexity (decode and prefill modes) on the CPU and on cuda: the same text, mean NLLs within
#   1e-3 nats, i.e. perplexities within 0.1 % (F16 weights: float32 products in another order on each side; a sanity
#   threshold, not a derived bound: tests/cuda/test_cuda_forward.c); perplexity with q8_0,
#   q4_0:rotate=1 and turboquant_mse:bits=4 caches (decode mode) on both, mean NLLs within 1e-2
#   nats (sanity threshold, printed); and bench runs.
set -u
VQ=$1 SRC=$2
fail=0
bad() { echo "FAIL: $*"; fail=1; }
ok() { echo "ok: $*"; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
# a text of plain sentences (no ../shared needed)
for i in $(seq 1 40); do
    echo "The river ran past the old mill at dawn, and the miller counted the sacks of grain again."
    echo "Children from the village came to watch the wheel turn while the water sang over the stones."
done > "$work/text.txt"

# expect_refusal NAME PATTERN CMD...: the command fails, prints PATTERN on stderr and nothing on stdout
expect_refusal() {
    local name=$1 pat=$2; shift 2
    "$@" >"$work/out" 2>"$work/err"; local rc=$?
    if [ $rc -eq 0 ]; then bad "$name: exit 0 (expected a refusal)"; return; fi
    if ! grep -q -- "$pat" "$work/err"; then bad "$name: stderr lacks '$pat': $(head -c 400 "$work/err")"; return; fi
    if [ -s "$work/out" ]; then bad "$name: printed on stdout: $(head -c 200 "$work/out")"; return; fi
    ok "$name (exit $rc): $(head -c 300 "$work/err")"
}
M0=$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf   # any path: the refusals come before it is read

# ---- part 1: refusals ----
expect_refusal "generate cuda kivi" "KV spec 'kivi' cannot be held there" \
    "$VQ" generate --device cuda --kv kivi -m "$M0" -p hi -n 1
expect_refusal "generate cuda tq 3 bits" "bits=4" \
    "$VQ" generate --device cuda --kv turboquant_mse:bits=3 -m "$M0" -p hi -n 1
expect_refusal "generate cuda sink" "sink=" \
    "$VQ" generate --device cuda --kv "q8_0;sink=4" -m "$M0" -p hi -n 1
expect_refusal "generate cuda eviction" "evict=" \
    "$VQ" generate --device cuda --kv "q8_0;evict=h2o,budget=64" -m "$M0" -p hi -n 1
expect_refusal "perplexity cuda window" "q8_0;window=16" \
    "$VQ" perplexity -dev cuda:0 --kv f16 --kv "q8_0;window=16" -m "$M0" -f "$work/text.txt"
expect_refusal "bench cuda per-layer kivi" "kivi" \
    "$VQ" bench --device cuda --kv f16 --kv-layers 0=kivi -m "$M0" -f "$work/text.txt"
expect_refusal "bad device name" "not a device" "$VQ" generate --device tpu -m "$M0" -p hi -n 1
expect_refusal "serve cuda kivi" "cannot be held there" \
    "$VQ" serve --device cuda --kv kivi -m "$M0" --port 0
expect_refusal "info has no --device" "is for generate, perplexity, bench and serve" "$VQ" info --device cuda -m "$M0"
# no GPU here (or no CUDA in the build): the reason, not a run on the CPU
"$VQ" generate --device cuda -m "$work/none.gguf" -p hi -n 1 >"$work/out" 2>"$work/err"; rc=$?
gpu=0
if [ $rc -eq 0 ]; then bad "generate --device cuda on a missing file: exit 0"
elif grep -q "this build has no CUDA backend\|no cuda device is usable here" "$work/err"; then
    [ -s "$work/out" ] && bad "no-GPU refusal printed on stdout"
    ok "no GPU here, refused (exit $rc): $(cat "$work/err")"
else
    gpu=1   # the device was found: the error is the missing file's
    ok "a GPU answers here: $(head -c 200 "$work/err")"
fi
if [ $gpu = 0 ]; then
    [ $fail = 0 ] || exit 1
    echo "SKIP: no usable CUDA GPU: the comparisons with the CPU ran nowhere"; exit 77
fi

# ---- part 2: the GPU against the CPU ----
expect_refusal "cuda index past the devices" "device cuda:999" "$VQ" generate --device cuda:999 -m "$M0" -p hi -n 1
M=${VQ_CUDA_CLI_MODEL:-}
if [ -z "$M" ]; then
    PY=${VQ_PYTHON:-$SRC/.venv-ref/bin/python}
    M=$work/mistral-tiny-f16.gguf
    (cd "$SRC" && "$PY" scripts/make_synthetic_gguf.py mistral-7b-tiny --type f16 -o "$M") >"$work/mk.log" 2>&1 ||
        { cat "$work/mk.log"; [ $fail = 0 ] || exit 1; echo "SKIP: no model (set VQ_CUDA_CLI_MODEL)"; exit 77; }
fi
echo "model: $M"
P="Once upon a time, in a village by the river,"
for dev in cpu cuda; do
    "$VQ" generate --device $dev -m "$M" -p "$P" -n 24 --temp 0 -c 128 >"$work/gen.$dev" 2>"$work/gen.$dev.err" ||
        bad "generate --device $dev: $(cat "$work/gen.$dev.err")"
    "$VQ" generate --device $dev -m "$M" -p "$P" -n 24 --temp 0 -c 128 --json >"$work/genj.$dev" 2>&1 ||
        bad "generate --json --device $dev"
done
grep -q '"device": *"cuda:0"' "$work/genj.cuda" || bad "generate --json does not say device cuda:0: $(cat "$work/genj.cuda")"
if cmp -s "$work/gen.cpu" "$work/gen.cuda"; then ok "generate: same greedy text on cpu and cuda ($(wc -c <"$work/gen.cpu") bytes)"
else bad "generate: the texts differ"; echo "cpu:  $(cat "$work/gen.cpu")"; echo "cuda: $(cat "$work/gen.cuda")"; fi
nll_of() { awk '$1 == "f16" { print $3 }' "$1"; }   # mean NLL (6 decimals): ppl = exp(nll)
for mode in decode prefill; do
    for dev in cpu cuda; do
        "$VQ" perplexity --device $dev -m "$M" -f "$work/text.txt" --ctx 64 --max-tokens 320 --mode $mode -b 16 \
            >"$work/ppl.$mode.$dev" 2>"$work/ppl.err" || bad "perplexity --mode $mode --device $dev: $(cat "$work/ppl.err")"
    done
    a=$(nll_of "$work/ppl.$mode.cpu") b=$(nll_of "$work/ppl.$mode.cuda")
    if [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-3) }'; then
        ok "perplexity --mode $mode: mean NLL cpu $a, cuda $b (|difference| <= 1e-3 nats: perplexities within 0.1 %)"
    else bad "perplexity --mode $mode: mean NLL cpu '$a', cuda '$b'"; cat "$work/ppl.$mode.cpu" "$work/ppl.$mode.cuda"; fi
done
# coded caches on the GPU (docs/cuda.md "Coded KV caches on the GPU"): the same arms on both, decode
# mode (a row per append on both sides, so both encode the partial block from fp16). The codes
# come from K/V rows that differ in float32 rounding, so a code may flip: 1e-2 nats is a sanity
# threshold, not a derived bound; the values are printed.
arms="q8_0 q4_0:rotate=1 turboquant_mse:bits=4"
for dev in cpu cuda; do
    "$VQ" perplexity --device $dev -m "$M" -f "$work/text.txt" --ctx 64 --max-tokens 320 --mode decode \
        $(for a in $arms; do printf -- '--kv %s ' "$a"; done) >"$work/pplc.$dev" 2>"$work/ppl.err" ||
        bad "perplexity coded arms --device $dev: $(cat "$work/ppl.err")"
done
for arm in $arms; do
    a=$(awk -v k="$arm" '$1 == k { print $3 }' "$work/pplc.cpu") b=$(awk -v k="$arm" '$1 == k { print $3 }' "$work/pplc.cuda")
    if [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-2) }'; then
        ok "perplexity --kv $arm: mean NLL cpu $a, cuda $b"
    else bad "perplexity --kv $arm: mean NLL cpu '$a', cuda '$b'"; cat "$work/pplc.cpu" "$work/pplc.cuda"; fi
done
"$VQ" bench --device cuda -m "$M" -f "$work/text.txt" --ctx 64 --gen 8 --reps 1 --bw-reps 1 --bw-mb 64 >"$work/bench" 2>&1 ||
    bad "bench --device cuda: $(tail -5 "$work/bench")"
[ $fail = 0 ] && ok "bench --device cuda ran"
[ $fail = 0 ] || exit 1
echo "PASS"
