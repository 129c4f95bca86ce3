#!/bin/sh
# arch_ref.sh SRC ARCH_REF NAME: make the synthetic model of tests/fixtures/arch/NAME.txt with the
# seeded script (its 'preset' line: preset and arguments), check its SHA-256 against the fixture's,
# then compare our forward pass with llama.cpp's figures (tests/arch/arch_ref.c). Exits 77 when the
# reference venv (.venv-ref, or VQ_REF_PYTHON) or the vocabularies (models/vocab, scripts/fetch_vocabs.sh;
# Gemma presets: models/gemma-3-270m-q4_k_m.gguf) are absent. Files go to VQ_SYNTH_DIR (default
# /tmp/vq-arch-synth) and are reused while their SHA-256 matches.
set -u
SRC=$1; BIN=$2; NAME=$3
FIX=$SRC/tests/fixtures/arch/$NAME.txt
PY=${VQ_REF_PYTHON:-$SRC/.venv-ref/bin/python}
[ -x "$PY" ] || { echo "SKIP: no reference python $PY (scripts/setup-ref-venv.sh makes .venv-ref)"; exit 77; }
[ -d "$SRC/models/vocab" ] || { echo "SKIP: no $SRC/models/vocab (scripts/fetch_vocabs.sh)"; exit 77; }
set -- $(sed -n 's/^preset //p' "$FIX")
PRESET=$1; shift
case $PRESET in gemma*) [ -f "$SRC/models/gemma-3-270m-q4_k_m.gguf" ] ||
    { echo "SKIP: no models/gemma-3-270m-q4_k_m.gguf (the Gemma vocabulary; scripts/fetch_gemma.sh)"; exit 77; } ;; esac
WANT=$(sed -n 's/^sha256 //p' "$FIX")
DIR=${VQ_SYNTH_DIR:-/tmp/vq-arch-synth}
mkdir -p "$DIR" || exit 1
F=$DIR/$NAME.gguf
if [ ! -f "$F" ] || [ "$(sha256sum "$F" | cut -d' ' -f1)" != "$WANT" ]; then
    "$PY" "$SRC/scripts/make_synthetic_gguf.py" "$PRESET" "$@" -o "$F" || exit 1
fi
GOT=$(sha256sum "$F" | cut -d' ' -f1)
[ "$GOT" = "$WANT" ] || { echo "FAIL: $F has SHA-256 $GOT, the fixture's is $WANT"; exit 1; }
exec "$BIN" "$FIX" "$F"
