"""Sweep the inner-outer (norm backward) kernel's warps, programs per multiprocessor, rows a step
and pipelining stages on the GPU, for the hand-written rmsnorm and layernorm backward
definitions. Shares of the copy bandwidth (x, dy read, dx written) measured in the same run;
not part of the suite. `--long`: rows beyond registers (the looped kernel's chunk, warps and
programs a multiprocessor, against the two-kernel form).

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/sweep_inner_outer.py [--long]
"""
from __future__ import annotations

import itertools
import os
import sys

import torch
import triton.testing

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

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


def _cells(shapes) -> str:
    cells = []
    for m, n in shapes:
        x, dy = (torch.randn(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        for name, build in (("rms", fuser_defs.rmsnorm_bwd), ("ln", fuser_defs.layernorm_bwd)):
            fd = build.__wrapped__()
            try:
                fd.execute([x, w, dy])
            except Exception as exc:  # noqa: BLE001 - a configuration beyond the resources
                cells.append(f"{name}[{m}x{n}] {type(exc).__name__}")
                continue
            ms = triton.testing.do_bench(lambda: fd.execute([x, w, dy]), return_mode="median")
            cells.append(f"{name}[{m}x{n}] {3 * x.nbytes / ms / 1e6 / _COPY[0]:.2f}")
    return "  ".join(cells)


_COPY = [0.0]
LONG_SHAPES = ((4096, 32768), (2048, 65536))


def main_long() -> None:
    names = ("INNER_OUTER_LOOPED", "INNER_OUTER_LOOPED_BLOCK", "INNER_OUTER_LOOPED_WARPS",
             "INNER_OUTER_LOOPED_PER_PROCESSOR", "INNER_OUTER_LOOPED_STAGES")
    saved = [getattr(heuristics, k) for k in names]
    heuristics.INNER_OUTER_LOOPED = False
    print("two kernels:", _cells(LONG_SHAPES), flush=True)
    heuristics.INNER_OUTER_LOOPED = True
    for block, warps, per_sm, stages in itertools.product((2048, 4096, 8192), (8, 16), (1, 2, 4), (2, 3)):
        if warps * per_sm > 32 or block * 8 * stages * per_sm > 224 * 1024:
            continue
        for k, v in zip(names[1:], (block, warps, per_sm, stages)):
            setattr(heuristics, k, v)
        print(f"looped, {block} columns a chunk, {warps} warps, {per_sm} programs/SM, {stages} stages:",
              _cells(LONG_SHAPES), flush=True)
    for k, v in zip(names, saved):
        setattr(heuristics, k, v)


def main() -> None:
    copy = _COPY[0] = copy_gbps()
    print(f"copy {copy:.0f} GB/s; torch {torch.__version__}, triton {triton.__version__}")
    if "--long" in sys.argv:
        return main_long()
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
