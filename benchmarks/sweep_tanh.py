"""Time the tanh lowerings of bf16-output kernels (codegen/math.py's `_BF16_UNARY`) on the GELU
rows, on the GPU: the GELU backward reads 0.92 of copy where eager reads 0.97, near the
instructions an element the H200 issues at that bandwidth. Shares of the copy bandwidth
measured in the same run (do_bench). The "approx" lowering (the hardware's tanh.approx.f32,
absolute error up to 5e-4) is a bound on what a cheaper tanh could gain, not a candidate.

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/sweep_tanh.py
"""
from __future__ import annotations

import os
import sys

import torch
import triton.testing

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)

from benchmarks import fuser_defs  # noqa: E402
from benchmarks.sweep_pointwise import copy_gbps  # noqa: E402
from fuser.codegen import math as lowering  # noqa: E402

# helpers for the variants, added to the helper blocks for the sweep
VARIANT_HELPERS = '''
@triton.jit
def _tanh_fdiv(x):
    ax = tl.abs(x)
    e = tl.exp(-2.0 * ax)
    t = tl.fdiv(1.0 - e, 1.0 + e)
    x2 = x * x
    series = x * (1.0 + x2 * (-0.333333343 + x2 * 0.133333340))
    return tl.where(ax < 0.0625, series, tl.where(x < 0, -t, t))


@triton.jit
def _tanh_rcp(x):
    t = 1.0 - tl.fdiv(2.0, 1.0 + tl.exp(2.0 * x))
    x2 = x * x
    series = x * (1.0 + x2 * (-0.333333343 + x2 * 0.133333340))
    return tl.where(tl.abs(x) < 0.0625, series, t)


@triton.jit
def _tanh_rcp_bare(x):
    return 1.0 - tl.fdiv(2.0, 1.0 + tl.exp(2.0 * x))
'''
VARIANTS = {
    "exp (now)": "_tanh({x})",
    "exp, fdiv": "_tanh_fdiv({x})",
    "1-2/(1+e^2x), series": "_tanh_rcp({x})",
    "1-2/(1+e^2x) bare": "_tanh_rcp_bare({x})",
    "approx (bound)": 'tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [{x}], '
                      'dtype=tl.float32, is_pure=True, pack=1)',
}


def main() -> None:
    copy = copy_gbps()
    print(f"copy {copy:.0f} GB/s; torch {torch.__version__}, triton {triton.__version__}")
    lowering._HELPER_BLOCKS.update(lowering._split_helpers(VARIANT_HELPERS))
    for m, n in ((16384, 4096), (16384, 8192), (4096, 32768)):
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        want = torch.ops.aten.gelu_backward(dy.float(), x.float(), approximate="tanh")
        for label, code in VARIANTS.items():
            lowering._BF16_UNARY[lowering.CUDA][lowering.U.tanh] = code
            cells = []
            for name, make, args, moved in (("gelu_dx", fuser_defs.gelu_dx, [x, dy], 3 * x.nbytes),
                                            ("gelu_bias_fwd", fuser_defs.gelu_bias_fwd, [x, b], 2 * x.nbytes)):
                fd = make.__wrapped__()
                (out,) = fd.execute(args)
                if name == "gelu_dx":
                    err = (out.float() - want).abs().max().item()
                ms = triton.testing.do_bench(lambda: fd.execute(args), return_mode="median")
                cells.append(f"{name} {moved / ms / 1e6 / copy:.3f}")
            print(f"[{m}x{n}] {label:22s} " + "  ".join(cells) + f"  (gelu_dx max error {err:.2e})", flush=True)
        eager_ms = triton.testing.do_bench(
            lambda: torch.ops.aten.gelu_backward(dy, x, approximate="tanh"), return_mode="median")
        print(f"[{m}x{n}] eager gelu_backward {3 * x.nbytes / eager_ms / 1e6 / copy:.3f}", flush=True)


if __name__ == "__main__":
    main()
