"""test_package.py: the installed package itself: version, the library it ships, the ctypes
structs against the header (compiled with the C compiler), the small module-level functions."""
from __future__ import annotations

import ctypes
import os
import re
import subprocess
from importlib import metadata

import pytest

import veloxquant as vq
from veloxquant import _lib
from conftest import SRC, have_cc


def header_version() -> str:
    text = (SRC / "include" / "veloxquant.h").read_text()
    parts = [re.search(rf"#define VQ_VERSION_{p} +(\d+)", text).group(1) for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


def test_version_is_the_library_and_the_header():
    assert vq.__version__ == header_version()
    assert _lib.vq_version_number() == int(vq.__version__.split(".")[0]) * 10000 + \
        int(vq.__version__.split(".")[1]) * 100 + int(vq.__version__.split(".")[2])
    try:
        assert metadata.version("veloxquant") == vq.__version__
    except metadata.PackageNotFoundError:
        pytest.skip("veloxquant is imported from the source tree, not installed")


def test_ships_its_library():
    if os.environ.get("VELOXQUANT_LIB"):
        pytest.skip("VELOXQUANT_LIB chooses the library")
    pkg = os.path.dirname(os.path.abspath(vq.__file__))
    assert os.path.dirname(vq.LIBRARY_PATH) == pkg and os.path.isfile(vq.LIBRARY_PATH)
    if os.environ.get("VQ_EXPECT_INSTALLED"):   # ctest: the wheel's copy, not the source tree
        assert not pkg.startswith(str(SRC / "python")), pkg


def test_runtime_facts():
    assert "f16" in vq.codecs_available() and "turboquant_mse" in vq.codecs_available()
    assert "turboquant_mse" in vq.kv_spec_help()
    assert vq.isa() in ("avx512", "avx2", "scalar") or vq.isa()
    assert vq.max_threads() >= 1
    with pytest.raises(ValueError):
        vq.set_threads(0)


def test_structs_match_the_header(tmp_path):
    """Every ctypes struct's size and field offsets equal the C compiler's for the header."""
    cc = have_cc()
    if not cc:
        pytest.skip("no C compiler to check the structs with")
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include <veloxquant.h>", "int main(void) {"]
    for name, S in _lib.STRUCTS.items():
        lines.append(f'printf("{name} %zu\\n", sizeof({name}));')
        for f, *_ in S._fields_:
            lines.append(f'printf("{name}.{f} %zu %zu\\n", offsetof({name}, {f}), sizeof((({name} *)0)->{f}));')
    lines += ["return 0;", "}"]
    c = tmp_path / "abi.c"
    c.write_text("\n".join(lines))
    exe = tmp_path / "abi"
    subprocess.run([cc, "-std=gnu11", "-I", str(SRC / "include"), "-o", str(exe), str(c)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    want = {}
    for line in out:
        if line:
            k, *v = line.split()
            want[k] = tuple(int(x) for x in v)
    for name, S in _lib.STRUCTS.items():
        assert want[name] == (ctypes.sizeof(S),), name
        for f, *_ in S._fields_:
            d = getattr(S, f)
            assert want[f"{name}.{f}"] == (d.offset, d.size), f"{name}.{f}"


def test_stop_reason_names_are_the_c_ones():
    assert [_lib.vq_stop_reason_name(i).decode() for i in range(6)] == \
        ["none", "length", "eog", "stop", "callback", "context"]
