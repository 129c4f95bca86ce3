#!/usr/bin/env bash
# setup-ref-venv.sh: the Python venv (.venv-ref, git-ignored) that runs scripts/make_synthetic_gguf.py:
# gguf-py (llama.cpp's own GGUF writer/reader) and numpy, both pinned so that a synthetic model's bytes
# are the same on every machine. Quiet, and does nothing when the venv already holds these versions;
# `make setup` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-ref
GGUF_VERSION=0.19.0
NUMPY_VERSION=2.4.6
check='import gguf, numpy, importlib.metadata as m, sys; sys.exit(0 if (m.version("gguf"), numpy.__version__) == (sys.argv[1], sys.argv[2]) else 1)'
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$check" "$GGUF_VERSION" "$NUMPY_VERSION" 2>/dev/null; then
    exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "gguf==$GGUF_VERSION" "numpy==$NUMPY_VERSION"
"$venv/bin/python" -c "$check" "$GGUF_VERSION" "$NUMPY_VERSION" || {
    echo "setup-ref-venv: $venv does not hold gguf==$GGUF_VERSION and numpy==$NUMPY_VERSION after install" >&2
    exit 1
}
