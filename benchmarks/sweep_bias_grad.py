"""Sweep the tile and split of an outer reduction that also stores an output of its rows (the
tanh GELU's gradient and its column sums, `fuser_defs.gelu_dx_bias_grad`), beside the plain
column sum, on the GPU. Shares of the copy bandwidth measured in the same run (the gradient:
x and dy read, dz written; the column sum: x read). Used to pick OUTER_STORING_ROWS and
OUTER_STORING_PROGRAMS_PER_PROCESSOR in fuser/schedulers/heuristics.py, not part of the suite.

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/sweep_bias_grad.py
    ... --peers   # instead: eager, torch.compile and fuser.jit on `gelu_and_bias_grads`
"""
from __future__ import annotations

import os
import sys

import torch
import triton.testing

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)
os.environ["FUSER_AUTOTUNE"] = "0"  # the forced configuration alone

from benchmarks import fuser_defs  # noqa: E402
from benchmarks.sweep_pointwise import copy_gbps  # noqa: E402
from fuser.codegen import launch  # noqa: E402
from fuser.schedulers import heuristics  # noqa: E402
from fuser.schedulers.plan import Template  # noqa: E402

SHAPES = ((16384, 4096), (4096, 4096), (65536, 1024))
# (columns a program, rows a step, warps, programs a processor when split)
CONFIGS = ((128, 32, 4, 4), (128, 32, 8, 4), (128, 16, 4, 8), (128, 16, 8, 8), (128, 8, 4, 8), (128, 8, 4, 4),
           (128, 8, 4, 16), (256, 8, 8, 8), (128, 32, 16, 4))


def forced(b1: int, b0: int, warps: int, per_processor: int):
    original = heuristics.choose

    def choose(template, r, c):
        if template is not Template.outer_reduction:
            return original(template, r, c)
        return heuristics.LaunchParams(b0, b1, False, warps, -(-c // b1))

    def split_count(params, rows, processors, _per_processor=None):
        return heuristics.split_count(params, rows, processors, per_processor)
    # the heuristic's own tile for storing kernels would override the forced one
    return choose, split_count, lambda params: params


def gelu_and_bias_grads(x: torch.Tensor, dy: torch.Tensor) -> tuple:
    """The backward of a linear layer's bias and tanh GELU as AOTAutograd writes it."""
    dz = torch.ops.aten.gelu_backward(dy, x, approximate="tanh")
    return dz, dz.sum(0)


def peers(copy: float) -> None:
    from benchmarks.peers import compare

    for m, n in SHAPES + ((16384, 16384),):
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn_like(x)
        line = compare(gelu_and_bias_grads, (x, dy), 3 * x.nbytes, copy)
        print(f"{m}x{n}: {line}", flush=True)


def timed(fd, args) -> float:
    fd.execute(args)
    return triton.testing.do_bench(lambda: fd.execute(args), return_mode="median")


def main() -> None:
    copy = copy_gbps()
    print(f"copy {copy:.0f} GB/s; torch {torch.__version__}, triton {triton.__version__}")
    if "--peers" in sys.argv:
        del os.environ["FUSER_AUTOTUNE"]  # fuser as users run it
        return peers(copy)
    inputs = {s: (torch.randn(*s, device="cuda", dtype=torch.bfloat16),
                  torch.randn(*s, device="cuda", dtype=torch.bfloat16)) for s in SHAPES}
    saved = launch.choose, launch.split_count, launch.outer_storing
    for config in (None,) + CONFIGS:
        if config is not None:
            launch.choose, launch.split_count, launch.outer_storing = forced(*config)
        cells = []
        for (m, n), (x, dy) in inputs.items():
            grad = 3 * x.nbytes / timed(fuser_defs.gelu_dx_bias_grad.__wrapped__(), [x, dy]) / 1e6 / copy
            colsum = x.nbytes / timed(fuser_defs.colsum_fwd.__wrapped__(), [x]) / 1e6 / copy
            cells.append(f"{m}x{n} {grad:.2f} (colsum {colsum:.2f})")
        label = "heuristics" if config is None else "cols {} rows {} warps {} programs/SM {}".format(*config)
        print(f"{label:40s} " + "  ".join(cells), flush=True)
        launch.choose, launch.split_count, launch.outer_storing = saved


if __name__ == "__main__":
    main()
