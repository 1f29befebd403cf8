"""Sweep the inner-reduction kernel (softmax, layernorm and rmsnorm forward): the persistent
kernel (whole row in registers, one program a row block) on 8 to 32 warps, the same kernel
looping over row blocks with its loop pipelined (`--row-loop`: programs a multiprocessor and
stages; heuristics.ROW_LOOP_*), and the looped kernel (one pass over chunks of the row per
reduction, re-reads served by L2) on chunk sizes and warps.
Shares of the copy bandwidth measured in the same run; not part of the suite.

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/sweep_inner.py [--row-loop] [--long] [--persistent]

`--persistent`: only the persistent kernel, on 4 to 32 warps and 1 or 2 rows a program.
`--reload`: the looped kernel with the whole row as its chunk (a loop of one iteration a pass,
the passes after the first re-reading the row from cache), on 8 to 32 warps, against the
persistent kernel on the default warps (and, as the suite runs it, the autotuned forms). With
a loop and masks left in, this measured 0.45-0.62 of copy at 4096x32768 where the one-pass form
without them (codegen/kernel.py `one_pass`) reached 0.98.
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

SHAPES = ((4096, 32768), (16384, 8192), (16384, 4096))
CONFIGS = ([("persistent", None, w) for w in (8, 16, 32)]
           + [("looped", b1, w) for b1 in (1024, 2048, 4096, 8192) for w in (4, 8, 16) if b1 // (32 * w) >= 4])
ROW_LOOP = [(per_sm, stages) for per_sm in (1, 2, 4) for stages in (1, 2, 3)]


PERSISTENT = [("persistent", rows, w) for rows in (1, 2) for w in (4, 8, 16, 32)]
# the whole row as the chunk of the looped kernel, on 8 to 32 warps
RELOAD = [("persistent", None, 0)] + [("looped", None, w) for w in (8, 16, 32)]


def forced(kind: str, block1, warps: int):
    original = heuristics.choose

    def choose(template, r, c):
        if template is not Template.inner_reduction:
            return original(template, r, c)
        if kind == "persistent":  # block1: rows a program (None: 1)
            rows = block1 or 1
            return heuristics.LaunchParams(rows, heuristics.next_pow2(c), True, warps, -(-r // rows))
        return heuristics.LaunchParams(1, block1 or heuristics.next_pow2(c), False, warps, r)
    return choose


def main() -> None:
    copy = copy_gbps()
    print(f"copy {copy:.0f} GB/s; torch {torch.__version__}, triton {triton.__version__}")
    inputs = {}
    for m, n in SHAPES:
        inputs[(m, n)] = (torch.randn(m, n, device="cuda", dtype=torch.bfloat16),
                          torch.randn(n, device="cuda", dtype=torch.bfloat16),
                          torch.randn(n, device="cuda", dtype=torch.bfloat16))
    saved = launch.choose
    row_loop = "--row-loop" in sys.argv
    if "--long" in sys.argv:  # only the longest rows
        inputs = {s: v for s, v in inputs.items() if s == SHAPES[0]}
    configs = ([("rows", per_sm, stages) for per_sm, stages in ROW_LOOP] + [("persistent", None, 0)]
               if row_loop else PERSISTENT if "--persistent" in sys.argv
               else RELOAD if "--reload" in sys.argv else CONFIGS)
    for kind, block1, warps in configs:
        if kind == "rows":  # block1: programs a multiprocessor, warps: stages (default warps)
            heuristics.ROW_LOOP_MIN_COLS, heuristics.ROW_LOOP_PROGRAMS_PER_PROCESSOR = 1, block1
            heuristics.ROW_LOOP_STAGES = warps
        else:
            heuristics.ROW_LOOP_MIN_COLS = None
            launch.choose = forced(kind, block1, warps) if warps else saved
        cells = []
        for (m, n), (x, w, b) in inputs.items():
            for name, build, args in (("softmax", fuser_defs.softmax_fwd, [x]),
                                      ("layernorm", fuser_defs.layernorm_fwd, [x, w, b]),
                                      ("rmsnorm", fuser_defs.rmsnorm_fwd, [x, w])):
                if kind == "persistent" and warps and (block1 or 1) * n // (32 * warps) > 128:
                    cells.append(f"{name}[{m}x{n}] -")  # spills: not a candidate
                    continue
                fd = build.__wrapped__()
                try:
                    fd.execute(args)
                    ms = triton.testing.do_bench(lambda: fd.execute(args), return_mode="median")
                    cells.append(f"{name}[{m}x{n}] {2 * x.nbytes / ms / 1e6 / copy:.2f}")
                except Exception as e:  # a configuration that does not compile (registers)
                    cells.append(f"{name}[{m}x{n}] failed ({type(e).__name__})")
        label = (f"row loop, {block1} programs/SM, {warps} stages" if kind == "rows" else
                 f"persistent {block1 or 1} row(s) a program, warps {warps or 'default'}" if kind == "persistent" else
                 f"{kind:10s} block1 {block1 or 'row'} warps {warps or 'default'}")
        print(f"{label}: " + "  ".join(cells), flush=True)
    launch.choose = saved


if __name__ == "__main__":
    main()
