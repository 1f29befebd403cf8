"""Review regressions of fuser.jit's direct call path (frontend/direct.py): it must behave as
the call through Dynamo would, whatever changed since the entry was remembered."""
import warnings

import pytest
import torch

import fuser
from fuser.errors import InternalError
from fuser.runtime.cache import FusionExecutorCache

from .jit_helpers import assert_close_to_eager


def test_reassigned_defaults_are_seen():
    # the direct path filled in the defaults the function had when it was remembered, so the
    # guards passed on stale values and the old default was used
    def scaled(x, s=2.0, t=torch.ones(3)):
        return x * s + t

    jitted = fuser.jit(scaled)
    x = torch.randn(3)
    for _ in range(2):
        assert_close_to_eager(jitted(x), scaled(x))
    scaled.__defaults__ = (5.0, torch.full((3,), 7.0))
    for _ in range(3):
        assert_close_to_eager(jitted(x), scaled(x))
    scaled.__defaults__ = (5.0, torch.full((3,), -1.0))  # same guards, another tensor
    for _ in range(2):
        assert_close_to_eager(jitted(x), scaled(x))
    assert jitted._direct.hits >= 2


def test_a_failure_at_run_time_falls_back_to_eager_on_the_direct_path_too(monkeypatch):
    # fallback="eager" caught fuser's failures only on the call through Dynamo: a repeat call
    # taking the direct path raised them
    def f(x):
        return torch.sigmoid(x) * 3.0

    jitted = fuser.jit(f, fallback="eager")
    x = torch.randn(4, 5)
    jitted(x)
    jitted(x)
    assert jitted._direct.hits == 1

    def broken(self, args):
        raise InternalError("a planted bug at run time")

    monkeypatch.setattr(FusionExecutorCache, "execute", broken)
    with pytest.warns(UserWarning, match="running it eagerly"):
        assert_close_to_eager(jitted(x), f(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        assert_close_to_eager(jitted(x), f(x))  # eager from now on
    # without the fallback the failure is fuser's error, as through Dynamo
    monkeypatch.undo()
    strict = fuser.jit(f)
    strict(x)
    strict(x)
    monkeypatch.setattr(FusionExecutorCache, "execute", broken)
    with pytest.raises(InternalError, match="planted bug"):
        strict(x)


def test_a_concurrent_remember_never_mixes_two_entries():
    # a call reads the remembered entry, checks its guards, then runs its code; another thread
    # remembering a second entry in between must not hand it the second entry's code (compiled
    # for float64) for arguments only the first entry's guards accepted
    def f(x):
        return x * 2.0 + 1.0

    jitted = fuser.jit(f)
    x32 = torch.randn(3, 4)
    x64 = torch.randn(3, 4, dtype=torch.float64)
    jitted(x64)
    jitted(x32)  # the float32 entry first in Dynamo's list, remembered
    direct = jitted._direct
    other_thread = [lambda: (jitted._compiled(x64), direct.remember())]

    class Interleaved(type(direct)):
        """Runs the other thread's work where a thread switch may happen: after the guards."""

        @property
        def hits(self):
            return self.__dict__["hits"]

        @hits.setter
        def hits(self, value):
            self.__dict__["hits"] = value
            if other_thread:
                other_thread.pop()()

    direct.__dict__["hits"] = direct.__dict__.pop("hits")
    direct.__class__ = Interleaved
    out = jitted(x32)
    assert not other_thread and direct.hits == 1  # the interleaving happened on the direct path
    assert out.dtype == torch.float32
    assert_close_to_eager(out, f(x32))


def test_an_emptied_closure_cell_raises_as_eager_does():
    """The locals of a call passing every argument are one generated dict display; a closure
    cell emptied after the entry was remembered leaves it to Dynamo, which raises as eager."""
    offset = 1.0

    def shifted(x):
        return torch.sigmoid(x) + offset

    jitted = fuser.jit(shifted)
    x = torch.randn(5, 7)
    for _ in range(3):
        assert_close_to_eager(jitted(x), shifted(x))
    assert jitted._direct.hits == 2
    del offset
    with pytest.raises(NameError):
        shifted(x)
    with pytest.raises(NameError):
        jitted(x)
    assert jitted._direct.hits == 2
