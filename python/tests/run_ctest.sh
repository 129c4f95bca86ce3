#!/usr/bin/env bash
# run_ctest.sh SRC BUILD CLI: the Python package's test as CTest runs it (python/pytest): build the
# wheel from python/ with the pinned backend (no index: the venv has it), install it into
# BUILD/python-site, run python/tests with pytest against that installed copy. Skips (77) without
# the venv scripts/setup-python-venv.sh makes (`make setup`). The scikit-build-core build folder
# persists in BUILD/python-skbuild, so a second run rebuilds only what changed.
set -uo pipefail
src=$(cd "$1" && pwd) build=$(cd "$2" && pwd) cli=$3
venv=$src/.venv-py
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import pytest, numpy, scikit_build_core" 2>/dev/null; then
    echo "SKIP: $venv with pytest, numpy and scikit-build-core is absent (bash scripts/setup-python-venv.sh; make setup runs it)"
    exit 77
fi
dist=$build/python-dist site=$build/python-site
rm -rf "$dist" "$site"
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} "$venv/bin/pip" wheel -q --disable-pip-version-check \
    --no-build-isolation --no-deps -w "$dist" -C build-dir="$build/python-skbuild" "$src/python" || exit 1
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps --target "$site" "$dist"/veloxquant-*.whl || exit 1
cd "$build"   # not the source tree: `import veloxquant` must find the installed wheel
VQ_EXPECT_INSTALLED=1 VQ_SOURCE_DIR=$src VQ_CLI=$cli PYTHONPATH=$site \
    "$venv/bin/python" -m pytest -q -p no:cacheprovider "$src/python/tests"
rc=$?
if [ $rc = 5 ]; then echo "SKIP: pytest collected no test"; exit 77; fi
exit $rc
