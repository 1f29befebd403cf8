"""Sweep the column-reduction tile (columns and rows per step, warps) and the split factor on
the GPU, for the suite's colsum row at its three shapes. Shares of the copy bandwidth measured
in the same run. Used to pick the outer-reduction heuristics, not part of the suite.

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/sweep_colsum.py
"""
from __future__ import annotations

import os
import sys

import torch
import triton.testing

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)

from benchmarks import fuser_defs  # noqa: E402
from benchmarks.sweep_pointwise import copy_gbps  # noqa: E402
from fuser.codegen import launch  # noqa: E402
from fuser.schedulers import heuristics  # noqa: E402
from fuser.schedulers.plan import Template  # noqa: E402

SHAPES = ((16384, 4096), (16384, 8192), (4096, 32768))
TILES = ((64, 64), (128, 16), (128, 32), (256, 8), (256, 16), (256, 32), (512, 4), (512, 8), (512, 16))


def forced(b1: int, b0: int, per_processor: int):
    original = heuristics.choose

    def choose(template, r, c):
        if template is not Template.outer_reduction:
            return original(template, r, c)
        warps = 4 if b0 * b1 <= 4096 else 8
        return heuristics.LaunchParams(b0, b1, False, warps, -(-c // b1))

    def split_count(params, r, processors, per_processor_default=None):
        if params.grid >= per_processor * processors:
            return 1
        return max(1, min(-(-per_processor * processors // params.grid), r // params.block0))
    return choose, split_count


def main() -> None:
    copy = copy_gbps()
    print(f"copy {copy:.0f} GB/s; torch {torch.__version__}, triton {triton.__version__}")
    inputs = {s: torch.randn(*s, device="cuda", dtype=torch.bfloat16) for s in SHAPES}
    saved = launch.choose, launch.split_count
    for b1, b0 in TILES:
        for per_processor in (2, 4, 8):
            launch.choose, launch.split_count = forced(b1, b0, per_processor)
            cells = []
            for shape, x in inputs.items():
                fd = fuser_defs.colsum_fwd.__wrapped__()
                fd.execute([x])
                ms = triton.testing.do_bench(lambda: fd.execute([x]), return_mode="median")
                moved = x.nbytes + shape[1] * 4
                cells.append(f"{shape[0]}x{shape[1]} {moved / ms / 1e6 / copy:.2f}")
            print(f"cols {b1:3d} rows {b0:2d} programs/SM {per_processor}: " + "  ".join(cells), flush=True)
    launch.choose, launch.split_count = saved


if __name__ == "__main__":
    main()
