"""Pointwise functions on channels-last and transposed bf16 tensors, through eager,
torch.compile and fuser.jit, as a share of the copy bandwidth measured in the same run (each
input read once, each output written once), with the result's strides checked against eager's.
Not a suite row: it shows that a permuted input and its result stream as a contiguous pair does.

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/layouts.py
"""
from __future__ import annotations

import os
import sys

# steady-state timings: each launch times its forms at its first call, as the bench's settled
# calls run them (with background compiles, do_bench's calls would all run the default form)
os.environ.setdefault("FUSER_BACKGROUND_COMPILE", "0")

import torch
import triton.testing

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)

import fuser  # noqa: E402
from benchmarks.sweep_pointwise import copy_gbps  # noqa: E402


def bias_gelu(x, b):
    return torch.nn.functional.gelu(x + b, approximate="tanh")


def scale_shift(x):
    return x * 2.0 + 1.0


def cases():
    """(name, function, inputs) with the layout named."""
    x = torch.randn(64, 256, 56, 56, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1, 256, 1, 1, device="cuda", dtype=torch.bfloat16)
    for fmt, label in ((torch.contiguous_format, "contiguous"), (torch.channels_last, "channels-last")):
        xs = x.contiguous(memory_format=fmt)
        yield f"bias + gelu [64, 256, 56, 56] {label}", bias_gelu, [xs, b]
        yield f"x * 2 + 1 [64, 256, 56, 56] {label}", scale_shift, [xs]
    t = torch.randn(8192, 16384, device="cuda", dtype=torch.bfloat16)
    yield "x * 2 + 1 [16384, 8192] row-major", scale_shift, [t.t().contiguous()]
    yield "x * 2 + 1 [16384, 8192] transposed", scale_shift, [t.t()]


def main() -> None:
    copy = copy_gbps()
    print(f"{torch.cuda.get_device_name()}: copy {copy:.0f} GB/s; torch {torch.__version__}, "
          f"triton {triton.__version__}")
    print("| case | eager | torch.compile | fuser.jit | fuser's strides = eager's |")
    print("| --- | --- | --- | --- | --- |")
    for name, fn, args in cases():
        want = fn(*args)
        moved = sum(a.nbytes for a in args) + want.nbytes
        cells, same = [], None
        for contender in (fn, torch.compile(fn), fuser.jit(fn)):
            out = contender(*args)
            torch.testing.assert_close(out, want, rtol=2e-2, atol=2e-2)
            if contender is not fn:
                same = out.stride() == want.stride()
            ms = triton.testing.do_bench(lambda: contender(*args), return_mode="median")
            cells.append(f"{moved / ms / 1e6 / copy:.2f}")
        print(f"| {name} | {' | '.join(cells)} | {'yes' if same else 'NO'} |", flush=True)


if __name__ == "__main__":
    if not torch.cuda.is_available():
        sys.exit("benchmarks/layouts.py needs a CUDA GPU")
    main()
