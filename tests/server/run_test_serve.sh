#!/usr/bin/env bash
# run_test_serve.sh BIN CASE: runs tests/server/test_serve.py with the venv that
# scripts/setup-serve-venv.sh made (the real `openai` client package); skips (77) without it.
set -u
here=$(cd "$(dirname "$0")" && pwd)
py="$here/../../.venv-serve/bin/python"
if [ ! -x "$py" ]; then
    echo "skip: $py not found: run scripts/setup-serve-venv.sh (make setup does) to install the openai package"
    exit 77
fi
exec "$py" -u "$here/test_serve.py" "$@"
