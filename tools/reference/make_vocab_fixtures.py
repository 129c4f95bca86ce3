#!/usr/bin/env python3
r"""Writes tests/fixtures/vocab_<name>_tokens.tsv: llama.cpp's own token ids for the real vocabularies
of the model families we run (models/vocab/ggml-vocab-{llama-bpe,qwen2,phi-3,llama-spm}.gguf, from
scripts/fetch_vocabs.sh), and for "llama-bpe-default" (llama-bpe's vocabulary with tokenizer.ggml.pre
rewritten to "default"), for tests/model/test_tokenizer_vocab.c to compare ours against.

The reference is llama.cpp's tokenizer through llama-cpp-python's ctypes binding (llama_tokenize on a
vocab_only model): the library loaded from LLAMA_CPP_LIB_PATH, the binding module from
LLAMA_CPP_PY (default /work/llamacpp/llama_cpp_python-0.3.36). Only the module llama_cpp.llama_cpp is
imported (the package's __init__ pulls in numpy and diskcache, which this does not need).

Lines of the output (tab-separated):
  case  <mode>  <escaped text>  <ids separated by spaces>
      mode "plain": parse_special off; "special": parse_special on. add_special (BOS) off: the BOS
      is prepended by a separate, trivial path in both tokenizers.
      Texts are bytes: backslash, tab, LF, CR escape as \\ \t \n \r; other control bytes, DEL and every
      byte that is not part of a valid UTF-8 sequence as \xHH; the rest is raw UTF-8.
  file  <path under ../shared>  <token count>  <FNV-1a 64 of the ids as little-endian uint32, hex>
      a whole shared data file (bytes as they are, CRLF kept) tokenized as one text, parse_special off.

Usage: LLAMA_CPP_LIB_PATH=/work/llamacpp/build/bin python3 tools/reference/make_vocab_fixtures.py
       [vocab names...]   (default: all four)
"""
import ctypes
import os
import random
import struct
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
VOCABS = ["llama-bpe", "qwen2", "phi-3", "llama-spm", "llama-bpe-default"]
SEED = 3030


def load_binding():
    pkgdir = Path(os.environ.get("LLAMA_CPP_PY", "/work/llamacpp/llama_cpp_python-0.3.36")) / "llama_cpp"
    pkg = types.ModuleType("llama_cpp")
    pkg.__path__ = [str(pkgdir)]
    sys.modules["llama_cpp"] = pkg
    import llama_cpp.llama_cpp as L
    return L


L = load_binding()
L.llama_backend_init()


def default_pre_copy(src):
    """llama-bpe's vocabulary with tokenizer.ggml.pre = "default" (llama.cpp's four-regex default, which
    no shipped vocabulary uses): the string value rewritten in place, in a temporary file. The C test
    makes the same bytes in memory."""
    import struct
    import tempfile
    data = src.read_bytes()
    k = b"tokenizer.ggml.pre"
    i = data.index(k) + len(k)
    (n,) = struct.unpack_from("<Q", data, i + 4)
    new = data[:i + 4] + struct.pack("<Q", 7) + b"default" + data[i + 12 + n:]
    f = tempfile.NamedTemporaryFile(suffix=".gguf", delete=False)
    f.write(new)
    f.close()
    return f.name


def open_vocab(name):
    p = L.llama_model_default_params()
    p.vocab_only = True
    if name == "llama-bpe-default":
        path = default_pre_copy(ROOT / "models" / "vocab" / "ggml-vocab-llama-bpe.gguf")
    else:
        path = str(ROOT / "models" / "vocab" / ("ggml-vocab-%s.gguf" % name))
    m = L.llama_model_load_from_file(path.encode(), p)
    if not m:
        raise SystemExit("cannot load vocab %s" % name)
    return m, L.llama_model_get_vocab(m)


def tokenize(vocab, data, parse_special):
    cap = len(data) + 16
    buf = (L.llama_token * cap)()
    n = L.llama_tokenize(vocab, data, len(data), buf, cap, False, parse_special)
    if n < 0:
        cap = -n
        buf = (L.llama_token * cap)()
        n = L.llama_tokenize(vocab, data, len(data), buf, cap, False, parse_special)
    assert n >= 0
    return list(buf[:n])


def utf8_len(b, i):
    """Length of the valid UTF-8 sequence at b[i], 0 when invalid (as tokenizer.c's check)."""
    try:
        for k in (1, 2, 3, 4):
            if i + k <= len(b):
                try:
                    b[i:i + k].decode("utf-8")
                    return k
                except UnicodeDecodeError:
                    pass
    except Exception:
        pass
    return 0


def escape(b):
    out, i = [], 0
    while i < len(b):
        c = b[i]
        k = utf8_len(b, i)
        if k == 0:
            out.append("\\x%02X" % c); i += 1; continue
        if k == 1:
            ch = chr(c)
            if ch == "\\": out.append("\\\\")
            elif ch == "\t": out.append("\\t")
            elif ch == "\n": out.append("\\n")
            elif ch == "\r": out.append("\\r")
            elif c < 0x20 or c == 0x7F: out.append("\\x%02X" % c)
            else: out.append(ch)
        else:
            out.append(b[i:i + k].decode("utf-8"))
        i += k
    return "".join(out)


FIXED = [
    "Hello world", "Hello, world! How are you today?", " leading space", "trailing space ",
    "   three leading spaces", "a  b   c    d", "line one\nline two\n\nline four\n", "\n\n\n", "\n",
    " ", "  ", "\t", "tabs\tbetween\t\twords\t", "mixed \t \n whitespace \r\n end", "CRLF\r\nline\r\n\r\nend\r\n",
    "\r\r\n\n \r\n", "12345", "1234567890123456789012345678901234567890", "3.14159",
    "1,000,000 and 2024-11-29 at 12:30:45", "x = 10**9 + 7; y = 0.5e-3", "٣٤٥ and ४५६ and １２３ and ½ ² Ⅻ",
    "café naïve résumé façade Ångström", "Größe Straße über", "日本語のテキストです。", "中文测试：你好，世界！",
    "한국어 문장입니다", "Привет, мир! Как дела?", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם",
    "नमस्ते दुनिया", "สวัสดีครับ ภาษาไทย", "emoji 😀🎉👍🏽 and 👨‍👩‍👧 family",
    "flags 🇫🇷🇯🇵 and symbols ©®™ ½ ² ∞ ≠ →", "🏳️‍🌈 🧑🏿‍💻 ❤️‍🔥",
    "def f(x):\n    if x > 0:\n        return x * 2\n    return -x\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "for (int i = 0; i < n; ++i) { a[i] += b[i]; }", "<div class=\"x\">&amp; &lt;tag&gt;</div>",
    "I'm sure you're right, it's what we'd've done. They'll go; I've seen it. Don't.",
    "I'M SHOUTING, IT'S LOUD, WE'LL SEE, THEY'VE GONE, SHE'D GO", "'s 'S 'll 'LL 've 'VE 'Re 'M 'D 't",
    "mixed scripts: English, Français, Deutsch, 日本語, русский, العربية",
    "URL: https://example.com/path?query=1&b=2#frag", "$100.00 (USD) — 50% off! #sale @shop",
    "«quotes» “curly” ‘single’ „low“", "non\u00a0breaking\u2009thin\u3000ideographic",
    "zero\u200bwidth\u200djoiner", "a" * 200, "ab" * 100 + " " + "-" * 50 + " " + "=" * 33,
    "!!!???...,,,;;;:::", "\u0001control\u007f bytes\u001b[0m", "    \n    \n\t\t\n",
    "Hello\n\n\n\nworld", "   ", "it'ſ long s 'ſ 'S", "▁underscore▁char", "<0x41> <unk> [UNK]",
]

SPECIAL = {
    "llama-bpe": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                  "<|eot_id|>", "<|reserved_special_token_5|>"],
    "qwen2": ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|fim_prefix|>", "<|vision_start|>"],
    "llama-bpe-default": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                          "<|eot_id|>", "<|reserved_special_token_5|>"],
    "phi-3": ["<|user|>", "<|assistant|>", "<|end|>", "<|system|>", "<s>", "</s>", "<|endoftext|>"],
    "llama-spm": ["<s>", "</s>", "<unk>"],
}


def special_cases(name):
    sp = SPECIAL[name]
    a, b = sp[0], sp[1 % len(sp)]
    c = sp[2 % len(sp)]
    return [
        a + "user\nWhat is 2+2?" + b + "\n" + a + "assistant\n",
        "text" + c + "more text", a + b + a, " " + a + " x", "1" + b + "2", a + "\n\n  ", "text " + c + " ",
        "almost special: " + a[:-1] + " and " + b[1:], "hello" + b, b + "hello", b + " hello", b + "\nhello",
        " ".join(sp), "".join(sp), "\n".join(sp) + "\n",
    ]


INVALID = [b"\x80", b"a\xbfb", b"\xc3", b"ab\xe6\x97", b"\xf0\x9f\x98", b"\xc0\xaf", b"\xe0\x80\xaf",
           b"\xed\xa0\x80", b"\xff\xfe", b"x\xf5\x80\x80\x80y", b" \xc3 \xa9 ", b"12\xff34", b"don\xe2\x80't",
           b"\xf4\x90\x80\x80", b"caf\xe9 ol\xe9", b"\xe6\x97\xa5\xe6\x9c"]


# llama.cpp aborts (std::invalid_argument "invalid codepoint", unicode.cpp) on a 4-byte sequence past
# U+10FFFF in a byte-level BPE vocabulary: these get no reference there (our test still runs them for
# no-crash and round trip elsewhere).
LLAMACPP_ABORTS_BPE = {b"x\xf5\x80\x80\x80y", b"\xf4\x90\x80\x80"}


def random_strings(rng, n):
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", "    \t\n\r",
        ".,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`", "éèêëàâîïôöùûüçñßåæø", "日本語中文字한국어", "αβγδεζηθ",
        "абвгдежз", "😀😁😂🤣😃🎉👍🏽", "กขคงจฉ", "अआइईउ", "ابتثجح", "'s'S'll'LL've",
    ]
    return ["".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(1, 80))).encode() for _ in range(n)]


def random_chat(rng, name, n):
    parts = "Hello world 42 \n  \t, café 日本 😀 don't \r\n".split(" ")
    sp = SPECIAL[name] + ["<|", "|>", "<s", "</"]
    out = []
    for _ in range(n):
        k = rng.randint(2, 12)
        out.append("".join(rng.choice(sp) if rng.random() < 0.3 else rng.choice(parts) + rng.choice(["", " ", "\n"])
                           for _ in range(k)).encode())
    return out


def random_bytes(rng, n):
    return [bytes(rng.choice([rng.randrange(256), *b"a \n1\x80\xc3\xe2\xf0"]) for _ in range(rng.randint(1, 60)))
            for _ in range(n)]


def fnv64(ids):
    h = 0xCBF29CE484222325
    for b in struct.pack("<%dI" % len(ids), *ids):
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    names = sys.argv[1:] or VOCABS
    for name in names:
        m, vocab = open_vocab(name)
        rng = random.Random(SEED)
        texts = ([s.encode() for s in FIXED] + [s.encode() for s in special_cases(name)] + INVALID +
                 random_strings(rng, 60) + random_chat(rng, name, 30) + random_bytes(rng, 30))
        lines = [
            "# llama.cpp token ids (llama-cpp-python 0.3.36's vendored llama.cpp, llama_tokenize, vocab_only,",
            "# add_special off) for models/vocab/ggml-vocab-%s.gguf. Written by" % name,
            "# tools/reference/make_vocab_fixtures.py (format described there); random cases: Python random, seed %d."
            % SEED,
        ]
        seen = set()
        for text in texts:
            if text in seen or (name in ("llama-bpe", "qwen2", "llama-bpe-default") and text in LLAMACPP_ABORTS_BPE):
                continue
            seen.add(text)
            for mode in ("plain", "special"):
                ids = tokenize(vocab, text, mode == "special")
                lines.append("case\t%s\t%s\t%s" % (mode, escape(text), " ".join(map(str, ids))))
        p = SHARED / "data" / "wikitext-2-raw-test.txt"
        if p.exists():
            ids = tokenize(vocab, p.read_bytes(), False)
            lines.append("file\tdata/wikitext-2-raw-test.txt\t%d\t%016x" % (len(ids), fnv64(ids)))
        else:
            print("skipping absent", p, file=sys.stderr)
        out = ROOT / "tests" / "fixtures" / ("vocab_%s_tokens.tsv" % name)
        out.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print("%s: %d cases -> %s" % (name, len(lines) - 4, out))
        L.llama_model_free(m)


if __name__ == "__main__":
    main()
