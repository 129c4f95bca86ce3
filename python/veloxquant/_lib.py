"""_lib.py: libveloxquant loaded with ctypes and the public header's declarations, by hand.

Only include/veloxquant.h is bound (no VQ_EXPERIMENTAL part, no lab): every struct below mirrors
the header field by field, and tests/test_abi.py compiles a C program against the header to check
sizes and offsets. ctypes, not cffi or a compiled extension: nothing is compiled at install time
beyond the library itself, the package is one wheel for every Python 3 (py3-none), and ctypes'
plain foreign calls release the GIL (CDLL, not PyDLL), which is what the long calls need.

Which library: $VELOXQUANT_LIB when set (a path to a libveloxquant.so, e.g. a development
build), else the libveloxquant.so shipped inside this package (the one the wheel was built with).
"""
from __future__ import annotations

import ctypes
import os
from ctypes import (POINTER, Structure, c_char, c_char_p, c_double, c_float, c_int, c_size_t,
                    c_uint, c_uint64, c_void_p)

# libgomp reads its wait policy once, when it is loaded. The CLI's default (tools/main.c,
# docs/experiments/2026-12-07-wait-policy.md): a short spin, which keeps the idle speed and does
# not collapse on a busy machine. Same default here, unless the user chose one; it only takes
# effect when libgomp is not loaded yet by something else in the process.
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = "1000"


def _library_path() -> str:
    env = os.environ.get("VELOXQUANT_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "libveloxquant.so")


LIBRARY_PATH = _library_path()
try:
    lib = ctypes.CDLL(LIBRARY_PATH)
except OSError as e:  # pragma: no cover - a broken install
    raise ImportError(f"veloxquant: cannot load the C library {LIBRARY_PATH}: {e} "
                      "(set VELOXQUANT_LIB to a libveloxquant.so, or reinstall the package)") from e

# ---- status and errors ----------------------------------------------------------------------
VQ_OK = 0
VQ_ERR_IO, VQ_ERR_FORMAT, VQ_ERR_UNSUPPORTED, VQ_ERR_ARG, VQ_ERR_NOMEM, VQ_ERR_RANGE, \
    VQ_ERR_NUMERIC, VQ_ERR_STATE = range(1, 9)

VQ_STOP_NONE, VQ_STOP_LENGTH, VQ_STOP_EOG, VQ_STOP_STRING, VQ_STOP_CALLBACK, VQ_STOP_CONTEXT = range(6)


class vq_err(Structure):
    _fields_ = [("code", c_int), ("msg", c_char * 512)]


class vq_model_params(Structure):
    _fields_ = [("tokenizer_path", c_char_p), ("n_threads", c_int), ("weights", c_char_p),
                ("copy_weights", c_int), ("device", c_char_p)]


class vq_model_info(Structure):
    _fields_ = [("arch", c_char * 32), ("n_layers", c_int), ("n_heads", c_int), ("n_kv_heads", c_int),
                ("head_dim", c_int), ("dim", c_int), ("hidden_dim", c_int), ("n_vocab", c_int),
                ("n_ctx_train", c_int), ("rope_base", c_float), ("file_bytes", c_size_t),
                ("has_chat_template", c_int)]


class vq_chat_message(Structure):
    _fields_ = [("role", c_char_p), ("content", c_char_p)]


class vq_sampler_params(Structure):
    _fields_ = [("temp", c_float), ("top_k", c_int), ("top_p", c_float), ("min_p", c_float),
                ("seed", c_uint64)]


class vq_session_params(Structure):
    _fields_ = [("n_ctx", c_int), ("n_batch", c_int), ("kv_seed", c_uint64),
                ("allow_ctx_over_train", c_int)]


class vq_generate_params(Structure):
    _fields_ = [("n_predict", c_int), ("stop", POINTER(c_char_p)), ("n_stop", c_int),
                ("show_special", c_int)]


class vq_generate_result(Structure):
    _fields_ = [("n_prompt", c_int), ("n_gen", c_int), ("t_prefill_s", c_double),
                ("t_decode_s", c_double), ("stop", c_int)]


class vq_gen_step(Structure):
    # text as a void pointer: exactly n_text bytes (ctypes.string_at), no NUL needed
    _fields_ = [("token", c_int), ("text", c_void_p), ("n_text", c_size_t), ("stop", c_int)]


# int (*vq_text_cb)(const char *bytes, size_t n, void *user); bytes as a void pointer so that
# ctypes does not stop at a NUL (string_at copies exactly n bytes)
vq_text_cb = ctypes.CFUNCTYPE(c_int, c_void_p, c_size_t, c_void_p)

P_err = POINTER(vq_err)
P_int = POINTER(c_int)
P_float = POINTER(c_float)


def _fn(name: str, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


# version
vq_version_number = _fn("vq_version_number", c_uint)
vq_version_string = _fn("vq_version_string", c_char_p)
vq_status_name = _fn("vq_status_name", c_char_p, c_int)
vq_free = _fn("vq_free", None, c_void_p)

# model
vq_model_default_params = _fn("vq_model_default_params", vq_model_params)
vq_model_load = _fn("vq_model_load", c_void_p, c_char_p, POINTER(vq_model_params), P_err)
vq_model_free = _fn("vq_model_free", None, c_void_p)
vq_model_get_info = _fn("vq_model_get_info", vq_model_info, c_void_p)
vq_model_n_vocab = _fn("vq_model_n_vocab", c_int, c_void_p)
vq_model_n_ctx_train = _fn("vq_model_n_ctx_train", c_int, c_void_p)
vq_model_chat_template = _fn("vq_model_chat_template", c_char_p, c_void_p)
vq_model_path = _fn("vq_model_path", c_char_p, c_void_p)

# tokenizer
vq_tokenize = _fn("vq_tokenize", c_int, c_void_p, c_char_p, c_size_t, c_int, c_int, P_int, c_int, P_err)
vq_token_piece = _fn("vq_token_piece", c_size_t, c_void_p, c_int, c_int, c_int, c_void_p, c_size_t)
vq_detokenize = _fn("vq_detokenize", c_size_t, c_void_p, P_int, c_int, c_void_p, c_size_t)
vq_token_bos = _fn("vq_token_bos", c_int, c_void_p)
vq_token_eos = _fn("vq_token_eos", c_int, c_void_p)
vq_token_is_eog = _fn("vq_token_is_eog", c_int, c_void_p, c_int)
vq_token_add_bos = _fn("vq_token_add_bos", c_int, c_void_p)
vq_chat_apply = _fn("vq_chat_apply", c_void_p, c_void_p, POINTER(vq_chat_message), c_int, c_int, c_int, P_err)
vq_chat_tokenize = _fn("vq_chat_tokenize", c_int, c_void_p, POINTER(vq_chat_message), c_int, c_int, c_int,
                       c_int, c_int, P_int, c_int, P_err)

# KV spec
vq_kv_spec_parse = _fn("vq_kv_spec_parse", c_void_p, c_char_p, P_err)
vq_kv_spec_free = _fn("vq_kv_spec_free", None, c_void_p)
vq_kv_spec_text = _fn("vq_kv_spec_text", c_char_p, c_void_p)
vq_kv_spec_equal = _fn("vq_kv_spec_equal", c_int, c_void_p, c_void_p)
vq_kv_spec_bytes = _fn("vq_kv_spec_bytes", c_int, c_void_p, c_void_p, c_int, POINTER(c_size_t), P_err)
vq_kv_spec_help = _fn("vq_kv_spec_help", c_size_t, c_void_p, c_size_t)

# sampler
vq_sampler_default_params = _fn("vq_sampler_default_params", vq_sampler_params)
vq_sampler_create = _fn("vq_sampler_create", c_void_p, POINTER(vq_sampler_params), c_int, P_err)
vq_sampler_free = _fn("vq_sampler_free", None, c_void_p)
vq_sampler_sample = _fn("vq_sampler_sample", c_int, c_void_p, P_float)

# session
vq_session_default_params = _fn("vq_session_default_params", vq_session_params)
vq_session_create = _fn("vq_session_create", c_void_p, c_void_p, c_void_p, POINTER(vq_session_params), P_err)
vq_session_free = _fn("vq_session_free", None, c_void_p)
vq_session_decode = _fn("vq_session_decode", c_int, c_void_p, P_int, c_int, P_float, c_int, P_err)
vq_decode_batch = _fn("vq_decode_batch", c_int, POINTER(c_void_p), c_int, P_int, P_float, P_err)
vq_session_pos = _fn("vq_session_pos", c_int, c_void_p)
vq_session_n_ctx = _fn("vq_session_n_ctx", c_int, c_void_p)
vq_session_tokens = _fn("vq_session_tokens", P_int, c_void_p)
vq_session_truncate = _fn("vq_session_truncate", c_int, c_void_p, c_int, P_err)
vq_session_kv_bytes = _fn("vq_session_kv_bytes", c_size_t, c_void_p)
vq_session_kv_bits = _fn("vq_session_kv_bits", c_double, c_void_p)
vq_session_scratch_bytes = _fn("vq_session_scratch_bytes", c_size_t, c_void_p)
vq_session_kv_spec_text = _fn("vq_session_kv_spec_text", c_char_p, c_void_p)

# generation
vq_stop_reason_name = _fn("vq_stop_reason_name", c_char_p, c_int)
vq_generate_default_params = _fn("vq_generate_default_params", vq_generate_params)
vq_session_generate = _fn("vq_session_generate", c_int, c_void_p, P_int, c_int, c_void_p,
                          POINTER(vq_generate_params), vq_text_cb, c_void_p, POINTER(vq_generate_result),
                          P_err)
# the generator (Session.generate steps it one token per iteration)
vq_generator_create = _fn("vq_generator_create", c_void_p, c_void_p, c_void_p, POINTER(vq_generate_params), P_err)
vq_generator_free = _fn("vq_generator_free", None, c_void_p)
vq_generator_step = _fn("vq_generator_step", c_int, c_void_p, POINTER(vq_gen_step), P_err)

# state files
vq_session_save = _fn("vq_session_save", c_int, c_void_p, c_char_p, P_err)
vq_session_load = _fn("vq_session_load", c_int, c_void_p, c_char_p, P_err)

# runtime
vq_cpu_description = _fn("vq_cpu_description", None, c_void_p, c_size_t)
vq_kernels_isa_name = _fn("vq_kernels_isa_name", c_char_p)
vq_max_threads = _fn("vq_max_threads", c_int)
vq_set_threads = _fn("vq_set_threads", None, c_int)
vq_rss_now_bytes = _fn("vq_rss_now_bytes", c_size_t)
vq_rss_peak_bytes = _fn("vq_rss_peak_bytes", c_size_t)
vq_clock_s = _fn("vq_clock_s", c_double)
vq_codec_name = _fn("vq_codec_name", c_char_p, c_int)

VERSION = vq_version_string().decode()

# the struct sizes the tests compare with the C compiler's (tests/test_abi.py)
STRUCTS = {
    "vq_err": vq_err, "vq_model_params": vq_model_params, "vq_model_info": vq_model_info,
    "vq_chat_message": vq_chat_message, "vq_sampler_params": vq_sampler_params,
    "vq_session_params": vq_session_params, "vq_generate_params": vq_generate_params,
    "vq_generate_result": vq_generate_result, "vq_gen_step": vq_gen_step,
}
