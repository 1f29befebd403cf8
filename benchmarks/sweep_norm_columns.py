"""Sweep the column kernel of the long-row norm backward (rows too long for registers run as a
row kernel, then a column kernel for dw and db: an outer reduction over rows) on the GPU: its
tile (columns and rows per step, warps) and the split factor, for the suite's rmsnorm and
layernorm backward at 4096x32768 through fuser.jit. Shares of the copy
bandwidth measured in the same run; not part of the suite.

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/sweep_norm_columns.py
"""
from __future__ import annotations

import os
import sys

import torch
import triton.testing

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)

import fuser  # noqa: E402
from benchmarks import suite  # noqa: E402
from benchmarks.sweep_colsum import forced  # noqa: E402
from benchmarks.sweep_pointwise import copy_gbps  # noqa: E402
from fuser.codegen import launch  # noqa: E402

ROWS = (("rmsnorm_bwd", (4096, 32768)), ("layernorm_bwd", (4096, 32768)))
TILES = ((64, 32), (128, 16), (128, 32), (128, 64), (256, 16), (256, 32), (512, 8))


def share(case, copy: float) -> float:
    torch._dynamo.reset()
    args = case.make_inputs("cuda")
    runner = suite.make_runner(case, fuser.jit(case.fn), args)
    runner()
    ms = triton.testing.do_bench(runner, return_mode="median")
    return case.bytes_moved / ms / 1e6 / copy


def main() -> None:
    copy = copy_gbps()
    print(f"copy {copy:.0f} GB/s; torch {torch.__version__}, triton {triton.__version__}")
    cases = [suite.make_case(k, *shape) for k, shape in ROWS]
    print("default: " + "  ".join(f"{c.name} {share(c, copy):.2f}" for c in cases), flush=True)
    saved = launch.choose, launch.split_count
    for b1, b0 in TILES:
        for per_processor in (2, 4, 8):
            launch.choose, launch.split_count = forced(b1, b0, per_processor)
            cells = "  ".join(f"{c.name} {share(c, copy):.2f}" for c in cases)
            print(f"cols {b1:3d} rows {b0:2d} programs/SM {per_processor}: {cells}", flush=True)
    launch.choose, launch.split_count = saved


if __name__ == "__main__":
    main()
