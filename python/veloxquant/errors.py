"""errors.py: the C library's vq_status codes as Python exceptions.

Every failure of a C call raises one of these with the library's own message (vq_err.msg) as its
text; each also derives from the builtin a Python caller would expect (a bad argument is a
ValueError, an unreadable file an OSError), so `except ValueError` works too.
"""
from __future__ import annotations

from . import _lib


class VeloxQuantError(Exception):
    """A C call failed. ``status`` is the vq_status code, ``status_name`` its name."""

    status: int = -1

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status

    @property
    def status_name(self) -> str:
        if self.status < 0:
            return "python"
        return _lib.vq_status_name(self.status).decode()


class FileError(VeloxQuantError, OSError):
    """VQ_ERR_IO: a file could not be opened, read, written or mapped."""
    status = _lib.VQ_ERR_IO


class FormatError(VeloxQuantError, ValueError):
    """VQ_ERR_FORMAT: a file's contents are corrupt, truncated or inconsistent."""
    status = _lib.VQ_ERR_FORMAT


class UnsupportedError(VeloxQuantError):
    """VQ_ERR_UNSUPPORTED: valid input the library does not handle (tensor type, architecture)."""
    status = _lib.VQ_ERR_UNSUPPORTED


class ArgumentError(VeloxQuantError, ValueError):
    """VQ_ERR_ARG: a bad argument (unknown name, out-of-range value, malformed KV spec)."""
    status = _lib.VQ_ERR_ARG


class OutOfMemoryError(VeloxQuantError, MemoryError):
    """VQ_ERR_NOMEM: an allocation failed."""
    status = _lib.VQ_ERR_NOMEM


class RangeError(VeloxQuantError, ValueError):
    """VQ_ERR_RANGE: a size limit was hit (e.g. tokens longer than the context)."""
    status = _lib.VQ_ERR_RANGE


class NumericError(VeloxQuantError, ArithmeticError):
    """VQ_ERR_NUMERIC: the model produced NaN or infinite values."""
    status = _lib.VQ_ERR_NUMERIC


class StateError(VeloxQuantError):
    """VQ_ERR_STATE: a saved session state does not fit this model or KV spec."""
    status = _lib.VQ_ERR_STATE


_BY_STATUS = {c.status: c for c in (FileError, FormatError, UnsupportedError, ArgumentError,
                                    OutOfMemoryError, RangeError, NumericError, StateError)}


def raise_for(err: _lib.vq_err, status: int | None = None) -> None:
    """Raise the exception for a filled vq_err (status: the call's return, when it has one)."""
    code = status if status else err.code
    msg = err.msg.decode("utf-8", "replace") or _lib.vq_status_name(code).decode()
    cls = _BY_STATUS.get(code, VeloxQuantError)
    raise cls(msg, code)
