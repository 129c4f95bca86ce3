#!/bin/sh
# make_arch_fixtures.sh [NAME...]: for each architecture fixture (default: all of them), make the seeded
# synthetic model (scripts/make_synthetic_gguf.py PRESET ARGS) into $VQ_SYNTH_DIR (default /tmp/vq-arch-synth)
# and write llama.cpp's figures for it to tests/fixtures/arch/NAME.txt (tools/reference/llamacpp_arch_reference.py).
# PY: python with gguf + numpy (default .venv-ref/bin/python); LLAMACPP_PY: the llama-cpp-python package dir,
# LLAMACPP_LIB: its built libraries (defaults: /work/llamacpp as HELPERS.md has them).
set -eu
REPO=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PY:-$REPO/.venv-ref/bin/python}
LLAMACPP_PY=${LLAMACPP_PY:-/work/llamacpp/llama_cpp_python-0.3.36}
LLAMACPP_LIB=${LLAMACPP_LIB:-/work/llamacpp/build/bin}
DIR=${VQ_SYNTH_DIR:-/tmp/vq-arch-synth}
mkdir -p "$DIR"
# NAME PRESET [ARGS...]
ALL='llama3.2-1b-tiny llama3.2-1b-tiny
llama3.1-8b-tiny llama3.1-8b-tiny
llama3.2-1b-tiny-linear llama3.2-1b-tiny --rope-scaling linear:4
llama3.2-1b-tiny-yarn llama3.2-1b-tiny --rope-scaling yarn:4,orig=4096
llama3.2-1b-tiny-biases llama3.2-1b-tiny --biases
mistral-7b-tiny mistral-7b-tiny
qwen2.5-1.5b-tiny qwen2.5-1.5b-tiny
qwen2.5-7b-tiny qwen2.5-7b-tiny
qwen3-1.7b-tiny qwen3-1.7b-tiny
gemma3-1b-tiny gemma3-1b-tiny
gemma3-4b-tiny gemma3-4b-tiny
gemma3-27b-tiny-62l gemma3-27b-tiny --layers 62
gemma2-2b-tiny gemma2-2b-tiny
gemma2-2b-tiny-cap5 gemma2-2b-tiny --attn-softcap 5
gemma2-27b-tiny-46l-f32 gemma2-27b-tiny --layers 46 --type f32
phi3-mini-tiny phi3-mini-tiny
phi3-mini-128k-tiny phi3-mini-128k-tiny
phi3-mini-128k-tiny-long phi3-mini-128k-tiny --longrope 256'
echo "$ALL" | while read -r NAME PRESET ARGS; do
    if [ $# -gt 0 ]; then
        case " $* " in *" $NAME "*) ;; *) continue ;; esac
    fi
    F=$DIR/$NAME.gguf
    # shellcheck disable=SC2086
    "$PY" "$REPO/scripts/make_synthetic_gguf.py" "$PRESET" $ARGS -o "$F"
    # shellcheck disable=SC2086
    PYTHONPATH=$LLAMACPP_PY LLAMA_CPP_LIB_PATH=$LLAMACPP_LIB "$PY" "$REPO/tools/reference/llamacpp_arch_reference.py" \
        "$F" -o "$REPO/tests/fixtures/arch/$NAME.txt" --preset "$PRESET" --preset-args="$ARGS"
done
