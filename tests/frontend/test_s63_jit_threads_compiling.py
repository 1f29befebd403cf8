"""Calls of a compiled jitted function while another thread compiles run fuser's program: the
probe of the sixty-third session found them running the Python function eagerly (unfused,
uncounted), for `torch.compiler.is_compiling()` is one flag for the whole process."""
import concurrent.futures as cf
import threading

import torch

import fuser


def _block(x, w):
    return torch.nn.functional.layer_norm(torch.relu(x @ w), (w.shape[1],)) * 2.0


def test_calls_during_another_threads_compile_run_the_compiled_program():
    torch._dynamo.reset()
    f = fuser.jit(_block)
    eager_calls = []
    inner = f._fn
    f._fn = lambda *a, **k: (eager_calls.append(1), inner(*a, **k))[1]
    w = torch.randn(32, 32)
    f(torch.randn(4, 32), w)  # compiled for rows of 32
    stop = threading.Event()
    started = threading.Event()

    def steady() -> int:
        n = 0
        while not stop.is_set() or n == 0:
            x = torch.randn(4, 32)
            torch.testing.assert_close(f(x, w), _block(x, w))
            n += 1
            started.set()
        return n

    def retrace() -> None:
        started.wait(60)
        for columns in (48, 64):  # new row lengths: Dynamo traces again, in this thread
            x, w2 = torch.randn(4, 32), torch.randn(32, columns)
            torch.testing.assert_close(f(x, w2), _block(x, w2))
        stop.set()

    before = f.cache_info().calls
    with cf.ThreadPoolExecutor(3) as pool:
        steady_calls = [pool.submit(steady) for _ in range(2)]
        pool.submit(retrace).result(timeout=600)
        made = sum(c.result(timeout=600) for c in steady_calls) + 2
    assert eager_calls == []
    assert f.cache_info().calls - before == made


def test_a_jitted_function_inside_a_compiled_one_joins_its_trace():
    torch._dynamo.reset()
    inner = fuser.jit(lambda x: torch.sigmoid(x) * x)
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    outer = torch.compile(lambda x: inner(x + 1).sum(-1), backend=counting)
    x = torch.randn(4, 8)
    torch.testing.assert_close(outer(x), (torch.sigmoid(x + 1) * (x + 1)).sum(-1))
    assert len(graphs) == 1  # (one graph: no break at fuser's call path)
    assert inner.cache_info().calls == 0
