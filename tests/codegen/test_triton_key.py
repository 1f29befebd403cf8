"""Triton's installation digest kept in fuser's cache directory (codegen/compile.py): a new
process reads it back instead of hashing libtriton again, and any change to Triton's files
makes a new stamp."""
import os

import pytest

triton = pytest.importorskip("triton")
from triton.runtime import cache as triton_cache  # noqa: E402

from fuser.codegen import compile as kcompile  # noqa: E402


def _fake_triton_key(calls):
    def triton_key():
        calls.append(1)
        return f"{triton.__version__}-fake-digest"
    return triton_key


def test_key_is_hashed_once_across_processes(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSER_CACHE_DIR", str(tmp_path))
    calls = []
    for _process in range(2):  # each process starts with Triton's own function
        monkeypatch.setattr(triton_cache, "triton_key", _fake_triton_key(calls))
        kcompile._keep_triton_key()
        assert triton_cache.triton_key() == f"{triton.__version__}-fake-digest"
        assert triton_cache.triton_key() == f"{triton.__version__}-fake-digest"
    assert calls == [1]
    assert len(list((tmp_path / "triton").glob("key-*.txt"))) == 1


def test_opt_out_leaves_triton_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FUSER_TRITON_KEY_CACHE", "0")
    original = _fake_triton_key([])
    monkeypatch.setattr(triton_cache, "triton_key", original)
    kcompile._keep_triton_key()
    assert triton_cache.triton_key is original


def test_stamp_follows_the_files(tmp_path):
    lib = tmp_path / "_C" / "libtriton.so"
    lib.parent.mkdir()
    lib.write_bytes(b"0" * 10)
    (tmp_path / "compiler").mkdir()
    (tmp_path / "compiler" / "compiler.py").write_text("x = 1\n")
    first = kcompile._triton_stamp(tmp_path, "3.9.0")
    assert kcompile._triton_stamp(tmp_path, "3.9.0") == first
    assert kcompile._triton_stamp(tmp_path, "3.9.1") != first
    lib.write_bytes(b"1" * 11)
    second = kcompile._triton_stamp(tmp_path, "3.9.0")
    assert second != first
    os.utime(lib, ns=(1, 1))
    assert kcompile._triton_stamp(tmp_path, "3.9.0") != second
