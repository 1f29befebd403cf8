"""Sweep the inner-outer (norm backward) kernel's warps, programs per multiprocessor, rows a step
and pipelining stages on the GPU, for the hand-written rmsnorm and layernorm backward
definitions. Shares of the copy bandwidth (x, dy read, dx written) measured in the same run;
not part of the suite.

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/sweep_inner_outer.py
"""
from __future__ import annotations

import itertools
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

SHAPES = ((16384, 4096), (16384, 8192))


def forced(warps: int, rows: int):
    original = heuristics.choose

    def choose(template, r, c):
        params = original(template, r, c)
        if template is Template.inner_outer and params.persistent:
            return heuristics.LaunchParams(rows, params.block1, True, warps, -(-r // rows))
        return params
    return choose


def main() -> None:
    copy = copy_gbps()
    print(f"copy {copy:.0f} GB/s; torch {torch.__version__}, triton {triton.__version__}")
    saved = launch.choose, heuristics.INNER_OUTER_WARPS_PER_PROCESSOR, heuristics.INNER_OUTER_STAGES
    configs = [((8, 16, 1), s) for s in (1, 2, 3, 4, 5)]
    configs += itertools.product(((8, 24, 1), (8, 16, 2), (16, 16, 1), (4, 16, 1), (4, 24, 1)), (3, 4))
    for (warps, per_sm, rows), stages in configs:
        if True:
            launch.choose, heuristics.INNER_OUTER_WARPS_PER_PROCESSOR = forced(warps, rows), per_sm
            heuristics.INNER_OUTER_STAGES = stages
            cells = []
            for m, n in SHAPES:
                x, dy = (torch.randn(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
                w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
                for name, build in (("rms", fuser_defs.rmsnorm_bwd), ("ln", fuser_defs.layernorm_bwd)):
                    fd = build.__wrapped__()
                    fd.execute([x, w, dy])
                    ms = triton.testing.do_bench(lambda: fd.execute([x, w, dy]), return_mode="median")
                    cells.append(f"{name}[{m}x{n}] {3 * x.nbytes / ms / 1e6 / copy:.2f}")
            print(f"warps {warps:2d}, {per_sm // warps} programs/SM, {rows} rows a step, {stages} stages: "
                  + "  ".join(cells), flush=True)
    launch.choose, heuristics.INNER_OUTER_WARPS_PER_PROCESSOR, heuristics.INNER_OUTER_STAGES = saved


if __name__ == "__main__":
    main()
