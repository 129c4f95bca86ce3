"""test_examples.py: examples/python/simple.py prints what `veloxquant generate --temp 0` prints,
and examples/python/chat.py what the C examples/chat.c prints, on the same model and flags."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import SRC, run_cli


def run_py(script: str, *args: str) -> bytes:
    r = subprocess.run([sys.executable, str(SRC / "examples" / "python" / script), *args], capture_output=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r.stdout


def test_simple_py_equals_the_cli(smol_path, cli):
    args = ["-m", str(smol_path), "-p", "The history of the printing press", "-n", "16"]
    want = run_cli(cli, "generate", *args, "--temp", "0", "--kv", "q4_0:rotate=1")
    assert run_py("simple.py", *args, "--kv", "q4_0:rotate=1") == want


def test_chat_py_equals_chat_c(smol_path, cli):
    chat_c = cli.parent / "examples" / "chat"
    if not chat_c.is_file():
        pytest.skip(f"{chat_c} is absent (the C examples are built with the CLI)")
    args = ["-m", str(smol_path), "-p", "Name a fruit.", "-p", "And its colour?", "-n", "24"]
    assert run_py("chat.py", *args) == run_cli(chat_c, *args)
