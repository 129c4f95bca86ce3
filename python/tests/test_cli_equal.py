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


@pytest.mark.parametrize("mode,ctx,max_tokens,kvs", [
    ("decode", 64, 128, ["f16", "q4_0:rotate=1"]),   # two arms: one batched forward per token
    ("prefill", 256, 512, ["f16"]),
])
def test_perplexity_equals_the_cli(model, smol_path, cli, shared, mode, ctx, max_tokens, kvs):
    path = shared / "wikitext-2-raw-test.txt"
    args = ["--ctx", str(ctx), "--mode", mode, "--max-tokens", str(max_tokens)]
    for kv in kvs:
        args += ["--kv", kv]
    want = json.loads(run_cli(cli, "perplexity", "-m", str(smol_path), "-f", str(path), "--json", *args))["arms"]
    got = model.perplexity(path, kv=kvs, n_ctx=ctx, mode=mode, max_tokens=max_tokens)
    assert len(got) == len(want) == len(kvs)
    for g, w in zip(got, want):
        assert isinstance(g, vq.Perplexity)
        assert g.n_scored == w["scored"]
        # the CLI prints 6 decimals; the float64 sums differ only in their order
        assert abs(g.mean_nll - w["mean_nll"]) <= 6e-7, (g, w)
        assert abs(g.ppl - w["ppl"]) <= 1e-6 * w["ppl"] + 6e-7
        assert g.bytes_held == w["kv_bytes"]
        assert abs(g.bits_per_element - w["bits_per_elem"]) <= 6e-5
    if len(kvs) == 1:   # one spec, not a list: one result
        one = model.perplexity(path, kv=kvs[0], n_ctx=ctx, mode=mode, max_tokens=ctx)
        assert isinstance(one, vq.Perplexity) and one.n_windows == 1
