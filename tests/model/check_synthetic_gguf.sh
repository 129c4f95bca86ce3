#!/bin/bash
# check_synthetic_gguf.sh BIN SRC: scripts/make_synthetic_gguf.py is reproducible (the same preset and
# seed twice give byte-identical files, another seed a different one) and what it writes loads in our
# engine (`veloxquant info` on the Llama 3 and Gemma 3 tiny presets, the architectures the loader
# takes today). Exit 77 (skip) without .venv-ref (scripts/setup-ref-venv.sh) or models/vocab
# (scripts/fetch_vocabs.sh) or the Gemma 3 270M file whose tokenizer the Gemma presets copy.
set -u
BIN=${1:?usage: check_synthetic_gguf.sh path/to/veloxquant SOURCE_DIR}
SRC=${2:?usage: check_synthetic_gguf.sh path/to/veloxquant SOURCE_DIR}
PY=$SRC/.venv-ref/bin/python
GEN=$SRC/scripts/make_synthetic_gguf.py
for need in "$PY:scripts/setup-ref-venv.sh" "$SRC/models/vocab/ggml-vocab-llama-bpe.gguf:scripts/fetch_vocabs.sh" \
            "$SRC/models/gemma-3-270m-q4_k_m.gguf:scripts/fetch_gemma.sh"; do
  if [ ! -e "${need%%:*}" ]; then
    echo "check_synthetic_gguf: skipped: ${need%%:*} is absent (${need#*:} makes it)"
    exit 77
  fi
done
T=$(mktemp -d "${TMPDIR:-/tmp}/vq_synth.XXXXXX")
trap 'rm -rf "$T"' EXIT
fails=0
pass() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

gen() {  # gen OUT ARGS...: the generator must succeed and print its seed
  local out=$1; shift
  if ! "$PY" "$GEN" "$@" -o "$out" > "$T/gen.log" 2>&1; then fail "make_synthetic_gguf $*: $(tail -3 "$T/gen.log")"; return 1; fi
  grep -q "seed=" "$T/gen.log" || { fail "make_synthetic_gguf $*: no seed printed"; return 1; }
  return 0
}

if gen "$T/a.gguf" llama3.2-1b-tiny && gen "$T/b.gguf" llama3.2-1b-tiny; then
  if cmp -s "$T/a.gguf" "$T/b.gguf"; then pass "llama3.2-1b-tiny twice: identical bytes"
  else fail "llama3.2-1b-tiny twice: the files differ"; fi
fi
if gen "$T/c.gguf" llama3.2-1b-tiny --seed 12345; then
  if cmp -s "$T/a.gguf" "$T/c.gguf"; then fail "--seed 12345 gave the default seed's bytes"
  else pass "--seed changes the weights"; fi
fi
gen "$T/g.gguf" gemma3-1b-tiny

# info must load each and report the preset's shape (tiny: llama 2 layers, gemma3 6; the real vocabularies)
for m in "a:llama:2:128256" "g:gemma3:6:262144"; do
  IFS=: read -r id arch nl nv <<< "$m"
  f=$T/$id.gguf
  [ -f "$f" ] || continue
  if ! "$BIN" info -m "$f" > "$T/info.out" 2> "$T/info.err"; then
    fail "veloxquant info on $arch tiny: $(tail -c 300 "$T/info.err")"; continue
  fi
  if grep -Eq "^arch +$arch\b" "$T/info.out" && grep -Eq "^layers +$nl\b" "$T/info.out" &&
     grep -Eq "^vocab +$nv\b" "$T/info.out"; then
    pass "veloxquant info loads the $arch tiny preset ($nl layers, $nv tokens)"
  else
    fail "veloxquant info on $arch tiny: expected arch $arch, $nl layers, vocab $nv in: $(head -c 500 "$T/info.out")"
  fi
done

# bad input: an unknown preset and a non-llama --biases are refused with a message, no traceback
if "$PY" "$GEN" no-such-preset -o "$T/x.gguf" > "$T/bad.out" 2>&1; then fail "unknown preset accepted"
elif grep -q Traceback "$T/bad.out"; then fail "unknown preset: traceback"; else pass "unknown preset refused"; fi
if "$PY" "$GEN" gemma3-1b-tiny --biases -o "$T/x.gguf" > "$T/bad.out" 2>&1; then fail "--biases on gemma3 accepted"
else pass "--biases on gemma3 refused"; fi

[ $fails -eq 0 ] && echo "check_synthetic_gguf: all passed" && exit 0
echo "check_synthetic_gguf: $fails failed"; exit 1
