"""Sweep: the looped form of the long-row reductions at 4096x32768 on more chunk sizes and warps.

Widens the autotuner's looped candidates (heuristics.looped_forms: 4096-column chunks on 32
warps) to chunks of 2048, 4096 and 8192 columns on 8, 16 and 32 warps, then runs each named
suite row once through fuser.jit, so that the autotuner times every form beside the others
(FUSER_DUMP=autotune prints them). Use a fresh FUSER_CACHE_DIR, or the remembered choices are
reused without timing.

    FUSER_DUMP=autotune FUSER_CACHE_DIR=$(mktemp -d) python3 benchmarks/sweep_looped_forms.py layernorm_bwd rmsnorm_bwd
"""
import os
import sys
from dataclasses import replace

import torch

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)

import fuser  # noqa: E402
from benchmarks import suite  # noqa: E402
from fuser.codegen import launch  # noqa: E402
from fuser.schedulers import heuristics  # noqa: E402


def wide_looped_forms(params, rows, cols):
    if not heuristics.looped_forms(params, rows, cols):
        return []
    return [replace(heuristics.looped_inner(rows), block1=b, num_warps=w)
            for b in (2048, 4096, 8192) for w in (8, 16, 32) if b // (32 * w) >= 2]


def main() -> None:
    launch.looped_forms = wide_looped_forms  # (launch.py imported the name)
    for kernel in sys.argv[1:] or ["layernorm_bwd", "rmsnorm_bwd"]:
        case = next(c for c in suite.build_suite() if c.kernel == kernel and c.shape == (4096, 32768))
        suite.make_runner(case, fuser.jit(case.fn), case.make_inputs("cuda"))()
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
