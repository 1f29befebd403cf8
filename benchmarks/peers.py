"""Timing one function through eager, torch.compile and fuser.jit on the GPU, checked against
eager first: the comparison the benchmarks of patterns outside the suite print a line of."""
from __future__ import annotations

from typing import Callable, Sequence

import torch
import triton.testing


def settle(fn: Callable, args: Sequence) -> None:
    """Once `fn` has been called: let fuser's launch forms compiling in the background finish
    (`fuser.finish_tuning`) and make the call that times them, so that what is timed next runs
    the chosen forms (codegen/tuning.py; a no-op for other functions)."""
    import fuser

    fuser.finish_tuning()
    fn(*args)


def compare(fn: Callable, args: Sequence, moved: int, copy_gbps: float, fuser_only: bool = False,
            per_call: bool = False, tolerance: tuple = (2e-2, 5e-2)) -> str:
    """'name share  name share ...' for each version of `fn(*args)`: the share of copy
    bandwidth for `moved` bytes, or with `per_call` the microseconds a call. Outputs are
    compared with eager's (fp32, `tolerance` = (rtol, atol)) before timing."""
    import fuser

    versions = [] if fuser_only else [("eager", fn), ("torch.compile", torch.compile(fn, dynamic=False))]
    want = fn(*args)
    cells = []
    for name, impl in versions + [("fuser.jit", fuser.jit(fn))]:
        got = impl(*args)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            torch.testing.assert_close(g.float(), w.float(), rtol=tolerance[0], atol=tolerance[1])
        settle(impl, args)
        ms = triton.testing.do_bench(lambda: impl(*args), return_mode="median")
        cells.append(f"{name} {ms * 1e3:.1f} us" if per_call else f"{name} {moved / ms / 1e6 / copy_gbps:.2f}")
    return "  ".join(cells)


def host_us(fn: Callable, args: Sequence, calls: int = 2000) -> float:
    """Wall time of a call in a tight loop with the GPU queue far from full (its host cost when
    the kernels are small): the best of 3 rounds, each ended by a synchronize."""
    import time

    for _ in range(50):
        fn(*args)
    settle(fn, args)
    best = float("inf")
    for _ in range(3):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def kernel_us(fn: Callable, args: Sequence, calls: int = 20) -> float:
    """GPU time of a call's kernels (the profiler's kernel durations, summed, a call), each
    call after the L2 cache is flushed as do_bench does: for calls too short for do_bench,
    whose wall time between events then includes the host's (tens of microseconds)."""
    from torch.profiler import ProfilerActivity, profile

    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
    for _ in range(3):
        fn(*args)
    settle(fn, args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flush.zero_()
            fn(*args)
        torch.cuda.synchronize()
    total = sum(e.device_time_total for e in prof.key_averages()
                if e.device_time_total and "fill" not in e.key.lower() and "zero" not in e.key.lower())
    return total / calls
