"""conftest.py: where the tests find the repository, the CLI, the model and ../shared.

Environment (ctest sets them; run by hand, the defaults fit the source tree): VQ_SOURCE_DIR (the
repository, default two levels up), VQ_CLI (default build/veloxquant), VQ_MODELS_DIR (models/),
VQ_SHARED_DIR (../shared). A test that needs what is absent skips with a message saying so.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SRC = Path(os.environ.get("VQ_SOURCE_DIR", Path(__file__).resolve().parents[2]))
CLI = Path(os.environ.get("VQ_CLI", SRC / "build" / "veloxquant"))
MODELS = Path(os.environ.get("VQ_MODELS_DIR", SRC / "models"))
SHARED = Path(os.environ.get("VQ_SHARED_DIR", SRC.parent / "shared"))
SMOL = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def smol_path() -> Path:
    if not SMOL.is_file():
        pytest.skip(f"{SMOL} is absent (scripts/fetch_model.sh fetches it)")
    return SMOL


@pytest.fixture(scope="session")
def model(smol_path):
    import veloxquant as vq
    m = vq.Model(smol_path)
    yield m
    m.close()


@pytest.fixture(scope="session")
def cli() -> Path:
    if not os.access(CLI, os.X_OK):
        pytest.skip(f"the CLI {CLI} is absent (build it, or set VQ_CLI)")
    return CLI


@pytest.fixture(scope="session")
def shared() -> Path:
    if not (SHARED / "data").is_dir():
        pytest.skip(f"{SHARED}/data is absent (the shared texts and stories260K)")
    return SHARED / "data"


def run_cli(cli: Path, *args: str, input: bytes | None = None) -> bytes:
    """The CLI's stdout (it must succeed)."""
    r = subprocess.run([str(cli), *args], input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=600)
    assert r.returncode == 0, f"{cli} {' '.join(args)} failed: {r.stderr.decode(errors='replace')}"
    return r.stdout


def have_cc() -> str | None:
    return shutil.which(os.environ.get("CC", "cc"))
