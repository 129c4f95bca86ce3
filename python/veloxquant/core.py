"""core.py: Model, KVSpec, Session, Generation: the C API's handles as Python objects.

Ownership follows the C API: a Model owns a vq_model, a KVSpec a vq_kv_spec, a Session a
vq_session (+ nothing else: the spec is not kept). Each frees its handle on close(), on leaving
a ``with`` block, or when garbage-collected; a closed object raises ValueError when used, never
touches freed memory. A Model closed while it has open sessions closes them first.

Threads: a Model may be shared by many threads (the C model is read-only). A Session is used by
one thread at a time: a call made while another thread is inside a call on the same session
raises RuntimeError at once (it is refused, not queued), so no two threads ever run C code on
one vq_session. Every long C call (decode, generate, save, load, truncate, model load) runs with
the GIL released (ctypes releases it around each foreign call), so other Python threads run.
"""
from __future__ import annotations

import codecs
import ctypes
import math
import os
import threading
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence, Union

import numpy as np

from . import _lib
from .errors import ArgumentError, RangeError, raise_for

CLI_KV_SEED = 0x5EED  # the seed `veloxquant generate/perplexity` give the codecs' rotations

Messages = Sequence[Union[Mapping[str, str], Sequence[str]]]
Tokens = Union[Sequence[int], np.ndarray]


def _cstr(s: str | bytes | os.PathLike, what: str) -> bytes:
    """A str/bytes/path as a NUL-free C string (a NUL would cut the text short in C)."""
    if isinstance(s, os.PathLike):
        s = os.fspath(s)
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    if b"\0" in b:
        raise ValueError(f"{what} contains a NUL character")
    return b


def _token_array(tokens: Tokens, n_vocab: int | None = None) -> np.ndarray:
    """tokens as a C-contiguous int32 array (ids outside int32 or the vocabulary: ValueError)."""
    a = np.asarray(tokens)
    if a.ndim != 1:
        raise ValueError(f"tokens must be a 1-D sequence of ints, got shape {a.shape}")
    if a.size == 0:
        return np.zeros(0, dtype=np.int32)
    if not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"tokens must be ints, got {a.dtype}")
    lo, hi = int(a.min()), int(a.max())
    top = (n_vocab - 1) if n_vocab else 2**31 - 1
    if lo < 0 or hi > top:
        bad = lo if lo < 0 else hi
        raise ValueError(f"token id {bad} is outside the vocabulary (0..{top})")
    return np.ascontiguousarray(a, dtype=np.int32)


def _int_ptr(a: np.ndarray):
    return a.ctypes.data_as(_lib.P_int) if a.size else None


def codecs_available() -> list[str]:
    """The KV codec table's names (``vq_codec_name``)."""
    out, i = [], 0
    while True:
        n = _lib.vq_codec_name(i)
        if not n:
            return out
        out.append(n.decode())
        i += 1


def kv_spec_help() -> str:
    """Every codec with its parameters, then the store keys, one per line (``vq_kv_spec_help``)."""
    n = _lib.vq_kv_spec_help(None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    _lib.vq_kv_spec_help(buf, n + 1)
    return buf.value.decode()


# ==== KV spec ==================================================================================
class KVSpec:
    """A parsed KV cache spec, e.g. ``KVSpec("turboquant_mse:k=4,v=4")`` (docs/kv-spec.md).

    Parsing is the only validation: a malformed spec raises ArgumentError (a ValueError) whose
    text is the C library's message. ``text`` is the normalized spec (every default spelled out);
    two specs are equal when they build the same cache.
    """

    def __init__(self, text: str) -> None:
        self._h = None
        if not isinstance(text, str):
            raise TypeError(f"KVSpec needs a str, got {type(text).__name__}")
        err = _lib.vq_err()
        h = _lib.vq_kv_spec_parse(_cstr(text, "KV spec"), ctypes.byref(err))
        if not h:
            raise_for(err)
        self._h = h
        self.source = text
        self._fin = weakref.finalize(self, _lib.vq_kv_spec_free, h)

    def _handle(self) -> int:
        if not self._h:
            raise ValueError("KVSpec is closed")
        return self._h

    @property
    def text(self) -> str:
        """The normalized spec text."""
        return _lib.vq_kv_spec_text(self._handle()).decode()

    def bytes_for(self, model: "Model", n_ctx: int) -> int:
        """Bytes a cache of this spec holds for ``model`` when every layer holds n_ctx rows."""
        out = ctypes.c_size_t()
        err = _lib.vq_err()
        st = _lib.vq_kv_spec_bytes(self._handle(), model._handle(), int(n_ctx), ctypes.byref(out),
                                   ctypes.byref(err))
        if st:
            raise_for(err, st)
        return out.value

    def close(self) -> None:
        """Free the C spec (sessions made from it do not need it)."""
        if self._h:
            self._fin()
            self._h = None

    def __enter__(self) -> "KVSpec":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KVSpec):
            return NotImplemented
        return bool(_lib.vq_kv_spec_equal(self._handle(), other._handle()))

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"KVSpec({self.text!r})" if self._h else "KVSpec(<closed>)"


def _as_spec(kv: Union[str, KVSpec]) -> tuple[KVSpec, bool]:
    """(spec, owned): a str is parsed here and freed by the caller."""
    if isinstance(kv, KVSpec):
        return kv, False
    return KVSpec(kv), True


# ==== model ====================================================================================
@dataclass(frozen=True)
class ModelInfo:
    """``vq_model_info``: the model's shape."""
    arch: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    dim: int
    hidden_dim: int
    n_vocab: int
    n_ctx_train: int
    rope_base: float
    file_bytes: int
    has_chat_template: bool


class Model:
    """A loaded model (GGUF file, reservoir file or llama2.c checkpoint), read-only and shareable.

    ``Model(path, threads=2)``: threads sets the OpenMP threads of all work (default: OpenMP's);
    ``tokenizer`` is the tokenizer .bin of a llama2.c checkpoint; ``weights`` re-codes the weights
    in memory at load (e.g. ``"q4_0,embd=q8_0"``); ``device`` is where the forward pass runs
    (``"cpu"``, the default, or ``"cuda"`` / ``"cuda:N"``; refused with an error naming why where the
    library has no CUDA or no GPU answers). Use it as a context manager or call close().
    """

    def __init__(self, path: str | os.PathLike, *, threads: int | None = None,
                 tokenizer: str | os.PathLike | None = None, weights: str | None = None,
                 copy_weights: bool = False, device: str | None = None) -> None:
        self._h = None
        self._sessions: "weakref.WeakSet[Session]" = weakref.WeakSet()
        if threads is not None and (not isinstance(threads, int) or threads < 1 or threads > 1024):
            raise ValueError(f"threads must be an int in 1..1024, got {threads!r}")
        self.threads = threads
        p = _lib.vq_model_default_params()
        tok = _cstr(tokenizer, "tokenizer path") if tokenizer is not None else None
        w = _cstr(weights, "weights spec") if weights is not None else None
        p.tokenizer_path = tok
        p.weights = w
        p.n_threads = threads or 0
        p.copy_weights = 1 if copy_weights else 0
        dev = _cstr(device, "device") if device is not None else None
        p.device = dev
        err = _lib.vq_err()
        h = _lib.vq_model_load(_cstr(path, "model path"), ctypes.byref(p), ctypes.byref(err))
        if not h:
            raise_for(err)
        self._h = h
        self._fin = weakref.finalize(self, _lib.vq_model_free, h)
        i = _lib.vq_model_get_info(h)
        self.info = ModelInfo(i.arch.decode(), i.n_layers, i.n_heads, i.n_kv_heads, i.head_dim, i.dim,
                              i.hidden_dim, i.n_vocab, i.n_ctx_train, i.rope_base, i.file_bytes,
                              bool(i.has_chat_template))
        self.n_vocab = i.n_vocab

    # -- lifetime
    def _handle(self) -> int:
        if not self._h:
            raise ValueError("Model is closed")
        return self._h

    def _threads_here(self) -> None:
        """OpenMP's thread count is per calling thread: set it in the thread about to run work."""
        if self.threads:
            _lib.vq_set_threads(self.threads)

    def close(self) -> None:
        """Close every open session of this model, then free the model."""
        if not self._h:
            return
        for s in list(self._sessions):
            s.close()
        self._fin()
        self._h = None

    @property
    def closed(self) -> bool:
        return not self._h

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Model({self.path!r})" if self._h else "Model(<closed>)"

    # -- facts
    @property
    def path(self) -> str:
        return _lib.vq_model_path(self._handle()).decode("utf-8", "replace")

    @property
    def chat_template(self) -> str | None:
        """The file's chat template text, or None."""
        t = _lib.vq_model_chat_template(self._handle())
        return t.decode("utf-8", "replace") if t else None

    @property
    def bos(self) -> int:
        """The BOS token id (-1: none)."""
        return _lib.vq_token_bos(self._handle())

    @property
    def eos(self) -> int:
        return _lib.vq_token_eos(self._handle())

    @property
    def add_bos(self) -> bool:
        """Whether the model file asks for BOS at the start of a text."""
        h = self._handle()
        return bool(_lib.vq_token_add_bos(h)) and _lib.vq_token_bos(h) >= 0

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens (eos, <|im_end|>, ...)."""
        return bool(_lib.vq_token_is_eog(self._handle(), int(token)))

    # -- tokenizer
    def encode(self, text: str | bytes, *, add_bos: bool | None = None, special: bool = False) -> list[int]:
        """Token ids of text. add_bos: None = as the model file asks. special: special-token text
        such as "<|im_start|>" becomes single tokens (off: it stays plain text)."""
        b = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        return self._encode_bytes(b, -1 if add_bos is None else int(bool(add_bos)), special).tolist()

    def _encode_bytes(self, b: bytes, add_bos: int, special: bool) -> np.ndarray:
        h = self._handle()
        err = _lib.vq_err()
        n = _lib.vq_tokenize(h, b, len(b), add_bos, int(special), None, 0, ctypes.byref(err))
        if n < 0:
            raise_for(err)
        out = np.empty(max(n, 1), dtype=np.int32)
        n2 = _lib.vq_tokenize(h, b, len(b), add_bos, int(special), _int_ptr(out), n, ctypes.byref(err))
        if n2 < 0:
            raise_for(err)
        return out[:n]

    def decode(self, tokens: Tokens) -> str:
        """The text of a token sequence (``vq_detokenize``); invalid UTF-8 becomes U+FFFD."""
        return self.decode_bytes(tokens).decode("utf-8", "replace")

    def decode_bytes(self, tokens: Tokens) -> bytes:
        """The bytes of a token sequence, exactly as the library makes them."""
        h = self._handle()
        a = _token_array(tokens, self.n_vocab)
        n = _lib.vq_detokenize(h, _int_ptr(a), a.size, None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        _lib.vq_detokenize(h, _int_ptr(a), a.size, buf, n + 1)
        return buf.raw[:n]

    def token_piece(self, token: int, prev: int = -1, *, special: bool = False) -> bytes:
        """Bytes of one token as generation prints them after ``prev`` (-1: start of text)."""
        h = self._handle()
        tok = int(token)
        if not 0 <= tok < self.n_vocab:
            raise ValueError(f"token id {tok} is outside the vocabulary (0..{self.n_vocab - 1})")
        buf = ctypes.create_string_buffer(256)
        n = _lib.vq_token_piece(h, int(prev), tok, int(special), buf, 256)
        if n > 256:
            buf = ctypes.create_string_buffer(n)
            n = _lib.vq_token_piece(h, int(prev), tok, int(special), buf, n)
        return buf.raw[:n]

    # -- chat
    @staticmethod
    def _messages(messages: Messages) -> tuple[ctypes.Array, list]:
        keep: list[bytes] = []
        arr = (_lib.vq_chat_message * max(len(messages), 1))()
        for i, m in enumerate(messages):
            if isinstance(m, Mapping):
                role, content = m.get("role"), m.get("content")
            else:
                role, content = m
            if not isinstance(role, str) or not isinstance(content, str):
                raise TypeError(f"message {i}: role and content must be str")
            r, c = _cstr(role, f"message {i}'s role"), _cstr(content, f"message {i}'s content")
            keep += [r, c]
            arr[i].role, arr[i].content = r, c
        return arr, keep

    def apply_chat_template(self, messages: Messages, *, add_assistant: bool = True,
                            add_default_system: bool = True) -> str:
        """Render messages ([{"role": ..., "content": ...}, ...]) with the model's chat template."""
        arr, _keep = self._messages(messages)
        err = _lib.vq_err()
        p = _lib.vq_chat_apply(self._handle(), arr, len(messages), int(add_assistant),
                               int(add_default_system), ctypes.byref(err))
        if not p:
            raise_for(err)
        try:
            return ctypes.string_at(p).decode("utf-8", "replace")
        finally:
            _lib.vq_free(p)

    def chat_tokenize(self, messages: Messages, *, add_assistant: bool = True, add_default_system: bool = True,
                      add_bos: bool | None = None, content_special: bool = False) -> list[int]:
        """Messages rendered by the chat template and tokenized so that only the template's own
        markers are special tokens (``vq_chat_tokenize``): "<|im_end|>" typed in a message stays
        text unless content_special (trusted input only)."""
        return self._chat_ids(messages, add_assistant, add_default_system, add_bos, content_special).tolist()

    def _chat_ids(self, messages, add_assistant, add_default_system, add_bos, content_special) -> np.ndarray:
        arr, _keep = self._messages(messages)
        h = self._handle()
        ab = -1 if add_bos is None else int(bool(add_bos))
        args = (h, arr, len(messages), int(add_assistant), int(add_default_system), ab, int(content_special))
        err = _lib.vq_err()
        n = _lib.vq_chat_tokenize(*args, None, 0, ctypes.byref(err))
        if n < 0:
            raise_for(err)
        out = np.empty(max(n, 1), dtype=np.int32)
        if _lib.vq_chat_tokenize(*args, _int_ptr(out), n, ctypes.byref(err)) < 0:
            raise_for(err)
        return out[:n]

    # -- sessions and measurements
    def session(self, kv: Union[str, KVSpec] = "f16", *, n_ctx: int | None = None, n_batch: int | None = None,
                kv_seed: int = CLI_KV_SEED, allow_ctx_over_train: bool = False) -> "Session":
        """A new session: this model + a KV cache of spec ``kv`` (a str or a KVSpec).

        n_ctx: positions held (None: 2048, capped at the training context unless
        allow_ctx_over_train); n_batch: tokens per forward pass when decoding many (None: 64);
        kv_seed: seeds the codecs' rotations (default: the CLI's, so results equal its)."""
        return Session(self, kv, n_ctx=n_ctx, n_batch=n_batch, kv_seed=kv_seed,
                       allow_ctx_over_train=allow_ctx_over_train)

    def perplexity(self, text: Union[str, bytes, os.PathLike], *,
                   kv: Union[str, KVSpec, Sequence[Union[str, KVSpec]]] = "f16", n_ctx: int = 512,
                   mode: str = "decode", max_tokens: int | None = None, score: str = "all",
                   first_scored: int | None = None, n_batch: int = 64, bos_per_window: bool = False,
                   kv_seed: int = CLI_KV_SEED, progress=None) -> Union["Perplexity", list["Perplexity"]]:
        """Perplexity of text over non-overlapping windows of n_ctx tokens, as
        ``veloxquant perplexity -f FILE --ctx N --mode M [--max-tokens T] --kv SPEC`` computes it.

        text: a str, bytes, or a path (pathlib.Path: the file's bytes, as the CLI reads them; note
        that open(..).read() in text mode turns "\r\n" into "\n", which changes the tokens).

        mode "decode": one token per forward pass, so every prediction reads the KV cache as
        generation does; "prefill": chunks of n_batch. score "all" or "second-half" (positions >=
        n_ctx/2, llama-perplexity's protocol); first_scored overrides it. progress(done, total) is
        called after each window. Returns a Perplexity; with a list of KV specs, a list of them,
        the arms run together (decode mode: one batched forward per token for all, as the CLI's
        ``perplexity --kv A --kv B``).
        """
        from .perplexity import run_perplexity
        return run_perplexity(self, text, kv=kv, n_ctx=n_ctx, mode=mode, max_tokens=max_tokens, score=score,
                              first_scored=first_scored, n_batch=n_batch, bos_per_window=bos_per_window,
                              kv_seed=kv_seed, progress=progress)


# ==== session ==================================================================================
class Session:
    """A model + a compressed KV cache + a position (``vq_session``). Make one with
    ``model.session(kv=..., n_ctx=...)`` or ``Session.load(model, path, ...)``.

    decode() runs tokens and returns logits; generate() streams text; truncate() drops positions;
    save()/restore() write and read the cache's codes. Used by one thread at a time: a call while
    another thread is inside one raises RuntimeError (see the module's docstring).
    """

    def __init__(self, model: Model, kv: Union[str, KVSpec] = "f16", *, n_ctx: int | None = None,
                 n_batch: int | None = None, kv_seed: int = CLI_KV_SEED,
                 allow_ctx_over_train: bool = False) -> None:
        self._h = None
        self._lock = threading.Lock()
        self._version = 0   # bumped by every call that changes the session (Generation checks it)
        spec, owned = _as_spec(kv)
        try:
            p = _lib.vq_session_default_params()
            for name, v in (("n_ctx", n_ctx), ("n_batch", n_batch)):
                if v is not None and (not isinstance(v, int) or v < 1):
                    raise ValueError(f"{name} must be a positive int, got {v!r}")
            if not isinstance(kv_seed, int) or not 0 <= kv_seed < 2**64:
                raise ValueError(f"kv_seed must be an int in 0..2**64-1, got {kv_seed!r}")
            p.n_ctx = min(n_ctx, 2**31 - 1) if n_ctx else 0
            p.n_batch = min(n_batch, 2**31 - 1) if n_batch else 0
            p.kv_seed = kv_seed
            p.allow_ctx_over_train = int(allow_ctx_over_train)
            err = _lib.vq_err()
            h = _lib.vq_session_create(model._handle(), spec._handle(), ctypes.byref(p), ctypes.byref(err))
            if not h:
                raise_for(err)
        finally:
            if owned:
                spec.close()
        self._h = h
        self.model = model
        self._fin = weakref.finalize(self, _lib.vq_session_free, h)
        self.n_ctx: int = _lib.vq_session_n_ctx(h)
        self.kv: str = _lib.vq_session_kv_spec_text(h).decode()
        model._sessions.add(self)

    # -- one thread at a time
    @contextmanager
    def _use(self, changes: bool = True):
        if not self._lock.acquire(blocking=False):
            raise RuntimeError("this Session is in use by another thread (a session is used by one thread "
                               "at a time: give each thread its own session)")
        try:
            if not self._h:
                raise ValueError("Session is closed")
            if changes:
                self._version += 1
            yield self._h
        finally:
            self._lock.release()

    def close(self) -> None:
        """Free the C session (refused with RuntimeError while another thread is using it)."""
        if not self._h:
            return
        if not self._lock.acquire(blocking=False):
            raise RuntimeError("cannot close a Session while another thread is using it")
        try:
            self._fin()
            self._h = None
        finally:
            self._lock.release()

    @property
    def closed(self) -> bool:
        return not self._h

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        if not self._h:
            return "Session(<closed>)"
        return f"Session(kv={self.kv!r}, n_ctx={self.n_ctx}, pos={self.pos})"

    # -- state
    @property
    def pos(self) -> int:
        """Tokens held (the next position); a token generate() sampled last counts."""
        with self._use(False) as h:
            return _lib.vq_session_pos(h)

    def __len__(self) -> int:
        return self.pos

    @property
    def tokens(self) -> list[int]:
        """The tokens held, in order (a copy)."""
        with self._use(False) as h:
            n = _lib.vq_session_pos(h)
            p = _lib.vq_session_tokens(h)
            return p[:n] if n else []

    @property
    def bytes_held(self) -> int:
        """Bytes the KV cache holds now (codes + metadata + full-precision window + codec state)."""
        with self._use(False) as h:
            return _lib.vq_session_kv_bytes(h)

    @property
    def bits_per_element(self) -> float:
        """Bits per K/V element held now."""
        with self._use(False) as h:
            return _lib.vq_session_kv_bits(h)

    @property
    def scratch_bytes(self) -> int:
        """Forward-pass and attention scratch memory of the session."""
        with self._use(False) as h:
            return _lib.vq_session_scratch_bytes(h)

    # -- decode
    def decode(self, tokens: Tokens, *, all_logits: bool = False, out: np.ndarray | None = None) -> np.ndarray:
        """Run tokens at the session's next positions; return the logits of the last one
        (float32, shape (n_vocab,)) or of every one (shape (n, n_vocab)) when all_logits.

        No copy on the Python side: the C library writes the logits straight into the returned
        NumPy array, which Python owns (no lifetime tied to the session). ``out`` (float32,
        C-contiguous, the right shape) is written and returned instead, so a loop allocates
        nothing. A failure (tokens that do not fit: RangeError; an id outside the vocabulary:
        ValueError) runs nothing and leaves the session as it was.
        """
        a = _token_array(tokens, self.model.n_vocab)
        n = a.size
        if n == 0:
            raise ValueError("decode needs at least one token")
        V = self.model.n_vocab
        shape = (n, V) if all_logits else (V,)
        if out is None:
            out = np.empty(shape, dtype=np.float32)
        elif (not isinstance(out, np.ndarray) or out.dtype != np.float32 or out.shape != shape
              or not out.flags.c_contiguous or not out.flags.writeable):
            raise ValueError(f"out must be a writeable C-contiguous float32 array of shape {shape}")
        err = _lib.vq_err()
        with self._use() as h:
            self.model._threads_here()
            st = _lib.vq_session_decode(h, _int_ptr(a), n, out.ctypes.data_as(_lib.P_float),
                                        int(bool(all_logits)), ctypes.byref(err))
        if st:
            raise_for(err, st)
        return out

    def truncate(self, n: int) -> None:
        """Keep the first n positions, drop the rest; the state then equals a session that never
        saw the dropped tokens."""
        if not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"truncate needs a position >= 0, got {n!r}")
        err = _lib.vq_err()
        with self._use() as h:
            self.model._threads_here()
            st = _lib.vq_session_truncate(h, int(min(n, 2**31 - 1)), ctypes.byref(err))
        if st:
            raise_for(err, st)

    # -- state files
    def save(self, path: str | os.PathLike) -> None:
        """Write the cache's codes, the tokens and the position to a checksummed file
        (docs/state-format.md), atomically."""
        err = _lib.vq_err()
        p = _cstr(path, "state path")
        with self._use(False) as h:
            st = _lib.vq_session_save(h, p, ctypes.byref(err))
        if st:
            raise_for(err, st)

    def restore(self, path: str | os.PathLike) -> None:
        """Read a state file saved from a session of the same model and KV spec into this one
        (StateError when it does not fit, FormatError when it is corrupt)."""
        err = _lib.vq_err()
        p = _cstr(path, "state path")
        with self._use() as h:
            st = _lib.vq_session_load(h, p, ctypes.byref(err))
        if st:
            raise_for(err, st)

    @classmethod
    def load(cls, model: Model, path: str | os.PathLike, kv: Union[str, KVSpec] = "f16", **kwargs) -> "Session":
        """A new session of model and kv (and the Session keywords) holding the state in path.
        Its logits equal those of the session that was saved, bit for bit."""
        s = cls(model, kv, **kwargs)
        try:
            s.restore(path)
        except BaseException:
            s.close()
            raise
        return s

    # -- generation
    def generate(self, prompt: Union[str, Tokens, None] = None, *, messages: Messages | None = None,
                 max_tokens: int = 128, temperature: float = 0.8, top_p: float = 0.95, top_k: int = 40,
                 min_p: float = 0.05, stop: Union[str, Sequence[str], None] = None, seed: int = 0,
                 add_bos: bool | None = None, show_special: bool = False) -> "Generation":
        """Generate text after prompt; returns a Generation, an iterator of str pieces whose
        ``stop_reason`` ("length", "eog", "stop", "context") is set when it ends.

        prompt: text (tokenized with BOS as the model asks when the session is empty), token ids,
        or None to continue from what the session holds. messages: a chat ([{"role", "content"}])
        rendered with the model's chat template instead of prompt. Sampling as the CLI's
        (defaults too): temperature 0 is greedy; top_k/top_p/min_p off at 0/1/0; seed makes a run
        reproducible on any machine. stop: strings that end generation (not printed). Every
        generated token stays in the session, so a later call continues the conversation.

        Lazy: one token per step, each step one ``vq_generator_step`` (the C API's generator, of
        which ``vq_session_generate`` is a loop: sampling, end-of-turn, context checks, stop
        strings, held-back bytes), so the text equals complete()'s.
        """
        ids = self._prompt_ids(prompt, messages, add_bos)
        return Generation(self, ids, max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
                          min_p=min_p, stop=stop, seed=seed, show_special=show_special)

    def complete(self, prompt: Union[str, Tokens, None] = None, *, messages: Messages | None = None,
                 max_tokens: int = 128, temperature: float = 0.8, top_p: float = 0.95, top_k: int = 40,
                 min_p: float = 0.05, stop: Union[str, Sequence[str], None] = None, seed: int = 0,
                 add_bos: bool | None = None, show_special: bool = False) -> "Completion":
        """As generate(), but the whole generation is one ``vq_session_generate`` call (the loop and
        the stop strings in C, the GIL released throughout); returns a Completion."""
        ids = self._prompt_ids(prompt, messages, add_bos)
        sampler = _Sampler(self.model, temperature, top_p, top_k, min_p, seed)
        stops = _stop_list(stop)
        pieces: list[bytes] = []

        def on_text(ptr, n, _user):
            pieces.append(ctypes.string_at(ptr, n))
            return 0

        cb = _lib.vq_text_cb(on_text)
        gp, _keep = _gen_params(max_tokens, stops, show_special)
        res = _lib.vq_generate_result()
        err = _lib.vq_err()
        try:
            with self._use() as h:
                self.model._threads_here()
                st = _lib.vq_session_generate(h, _int_ptr(ids), ids.size, sampler.h, ctypes.byref(gp), cb, None,
                                              ctypes.byref(res), ctypes.byref(err))
        finally:
            sampler.close()
        if st:
            raise_for(err, st)
        data = b"".join(pieces)
        return Completion(text=data.decode("utf-8", "replace"), stop_reason=_stop_name(res.stop),
                          n_prompt=res.n_prompt, n_generated=res.n_gen, t_prefill_s=res.t_prefill_s,
                          t_decode_s=res.t_decode_s)

    def _prompt_ids(self, prompt, messages, add_bos) -> np.ndarray:
        if messages is not None:
            if prompt is not None:
                raise ValueError("give prompt or messages, not both")
            ab = add_bos if add_bos is not None else (self.model.add_bos if self.pos == 0 else False)
            return self.model._chat_ids(messages, True, True, ab, False)
        if prompt is None:
            return np.zeros(0, dtype=np.int32)
        if isinstance(prompt, (str, bytes)):
            b = prompt.encode("utf-8") if isinstance(prompt, str) else prompt
            ab = add_bos if add_bos is not None else (self.model.add_bos if self.pos == 0 else False)
            return self.model._encode_bytes(b, int(bool(ab)), False)
        return _token_array(prompt, self.model.n_vocab)


# ==== generation ===============================================================================
def _stop_name(code: int) -> str:
    return _lib.vq_stop_reason_name(code).decode()


def _stop_list(stop: Union[str, Sequence[str], None]) -> list[bytes]:
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    out = []
    for s in stop:
        if not isinstance(s, str) or not s:
            raise ValueError(f"stop strings must be non-empty str, got {s!r}")
        out.append(_cstr(s, "stop string"))
    return out


def _gen_params(max_tokens: int, stops: list[bytes], show_special: bool):
    if not isinstance(max_tokens, (int, np.integer)) or max_tokens < 0:
        raise ValueError(f"max_tokens must be an int >= 0 (0: until the context is full), got {max_tokens!r}")
    gp = _lib.vq_generate_default_params()
    gp.n_predict = int(min(max_tokens, 2**31 - 1))
    arr = (ctypes.c_char_p * max(len(stops), 1))(*stops)
    gp.stop = arr if stops else None
    gp.n_stop = len(stops)
    gp.show_special = int(show_special)
    return gp, arr


class _Sampler:
    """A vq_sampler for one generation."""

    def __init__(self, model: Model, temperature, top_p, top_k, min_p, seed) -> None:
        for name, v in (("temperature", temperature), ("top_p", top_p), ("min_p", min_p)):
            if not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"{name} must be a finite number, got {v!r}")
        if not 0 <= temperature <= 100:
            raise ValueError(f"temperature must be in 0..100, got {temperature}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        if not 0 <= min_p < 1:
            raise ValueError(f"min_p must be in [0, 1), got {min_p}")
        if not isinstance(top_k, int) or top_k < 0:
            raise ValueError(f"top_k must be an int >= 0, got {top_k!r}")
        if not isinstance(seed, int) or not 0 <= seed < 2**64:
            raise ValueError(f"seed must be an int in 0..2**64-1, got {seed!r}")
        p = _lib.vq_sampler_params(float(temperature), min(top_k, 2**31 - 1), float(top_p), float(min_p), seed)
        err = _lib.vq_err()
        self.h = _lib.vq_sampler_create(ctypes.byref(p), model.n_vocab, ctypes.byref(err))
        if not self.h:
            raise_for(err)

    def close(self) -> None:
        if self.h:
            _lib.vq_sampler_free(self.h)
            self.h = None


@dataclass
class Completion:
    """The result of Session.complete()."""
    text: str
    stop_reason: str
    n_prompt: int
    n_generated: int
    t_prefill_s: float
    t_decode_s: float

    @property
    def decode_tokens_per_second(self) -> float:
        """As the CLI counts it: the tokens after the first over the decode time."""
        n = self.n_generated - 1
        return n / self.t_decode_s if n > 0 and self.t_decode_s > 0 else 0.0


class Generation(Iterator[str]):
    """An iterator of generated text pieces (str). After it ends: ``stop_reason`` ("length",
    "eog", "stop", "context"; "cancelled" when closed early, "error" after an exception), ``n_prompt``, ``n_generated``, ``text`` (everything yielded),
    timings. close() (or leaving a ``with`` block, or breaking out of a for loop and dropping it)
    ends it early; the tokens generated so far stay in the session. A piece never ends inside a
    UTF-8 character. The session must not change between steps (RuntimeError otherwise).
    """

    def __init__(self, session: Session, prompt: np.ndarray, *, max_tokens, temperature, top_p, top_k, min_p,
                 stop, seed, show_special) -> None:
        self.session = session
        self.stop_reason: str | None = None
        self.n_prompt = 0
        self.n_generated = 0
        self.text = ""
        self.t_prefill_s = 0.0
        self.t_decode_s = 0.0
        self._gen = None
        self._t_decode0 = 0.0
        self._gp, self._keep = _gen_params(max_tokens, _stop_list(stop), show_special)
        self._sampler = _Sampler(session.model, temperature, top_p, top_k, min_p, seed)
        self._prompt = prompt
        self._it = self._run()

    def __iter__(self) -> "Generation":
        return self

    def __next__(self) -> str:
        return next(self._it)

    def close(self) -> None:
        """Stop generating (the tokens made so far stay in the session)."""
        self._it.close()
        self._free()

    def __enter__(self) -> "Generation":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._free()
        except Exception:
            pass

    def _start(self, h) -> None:
        """vq_session_generate's checks and prefill, then the generator (session h in use)."""
        p = self._prompt
        held, n_ctx = _lib.vq_session_pos(h), _lib.vq_session_n_ctx(h)
        if p.size == 0 and held == 0:
            raise ArgumentError("vq_session_generate: no prompt and nothing decoded yet")
        if held + p.size >= n_ctx:
            raise RangeError(f"the prompt is {p.size} tokens and the session holds {held}, but the context holds "
                             f"{n_ctx} (raise -c, or shorten the prompt)")
        err = _lib.vq_err()
        gen = _lib.vq_generator_create(h, self._sampler.h, ctypes.byref(self._gp), ctypes.byref(err))
        if not gen:
            raise_for(err)
        self._gen = gen
        t0 = time.perf_counter()
        # the prompt (n = 0: the pending token a previous generation left, if any)
        st = _lib.vq_session_decode(h, _int_ptr(p), p.size, None, 0, ctypes.byref(err))
        if st:
            raise_for(err, st)
        self.n_prompt = int(p.size)
        self._t_decode0 = time.perf_counter()
        self.t_prefill_s = self._t_decode0 - t0

    def _run(self) -> Iterator[str]:
        s = self.session
        err = _lib.vq_err()
        step = _lib.vq_gen_step()
        utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        out: list[str] = []
        version = None
        why = None
        try:
            while True:
                with s._use() as h:
                    if version is not None and s._version != version + 1:
                        raise RuntimeError("the session was used between two steps of this Generation")
                    s.model._threads_here()
                    if version is None:
                        self._start(h)
                    # one vq_generator_step: the pending token runs, one is sampled and taken; its
                    # text, stop strings and limits are the C generator's (vq_session_generate's loop)
                    st = _lib.vq_generator_step(self._gen, ctypes.byref(step), ctypes.byref(err))
                    if not st and step.stop == _STOP_CONTEXT:
                        # every generated token ends up in the cache: the last one runs now
                        st = _lib.vq_session_decode(h, None, 0, None, 0, ctypes.byref(err))
                    version = s._version
                if st:
                    raise_for(err, st)
                if step.token >= 0:
                    self.n_generated += 1
                done = step.stop != _STOP_NONE
                chunk = utf8.decode(ctypes.string_at(step.text, step.n_text) if step.n_text else b"", final=done)
                if chunk:
                    out.append(chunk)
                    yield chunk
                if done:
                    why = _stop_name(step.stop)
                    break
        except GeneratorExit:
            why = why or "cancelled"
            raise
        except BaseException:
            why = why or "error"
            raise
        finally:
            self.stop_reason = why
            self.text = "".join(out)
            if self._t_decode0:
                self.t_decode_s = time.perf_counter() - self._t_decode0
            self._free()

    def _free(self) -> None:
        # the generator borrows the sampler: freed first
        if self._gen:
            _lib.vq_generator_free(self._gen)
            self._gen = None
        self._sampler.close()

    @property
    def decode_tokens_per_second(self) -> float:
        """As the CLI counts it: the tokens after the first over the decode time (wall time in
        Python between the end of the prefill and the last step, consumer's time included)."""
        n = self.n_generated - 1
        return n / self.t_decode_s if n > 0 and self.t_decode_s > 0 else 0.0


_STOP_NONE, _STOP_CONTEXT = _lib.VQ_STOP_NONE, _lib.VQ_STOP_CONTEXT


@dataclass
class Perplexity:
    """The result of Model.perplexity() (the CLI's ``perplexity --json`` arm figures)."""
    kv: str                    # normalized KV spec
    ppl: float
    mean_nll: float
    n_scored: int              # predictions scored
    n_tokens: int              # tokens run through the model
    n_windows: int
    n_ctx: int
    mode: str
    bytes_held: int            # the cache's largest size over the windows
    bits_per_element: float
    seconds: float             # time in decode calls

    @property
    def tokens_per_second(self) -> float:
        return self.n_tokens / self.seconds if self.seconds > 0 else 0.0


__all__ = ["Model", "ModelInfo", "KVSpec", "Session", "Generation", "Completion", "Perplexity",
           "codecs_available", "kv_spec_help", "CLI_KV_SEED"]
