"""Sweep the pointwise tile (block sizes, warps) and the tanh lowering on the GPU.

For each configuration, fresh FusionDefinitions of the suite's pointwise rows are compiled with
that configuration forced and timed with `triton.testing.do_bench`; figures are shares of the
copy bandwidth measured in the same run. Used to pick the heuristics in
fuser/schedulers/heuristics.py, not part of the suite.

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/sweep_pointwise.py
"""
from __future__ import annotations

import itertools
import os
import sys

import torch
import triton.testing

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)

from benchmarks import fuser_defs  # noqa: E402
from fuser.codegen import launch, math as lowering  # noqa: E402
from fuser.schedulers import heuristics  # noqa: E402
from fuser.schedulers.plan import Template  # noqa: E402

SHAPES = ((16384, 4096), (4096, 32768))
TANH = {"libdevice": "libdevice.tanh({x})",
        "approx": 'tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [{x}], '
                  'dtype=tl.float32, is_pure=True, pack=1)'}


def rows():
    """(name, fresh definition, inputs, bytes moved) for each pointwise row and shape."""
    for m, n in SHAPES:
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        yield f"gelu_bias_fwd[{m}x{n}]", fuser_defs.gelu_bias_fwd.__wrapped__(), [x, b], 2 * x.nbytes
        yield f"gelu_dx[{m}x{n}]", fuser_defs.gelu_dx.__wrapped__(), [x, dy], 3 * x.nbytes


def forced(b1_cap: int, tile: int, warps: int):
    original = heuristics.choose

    def choose(template, r, c):
        if template is not Template.pointwise:
            return original(template, r, c)
        b1 = min(heuristics.next_pow2(c), b1_cap)
        b0 = max(1, min(heuristics.next_pow2(r), tile // b1))
        grid = -(-r // b0) * -(-c // b1)
        return heuristics.LaunchParams(b0, b1, True, warps, grid)
    return choose


def copy_gbps() -> float:
    src = torch.randn(1 << 28, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    return 2 * src.nbytes / triton.testing.do_bench(lambda: dst.copy_(src), return_mode="median") / 1e6


def main() -> None:
    copy = copy_gbps()
    print(f"copy {copy:.0f} GB/s; torch {torch.__version__}, triton {triton.__version__}")
    configs = [(b1, tile, w) for b1, tile, w in itertools.product((1024, 2048), (2048, 4096, 8192), (4, 8, 16))
               if tile >= b1 and tile // (32 * w) >= 4]
    original = launch.choose
    for tanh, code in TANH.items():
        lowering._UNARY[lowering.CUDA][lowering.U.tanh] = code
        for b1, tile, w in (configs if tanh == "libdevice" else [(1024, 4096, 8), (1024, 2048, 4), (2048, 8192, 16)]):
            launch.choose = forced(b1, tile, w)
            cells = []
            for name, fd, args, moved in rows():
                fd.execute(args)
                ms = triton.testing.do_bench(lambda: fd.execute(args), return_mode="median")
                cells.append(f"{name} {moved / ms / 1e6 / copy:.2f}")
            print(f"tanh={tanh:9s} b1<={b1:4d} tile={tile:5d} warps={w:2d}: " + "  ".join(cells), flush=True)
    launch.choose = original


if __name__ == "__main__":
    main()
