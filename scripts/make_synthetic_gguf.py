#!/usr/bin/env python3
"""make_synthetic_gguf.py: a GGUF with seeded random weights in the exact configuration of a real model.

Each preset names a real model (Llama 3.x, Mistral 7B v0.1, Qwen 2.5, Qwen 3, Phi-3 mini, Gemma 2/3) and
writes its real hyper-parameters, the metadata keys and tensor names/shapes that llama.cpp's converter
(convert_hf_to_gguf.py) writes for it, the family's REAL tokenizer (copied key by key from the vocab-only
GGUFs of models/vocab/, made by scripts/fetch_vocabs.sh) and its real chat template; only the weights are
random. Such files measure speed exactly like the real model (same shapes, same vocabulary, same tokens)
and let two engines be compared numerically on the same weights; they are useless for quality.

Run with the reference venv (scripts/setup-ref-venv.sh makes .venv-ref/; pinned: gguf==0.19.0,
numpy==2.4.6, Python >= 3.10):
    .venv-ref/bin/python scripts/make_synthetic_gguf.py llama3.2-1b-tiny -o /tmp/l.gguf
    .venv-ref/bin/python scripts/make_synthetic_gguf.py --list

Reproducible: the same command gives the same bytes. The seed is printed; --seed overrides the preset's
fixed default. Each tensor draws from its own stream (seed, crc32(tensor name)), so a file made with
--layers N holds the same first N layers as the full one.

Tensors are generated and written one at a time (big ones in row chunks), so an 8B F16 file (16 GB)
needs well under 1 GB of RAM.

What differs from the real models (also in docs/synthetic-models.md):
  * the weights are random (N(0, sigma^2), sigma chosen so activations stay O(1) through every layer and
    the next-token distribution has an entropy of a few nats, see `scales`);
  * Gemma 2 uses the Gemma 3 tokenizer (262144 tokens; Gemma 2's real one has 256000), Mistral 7B uses
    the Llama 2 SentencePiece vocabulary (same size 32000, same type and special ids 0/1/2, different
    pieces), Phi-3 mini 128k's longrope factors are smooth synthetic curves, not the published lists;
  * Qwen 2.5 7B and Gemma 3 4B/27B have more embedding rows than tokenizer entries (152064 vs 151936,
    262208 vs 262144); as the real converter does, the token list is padded with "[PADn]" tokens of type
    UNUSED so that token_embd's rows equal the token count;
  * eos is the Instruct model's end-of-turn token where the real Instruct GGUFs use it (Llama 3: 128009,
    Qwen: 151645), so the embedded chat template and stop token agree.
None of this changes the work an engine does per token (same shapes, same kernels, same vocabulary size)
nor the arithmetic two engines must agree on.
"""
import argparse
import math
import os
import struct
import sys
import time
import zlib
from dataclasses import dataclass, field, replace

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
VOCAB_DIR = os.path.join(REPO, "models", "vocab")
TEMPLATE_DIR = os.path.join(VOCAB_DIR, "templates")
GEMMA_VOCAB = os.path.join(REPO, "models", "gemma-3-270m-q4_k_m.gguf")

# Mistral-7B-Instruct v0.1/v0.2's chat template (the same string in both): it is not among the templates
# llama.cpp ships in models/templates; llama.cpp's tests/test-chat-template.cpp quotes it as the
# "mistralai/Mistral-7B-Instruct-v0.2 (Old pre-v1 without a system prompt)" case.
MISTRAL_V01_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")


@dataclass(frozen=True)
class Preset:
    name: str
    arch: str             # llama | qwen2 | qwen3 | phi3 | gemma2 | gemma3
    title: str            # the real model it copies
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_vocab: int          # rows of token_embd (HF config vocab_size)
    vocab: str            # llama-bpe | qwen2 | phi-3 | llama-spm | gemma
    template: str         # file in models/vocab/templates, "vocab" (the vocab GGUF's own) or "mistral-v0.1"
    ctx: int
    rope_base: float
    rms_eps: float
    tied: bool
    seed: int
    eos: int | None = None          # override of the vocab file's eos (Instruct end-of-turn)
    add_bos: bool | None = None     # written when the real Instruct GGUF carries it
    added: str | None = None        # "qwen2.5" | "qwen3": the added tokens the qwen2 vocab file lacks
    llama3_rope: tuple | None = None  # (factor, low_freq_factor, high_freq_factor, original_ctx)
    rope_linear: float | None = None
    rope_yarn: tuple | None = None    # (factor, original_ctx)
    longrope: int | None = None       # original ctx of a Phi-3 longrope model
    sliding_window: int | None = None
    attn_softcap: float | None = None
    final_softcap: float | None = None
    explicit_head_dim: bool = False   # config.json gives head_dim: the converter writes key/value_length
    biases: bool = False              # llama --biases: q/k/v/o biases
    tiny: bool = False


def P(**kw):
    return Preset(**kw)


L3_32 = (32.0, 1.0, 4.0, 8192)
L3_8 = (8.0, 1.0, 4.0, 8192)
PRESETS = {p.name: p for p in [
    # meta-llama/Llama-3.2-1B(-Instruct) config.json
    P(name="llama3.2-1b", arch="llama", title="Llama 3.2 1B", n_layer=16, n_embd=2048, n_ff=8192, n_head=32,
      n_head_kv=8, head_dim=64, n_vocab=128256, vocab="llama-bpe",
      template="meta-llama-Llama-3.2-3B-Instruct.jinja", ctx=131072, rope_base=500000.0, rms_eps=1e-5,
      tied=True, explicit_head_dim=True, seed=3201, eos=128009, add_bos=True, llama3_rope=L3_32),
    P(name="llama3.2-3b", arch="llama", title="Llama 3.2 3B", n_layer=28, n_embd=3072, n_ff=8192, n_head=24,
      n_head_kv=8, head_dim=128, n_vocab=128256, vocab="llama-bpe",
      template="meta-llama-Llama-3.2-3B-Instruct.jinja", ctx=131072, rope_base=500000.0, rms_eps=1e-5,
      tied=True, explicit_head_dim=True, seed=3203, eos=128009, add_bos=True, llama3_rope=L3_32),
    P(name="llama3.1-8b", arch="llama", title="Llama 3.1 8B", n_layer=32, n_embd=4096, n_ff=14336, n_head=32,
      n_head_kv=8, head_dim=128, n_vocab=128256, vocab="llama-bpe",
      template="meta-llama-Llama-3.1-8B-Instruct.jinja", ctx=131072, rope_base=500000.0, rms_eps=1e-5,
      tied=False, seed=3108, eos=128009, add_bos=True, llama3_rope=L3_8),
    # mistralai/Mistral-7B-v0.1: sliding_window 4096, rope_theta 1e4, max_position_embeddings 32768
    P(name="mistral-7b", arch="llama", title="Mistral 7B v0.1", n_layer=32, n_embd=4096, n_ff=14336, n_head=32,
      n_head_kv=8, head_dim=128, n_vocab=32000, vocab="llama-spm", template="mistral-v0.1", ctx=32768,
      rope_base=10000.0, rms_eps=1e-5, tied=False, seed=7001, sliding_window=4096),
    # Qwen/Qwen2.5-1.5B-Instruct, Qwen/Qwen2.5-7B-Instruct
    P(name="qwen2.5-1.5b", arch="qwen2", title="Qwen2.5 1.5B", n_layer=28, n_embd=1536, n_ff=8960, n_head=12,
      n_head_kv=2, head_dim=128, n_vocab=151936, vocab="qwen2", template="Qwen-Qwen2.5-7B-Instruct.jinja",
      ctx=32768, rope_base=1000000.0, rms_eps=1e-6, tied=True, seed=2515, eos=151645, add_bos=False,
      added="qwen2.5"),
    P(name="qwen2.5-7b", arch="qwen2", title="Qwen2.5 7B", n_layer=28, n_embd=3584, n_ff=18944, n_head=28,
      n_head_kv=4, head_dim=128, n_vocab=152064, vocab="qwen2", template="Qwen-Qwen2.5-7B-Instruct.jinja",
      ctx=32768, rope_base=1000000.0, rms_eps=1e-6, tied=False, seed=2507, eos=151645, add_bos=False,
      added="qwen2.5"),
    # Qwen/Qwen3-1.7B, Qwen/Qwen3-8B (head_dim 128 given explicitly in config.json)
    P(name="qwen3-1.7b", arch="qwen3", title="Qwen3 1.7B", n_layer=28, n_embd=2048, n_ff=6144, n_head=16,
      n_head_kv=8, head_dim=128, n_vocab=151936, vocab="qwen2", template="Qwen-Qwen3-0.6B.jinja",
      ctx=40960, rope_base=1000000.0, rms_eps=1e-6, tied=True, explicit_head_dim=True, seed=3017, eos=151645, add_bos=False,
      added="qwen3"),
    P(name="qwen3-8b", arch="qwen3", title="Qwen3 8B", n_layer=36, n_embd=4096, n_ff=12288, n_head=32,
      n_head_kv=8, head_dim=128, n_vocab=151936, vocab="qwen2", template="Qwen-Qwen3-0.6B.jinja",
      ctx=40960, rope_base=1000000.0, rms_eps=1e-6, tied=False, explicit_head_dim=True, seed=3008, eos=151645, add_bos=False,
      added="qwen3"),
    # microsoft/Phi-3-mini-4k-instruct (sliding_window 2047) and -128k-instruct (longrope, sliding 262144)
    P(name="phi3-mini", arch="phi3", title="Phi-3 mini 4k", n_layer=32, n_embd=3072, n_ff=8192, n_head=32,
      n_head_kv=32, head_dim=96, n_vocab=32064, vocab="phi-3", template="vocab", ctx=4096,
      rope_base=10000.0, rms_eps=1e-5, tied=False, seed=3404, sliding_window=2047, longrope=None),
    P(name="phi3-mini-128k", arch="phi3", title="Phi-3 mini 128k", n_layer=32, n_embd=3072, n_ff=8192,
      n_head=32, n_head_kv=32, head_dim=96, n_vocab=32064, vocab="phi-3", template="vocab", ctx=131072,
      rope_base=10000.0, rms_eps=1e-5, tied=False, seed=3428, sliding_window=262144, longrope=4096),
    # google/gemma-2-2b-it: softcaps 50/30, sliding 4096, query_pre_attn_scalar 256 (= head_dim, which is
    # what llama.cpp uses for every Gemma 2 but the 27B)
    P(name="gemma2-2b", arch="gemma2", title="Gemma 2 2B", n_layer=26, n_embd=2304, n_ff=9216, n_head=8,
      n_head_kv=4, head_dim=256, n_vocab=262144, vocab="gemma", template="google-gemma-2-2b-it.jinja",
      ctx=8192, rope_base=10000.0, rms_eps=1e-6, tied=True, explicit_head_dim=True, seed=2202, sliding_window=4096,
      attn_softcap=50.0, final_softcap=30.0),
    # google/gemma-2-9b-it (query_pre_attn_scalar 256 = head_dim) and google/gemma-2-27b-it
    # (query_pre_attn_scalar 144 = n_embd / n_head: llama.cpp applies it when n_layer == 46, LLM_TYPE_27B)
    P(name="gemma2-9b", arch="gemma2", title="Gemma 2 9B", n_layer=42, n_embd=3584, n_ff=14336, n_head=16,
      n_head_kv=8, head_dim=256, n_vocab=262144, vocab="gemma", template="google-gemma-2-2b-it.jinja",
      ctx=8192, rope_base=10000.0, rms_eps=1e-6, tied=True, explicit_head_dim=True, seed=2209, sliding_window=4096,
      attn_softcap=50.0, final_softcap=30.0),
    P(name="gemma2-27b", arch="gemma2", title="Gemma 2 27B", n_layer=46, n_embd=4608, n_ff=36864, n_head=32,
      n_head_kv=16, head_dim=128, n_vocab=262144, vocab="gemma", template="google-gemma-2-2b-it.jinja",
      ctx=8192, rope_base=10000.0, rms_eps=1e-6, tied=True, explicit_head_dim=True, seed=2227, sliding_window=4096,
      attn_softcap=50.0, final_softcap=30.0),
    # google/gemma-3-1b-it, gemma-3-4b-it and gemma-3-27b-it (text configs). rope_theta 1e6 for global
    # layers, 1e4 for the local (sliding) ones, which is llama.cpp's default freq_base_swa.
    P(name="gemma3-1b", arch="gemma3", title="Gemma 3 1B", n_layer=26, n_embd=1152, n_ff=6912, n_head=4,
      n_head_kv=1, head_dim=256, n_vocab=262144, vocab="gemma", template="google-gemma-2-2b-it.jinja",
      ctx=32768, rope_base=1000000.0, rms_eps=1e-6, tied=True, explicit_head_dim=True, seed=3301, sliding_window=512),
    P(name="gemma3-4b", arch="gemma3", title="Gemma 3 4B", n_layer=34, n_embd=2560, n_ff=10240, n_head=8,
      n_head_kv=4, head_dim=256, n_vocab=262208, vocab="gemma", template="google-gemma-2-2b-it.jinja",
      ctx=131072, rope_base=1000000.0, rms_eps=1e-6, tied=True, explicit_head_dim=True, seed=3304, sliding_window=1024,
      rope_linear=8.0),
    # query_pre_attn_scalar = 168 = n_embd / n_head: llama.cpp applies it when n_layer == 62 (LLM_TYPE_27B)
    P(name="gemma3-27b", arch="gemma3", title="Gemma 3 27B", n_layer=62, n_embd=5376, n_ff=21504, n_head=32,
      n_head_kv=16, head_dim=128, n_vocab=262208, vocab="gemma", template="google-gemma-2-2b-it.jinja",
      ctx=131072, rope_base=1000000.0, rms_eps=1e-6, tied=True, explicit_head_dim=True, seed=3327, sliding_window=1024,
      rope_linear=8.0),
]}


def tiny_of(p: Preset) -> Preset:
    """The -tiny variant: few layers and a narrow residual, but the same head_dim, GQA ratio, vocabulary,
    tied-ness and every architectural feature (biases, norms, softcaps, rope scaling, sliding window)."""
    ratio = p.n_head // p.n_head_kv
    # the fewest kv heads (1 or 2; 8 for Phi-3's 96-wide heads) for which the width is a multiple of 256,
    # the K-quant block, so llama-quantize's Q4_K_M really uses K-quants; 1 kv head where that passes
    # 1024 wide (the embedding of a 150k vocabulary would make the "tiny" file large)
    n_kv = 1
    for k in (1, 2, 8):
        if ratio * k * p.head_dim % 256 == 0:
            n_kv = k if ratio * k * p.head_dim <= 1024 else 1
            break
    if ratio == 1 and n_kv == 1:
        n_kv = 2                      # several heads, so head indexing is exercised
    n_head = ratio * n_kv
    if p.arch in ("gemma2", "gemma3"):
        # Gemma's residual width differs from n_head*head_dim; keep that, and keep n_embd/n_head where it is
        # the attention scale's source (27B: 168, Gemma 2 27B: 144)
        n_embd = n_head * (p.n_embd // p.n_head) if p.name in ("gemma3-27b", "gemma2-27b") else 256
    else:
        n_embd = n_head * p.head_dim
    # Gemma 3's pattern is 5 sliding layers then 1 global: 6 layers keep one global layer. Gemma 2
    # alternates, 4 layers keep two of each.
    n_layer = {"gemma3": 6, "gemma2": 4}.get(p.arch, 2)
    # Gemma: a short window, so that a 128-token test context crosses it. Mistral and Phi-3 keep theirs:
    # llama.cpp ignores Mistral's (llama arch) and disables Phi-3's, so a short one would only make an
    # engine that honours it disagree with the reference on short tests
    sw = min(p.sliding_window, 32) if p.arch in ("gemma2", "gemma3") else p.sliding_window
    return replace(p, name=p.name + "-tiny", title=p.title + " (tiny)", n_layer=n_layer, n_embd=n_embd,
                   n_ff=-(-3 * n_embd // 256) * 256, n_head=n_head, n_head_kv=n_kv,
                   sliding_window=sw, seed=p.seed + 1, tiny=True)


for _p in list(PRESETS.values()):
    PRESETS[_p.name + "-tiny"] = tiny_of(_p)


# --------------------------------------------------------------------------------------------- vocabulary

# llama.cpp's ggml-vocab-qwen2.gguf (Qwen 1.5's tokenizer) ends its real tokens at <|im_end|> (151645)
# and holds "[PADn]" from 151646 on. Qwen 2.5 added these tokens there (tokenizer.json "added_tokens";
# special ones become CONTROL, the others USER_DEFINED as the converter types them), Qwen 3 four more.
# The chat templates use some of them (<tool_call>, <think>), so they are put in.
CONTROL, USER = int(gguf.TokenType.CONTROL), int(gguf.TokenType.USER_DEFINED)
QWEN25_ADDED = [(151646, "<|object_ref_start|>", CONTROL), (151647, "<|object_ref_end|>", CONTROL),
                (151648, "<|box_start|>", CONTROL), (151649, "<|box_end|>", CONTROL),
                (151650, "<|quad_start|>", CONTROL), (151651, "<|quad_end|>", CONTROL),
                (151652, "<|vision_start|>", CONTROL), (151653, "<|vision_end|>", CONTROL),
                (151654, "<|vision_pad|>", CONTROL), (151655, "<|image_pad|>", CONTROL),
                (151656, "<|video_pad|>", CONTROL), (151657, "<tool_call>", USER), (151658, "</tool_call>", USER),
                (151659, "<|fim_prefix|>", USER), (151660, "<|fim_middle|>", USER),
                (151661, "<|fim_suffix|>", USER), (151662, "<|fim_pad|>", USER),
                (151663, "<|repo_name|>", USER), (151664, "<|file_sep|>", USER)]
QWEN3_ADDED = QWEN25_ADDED + [(151665, "<tool_response>", USER), (151666, "</tool_response>", USER),
                              (151667, "<think>", USER), (151668, "</think>", USER)]


def vocab_path(p: Preset) -> str:
    if p.vocab == "gemma":
        return GEMMA_VOCAB
    return os.path.join(VOCAB_DIR, f"ggml-vocab-{p.vocab}.gguf")


# GGUF value types -> struct format (gguf.GGUFReader builds a numpy view per array item, over a minute
# for a 262144-token vocabulary; the tokenizer keys need only this small parser)
_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_NP = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1", 10: "<u8", 11: "<i8",
       12: "<f8"}


def read_gguf_kv(path):
    """{key: [value, vtype, sub_type]} of a GGUF file's metadata, strings as raw bytes, in file order."""
    with open(path, "rb") as f:
        head = f.read(24)
        if head[:4] != b"GGUF":
            sys.exit(f"make_synthetic_gguf: {path} is not a GGUF file")
        _, n_t, n_kv = struct.unpack("<IQQ", head[4:])
        buf = f.read(64 << 20)          # the metadata of every vocab file fits well inside 64 MiB
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, buf, pos)[0]
        pos += struct.calcsize(fmt)
        return v

    def string():
        nonlocal pos
        n = take("<Q")
        v = bytes(buf[pos:pos + n])
        pos += n
        return v

    out = {}
    for _ in range(n_kv):
        key = string().decode("utf-8")
        vt = take("<I")
        if vt == 8:
            out[key] = [string(), gguf.GGUFValueType(vt), None]
        elif vt == 9:
            st, n = take("<I"), take("<Q")
            if st == 8:
                vals = [string() for _ in range(n)]
            else:
                a = np.frombuffer(buf, dtype=_NP[st], count=n, offset=pos)
                pos += a.nbytes
                vals = a.astype(bool).tolist() if st == 7 else a.tolist()
            out[key] = [vals, gguf.GGUFValueType(vt), gguf.GGUFValueType(st)]
        else:
            out[key] = [take(_FMT[vt]), gguf.GGUFValueType(vt), None]
    return out


def load_tokenizer(p: Preset):
    """Every tokenizer.* key of the family's vocab file, in file order, padded to p.n_vocab tokens."""
    path = vocab_path(p)
    if not os.path.isfile(path):
        sys.exit(f"make_synthetic_gguf: {path} is missing (run scripts/fetch_vocabs.sh"
                 f"{' and scripts/fetch_gemma.sh' if p.vocab == 'gemma' else ''})")
    kv = {k: v for k, v in read_gguf_kv(path).items() if k.startswith("tokenizer.")}
    toks = kv["tokenizer.ggml.tokens"][0]
    if len(toks) > p.n_vocab:
        sys.exit(f"make_synthetic_gguf: {path} has {len(toks)} tokens, more than {p.name}'s {p.n_vocab}")
    types = kv["tokenizer.ggml.token_type"][0]
    if p.added:
        for i, text, ty in QWEN3_ADDED if p.added == "qwen3" else QWEN25_ADDED:
            assert toks[i] == f"[PAD{i}]".encode(), (path, i, toks[i])
            toks[i], types[i] = text.encode(), ty
    n_pad = p.n_vocab - len(toks)
    if n_pad:
        # as convert_hf_to_gguf.py pads a vocabulary shorter than the embedding: "[PAD<id>]", score -1000
        # for SentencePiece vocabularies, typed as the file's own pads are (older converters wrote
        # USER_DEFINED, today's UNUSED)
        first = len(toks)
        pad_type = types[-1] if toks[-1].startswith(b"[PAD") else int(gguf.TokenType.UNUSED)
        toks.extend(f"[PAD{i}]".encode() for i in range(first, p.n_vocab))
        types.extend([pad_type] * n_pad)
        if "tokenizer.ggml.scores" in kv:
            kv["tokenizer.ggml.scores"][0].extend([-1000.0] * n_pad)
    if p.eos is not None:
        kv["tokenizer.ggml.eos_token_id"] = [p.eos, gguf.GGUFValueType.UINT32, None]
    if p.add_bos is not None:
        kv["tokenizer.ggml.add_bos_token"] = [p.add_bos, gguf.GGUFValueType.BOOL, None]
    if p.template == "vocab":
        if "tokenizer.chat_template" not in kv:
            sys.exit(f"make_synthetic_gguf: {path} has no chat template")
    else:
        if p.template == "mistral-v0.1":
            tmpl = MISTRAL_V01_TEMPLATE
        else:
            tp = os.path.join(TEMPLATE_DIR, p.template)
            if not os.path.isfile(tp):
                sys.exit(f"make_synthetic_gguf: {tp} is missing (run scripts/fetch_vocabs.sh)")
            with open(tp, "rb") as f:
                tmpl = f.read().decode("utf-8")
        kv["tokenizer.chat_template"] = [tmpl.encode("utf-8"), gguf.GGUFValueType.STRING, None]
    return kv, n_pad


# --------------------------------------------------------------------------------------------- tensors

@dataclass
class T:
    name: str
    shape: tuple          # numpy order (rows, cols): GGUF ne = reversed
    kind: str             # "mat" (random, sigma), "norm" (centre +-10%), "bias" (sigma), "const" (values)
    sigma: float = 0.0
    centre: float = 1.0
    values: np.ndarray | None = None


# The scale of the logits: with logits ~ N(0, s^2) over V tokens the softmax entropy is about
# ln V - s^2/2 while s^2 < 2 ln V; s = sqrt(2 (ln V - 4)) aims at ~4 nats (3.6 for 32000 tokens,
# 3.9 for 128256, 4.1 for 262144).
def logit_scale(n_vocab):
    return math.sqrt(2.0 * (math.log(n_vocab) - 4.0))


def scales(p: Preset):
    """Standard deviations that keep activations O(1). Every sub-layer reads an RMS-normalised input
    (rms ~1); a matrix n_in -> n_out with sigma = g/sqrt(n_in) gives outputs of rms ~g. Attention
    logits q.k/sqrt(d) get std A (mildly peaked attention); every sub-layer output adds rms ~1 to the
    residual. The token embedding's own contribution must stay small next to the layers' sum, or a
    tied output matrix would just predict the input token back (its self-logit is about s^2/sqrt(R),
    R the residual's variance from the layers)."""
    n, d = p.n_embd, p.head_dim
    s = logit_scale(p.n_vocab)
    if p.final_softcap:
        # Gemma 2 caps logits at c*tanh(x/c), c = 30, which flattens the top of the distribution: at
        # s = 4.1 the entropy over 262144 tokens is ~7.1 nats (sampled: 262144 N(0, s^2) logits), at
        # s = 0.2c = 6 it is ~5.4, near the least the cap allows (5.4-5.9 for s = 6..8)
        s = 0.2 * p.final_softcap
    A = 2.0
    sc = {}
    # q.k/sqrt(d) std = sigma_q*sigma_k*n (rms-1 input, independent weights): sigma_q = sigma_k = sqrt(A/n)
    sc["wq"] = sc["wk"] = math.sqrt(A / n)
    if p.arch in ("qwen3", "gemma3"):       # q/k are RMS-normalised per head: scale irrelevant
        sc["wq"] = sc["wk"] = 1.0 / math.sqrt(n)
    sc["wv"] = 1.0 / math.sqrt(n)
    # attention averages values over many positions (variance shrinks), hence the factor 2 on wo
    sc["wo"] = 2.0 / math.sqrt(p.n_head * d)
    sc["gate"] = sc["up"] = 1.0 / math.sqrt(n)
    # silu(g)*u with g,u ~ N(0,1) has rms ~0.6; gelu similar: factor 1.6 brings the output to rms ~1
    sc["down"] = 1.6 / math.sqrt(p.n_ff)
    if p.arch in ("gemma2", "gemma3"):
        # Gemma multiplies the embedding by sqrt(n_embd) and ties the output: input rms c = 0.5, and the
        # final norm's weight (s/c) carries the logit scale (the post-norms give each sub-layer rms ~1)
        c = 0.5
        sc["embd"] = c / math.sqrt(n)
        sc["out_norm"] = s / c
    elif p.tied:
        sc["embd"] = s / math.sqrt(n)         # input rms s/sqrt(n): small next to the layers' sum
        sc["out_norm"] = 1.0
    else:
        sc["embd"] = 1.0
        sc["out"] = s / math.sqrt(n)
        sc["out_norm"] = 1.0
    sc["bias"] = 0.05
    return sc


def llama3_rope_freqs(base, dim, factor, low_freq_factor, high_freq_factor, old_ctx):
    """rope_freqs.weight as convert_hf_to_gguf.py (LlamaModel.generate_extra_tensors) computes it from
    Llama 3's rope_scaling. The converter works on float32 torch tensors, and a Python float combined with
    a float32 tensor stays float32, so every step here is float32 too; only pow() may round differently
    from torch's by an ulp, which moves a factor of the smooth band by about an ulp."""
    f32 = np.float32
    freqs = f32(1.0) / (f32(base) ** (np.arange(0, dim, 2, dtype=f32) / f32(dim)))
    low_wl, high_wl = old_ctx / low_freq_factor, old_ctx / high_freq_factor
    out = []
    for f in freqs.astype(f32):
        wl = f32(2 * math.pi) / f
        if wl < f32(high_wl):
            out.append(1.0)
        elif wl > f32(low_wl):
            out.append(factor)
        else:
            smooth = (f32(old_ctx) / wl - f32(low_freq_factor)) / f32(high_freq_factor - low_freq_factor)
            out.append(f32(1) / ((f32(1) - smooth) / f32(factor) + smooth))
    return np.array(out, dtype=f32)


def longrope_factors(n):
    """Synthetic Phi-3 longrope factors (the published lists are not at hand): short ~1.0-1.3, long rising
    smoothly from 1 to ~40 over the frequency bands, the shape of the real lists."""
    i = np.arange(n, dtype=np.float64) / (n - 1)
    short = 1.0 + 0.3 * i ** 2
    long = 1.0 + 39.0 / (1.0 + np.exp(-12.0 * (i - 0.6)))
    return long.astype(np.float32), short.astype(np.float32)


def tensor_list(p: Preset):
    sc = scales(p)
    n, d, ff = p.n_embd, p.head_dim, p.n_ff
    nq, nkv = p.n_head * d, p.n_head_kv * d
    ts = [T("token_embd.weight", (p.n_vocab, n), "mat", sc["embd"])]
    if p.llama3_rope:
        f, lo, hi, oc = p.llama3_rope
        ts.append(T("rope_freqs.weight", (d // 2,), "const",
                    values=llama3_rope_freqs(p.rope_base, d, f, lo, hi, oc)))
    if p.longrope:
        lf, sf = longrope_factors(d // 2)
        ts.append(T("rope_factors_long.weight", (d // 2,), "const", values=lf))
        ts.append(T("rope_factors_short.weight", (d // 2,), "const", values=sf))
    ts.append(T("output_norm.weight", (n,), "norm", centre=sc["out_norm"]))
    if not p.tied:
        ts.append(T("output.weight", (p.n_vocab, n), "mat", sc["out"]))
    for i in range(p.n_layer):
        b = f"blk.{i}."
        ts.append(T(b + "attn_norm.weight", (n,), "norm"))
        if p.arch == "phi3":
            # one fused projection: rows q | k | v
            ts.append(T(b + "attn_qkv.weight", (nq + 2 * nkv, n), "mat", sc["wv"]))
        else:
            ts.append(T(b + "attn_q.weight", (nq, n), "mat", sc["wq"]))
            ts.append(T(b + "attn_k.weight", (nkv, n), "mat", sc["wk"]))
            ts.append(T(b + "attn_v.weight", (nkv, n), "mat", sc["wv"]))
        if p.arch == "qwen2" or p.biases:
            ts.append(T(b + "attn_q.bias", (nq,), "bias", sc["bias"]))
            ts.append(T(b + "attn_k.bias", (nkv,), "bias", sc["bias"]))
            ts.append(T(b + "attn_v.bias", (nkv,), "bias", sc["bias"]))
        if p.arch in ("qwen3", "gemma3"):
            ts.append(T(b + "attn_q_norm.weight", (d,), "norm"))
            ts.append(T(b + "attn_k_norm.weight", (d,), "norm"))
        ts.append(T(b + "attn_output.weight", (n, nq), "mat", sc["wo"]))
        if p.biases:
            ts.append(T(b + "attn_output.bias", (n,), "bias", sc["bias"]))
        if p.arch in ("gemma2", "gemma3"):
            ts.append(T(b + "post_attention_norm.weight", (n,), "norm"))
        ts.append(T(b + "ffn_norm.weight", (n,), "norm"))
        if p.arch == "phi3":
            # gate | up stacked in one matrix of 2*n_ff rows, as the converter keeps gate_up_proj
            ts.append(T(b + "ffn_up.weight", (2 * ff, n), "mat", sc["up"]))
        else:
            ts.append(T(b + "ffn_gate.weight", (ff, n), "mat", sc["gate"]))
            ts.append(T(b + "ffn_up.weight", (ff, n), "mat", sc["up"]))
        ts.append(T(b + "ffn_down.weight", (n, ff), "mat", sc["down"]))
        if p.arch in ("gemma2", "gemma3"):
            ts.append(T(b + "post_ffw_norm.weight", (n,), "norm"))
    return ts


# --------------------------------------------------------------------------------------------- writing

TYPES = {"f32": (QT.F32, np.float32, 0), "f16": (QT.F16, np.float16, 1), "q8_0": (QT.Q8_0, np.uint8, 7)}
CHUNK = 1 << 24   # values generated per step: 16 M floats = 64 MB of float32


def stored_shape_nbytes(t: T, qtype):
    """(shape passed to add_tensor_info, its dtype, nbytes) for tensor t stored as qtype."""
    if t.kind != "mat" or qtype == QT.F32:
        return t.shape, np.float32, int(np.prod(t.shape)) * 4
    if qtype == QT.F16:
        return t.shape, np.float16, int(np.prod(t.shape)) * 2
    blk, tsz = gguf.GGML_QUANT_SIZES[qtype]
    rows, cols = t.shape
    return (rows, cols // blk * tsz), np.uint8, rows * (cols // blk) * tsz


def rng_for(seed, name):
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, zlib.crc32(name.encode())])))


def chunks(t: T, seed, qtype):
    """The tensor's stored bytes, as a sequence of arrays (row chunks for matrices)."""
    rng = rng_for(seed, t.name)
    if t.kind == "const":
        yield t.values.astype(np.float32)
        return
    if t.kind == "norm":
        yield (t.centre * (1.0 + rng.uniform(-0.1, 0.1, t.shape))).astype(np.float32)
        return
    if t.kind == "bias":
        yield (t.sigma * rng.standard_normal(t.shape, dtype=np.float32)).astype(np.float32)
        return
    rows, cols = t.shape
    step = max(1, CHUNK // cols)
    for r0 in range(0, rows, step):
        m = rng.standard_normal((min(step, rows - r0), cols), dtype=np.float32)
        m *= np.float32(t.sigma)
        if qtype == QT.F32:
            yield m
        elif qtype == QT.F16:
            yield m.astype(np.float16)
        else:
            yield gguf.quants.quantize(m, qtype)


def write_metadata(w: gguf.GGUFWriter, p: Preset, tok_kv, qtype_id):
    a = p.arch
    w.add_type("model")
    w.add_name(f"{p.title} synthetic (random weights)")
    w.add_description("Random weights in the exact configuration of " + p.title +
                      "; made by VeloxQuant scripts/make_synthetic_gguf.py")
    w.add_context_length(p.ctx)
    w.add_embedding_length(p.n_embd)
    w.add_block_count(p.n_layer)
    w.add_feed_forward_length(p.n_ff)
    w.add_head_count(p.n_head)
    w.add_head_count_kv(p.n_head_kv)
    w.add_layer_norm_rms_eps(p.rms_eps)
    if p.explicit_head_dim or p.head_dim != p.n_embd // p.n_head:
        # the converter writes key/value_length where config.json gives head_dim explicitly
        w.add_key_length(p.head_dim)
        w.add_value_length(p.head_dim)
    if a == "gemma2":
        w.add_attn_logit_softcapping(p.attn_softcap)
        w.add_final_logit_softcapping(p.final_softcap)
        w.add_sliding_window(p.sliding_window)
    else:
        w.add_rope_freq_base(p.rope_base)
    if a == "gemma3":
        w.add_sliding_window(p.sliding_window)
    if a == "llama":
        w.add_vocab_size(p.n_vocab)
        w.add_rope_dimension_count(p.head_dim)
        if p.sliding_window:
            # convert_hf_to_gguf.py drops Mistral's sliding_window (and llama.cpp's llama arch ignores
            # it); written here under the standard key so an engine can honour it
            w.add_sliding_window(p.sliding_window)
    if a == "phi3":
        w.add_rope_dimension_count(p.head_dim)
        w.add_rope_scaling_orig_ctx_len(p.longrope or p.ctx)
        w.add_sliding_window(p.sliding_window)
        if p.longrope:
            scale = p.ctx / p.longrope
            w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(p.longrope)))
    if p.rope_linear:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(p.rope_linear)
    if p.rope_yarn:
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(p.rope_yarn[0])
        w.add_rope_scaling_orig_ctx_len(p.rope_yarn[1])
    w.add_file_type(qtype_id)
    if qtype_id == 7:
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for k, (val, vt, st) in tok_kv.items():
        w.add_key_value(k, val, vt, sub_type=st)


def generate(p: Preset, out: str, seed: int, qtype_name: str):
    qtype, _, qtype_id = TYPES[qtype_name]
    tok_kv, n_pad = load_tokenizer(p)
    ts = tensor_list(p)
    if qtype == QT.Q8_0:
        for t in ts:
            if t.kind == "mat" and t.shape[1] % 32:
                sys.exit(f"make_synthetic_gguf: {t.name} has {t.shape[1]} columns, not a multiple of 32 (q8_0)")
    tmp = out + ".tmp"
    w = gguf.GGUFWriter(tmp, p.arch)
    write_metadata(w, p, tok_kv, qtype_id)
    for t in ts:
        shape, dt, nb = stored_shape_nbytes(t, qtype)
        w.add_tensor_info(t.name, shape, np.dtype(dt), nb, raw_dtype=qtype if dt == np.uint8 else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    fout = w.fout[0]
    for t in ts:
        # what GGUFWriter.write_tensor_data does, but fed in row chunks so a 2 GB matrix never sits in RAM
        ti = w.tensors[0].pop(t.name)
        w.write_padding(fout, fout.tell())
        written = 0
        for c in chunks(t, seed, qtype):
            c.tofile(fout)
            written += c.nbytes
        assert written == ti.nbytes, (t.name, written, ti.nbytes)
        w.write_padding(fout, written)
    w.close()
    os.replace(tmp, out)
    return ts, n_pad


def main():
    ap = argparse.ArgumentParser(description="Write a GGUF with seeded random weights in a real model's "
                                 "configuration (see the module docstring and docs/synthetic-models.md).")
    ap.add_argument("preset", nargs="?", help="preset name (--list shows them)")
    ap.add_argument("-o", "--output", help="output file (default: <preset>-<TYPE>.gguf)")
    ap.add_argument("--seed", type=int, help="random seed (default: the preset's own)")
    ap.add_argument("--layers", type=int, help="number of layers (default: the preset's)")
    ap.add_argument("--type", choices=sorted(TYPES), default="f16", help="matrix type (norms are F32)")
    ap.add_argument("--rope-scaling", help="llama only: linear:F or yarn:F,orig=N")
    ap.add_argument("--biases", action="store_true", help="llama only: q/k/v/o biases")
    ap.add_argument("--attn-softcap", type=float, help="gemma2 only: attn_logit_softcapping (default: the "
                    "preset's 50; a small cap makes the random model's attention scores reach it)")
    ap.add_argument("--longrope", type=int, metavar="ORIG", help="phi3 only: longrope factors with original "
                    "context ORIG (the 128k presets: 4096); an engine turns by the long factors past ORIG tokens")
    ap.add_argument("--list", action="store_true", help="list the presets and exit")
    a = ap.parse_args()
    if a.list or not a.preset:
        for p in PRESETS.values():
            print(f"{p.name:22s} {p.arch:7s} L={p.n_layer:<3d} n_embd={p.n_embd:<5d} ff={p.n_ff:<6d} "
                  f"heads={p.n_head}/{p.n_head_kv} hd={p.head_dim} vocab={p.n_vocab}  {p.title}")
        if not a.list:
            print("make_synthetic_gguf: name a preset (above)", file=sys.stderr)
        return 0 if a.list else 2
    if a.preset not in PRESETS:
        sys.exit(f"make_synthetic_gguf: unknown preset {a.preset!r} (--list shows them)")
    p = PRESETS[a.preset]
    if a.layers is not None:
        if a.layers < 1:
            sys.exit("make_synthetic_gguf: --layers must be >= 1")
        p = replace(p, n_layer=a.layers)
    if a.rope_scaling or a.biases:
        if p.arch != "llama":
            sys.exit("make_synthetic_gguf: --rope-scaling and --biases apply to llama presets only")
        if a.biases:
            p = replace(p, biases=True)
        if a.rope_scaling:
            kind, _, arg = a.rope_scaling.partition(":")
            try:
                if kind == "linear":
                    p = replace(p, llama3_rope=None, rope_linear=float(arg))
                elif kind == "yarn":
                    f, _, orig = arg.partition(",orig=")
                    p = replace(p, llama3_rope=None, rope_yarn=(float(f), int(orig)))
                else:
                    raise ValueError(kind)
            except ValueError:
                sys.exit(f"make_synthetic_gguf: bad --rope-scaling {a.rope_scaling!r} "
                         "(linear:F or yarn:F,orig=N)")
    if a.attn_softcap is not None:
        if p.arch != "gemma2" or not a.attn_softcap > 0:
            sys.exit("make_synthetic_gguf: --attn-softcap applies to gemma2 presets only, with a value > 0")
        p = replace(p, attn_softcap=a.attn_softcap)
    if a.longrope is not None:
        if p.arch != "phi3" or not 1 <= a.longrope < p.ctx:
            sys.exit(f"make_synthetic_gguf: --longrope applies to phi3 presets only, with 1 <= ORIG < the "
                     f"context length ({p.ctx})")
        p = replace(p, longrope=a.longrope)
    seed = p.seed if a.seed is None else a.seed
    out = a.output or f"{p.name}-{a.type.upper()}.gguf"
    print(f"make_synthetic_gguf: {p.name} seed={seed} type={a.type} -> {out}")
    t0 = time.time()
    try:
        ts, n_pad = generate(p, out, seed, a.type)
    except OSError as e:
        sys.exit(f"make_synthetic_gguf: cannot write {out}: {e.strerror or e}")
    dt = time.time() - t0
    n_params = sum(int(np.prod(t.shape)) for t in ts)
    size = os.path.getsize(out)
    pad = f", {n_pad} [PAD] tokens" if n_pad else ""
    print(f"make_synthetic_gguf: {p.arch} {p.title}: {p.n_layer} layers, n_embd {p.n_embd}, heads "
          f"{p.n_head}/{p.n_head_kv}x{p.head_dim}, vocab {p.n_vocab}{pad}, {n_params / 1e6:.1f} M params, "
          f"{len(ts)} tensors, {size / 2**20:.1f} MiB in {dt:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
