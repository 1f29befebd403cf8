"""Sweep the split of inner reductions over a whole tensor or a few long rows (columns a block,
warps, programs a processor, blocks a chunk at least) on the GPU, beside the unsplit kernel
(one program a row). Shares of the copy bandwidth measured in the same run, counting the
inputs read once, and the kernels' microseconds a call (profiled, L2 flushed before each). Used to pick the INNER_SPLIT_* constants in
fuser/schedulers/heuristics.py, not part of the suite.

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/sweep_inner_split.py
"""
from __future__ import annotations

import os
import sys

import torch

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)
os.environ["FUSER_AUTOTUNE"] = "0"  # the forced configuration alone

import fuser  # noqa: E402
from benchmarks.peers import kernel_us  # noqa: E402
from benchmarks.sweep_pointwise import copy_gbps  # noqa: E402
from fuser.schedulers import heuristics  # noqa: E402

# (columns a block, warps, programs a processor, blocks a chunk at least); None: unsplit
CONFIGS = (None, (4096, 16, 4, 4), (2048, 8, 4, 4), (2048, 8, 8, 4), (2048, 4, 8, 4), (1024, 4, 8, 4),
           (1024, 4, 16, 4), (1024, 8, 8, 4), (1024, 4, 8, 8), (1024, 4, 8, 2), (1024, 2, 16, 4))


def amax(x):
    return x.abs().amax()


def sum_squares(g):
    return (g * g).sum()


def row_sums(x):
    return x.sum(1)


def cases():
    bf16 = dict(device="cuda", dtype=torch.bfloat16)
    yield "amax", amax, (torch.randn(8192, 8192, **bf16),)
    yield "sum_squares", sum_squares, (torch.randn(4096, 16384, device="cuda"),)
    yield "row_sums", row_sums, (torch.randn(16, 1 << 22, **bf16),)
    yield "row_sums", row_sums, (torch.randn(128, 1 << 18, **bf16),)
    yield "row_sums", row_sums, (torch.randn(512, 65536, **bf16),)
    for n in (4096, 2048, 1024, 512, 256):
        yield "amax", amax, (torch.randn(n, n, **bf16),)


def configure(config) -> None:
    if config is None:
        heuristics.INNER_SPLIT_MIN_COLS = 1 << 62
        return
    block, warps, per_processor, min_blocks = config
    heuristics.INNER_SPLIT_MIN_COLS = block * min_blocks * 2
    heuristics.INNER_SPLIT_BLOCK, heuristics.INNER_SPLIT_WARPS = block, warps
    heuristics.INNER_SPLIT_PROGRAMS_PER_PROCESSOR = per_processor
    heuristics.INNER_SPLIT_MIN_CHUNK = block * min_blocks


def main() -> None:
    copy = copy_gbps()
    print(f"copy {copy:.0f} GB/s; torch {torch.__version__}; configs: (block, warps, programs a processor, "
          f"blocks a chunk), None: unsplit")
    for label, fn, args in cases():
        moved = sum(a.nbytes for a in args)
        want = fn(*args).float()
        cells = []
        for config in CONFIGS:
            configure(config)
            torch._dynamo.reset()  # (Dynamo keeps a function's compiled frame across jit wrappers)
            jitted = fuser.jit(fn)
            torch.testing.assert_close(jitted(*args).float(), want, rtol=2e-2, atol=1e-2)
            us = kernel_us(jitted, args)  # (do_bench's figures under ~30 us are the host's)
            cells.append(f"{config}: {moved / us / 1e3 / copy:.2f} ({us:.1f} us)")
        shape = "x".join(map(str, args[0].shape))
        print(f"{label}[{shape}] " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
