#!/usr/bin/env python3
"""chat.py: examples/chat.c in Python: a multi-turn chat on ONE session. Each turn renders only
the new user message with the model's chat template and feeds only its tokens: the earlier turns,
the replies included, are already in the session's KV cache (every generated token stays there),
so nothing is prefilled twice.
    python examples/python/chat.py -m models/SmolLM2-135M-Instruct.Q4_1.gguf -p "Name a fruit." -p "And its colour?"
Without -p it reads one user message per line from stdin. Replies go to stdout; per turn a line on
stderr says how many tokens were prefilled and how many the session held before and after. Each
turn seeds its own sampler (chat.c keeps one for the whole chat): with --temp 0 the replies are
chat.c's byte for byte (python/tests/test_examples.py), with --temp > 0 they differ."""
import argparse
import sys

import veloxquant as vq


def assistant_close(model: vq.Model) -> str:
    """The text the template puts after an assistant message, e.g. "<|im_end|>\\n" for ChatML:
    rendered once around a marker, so the program needs no knowledge of the template."""
    mark = "\x01vq-reply\x01"
    t = model.apply_chat_template([{"role": "assistant", "content": mark}], add_assistant=False,
                                  add_default_system=False)
    if mark not in t:
        raise SystemExit("chat: the chat template dropped the assistant's text")
    return t[t.index(mark) + len(mark):]


def main() -> int:
    ap = argparse.ArgumentParser(prog="chat.py", description="A multi-turn chat on one session with veloxquant.")
    ap.add_argument("-m", "--model", required=True, help="GGUF file with a chat template")
    ap.add_argument("--tokenizer", help="tokenizer .bin (llama2.c checkpoints only)")
    ap.add_argument("-p", "--prompt", action="append", default=[], help="one user turn; repeat for more")
    ap.add_argument("-n", "--n-predict", type=int, default=128, help="most tokens per reply (default 128)")
    ap.add_argument("-c", "--ctx-size", type=int, default=2048, help="context for the whole conversation")
    ap.add_argument("--kv", default="f16", help="KV cache spec (default f16)")
    ap.add_argument("--system", help="system prompt (default: the template's own, if any)")
    ap.add_argument("--temp", type=float, default=0.0, help="sampling temperature, 0 = greedy (default 0)")
    ap.add_argument("-s", "--seed", type=int, default=0)
    a = ap.parse_args()
    try:
        model = vq.Model(a.model, tokenizer=a.tokenizer)
    except vq.VeloxQuantError as e:
        print(f"chat: {e}", file=sys.stderr)
        return 1
    with model, model.session(kv=a.kv, n_ctx=a.ctx_size) as s:
        if model.chat_template is None:
            print(f"chat: {a.model} has no chat template (chat needs one)", file=sys.stderr)
            return 1
        close = assistant_close(model)
        turns = iter(a.prompt) if a.prompt else (line.rstrip("\r\n") for line in sys.stdin)
        last_stop = None
        turn = 0
        for user in turns:
            if not user:
                continue
            turn += 1
            msgs = ([{"role": "system", "content": a.system}] if turn == 1 and a.system else [])
            msgs.append({"role": "user", "content": user})
            # the new text: the close of the previous reply (a reply that ended with the model's
            # end-of-turn token already holds it), then the user message and the assistant header
            c = ""
            if turn > 1:
                c = close
                if last_stop == "eog" and s.pos > 0:
                    eog = model.token_piece(s.tokens[-1], special=True).decode("utf-8", "replace")
                    if eog and c.startswith(eog):
                        c = c[len(eog):]
            # the close is the template's own text (special tokens on); the messages go through
            # chat_tokenize, so special-token text a user types stays plain text
            ids = model.encode(c, add_bos=False, special=True) + model.chat_tokenize(
                msgs, add_assistant=True, add_default_system=turn == 1, add_bos=None if turn == 1 else False)
            held = s.pos
            print(f"> {user}", flush=True)
            try:
                gen = s.generate(ids, max_tokens=a.n_predict, temperature=a.temp, seed=a.seed)
                for piece in gen:
                    sys.stdout.write(piece)
                    sys.stdout.flush()
            except vq.VeloxQuantError as e:
                print(f"\nchat: turn {turn}: {e}", file=sys.stderr)
                return 1
            print(flush=True)
            print(f"turn {turn}: prefilled {gen.n_prompt} tokens (new text {len(ids)} tokens), session held "
                  f"{held} before, {s.pos} after, generated {gen.n_generated} (stop: {gen.stop_reason})",
                  file=sys.stderr)
            last_stop = gen.stop_reason
    return 0


if __name__ == "__main__":
    sys.exit(main())
