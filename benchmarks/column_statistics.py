"""Column statistics on the GPU: centering over the batch (`x - x.mean(0)`) and a batch
normalization written by hand (var_mean over rows, then the normalized rows), bf16, through
eager, torch.compile and fuser.jit. Shares of the copy bandwidth measured in the same run,
counting x read and y written once (every form reads x twice: the statistics, then the rows).
Not a suite row; it measures the two-kernel form of schedulers/plan.py StatisticsParts.

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/column_statistics.py [--fuser-only]
"""
from __future__ import annotations

import os
import sys

import torch
import triton

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)

from benchmarks.peers import compare  # noqa: E402
from benchmarks.sweep_pointwise import copy_gbps  # noqa: E402

SHAPES = ((16384, 1024), (4096, 4096), (8192, 16384))


def center(x: torch.Tensor) -> torch.Tensor:
    return x - x.mean(0)


def batch_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    var, mean = torch.var_mean(xf, 0, correction=0)
    return ((xf - mean) * torch.rsqrt(var + 1e-5) * w + b).to(x.dtype)


def main() -> None:
    copy = copy_gbps()
    print(f"copy {copy:.0f} GB/s; torch {torch.__version__}, triton {triton.__version__}")
    fuser_only = "--fuser-only" in sys.argv
    for m, n in SHAPES:
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        for label, fn, args in (("center", center, (x,)), ("batch_norm", batch_norm, (x, w, b))):
            print(f"{label}[{m}x{n}]: " + compare(fn, args, 2 * x.nbytes, copy, fuser_only), flush=True)


if __name__ == "__main__":
    main()
