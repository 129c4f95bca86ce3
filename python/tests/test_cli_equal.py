"""test_cli_equal.py: the package's results equal the CLI's on the same model and arms: greedy
and seeded text (plain and chat), perplexity in decode and prefill mode."""
from __future__ import annotations

import json

import pytest

import veloxquant as vq
from conftest import run_cli

PROMPT = "The history of the printing press"


@pytest.mark.parametrize("kv", ["f16", "turboquant_mse:k=4,v=4"])
def test_greedy_text_equals_the_cli(model, smol_path, cli, kv):
    want = run_cli(cli, "generate", "-m", str(smol_path), "-p", PROMPT, "-n", "24", "--temp", "0", "--kv", kv)
    with model.session(kv=kv, n_ctx=2048) as s:
        gen = s.generate(PROMPT, max_tokens=24, temperature=0)
        got = "".join(gen)
    assert (PROMPT + got + "\n").encode() == want
    assert gen.stop_reason in ("length", "eog") and gen.n_generated <= 24


def test_seeded_sampling_equals_the_cli(model, smol_path, cli):
    want = run_cli(cli, "generate", "-m", str(smol_path), "-p", PROMPT, "-n", "20", "--temp", "0.9",
                   "--top-k", "30", "--top-p", "0.9", "-s", "42")
    with model.session() as s:
        got = "".join(s.generate(PROMPT, max_tokens=20, temperature=0.9, top_k=30, top_p=0.9, seed=42))
    assert (PROMPT + got + "\n").encode() == want


def test_chat_equals_the_cli(model, smol_path, cli):
    q = "What is the capital of France?"
    want = run_cli(cli, "generate", "-m", str(smol_path), "--chat", "-p", q, "-n", "40", "--temp", "0")
    with model.session() as s:
        gen = s.generate(messages=[{"role": "user", "content": q}], max_tokens=40, temperature=0)
        got = "".join(gen)
    assert (got + "\n").encode() == want


def cli_ppl(cli, smol_path, text_path, *args):
    out = run_cli(cli, "perplexity", "-m", str(smol_path), "-f", str(text_path), "--json", *args)
    return json.loads(out)["arms"][0]


@pytest.mark.parametrize("mode,ctx,max_tokens,kv", [
    ("decode", 64, 128, "q4_0:rotate=1"),
    ("prefill", 256, 512, "f16"),
])
def test_perplexity_equals_the_cli(model, smol_path, cli, shared, mode, ctx, max_tokens, kv):
    path = shared / "wikitext-2-raw-test.txt"
    want = cli_ppl(cli, smol_path, path, "--ctx", str(ctx), "--mode", mode, "--max-tokens", str(max_tokens),
                   "--kv", kv)
    got = model.perplexity(path, kv=kv, n_ctx=ctx, mode=mode, max_tokens=max_tokens)
    assert isinstance(got, vq.Perplexity)
    assert got.n_scored == want["scored"]
    # the CLI prints 6 decimals; the float64 sums differ only in their order
    assert abs(got.mean_nll - want["mean_nll"]) <= 6e-7
    assert abs(got.ppl - want["ppl"]) <= 1e-6 * want["ppl"] + 6e-7
    assert got.bytes_held == want["kv_bytes"]
    assert abs(got.bits_per_element - want["bits_per_elem"]) <= 6e-5
