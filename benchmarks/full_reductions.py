"""Reductions over a whole tensor on the GPU: an fp8-style amax (`x.abs().amax()`, bf16), an
MSE loss (bf16 prediction and target) and a sum of squares (a gradient norm, fp32), through
eager, torch.compile and fuser.jit. Shares of the copy bandwidth measured in the same run,
counting the inputs read once; and, for a small MSE ([64, 256]), the time of a call. Not suite
rows; they measure passes/split_full_reductions.py.

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/full_reductions.py [--fuser-only]

For the small case it also prints fuser.jit's host time a call and how many calls took the
direct path (an MSE loss of [64, 256] read 42 us a call under do_bench on the H200, an amax
4.2 us: to be explained).
"""
from __future__ import annotations

import os
import sys

# steady-state timings: each launch times its forms at its first call, as the bench's settled
# calls run them (with background compiles, do_bench's calls would all run the default form)
os.environ.setdefault("FUSER_BACKGROUND_COMPILE", "0")

import torch
import torch.nn.functional as F
import triton

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)

import fuser  # noqa: E402
from benchmarks.peers import compare, host_us, kernel_us  # noqa: E402
from benchmarks.sweep_pointwise import copy_gbps  # noqa: E402


def amax(x):
    return x.abs().amax()


def mse(p, t):
    return F.mse_loss(p, t)


def sum_squares(g):
    return (g * g).sum()


def cases(small: bool):
    m, n = (64, 256) if small else (8192, 8192)
    bf16 = dict(device="cuda", dtype=torch.bfloat16)
    yield "amax", amax, (torch.randn(m, n, **bf16),)
    yield "mse", mse, (torch.randn(m, n, **bf16), torch.randn(m, n, **bf16))
    yield "sum_squares", sum_squares, (torch.randn(m // 2 or 1, n * 2, device="cuda"),)


def main() -> None:
    copy = copy_gbps()
    print(f"copy {copy:.0f} GB/s; torch {torch.__version__}, triton {triton.__version__}")
    fuser_only = "--fuser-only" in sys.argv
    for small in (False, True):
        for label, fn, args in cases(small):
            shape = "x".join(map(str, args[0].shape))
            line = compare(fn, args, sum(a.nbytes for a in args), copy, fuser_only, per_call=small,
                           tolerance=(2e-2, 1e-2))
            print(f"{label}[{shape}]: {line}", flush=True)
            if small:  # where a small call's time goes: the host's part, and fuser.jit's path
                jitted = fuser.jit(fn)
                host = host_us(jitted, args)
                print(f"   kernels {kernel_us(jitted, args):.1f} us a call (eager's {kernel_us(fn, args):.1f}); "
                      f"fuser.jit host {host:.1f} us a call, eager {host_us(fn, args):.1f} us; "
                      f"direct path {jitted._direct.hits} of {jitted.cache_info().calls} calls; "
                      f"{jitted.cache_info()}", flush=True)


if __name__ == "__main__":
    main()
