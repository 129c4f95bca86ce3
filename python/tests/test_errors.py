"""test_errors.py: bad input raises a Python exception carrying the C message; nothing crashes."""
from __future__ import annotations

import numpy as np
import pytest

import veloxquant as vq


def test_kvspec_parse_errors_carry_the_c_message():
    with pytest.raises(vq.ArgumentError) as e:
        vq.KVSpec("nope:k=4")
    assert "unknown codec 'nope'" in str(e.value) and e.value.status_name == "bad argument"
    assert isinstance(e.value, ValueError)
    with pytest.raises(ValueError, match="turboquant_mse"):
        vq.KVSpec("turboquant_mse:k=99")
    with pytest.raises(ValueError):
        vq.KVSpec("f16\0q4_0")
    with pytest.raises(TypeError):
        vq.KVSpec(16)   # type: ignore[arg-type]


def test_kvspec_normalizes_and_compares():
    a, b = vq.KVSpec("turboquant_mse:k=4,v=4"), vq.KVSpec(vq.KVSpec("turboquant_mse:k=4,v=4").text)
    assert a == b and hash(a) == hash(b) and a != vq.KVSpec("f16")
    a.close()
    with pytest.raises(ValueError, match="closed"):
        a.text


def test_model_load_errors(tmp_path):
    with pytest.raises(vq.FileError) as e:
        vq.Model(tmp_path / "absent.gguf")
    assert isinstance(e.value, OSError) and "absent.gguf" in str(e.value)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 64)
    with pytest.raises(vq.VeloxQuantError):
        vq.Model(bad)
    with pytest.raises(ValueError):
        vq.Model(tmp_path / "a\0b")
    with pytest.raises(ValueError):
        vq.Model(bad, threads=0)


def test_session_bad_input(model):
    with pytest.raises(vq.ArgumentError):
        model.session(kv="q4_0:bits=7")
    with pytest.raises(ValueError):
        model.session(n_ctx=-3)
    with pytest.raises(vq.RangeError):
        model.session(n_ctx=10**6)   # past the training context
    with model.session(n_ctx=16) as s:
        with pytest.raises(ValueError, match="outside the vocabulary"):
            s.decode([1, model.n_vocab])
        with pytest.raises(ValueError, match="outside the vocabulary"):
            s.decode([-1])
        with pytest.raises(ValueError):
            s.decode([1.5, 2.0])
        with pytest.raises(ValueError):
            s.decode([])
        with pytest.raises(vq.RangeError, match="do not fit"):
            s.decode(list(range(1, 18)))
        assert s.pos == 0          # nothing ran
        s.decode([1, 2, 3])
        with pytest.raises(ValueError):
            s.decode([4], out=np.empty(3, dtype=np.float32))
        with pytest.raises(vq.ArgumentError):
            s.truncate(10)
        with pytest.raises(ValueError):
            s.truncate(-1)
        with pytest.raises(ValueError):
            s.generate("x", stop=[""])
        with pytest.raises(ValueError):
            s.generate("x", temperature=float("nan"))
        with pytest.raises(ValueError):
            s.generate("x", top_p=0)
        with pytest.raises(vq.RangeError):   # the prompt does not fit what is left
            list(s.generate("word " * 40, max_tokens=4))
        assert s.pos == 3
    with pytest.raises(ValueError, match="closed"):
        s.decode([1])
    with pytest.raises(ValueError, match="closed"):
        s.pos


def test_state_file_errors(model, tmp_path):
    p = tmp_path / "s.vqs"
    with model.session(kv="q8_0", n_ctx=64) as s:
        s.decode(model.encode("Hello there"))
        s.save(p)
    with model.session(kv="f16", n_ctx=64) as other:
        with pytest.raises(vq.StateError):
            other.restore(p)
    raw = bytearray(p.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (tmp_path / "bad.vqs").write_bytes(bytes(raw))
    with model.session(kv="q8_0", n_ctx=64) as s2:
        with pytest.raises(vq.VeloxQuantError):
            s2.restore(tmp_path / "bad.vqs")
        with pytest.raises(vq.FileError):
            s2.restore(tmp_path / "absent.vqs")
        assert s2.pos == 0


def test_chat_errors(model):
    with pytest.raises(TypeError):
        model.chat_tokenize([{"role": "user"}])
    with pytest.raises(vq.ArgumentError):
        model.chat_tokenize([{"role": "wizard", "content": "hi"}])


def test_closed_model_closes_its_sessions(smol_path):
    m = vq.Model(smol_path)
    s = m.session(n_ctx=32)
    m.close()
    assert s.closed and m.closed
    with pytest.raises(ValueError, match="closed"):
        s.decode([1])
    with pytest.raises(ValueError, match="closed"):
        m.encode("x")


def test_model_device(smol_path):
    """device= reaches vq_model_params.device: a bad name and an absent GPU are refused by name."""
    with pytest.raises(vq.ArgumentError, match="'tpu': not a device"):
        vq.Model(smol_path, device="tpu")
    # the wheel and CI have no GPU (and the wheel no CUDA backend): refused, never run on the CPU
    import subprocess
    has_gpu = subprocess.run(["sh", "-c", "nvidia-smi -L"], capture_output=True).returncode == 0
    if not has_gpu:
        with pytest.raises(vq.VeloxQuantError, match="cuda|CUDA"):
            vq.Model(smol_path, device="cuda")
    with vq.Model(smol_path, device="cpu") as m:
        assert m.n_vocab > 0
