#!/usr/bin/env python3
r"""Writes tests/fixtures/smollm2_tokens.tsv: SmolLM2 token ids from an independent tokenizer
(HuggingFace `tokenizers`, the Rust library) for the C tokenizer test to compare against.

The reference is built from the GGUF's own vocabulary and merges (read with the `gguf` package):
a byte-level BPE model, the pre-tokenizer SmolLM2's tokenizer.json uses (Digits with
individual_digits, then ByteLevel with the GPT-2 regex, no prefix space), and every token the
GGUF marks CONTROL (type 3) added as a special token. `transformers` can load a GGUF tokenizer
too, but it needs torch, and its GGUF path has no "smollm" pre-tokenizer (it would skip the
digit split), so it is not used.

Lines of the output (tab-separated):
  case  <mode>  <escaped text>  <ids separated by spaces>
      mode "plain": parse_special off (special-token text is ordinary text);
      mode "special": parse_special on. Never BOS (add_bos_token is false for SmolLM2).
      The text escapes backslash, tab, LF, CR as \\ \t \n \r and other control bytes as \xHH;
      everything else is raw UTF-8.
  file  <path under ../shared>  <token count>  <FNV-1a 64 of the ids as little-endian uint32, hex>
      a whole shared data file tokenized as one text, parse_special off.

Usage: python3 tools/reference/make_token_fixtures.py [model.gguf] [out.tsv]
"""
import random
import struct
import sys
from pathlib import Path

import gguf
import tokenizers
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = ROOT / "tests" / "fixtures" / "smollm2_tokens.tsv"
SHARED = ROOT.parent / "shared"


def field(reader, key):
    f = reader.fields[key]
    return f.contents()


def build(path):
    r = gguf.GGUFReader(str(path))
    model, pre = field(r, "tokenizer.ggml.model"), field(r, "tokenizer.ggml.pre")
    if model != "gpt2" or pre != "smollm":
        raise SystemExit(f"expected tokenizer gpt2 / pre smollm, got {model} / {pre}")
    toks = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in field(r, "tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(toks)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(toks[i], special=True, normalized=False)
                            for i in range(len(toks)) if types[i] == 3])
    return tok


def encode(tok, text, parse_special):
    tok.encode_special_tokens = not parse_special
    ids = tok.encode(text, add_special_tokens=False).ids
    tok.encode_special_tokens = False
    return ids


def escape(s):
    out = []
    for ch in s:
        if ch == "\\": out.append("\\\\")
        elif ch == "\t": out.append("\\t")
        elif ch == "\n": out.append("\\n")
        elif ch == "\r": out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F: out.append("\\x%02X" % ord(ch))
        else: out.append(ch)
    return "".join(out)


FIXED = [
    "Hello world",
    "Hello, world! How are you today?",
    " leading space",
    "trailing space ",
    "   three leading spaces",
    "a  b   c    d",
    "line one\nline two\n\nline four\n",
    "\n\n\n",
    "tabs\tbetween\t\twords\t",
    "mixed \t \n whitespace \r\n end",
    "12345",
    "3.14159",
    "1,000,000 and 2024-11-29 at 12:30:45",
    "x = 10**9 + 7; y = 0.5e-3",
    "café naïve résumé façade Ångström",
    "Größe Straße über",
    "日本語のテキストです。",
    "中文测试：你好，世界！",
    "한국어 문장입니다",
    "Привет, мир! Как дела?",
    "Γειά σου Κόσμε",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "emoji 😀🎉👍🏽 and 👨‍👩‍👧 family",
    "flags 🇫🇷🇯🇵 and symbols ©®™ ½ ² ∞ ≠ →",
    "def f(x):\n    if x > 0:\n        return x * 2\n    return -x\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "for (int i = 0; i < n; ++i) { a[i] += b[i]; }",
    "<div class=\"x\">&amp; &lt;tag&gt;</div>",
    "I'm sure you're right, it's what we'd've done. They'll go; I've seen it. Don't.",
    "I'M SHOUTING, IT'S LOUD",
    "mixed scripts: English, Français, Deutsch, 日本語, русский, العربية",
    "URL: https://example.com/path?query=1&b=2#frag",
    "email: someone@example.org",
    "$100.00 (USD) — 50% off! #sale @shop",
    "«quotes» “curly” ‘single’ „low“",
    "non\u00a0breaking\u2009thin\u3000ideographic",
    "zero\u200bwidth\u200djoiner",
    "a" * 200,
    "ab" * 100 + " " + "-" * 50 + " " + "=" * 33,
    "!!!???...,,,;;;:::",
    "\u0001control\u007f bytes\u001b[0m",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n",
    "text<|endoftext|>more text",
    "<|im_start|><|im_end|><|im_start|>",
    "almost special: <|im_start| and <|im_end and <im_start|>",
    "<repo_name>veloxquant<file_sep>src/main.c<filename>x",
    "bytes without a token: a\x04b \x06\x06 \U00050000x",
    " <|im_start|> x",
    "1<|im_end|>2",
    "<|im_start|>\n\n  ",
    "text <|endoftext|> ",
    "<|im_start|>assistant\nSure! 3.14<|im_end|>",
]


def random_strings(seed, n):
    rng = random.Random(seed)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789", "    \t\n", ".,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`",
        "éèêëàâîïôöùûüçñßåæø", "日本語中文字한국어", "αβγδεζηθ", "абвгдежз",
        "😀😁😂🤣😃🎉👍🏽",
    ]
    out = []
    for _ in range(n):
        k = rng.randint(1, 60)
        out.append("".join(rng.choice(rng.choice(pools)) for _ in range(k)))
    return out


def random_chat(seed, n):
    """Random text with special-token text spliced in at random places."""
    rng = random.Random(seed)
    specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<jupyter_code>", "<|im_start", "|>"]
    parts = "Hello world 42 \n  \t, café 日本 😀 don't".split(" ")
    out = []
    for _ in range(n):
        k = rng.randint(2, 12)
        out.append("".join(rng.choice(specials) if rng.random() < 0.3 else
                           rng.choice(parts) + rng.choice(["", " ", "\n"]) for _ in range(k)))
    return out


def fnv64(ids):
    h = 0xCBF29CE484222325
    for b in struct.pack("<%dI" % len(ids), *ids):
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    model = Path(sys.argv[1]) if len(sys.argv) > 1 else MODEL
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else OUT
    tok = build(model)
    seed = 1129
    lines = [
        "# SmolLM2 token ids from HF tokenizers %s (vocab and merges read from %s with gguf %s)."
        % (tokenizers.__version__, model.name, getattr(gguf, "__version__", "?")),
        "# Written by tools/reference/make_token_fixtures.py; format described there. Random cases: seed %d." % seed,
    ]
    for text in FIXED + random_strings(seed, 40) + random_chat(seed + 1, 20):
        modes = ("plain", "special") if "<" in text else ("plain",)
        for mode in modes:
            ids = encode(tok, text, mode == "special")
            back = tok.decode(ids, skip_special_tokens=False)
            if back != text:   # only bytes the vocabulary lacks may go missing
                assert "\x04" in text, (text, back)
            lines.append("case\t%s\t%s\t%s" % (mode, escape(text), " ".join(map(str, ids))))
    for rel in ("data/wikitext-2-raw-test.txt", "data/tinystories-valid-sample.txt",
                "data/calibration-moby-dick.txt"):
        p = SHARED / rel
        if not p.exists():
            print("skipping absent", p, file=sys.stderr)
            continue
        text = p.read_bytes().decode("utf-8")
        ids = encode(tok, text, False)
        lines.append("file\t%s\t%d\t%016x" % (rel, len(ids), fnv64(ids)))
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("wrote", out, len(lines), "lines")


if __name__ == "__main__":
    main()
