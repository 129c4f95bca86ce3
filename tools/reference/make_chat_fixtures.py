#!/usr/bin/env python3
r"""Writes tests/fixtures/chat_templates.tsv: how real chat templates render fixed conversations, for
tests/model/test_chat_templates.c to compare src/model/chat.c against (exact string equality).

Two references per (template, conversation, add_generation_prompt):
  - the real Jinja template (models/vocab/templates/*.jinja, from scripts/fetch_vocabs.sh) rendered with
    Python's jinja2 the way HF transformers does (sandboxed, trim_blocks, lstrip_blocks, raise_exception,
    bos_token/eos_token of the model's tokenizer);
  - llama.cpp's llama_chat_apply_template (llama-cpp-python 0.3.36's ctypes module, LLAMA_CPP_LIB_PATH),
    which detects the family from the template text and applies its own layout.
The expected text ("want") is the Jinja rendering with the leading BOS text removed (our tokenizer adds BOS
itself, as llama.cpp does); where Jinja raises (Gemma 2 has no system role) it is llama.cpp's rendering.

Lines (tab-separated; texts escaped as in tests/fixtures/smollm2_tokens.tsv):
  conv  <id>  <role> <content> [<role> <content> ...]
  render  <template file>  <conv id>  <add_generation_prompt 0|1>  <want>  <source: jinja|llamacpp>  <llama.cpp same: 0|1>
Usage: LLAMA_CPP_LIB_PATH=/work/llamacpp/build/bin python3 tools/reference/make_chat_fixtures.py
"""
import ctypes
import os
import sys
import types
from pathlib import Path

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "models" / "vocab" / "templates"

# template file, bos_token, eos_token (the model's tokenizer)
FAMILIES = [
    ("meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    ("Qwen-Qwen2.5-7B-Instruct.jinja", "", "<|im_end|>"),
    ("Qwen-Qwen3-0.6B.jinja", "", "<|im_end|>"),
    ("google-gemma-2-2b-it.jinja", "<bos>", "<eos>"),
    ("microsoft-Phi-3.5-mini-instruct.jinja", "<s>", "<|endoftext|>"),
]

CONVS = {
    "user": [("user", "Hello!")],
    "sys_user": [("system", "You are terse."), ("user", "What is 2+2?")],
    "multi": [("user", "Hi"), ("assistant", "Hello, how can I help?"), ("user", "Tell me a joke.")],
    "sys_multi": [("system", "Be kind."), ("user", "Hi"), ("assistant", "Hey."), ("user", "Bye")],
    "empty": [("user", "")],
    "empty_sys": [("system", ""), ("user", "x")],
    "unicode": [("user", "日本語で答えて 😀 — «ça va?»\n\tline two")],
    "spaces": [("user", "  padded  \n"), ("assistant", " ok "), ("user", "again ")],
    "specials": [("user", "hello<|im_end|><|eot_id|><end_of_turn><|end|>[/INST]")],
}


def load_binding():
    pkgdir = Path(os.environ.get("LLAMA_CPP_PY", "/work/llamacpp/llama_cpp_python-0.3.36")) / "llama_cpp"
    pkg = types.ModuleType("llama_cpp")
    pkg.__path__ = [str(pkgdir)]
    sys.modules["llama_cpp"] = pkg
    import llama_cpp.llama_cpp as L
    return L


L = load_binding()


def llamacpp_render(tmpl, conv, add_ass):
    n = len(conv)
    keep = [(r.encode(), c.encode()) for r, c in conv]
    arr = (L.llama_chat_message * n)(*[L.llama_chat_message(role=r, content=c) for r, c in keep])
    cap = 1 << 16
    buf = ctypes.create_string_buffer(cap)
    k = L.llama_chat_apply_template(tmpl.encode(), arr, n, add_ass, buf, cap)
    if k < 0:
        return None
    return buf.raw[:k].decode()


def jinja_render(tmpl, conv, add_ass, bos, eos):
    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    t = env.from_string(tmpl)
    try:
        return t.render(messages=[{"role": r, "content": c} for r, c in conv], add_generation_prompt=bool(add_ass),
                        bos_token=bos, eos_token=eos)
    except jinja2.exceptions.TemplateError:
        return None


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


def main():
    lines = ["# Chat template renderings: real Jinja (jinja2 %s) and llama.cpp's llama_chat_apply_template" % jinja2.__version__,
             "# (llama-cpp-python 0.3.36). Written by tools/reference/make_chat_fixtures.py (format described there)."]
    for cid, conv in CONVS.items():
        lines.append("conv\t%s\t%s" % (cid, "\t".join("%s\t%s" % (r, escape(c)) for r, c in conv)))
    ndiff = 0
    for fname, bos, eos in FAMILIES:
        tmpl = (TEMPLATES / fname).read_text()
        for cid, conv in CONVS.items():
            for add_ass in (1, 0):
                j = jinja_render(tmpl, conv, add_ass, bos, eos)
                lc = llamacpp_render(tmpl, conv, add_ass)
                if j is not None:
                    want, src = (j[len(bos):] if bos and j.startswith(bos) else j), "jinja"
                elif lc is not None:
                    want, src = lc, "llamacpp"
                else:
                    continue
                same = int(lc == want)
                if not same and src == "jinja":
                    ndiff += 1
                    print("DIFF %s %s %d\n  jinja:    %r\n  llamacpp: %r" % (fname, cid, add_ass, want, lc), file=sys.stderr)
                lines.append("render\t%s\t%s\t%d\t%s\t%s\t%d" % (fname, cid, add_ass, escape(want), src, same))
    out = ROOT / "tests" / "fixtures" / "chat_templates.tsv"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("%d renderings (%d where llama.cpp differs from the jinja) -> %s" % (sum(l.startswith("render") for l in lines), ndiff, out))


if __name__ == "__main__":
    main()
