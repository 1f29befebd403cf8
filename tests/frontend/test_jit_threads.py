"""fuser.jit, fuser.explain and fuser's process-wide settings under threads and fork
(fifty-seventh session's probe), each against eager or the single-threaded behaviour."""
import contextlib
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
    # and at a new row length, racing again (the lock once covered only the first call)
    x2, w2 = make((4, 48)), make((48,))
    for out in _in_threads(lambda k: f(x2, w2), 8):
        torch.testing.assert_close(out, _softmax_norm(x2, w2))
    assert f.cache_info().graphs == 2 and f.cache_info().fusions == 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_while_a_setting_is_held_gets_it_back():
    # a DataLoader worker forked while another thread compiled kept its collector off for good
    assert gc.isenabled()
    with GC_PAUSE:
        pid = os.fork()
        if pid == 0:
            code = 0 if gc.isenabled() and GC_PAUSE.depth == 0 else 3
    if pid == 0:  # (the child left the parent's `with` too: its exit must not unbalance it)
        with GC_PAUSE:
            code = code or (0 if not gc.isenabled() and GC_PAUSE.depth == 1 else 4)
        os._exit(code or (0 if gc.isenabled() else 5))
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert gc.isenabled()


@contextlib.contextmanager
def _held_by_another_thread(lock):
    """`lock` held by another thread while the block runs."""
    held, release = threading.Event(), threading.Event()

    def hold():
        with lock:
            held.set()
            release.wait(60)
    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(60)
    try:
        yield
    finally:
        release.set()
        holder.join()


def _child_calls(f, *args) -> int:
    """The exit code of a forked child calling `f(*args)` as a DataLoader worker would (one
    thread), 0 where it returns eager's result; a hang ends it after 60 s."""
    expected = _softmax_norm(*args)
    pid = os.fork()
    if pid == 0:
        import signal
        signal.alarm(60)
        torch.set_num_threads(1)  # (the parent's OpenMP pool is not the child's)
        os._exit(0 if torch.allclose(f(*args), expected) else 3)
    return pid


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_during_another_threads_call_can_call():
    # the lock that serializes calls through Dynamo, held by a thread the child does not have
    torch._dynamo.reset()
    f = fuser.jit(_softmax_norm)
    with _held_by_another_thread(f._tracing):
        pid = _child_calls(f, make((4, 32)), make((32,)))
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, os.waitstatus_to_exitcode(status)


def test_explains_in_threads_leave_the_phase_timer_as_it_was():
    # each saved and restored the process-wide timer: where the first to start ended first,
    # the second restored "on" (the order is forced: the first's function waits for the second)
    before = timing.enabled()
    torch._dynamo.reset()
    first_in, second_in, first_done = threading.Event(), threading.Event(), threading.Event()

    def first(x):
        first_in.set()
        second_in.wait(60)
        return x * 2

    def second(x):
        second_in.set()
        first_done.wait(60)
        return x + 1

    def explain(k):
        if k == 0:
            report = fuser.explain(first, make((3, 4)))
            first_done.set()
            return report
        first_in.wait(60)
        return fuser.explain(second, make((3, 4)))
    _in_threads(explain, 2)
    assert timing.enabled() == before


def test_the_functions_own_index_error_runs_it_once():
    # an IndexError of the function's own (a list too short) ran it again "to tell", updating
    # a batch norm's running statistics twice
    bn = torch.nn.BatchNorm1d(4)

    def f(x, scales):
        return bn(x) * scales[3]
    torch._dynamo.reset()
    with pytest.raises(IndexError, match="list index out of range"):
        fuser.jit(f)(make((8, 4)), [1.0, 2.0])
    assert int(bn.num_batches_tracked) == 1


def test_the_callers_dynamic_and_static_marks_are_kept():
    # rows mode's static mark beside the caller's mark_dynamic raised torch's raw
    # ConstraintViolationError; and a caller's own mark_static set grew by the row's dim
    def f(x, w):
        return (x * w).sum(-1)
    torch._dynamo.reset()
    x, w = make((4, 8)), make((8,))
    torch._dynamo.mark_dynamic(x, 1)
    torch.testing.assert_close(fuser.jit(f)(x, w), f(x, w))
    y = make((4, 8))
    torch._dynamo.mark_static(y, 0)
    fuser.jit(lambda y: y.exp() * 2)(y)
    assert y._dynamo_static_indices == {0}


def _racing_after_a_held_trace(f, calls: list) -> None:
    """`calls` made from threads that all arrive while another call holds f's trace."""
    threads = [threading.Thread(target=f, args=args) for args in calls]
    with _held_by_another_thread(f._tracing):
        for t in threads:
            t.start()
    for t in threads:
        t.join(timeout=300)


def test_first_calls_waiting_on_a_trace_mark_their_sizes_after_it():
    # each waiting first call marked its row lengths static before the wait, and traced with
    # those marks after the first trace: about twice the graphs, until Dynamo's recompile limit
    # (then new shapes ran uncompiled)
    calls = [(make((4, n), dtype=dtype), make((n,), dtype=dtype))
             for dtype in (torch.float32, torch.bfloat16, torch.float64) for n in (32, 48)]
    torch._dynamo.reset()
    one_by_one = fuser.jit(_softmax_norm)
    for args in calls:
        one_by_one(*args)
    torch._dynamo.reset()
    racing = fuser.jit(_softmax_norm)
    _racing_after_a_held_trace(racing, calls)
    assert racing.cache_info().graphs == one_by_one.cache_info().graphs


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_while_dynamo_traces_can_trace():
    # Dynamo's compile lock, held by a parent's thread the child does not have: the child's
    # first trace (a DataLoader worker's, whose set_num_threads(1) misses the parent's entries)
    # waited on it for good
    import torch._dynamo.convert_frame as convert_frame
    f = fuser.jit(_softmax_norm)
    with _held_by_another_thread(convert_frame.compile_lock):
        pid = _child_calls(f, make((4, 32)), make((32,)))
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, os.waitstatus_to_exitcode(status)
