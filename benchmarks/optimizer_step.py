"""An optimizer's step on the GPU: `Adam(foreach=True)` (torch's default on CUDA) over a
llama-layer-like set of fp32 parameters, through fuser.jit, eager and torch.compile in one
process, each checked against eager's parameters after three steps and timed by do_bench.
`--no-foreach-decomposition` leaves torch's `_foreach_*` ops as ATen calls (the tree before
frontend/foreach.py), for the comparison. `--eager-first` takes one eager step before the
compiled ones: the state then keeps its step counters on the CPU (`capturable=False`), where a
traced first step (Dynamo's) puts them on the GPU (frontend/host_scalars.py is the CPU form's
path). Each contender's first three steps are timed (the first traces and compiles; at
fuser's second its ready program batches launches: the batched kernel compiles). `--kernels`
adds each contender's GPU time a step by kernel (the profiler's, no flush).
Open lead 15 of docs/performance.md.

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/optimizer_step.py [--no-foreach-decomposition] [--eager-first] [--kernels]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)

import fuser  # noqa: E402

SHAPES = [(4096, 4096)] * 8 + [(4096,)] * 8 + [(11008, 4096)] * 2
PASSES = 7  # a step reads parameter, gradient and two moments, and writes parameter and moments


def _setup(device: str):
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, device=device)) for s in SHAPES]
    for p in params:
        p.grad = torch.randn_like(p)
    return params, torch.optim.Adam(params, lr=1e-3, foreach=True)


def _host_us(step, calls: int = 5) -> float:
    """The host's time a step (to its last launch, the GPU left to finish: a few steps' kernels
    stay far below the launch queue's depth), best of 3."""
    best = float("inf")
    for _ in range(3):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            step()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    torch.cuda.synchronize()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-foreach-decomposition", action="store_true")
    parser.add_argument("--eager-first", action="store_true")
    parser.add_argument("--kernels", action="store_true")
    options = parser.parse_args()
    if options.no_foreach_decomposition:
        import fuser.frontend.backend as backend
        backend.foreach_decompositions = dict  # (read once, at the first jit compile)
    from triton.testing import do_bench

    reference = None
    times, hosts = {}, {}
    for name in ("eager", "fuser.jit", "torch.compile"):
        params, opt = _setup("cuda")
        if options.eager_first:
            opt.step()
        step = {"eager": opt.step, "fuser.jit": fuser.jit(lambda: opt.step()),
                "torch.compile": torch.compile(lambda: opt.step())}[name]
        firsts = []  # (the first call traces and compiles; a ready program's second batches, compiling)
        for _ in range(3):
            start = time.perf_counter()
            step()
            torch.cuda.synchronize()
            firsts.append((time.perf_counter() - start) * 1e3)
        print(f"{name}: the first three steps {' / '.join(f'{ms:.1f}' for ms in firsts)} ms")
        if reference is None:
            reference = [p.detach().clone() for p in params]
        else:
            error = max((a - b).abs().max().item() for a, b in zip(params, reference))
            print(f"{name}: largest |parameter - eager's| after 3 steps {error:.3g}")
        times[name] = do_bench(step, warmup=10, rep=200)
        hosts[name] = _host_us(step)
        if options.kernels:
            from benchmarks.harness import kernel_times
            busy = sorted(kernel_times(step, torch.device("cuda")).items(), key=lambda kv: -kv[1])
            print(f"{name}: {sum(t for _, t in busy):.1f} us of kernels a step")
            for kernel, us in busy[:12]:
                print(f"   {kernel:80s} {us:8.1f} us")
        if name == "fuser.jit":
            print(step.cache_info(), "step counters on", opt.state[params[0]]["step"].device)
    elements = sum(torch.Size(s).numel() for s in SHAPES)
    for name, ms in times.items():
        print(f"{name:14s} {ms * 1000:9.1f} us a step ({PASSES * elements * 4 / ms / 1e6:6.0f} GB/s of the "
              f"{PASSES} passes a step needs), the host {hosts[name]:7.1f} us a step")


if __name__ == "__main__":
    main()
