"""Reductions over few long rows on the GPU: a softmax for sampling at decode time (1-64 rows
of a 128K vocabulary, bf16), a logsumexp of the same, and a row sum, which splits across
programs (fuser/schedulers/heuristics.py `inner_split`). Kernel time a call (profiled, L2
flushed before each call: `benchmarks/peers.kernel_us`) through eager, torch.compile and
fuser.jit, and the share of copy bandwidth it makes (the input read once, the output written
once). Not suite rows: the softmax's statistics split across programs as online pairs, then a
pointwise kernel writes the rows (schedulers/plan.py StatisticsParts; docs/performance-history.md).

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/few_long_rows.py
"""
from __future__ import annotations

import os
import sys

import torch

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)

import fuser  # noqa: E402
from benchmarks.peers import kernel_us  # noqa: E402
from benchmarks.sweep_pointwise import copy_gbps  # noqa: E402


def softmax(x):
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def logsumexp(x):
    return torch.logsumexp(x.float(), dim=-1)


def row_sum(x):
    return x.float().sum(-1)


def main() -> None:
    copy = copy_gbps()
    print(f"copy {copy:.0f} GB/s; torch {torch.__version__}; kernel us a call (share of copy)")
    for rows in (1, 8, 64):
        x = torch.randn(rows, 128256, device="cuda", dtype=torch.bfloat16)
        for fn in (softmax, logsumexp, row_sum):
            want = fn(x)
            moved = x.nbytes + want.nbytes
            cells = []
            for name, impl in (("eager", fn), ("torch.compile", torch.compile(fn, dynamic=False)),
                               ("fuser.jit", fuser.jit(fn))):
                torch.testing.assert_close(impl(x).float(), want.float(), rtol=2e-2, atol=1e-2)
                us = kernel_us(impl, (x,))
                cells.append(f"{name} {us:.1f} ({moved / us / 1e3 / copy:.2f})")
            print(f"{fn.__name__}[{rows}x128256]: " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
