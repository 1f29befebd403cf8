"""The garbage collector is paused while fuser.jit compiles (fuser/frontend/gc_pause.py)."""
import gc

import torch

import fuser
from fuser.frontend import gc_pause
from fuser.frontend.gc_pause import GcPause


def test_overlapping_pauses_end_with_the_last_and_restore_the_collector():
    pause = GcPause()
    assert gc.isenabled()
    pause.__enter__()
    pause.__enter__()  # another thread's call
    assert not gc.isenabled()
    pause.__exit__(None, None, None)
    assert not gc.isenabled()  # the other call is still compiling
    pause.__exit__(None, None, None)
    assert gc.isenabled()


def test_a_collector_the_user_turned_off_stays_off():
    pause = GcPause()
    gc.disable()
    try:
        with pause:
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_jit_compile_runs_with_the_collector_paused_and_leaves_it_on(monkeypatch):
    seen = []
    plan = fuser.frontend.backend.plan_graph

    def spy(gm):
        seen.append(gc.isenabled())
        return plan(gm)
    monkeypatch.setattr(fuser.frontend.backend, "plan_graph", spy)

    def f(x):
        return torch.tanh(x * 3.0).sum(-1)

    x = torch.randn(3, 7, requires_grad=True)
    jitted = fuser.jit(f)
    out = jitted(x)
    out.sum().backward()  # the backward compiles at its first call
    torch.testing.assert_close(out, f(x.detach()))
    assert seen == [False, False] and gc.isenabled() and gc_pause.GC_PAUSE.depth == 0
