"""veloxquant: Python bindings of libveloxquant (include/veloxquant.h), the C library that runs
language models on x86-64 CPUs with a really compressed KV cache.

    import veloxquant as vq
    with vq.Model("models/SmolLM2-135M-Instruct.Q4_1.gguf") as model:
        with model.session(kv="turboquant_mse:k=4,v=4") as s:
            for piece in s.generate("The history of the printing press", max_tokens=64, temperature=0):
                print(piece, end="", flush=True)

Bound with ctypes over the public header only (python/README.md says why); the package ships the
libveloxquant.so it was built with, and its version is the library's.
"""
from __future__ import annotations

from . import _lib
from .core import (CLI_KV_SEED, Completion, Generation, KVSpec, Model, ModelInfo, Perplexity, Session,
                   codecs_available, kv_spec_help)
from .errors import (ArgumentError, FileError, FormatError, NumericError, OutOfMemoryError, RangeError,
                     StateError, UnsupportedError, VeloxQuantError)

__version__: str = _lib.VERSION
LIBRARY_PATH: str = _lib.LIBRARY_PATH


def set_threads(n: int) -> None:
    """OpenMP threads for later work in the calling thread (Model(threads=...) does this per call)."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"threads must be an int >= 1, got {n!r}")
    _lib.vq_set_threads(n)


def max_threads() -> int:
    """OpenMP threads work runs on in the calling thread."""
    return _lib.vq_max_threads()


def isa() -> str:
    """The matmul variant chosen at run time: "avx512", "avx2", ..."""
    return _lib.vq_kernels_isa_name().decode()


def cpu_description() -> str:
    import ctypes
    buf = ctypes.create_string_buffer(512)
    _lib.vq_cpu_description(buf, 512)
    return buf.value.decode("utf-8", "replace")


__all__ = ["Model", "ModelInfo", "KVSpec", "Session", "Generation", "Completion", "Perplexity",
           "VeloxQuantError", "FileError", "FormatError", "UnsupportedError", "ArgumentError",
           "OutOfMemoryError", "RangeError", "NumericError", "StateError", "codecs_available", "kv_spec_help",
           "set_threads", "max_threads", "isa", "cpu_description", "CLI_KV_SEED", "LIBRARY_PATH", "__version__"]
