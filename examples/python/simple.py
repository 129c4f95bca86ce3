#!/usr/bin/env python3
"""simple.py: examples/simple.c in Python: load a model, make one session with a KV cache spec,
generate greedily, print the text. Needs only the veloxquant package (pip install ./python):
    python examples/python/simple.py -m models/SmolLM2-135M-Instruct.Q4_1.gguf -p "The history of the printing press"
It prints what `veloxquant generate --temp 0` prints for the same model, prompt, -n and -c: the
prompt, then the continuation, then a newline (python/tests/test_examples.py compares the two)."""
import argparse
import sys

import veloxquant as vq


def main() -> int:
    ap = argparse.ArgumentParser(prog="simple.py", description="Greedy generation from a prompt with veloxquant.")
    ap.add_argument("-m", "--model", required=True, help="GGUF file or llama2.c checkpoint")
    ap.add_argument("--tokenizer", help="tokenizer .bin (llama2.c checkpoints only)")
    ap.add_argument("-p", "--prompt", default="Once upon a time")
    ap.add_argument("-n", "--n-predict", type=int, default=64, help="tokens to generate (default 64)")
    ap.add_argument("-c", "--ctx-size", type=int, default=None, help="context in tokens (default 2048)")
    ap.add_argument("--kv", default="f16", help="KV cache spec, e.g. f16, q4_0:rotate=1 (default f16)")
    a = ap.parse_args()
    if a.n_predict < 1:
        ap.error("-n needs a whole number >= 1")
    try:
        with vq.Model(a.model, tokenizer=a.tokenizer) as model, \
                model.session(kv=a.kv, n_ctx=a.ctx_size) as s:
            sys.stdout.write(a.prompt)   # echo the prompt, as veloxquant generate does
            gen = s.generate(a.prompt, max_tokens=a.n_predict, temperature=0)   # greedy
            for piece in gen:
                sys.stdout.write(piece)
                sys.stdout.flush()
            sys.stdout.write("\n")
            print(f"simple: prompt {gen.n_prompt} tokens, generated {gen.n_generated} (stop: {gen.stop_reason}), "
                  f"kv {s.kv}: {s.bytes_held} bytes", file=sys.stderr)
    except vq.VeloxQuantError as e:   # the C library's message: what was wrong and where
        print(f"simple: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
