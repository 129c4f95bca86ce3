"""test_threads.py: a session used from two threads is refused (RuntimeError), never run twice at
once; the GIL is released during C calls; separate sessions on separate threads agree with serial."""
from __future__ import annotations

import threading

import numpy as np


def test_session_refused_while_another_thread_uses_it(model):
    ids = model.encode("word " * 300, add_bos=False)
    with model.session(n_ctx=512) as s:
        done = threading.Event()
        result = {}

        def worker():
            try:
                result["logits"] = s.decode(ids)
            finally:
                done.set()

        t = threading.Thread(target=worker)
        refused = spins = 0
        t.start()
        while not done.is_set():   # this loop runs while the worker is inside C: the GIL is free
            spins += 1
            try:
                s.decode([1])
            except RuntimeError as e:
                assert "another thread" in str(e)
                refused += 1
        t.join()
        assert refused > 0, "no call was refused while the worker decoded"
        assert spins > 10
        assert "logits" in result
        # the refused calls ran nothing: the session holds the worker's tokens in one piece, and
        # only the [1]s of calls that ran before the worker began or after it ended
        toks = s.tokens
        i = toks.index(ids[0]) if ids[0] in toks else -1
        assert i >= 0 and toks[i:i + len(ids)] == ids and set(toks[:i] + toks[i + len(ids):]) <= {1}


def test_two_sessions_two_threads_equal_serial(model):
    prompts = ["The history of the printing press", "Once upon a time"]
    serial = []
    for p in prompts:
        with model.session(n_ctx=128) as s:
            serial.append(s.decode(model.encode(p)))
    got = [None, None]

    def run(i):
        with model.session(n_ctx=128) as s:
            got[i] = s.decode(model.encode(prompts[i]))

    ts = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for a, b in zip(serial, got):
        np.testing.assert_array_equal(a, b)
