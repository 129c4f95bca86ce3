#!/usr/bin/env bash
# setup-python-venv.sh: the venv the Python package's tests use (.venv-py, git-ignored): pytest,
# numpy and the package's build backend (scikit-build-core, the version python/pyproject.toml pins)
# from the Python package index, so `ctest -R python/` builds the wheel without reaching the index
# (pip --no-build-isolation) and tests it. Pinned, quiet, skips what is there; `make setup` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-py
pins=(numpy==2.4.6 pytest==9.2.0 scikit-build-core==1.1.2)
want="${pins[*]}"
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.pins" 2>/dev/null)" = "$want" ]; then exit 0; fi
python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "${pins[@]}"
echo "$want" > "$venv/.pins"
"$venv/bin/python" -c "import numpy, pytest, scikit_build_core; print('setup-python-venv: numpy', numpy.__version__, 'pytest', pytest.__version__, 'scikit-build-core', scikit_build_core.__version__)"
