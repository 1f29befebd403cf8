"""Forward + backward of a GPT-2-style MLP block (Linear with bias, tanh GELU, Linear with bias),
bf16, on the GPU, through eager, torch.compile and fuser.jit: milliseconds a step (do_bench
median) and each against eager. Its backward has the pattern of every biased linear layer:
a bias gradient (a column sum of the incoming gradient) beside the weight gradient's matmul
with the gradient's transposed view. Not a suite row.

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/mlp_step.py [--single-thread]

--single-thread times each again with `torch.autograd.set_multithreading_enabled(False)` (the
backward on the calling thread), against the same eager base.
"""
from __future__ import annotations

import os
import sys

# steady-state timings: each launch times its forms at its first call, as the bench's settled
# calls run them (with background compiles, do_bench's calls would all run the default form)
os.environ.setdefault("FUSER_BACKGROUND_COMPILE", "0")

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.testing

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)

import fuser  # noqa: E402


class MLP(nn.Module):
    def __init__(self, d: int, h: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


def main() -> None:
    single_thread = "--single-thread" in sys.argv
    print(f"torch {torch.__version__}, triton {triton.__version__}; ms a forward + backward step")
    for batch, seq, d in ((8, 1024, 1024), (4, 2048, 2048)):
        torch.manual_seed(0)
        model = MLP(d, 4 * d).cuda().bfloat16()
        x = torch.randn(batch, seq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn(batch, seq, d, device="cuda", dtype=torch.bfloat16)
        params = [x, *model.parameters()]
        versions = {"eager": model, "torch.compile": torch.compile(model, dynamic=False),
                    "fuser.jit": fuser.jit(model)}
        want = torch.autograd.grad(model(x), params, dy)
        cells, base = [], None
        for name, fn in versions.items():
            got = torch.autograd.grad(fn(x), params, dy)
            for g, w in zip(got, want):
                torch.testing.assert_close(g.float(), w.float(), rtol=5e-2, atol=5e-1)
            ms = triton.testing.do_bench(lambda: torch.autograd.grad(fn(x), params, dy), return_mode="median")
            base = base or ms
            cells.append(f"{name} {ms:.3f} ({base / ms:.2f}x)")
            if single_thread:  # the engine runs every node on this thread: no hand-off to its device thread
                with torch.autograd.set_multithreading_enabled(False):
                    ms = triton.testing.do_bench(lambda: torch.autograd.grad(fn(x), params, dy), return_mode="median")
                cells.append(f"[one thread {ms:.3f} ({base / ms:.2f}x)]")
        print(f"[{batch}, {seq}, {d}] hidden {4 * d}: " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
