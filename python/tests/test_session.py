"""test_session.py: decode, truncate, state save/load, generation (stop strings, stop reasons,
lazy vs one-call) on SmolLM2."""
from __future__ import annotations

import numpy as np
import pytest

import veloxquant as vq

PROMPT = "The history of the printing press"


def test_tokenizer_round_trip(model):
    text = "Hello world, naïve café — 東京"
    ids = model.encode(text, add_bos=False)
    assert model.decode(ids) == text
    assert model.encode("<|im_start|>", special=True) != model.encode("<|im_start|>")
    assert model.is_eog(model.encode("<|im_end|>", special=True)[0])
    assert "<|im_start|>user" in model.apply_chat_template([{"role": "user", "content": "hi"}])
    ids = model.chat_tokenize([("user", "hi<|im_end|>")])
    # special-token text typed in a message stays text
    assert ids.count(model.encode("<|im_end|>", special=True)[0]) == 2


def test_decode_logits(model):
    ids = model.encode(PROMPT)
    with model.session(n_ctx=128) as a, model.session(n_ctx=128) as b:
        last = a.decode(ids)
        every = b.decode(ids, all_logits=True)
        assert last.shape == (model.n_vocab,) and last.dtype == np.float32
        assert every.shape == (len(ids), model.n_vocab)
        # the last row of a batch's logits goes through the batched output product: equal to
        # float rounding, not bit for bit
        np.testing.assert_allclose(last, every[-1], rtol=1e-4, atol=1e-4)
        out = np.empty(model.n_vocab, dtype=np.float32)
        r = a.decode([int(last.argmax())], out=out)
        assert r is out and a.pos == len(ids) + 1 and a.tokens[-1] == int(last.argmax())


def test_truncate_equals_a_fresh_session(model):
    ids = model.encode(PROMPT)
    kv = "turboquant_mse:k=4,v=4"
    with model.session(kv=kv, n_ctx=128) as a, model.session(kv=kv, n_ctx=128) as b:
        a.decode(ids)
        a.decode(model.encode(" and the rest of it", add_bos=False))
        a.truncate(len(ids))
        assert a.tokens == ids
        la = a.decode([13])
        b.decode(ids)
        lb = b.decode([13])
        np.testing.assert_array_equal(la, lb)


@pytest.mark.parametrize("kv", ["f16", "q4_0:rotate=1"])
def test_state_round_trip(model, tmp_path, kv):
    ids = model.encode(PROMPT)
    path = tmp_path / "state.vqs"
    with model.session(kv=kv, n_ctx=256) as s:
        s.decode(ids)
        s.save(path)
        bytes_held = s.bytes_held
        want = s.decode([42, 43], all_logits=True)
    with vq.Session.load(model, path, kv=kv, n_ctx=256) as t:
        assert t.tokens == ids and t.bytes_held == bytes_held
        got = t.decode([42, 43], all_logits=True)
    np.testing.assert_array_equal(got, want)   # bit-identical


def test_generate_matches_complete_and_stop_strings(model):
    for stop in (None, "the", ["press", "in the"], ". "):
        with model.session(n_ctx=256) as a, model.session(n_ctx=256) as b:
            gen = a.generate(PROMPT, max_tokens=30, temperature=0, stop=stop)
            text = "".join(gen)
            c = b.complete(PROMPT, max_tokens=30, temperature=0, stop=stop)
            assert text == c.text == gen.text, stop
            assert gen.stop_reason == c.stop_reason, stop
            assert gen.n_generated == c.n_generated and a.tokens == b.tokens
            if stop:
                assert gen.stop_reason == "stop"
                for x in [stop] if isinstance(stop, str) else stop:
                    assert x not in text


def test_generate_steps_the_c_generator(model, monkeypatch):
    """generate() is one vq_generator_step per token (the C generator of which vq_session_generate is
    a loop) and never re-enters vq_session_generate; its text is complete()'s."""
    from veloxquant import _lib
    calls = {"generate": 0, "step": 0}
    real_gen, real_step = _lib.vq_session_generate, _lib.vq_generator_step

    def gen(*a):
        calls["generate"] += 1
        return real_gen(*a)

    def step(*a):
        calls["step"] += 1
        return real_step(*a)

    monkeypatch.setattr(_lib, "vq_session_generate", gen)
    monkeypatch.setattr(_lib, "vq_generator_step", step)
    with model.session(n_ctx=256) as a:
        g = a.generate(PROMPT, max_tokens=12, temperature=0, stop="zzz")
        text = "".join(g)
        assert calls == {"generate": 0, "step": 12} and g.n_generated == 12 and g.stop_reason == "length"
    monkeypatch.undo()
    with model.session(n_ctx=256) as b:
        assert b.complete(PROMPT, max_tokens=12, temperature=0, stop="zzz").text == text


def test_stop_reasons_and_continuation(model):
    with model.session(n_ctx=24) as s:
        gen = s.generate(PROMPT, max_tokens=0, temperature=0)   # until the context is full
        list(gen)
        assert gen.stop_reason == "context" and s.pos == 24
    with model.session() as s:
        gen = s.generate(messages=[{"role": "user", "content": "Say hi."}], max_tokens=200, temperature=0)
        list(gen)
        assert gen.stop_reason == "eog"
        held = s.pos
        more = s.generate(messages=[{"role": "user", "content": "Again."}], max_tokens=5, temperature=0)
        assert len("".join(more)) > 0 and s.pos > held and more.stop_reason == "length"


def test_generation_closed_early_keeps_its_tokens(model):
    with model.session(n_ctx=128) as s:
        gen = s.generate(PROMPT, max_tokens=50, temperature=0)
        first = [next(gen), next(gen)]
        gen.close()
        assert gen.stop_reason == "cancelled" and all(first)
        pos = s.pos
        assert s.decode([13]).shape == (model.n_vocab,) and s.pos == pos + 1


def test_session_changed_between_steps_is_refused(model):
    with model.session(n_ctx=128) as s:
        gen = s.generate(PROMPT, max_tokens=10, temperature=0)
        next(gen)
        s.decode([13])
        with pytest.raises(RuntimeError, match="between two steps"):
            next(gen)


def test_memory_figures(model):
    with model.session(kv="turboquant_mse:k=4,v=4", n_ctx=512) as q, model.session(kv="f16", n_ctx=512) as f:
        ids = model.encode("word " * 200)
        q.decode(ids)
        f.decode(ids)
        assert 0 < q.bytes_held < f.bytes_held
        assert 0 < q.bits_per_element < f.bits_per_element   # (pages held count, so not 4 and 16)
        assert vq.KVSpec("f16").bytes_for(model, 512) > 0
