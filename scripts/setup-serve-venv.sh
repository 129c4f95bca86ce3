#!/usr/bin/env bash
# setup-serve-venv.sh: the Python venv the server's tests use (.venv-serve, git-ignored): the real
# `openai` client package from the Python package index, so the tests speak to `veloxquant serve`
# as an OpenAI client does. Skips what is there; `make setup` (and so `make test`) runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-serve
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import openai" 2>/dev/null; then exit 0; fi
python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check openai
"$venv/bin/python" -c "import openai; print('setup-serve-venv: openai', openai.__version__)"
