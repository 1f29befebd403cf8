"""fuser.jit, fuser.explain and fuser's process-wide settings under threads and fork
(fifty-seventh session's probe), each against eager or the single-threaded behaviour."""
import gc
import os
import threading

import pytest
import torch
import torch._dynamo

import fuser
from fuser import timing
from fuser.frontend.gc_pause import GC_PAUSE
from tests.helpers import make


def _softmax_norm(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w).softmax(-1)


def _in_threads(fn, n: int) -> list:
    results, errors = [None] * n, []
    barrier = threading.Barrier(n)

    def run(k):
        try:
            barrier.wait()
            results[k] = fn(k)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    return results


def test_first_calls_racing_in_threads_trace_once():
    # each racing first call traced its own copy (Dynamo checks its cache before its compile
    # lock): 8 of them filled Dynamo's recompile limit, and a later row length ran eagerly
    torch._dynamo.reset()
    f = fuser.jit(_softmax_norm)
    x, w = make((4, 32)), make((32,))
    outs = _in_threads(lambda k: f(x, w), 8)
    for out in outs:
        torch.testing.assert_close(out, _softmax_norm(x, w))
    assert f.cache_info().graphs == 1
    x2, w2 = make((4, 48)), make((48,))
    torch.testing.assert_close(f(x2, w2), _softmax_norm(x2, w2))
    assert f.cache_info().graphs == 2 and f.cache_info().fusions == 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_while_a_setting_is_held_gets_it_back():
    # a DataLoader worker forked while another thread compiled kept its collector off for good
    assert gc.isenabled()
    with GC_PAUSE:
        pid = os.fork()
        if pid == 0:
            os._exit(0 if gc.isenabled() and GC_PAUSE.depth == 0 else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert gc.isenabled()


def test_explains_in_threads_leave_the_phase_timer_as_it_was():
    # each saved and restored the process-wide timer: the later one restored "on"
    before = timing.enabled()
    torch._dynamo.reset()

    def explain(k):
        x, w = make((3, 16 + 8 * k)), make((16 + 8 * k,))
        return fuser.explain(lambda x, w: _softmax_norm(x, w) * 2, x, w)
    reports = _in_threads(explain, 2)
    assert all(r.info.fusions >= 1 for r in reports)
    assert timing.enabled() == before
