"""Host time of the suite's backward rows: where a `torch.autograd.grad` call's time goes when
the kernels are short (16384x4096 on the H200 hosts), for eager, torch.compile, fuser.jit and
the hand-written definitions, beside two floors: autograd through a C++ node and through a
Python node that launch nothing. Not a suite row.

- launch-bound: wall time a call at [64, 256], the GPU far from busy (the host's cost);
- suite shape: do_bench's median (the suite's timing, L2 flushed before each call) and the
  back-to-back time a call (max of host and GPU) at 16384x4096;
- `--suite-order`: first builds and runs every forward row of the suite at that shape through
  fuser.jit and the definitions, as `scripts/bench` does before the backward rows, so that a
  row timed alone can be told from the same row in the suite's state;
- `--profile`: cProfile of each contender's launch-bound call.

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/backward_host.py [--rows rmsnorm_bwd,gelu_bwd]
        [--suite-order] [--profile]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time

import torch
import torch._functorch.config as functorch_config

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from benchmarks import harness, suite  # noqa: E402

CONTENDERS = ("eager", "torch.compile", "fuser", "fuser-fd")
SUITE_SHAPE = (16384, 4096)
SMALL_SHAPE = (64, 256)


class _NoWork(torch.autograd.Function):
    """A Python autograd node whose backward launches nothing."""

    @staticmethod
    def forward(ctx, x):
        ctx.grad = torch.empty_like(x)
        return x.clone()

    @staticmethod
    def backward(ctx, dy):
        return ctx.grad


def floors(shape: tuple) -> dict:
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    through_cpp, through_python = x.clone(), _NoWork.apply(x)  # CloneBackward passes dy on
    return {"floor: C++ node, no launch": lambda: torch.autograd.grad(through_cpp, x, dy, retain_graph=True),
            "floor: Python node, no launch": lambda: torch.autograd.grad(through_python, x, dy, retain_graph=True)}


def runners(kernel: str, shape: tuple) -> dict:
    case = suite.make_case(kernel, *shape)
    args = case.make_inputs(torch.device("cuda"), 0)
    made = {}
    for name in CONTENDERS:
        impl = harness.CONTENDERS[name](case)
        if impl is not None:
            made[name] = suite.make_runner(case, impl.fn, args)
            made[name]()
    return made


def wall_us(fn, calls: int = 2000) -> float:
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def back_to_back_us(fn, calls: int = 200) -> float:
    for _ in range(10):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls * 1e3


def run_forward_rows(shape: tuple) -> None:
    """The suite's forward rows at `shape` through fuser.jit and the definitions, validated
    once and called as the bench calls them (its state before the backward rows)."""
    import triton.testing

    for kernel in suite.ROW_KERNELS:
        case = suite.make_case(kernel, *shape)
        if case.backward:
            continue
        args = case.make_inputs(torch.device("cuda"), 0)
        for name in ("fuser", "fuser-fd"):
            impl = harness.CONTENDERS[name](case)
            if impl is not None:
                triton.testing.do_bench(suite.make_runner(case, impl.fn, args), return_mode="median")


def profile(fn, calls: int = 2000, top: int = 20) -> str:
    wall_us(fn, 200)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main() -> None:
    import triton
    import triton.testing

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="rmsnorm_bwd,layernorm_bwd,gelu_bwd",
                   help="comma-separated backward kernels of the suite")
    p.add_argument("--suite-order", action="store_true", help="run the forward rows first, as the bench does")
    p.add_argument("--profile", action="store_true", help="cProfile each contender's launch-bound call")
    opts = p.parse_args()
    rows = opts.rows.split(",")
    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}")
    with functorch_config.patch(donated_buffer=False):  # (retain_graph=True, as the harness)
        if opts.suite_order:
            run_forward_rows(SUITE_SHAPE)
        print(f"== launch-bound: wall time a call at {list(SMALL_SHAPE)}")
        for kernel in rows:
            for name, fn in {**floors(SMALL_SHAPE), **runners(kernel, SMALL_SHAPE)}.items():
                print(f"{kernel:14s} {name:30s} {wall_us(fn):8.1f} us", flush=True)
        print(f"== {SUITE_SHAPE[0]}x{SUITE_SHAPE[1]}: do_bench median / back-to-back a call")
        for kernel in rows:
            for name, fn in {**floors(SUITE_SHAPE), **runners(kernel, SUITE_SHAPE)}.items():
                median = triton.testing.do_bench(fn, return_mode="median") * 1e3
                print(f"{kernel:14s} {name:30s} {median:8.1f} us {back_to_back_us(fn):8.1f} us", flush=True)
        if opts.profile:
            for kernel in rows:
                for name, fn in runners(kernel, SMALL_SHAPE).items():
                    print(f"== cProfile {kernel} {name}, 2000 calls\n{profile(fn)}")


if __name__ == "__main__":
    if not torch.cuda.is_available():
        sys.exit("backward_host.py needs a CUDA GPU")
    main()
