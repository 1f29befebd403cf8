"""First-call compile time of whole jitted models, forward and backward, by phase.

    python benchmarks/compile_model.py                 # train_block's model, and 4/16-layer stacks
    python benchmarks/compile_model.py --layers 1 8 32

Each model runs in a fresh process with empty Triton and fuser caches (Dynamo, AOTAutograd and
Triton start cold there, as in a user's first call; `--keep-caches` uses the environment's).
Rows: the model of `examples/train_block.py`, and stacks of llama-style layers (RMSNorm, SwiGLU
MLP, residual) of the given depths. Columns: the first forward and
backward in ms, fuser's phases (`fuser/timing.py`; lowering = turning the ATen graphs into
definitions), kernels generated and kernels compiled (distinct canonical forms). On the CPU,
kernels run in Triton's interpreter, so "first launch" is no compile there.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _stack(layers: int, device: str):
    import torch
    import torch.nn.functional as F

    def model(x, *ws):
        for k in range(layers):
            gate, up, down, norm = ws[4 * k:4 * k + 4]
            xf = x.float()
            h = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * norm
            x = x + (F.silu(h @ gate) * (h @ up)) @ down
        return x.sum()

    dim, hidden = 32, 64
    ws = []
    for _ in range(layers):
        ws += [torch.randn(dim, hidden, device=device) * 0.1, torch.randn(dim, hidden, device=device) * 0.1,
               torch.randn(hidden, dim, device=device) * 0.1, torch.randn(dim, device=device)]
    args = [torch.randn(8, dim, device=device)] + ws
    return model, [a.requires_grad_() for a in args]


def _train_block(device: str):
    import torch

    sys.path.insert(0, os.path.join(ROOT, "examples"))
    from train_block import Block, batch, rope_tables

    torch.manual_seed(0)
    block = Block(vocab=64, dim=32, heads=2, hidden=64).to(device)
    tokens, targets = batch(64, 2, 8, device)
    cos, sin = rope_tables(8, 16, device)
    return block, [tokens, targets, cos, sin]


def measure(row: str, device: str) -> dict:
    """One row, in this process."""
    from fuser import timing
    timing.enable()
    import torch

    import fuser
    from fuser.codegen import compile as kernel_compile
    from fuser.frontend import backend

    lowering = [0.0]
    plan_graph = backend.plan_graph

    def timed_plan(gm):
        start = time.perf_counter()
        try:
            return plan_graph(gm)
        finally:
            lowering[0] += time.perf_counter() - start
    backend.plan_graph = timed_plan
    model, args = _train_block(device) if row == "train_block" else _stack(int(row.split("-")[0]), device)
    jitted = fuser.jit(model)
    start = time.perf_counter()
    with timing.phase("other"):
        jitted(*args).backward()
        if device == "cuda":
            torch.cuda.synchronize()
    total = time.perf_counter() - start
    phases = {k: round(v * 1e3, 1) for k, v in timing.totals().items() if k != "other"}
    return {"row": row, "first_ms": round(total * 1e3), "lowering_ms": round(lowering[0] * 1e3, 1),
            **phases, "kernels": jitted.cache_info().kernels, "compiled": len(kernel_compile._memory)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, nargs="*", default=[4, 16])
    parser.add_argument("--device", default=None)
    parser.add_argument("--keep-caches", action="store_true",
                        help="use the environment's Triton and fuser caches (default: empty ones a row)")
    parser.add_argument("--row", help=argparse.SUPPRESS)  # internal: measure one row here
    opts = parser.parse_args()
    import torch
    device = opts.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if opts.row:
        print(json.dumps(measure(opts.row, device)))
        return
    rows = ["train_block"] + [f"{n}-layer stack" for n in opts.layers]
    results = []
    for row in rows:
        env = {**os.environ, "PYTHONPATH": ROOT}
        with tempfile.TemporaryDirectory() as triton_cache, tempfile.TemporaryDirectory() as fuser_cache:
            if not opts.keep_caches:  # a cold first call: no kernel compiled or tuned before
                env.update(TRITON_CACHE_DIR=triton_cache, FUSER_CACHE_DIR=fuser_cache)
            done = subprocess.run([sys.executable, __file__, "--row", row, "--device", device],
                                  capture_output=True, text=True, env=env)
        if done.returncode:
            print(f"{row}: failed\n{done.stderr[-2000:]}")
            continue
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    cols = ["first_ms", "lowering_ms", "segmentation", "planning", "codegen", "load", "compile ahead", "first launch",
            "kernels", "compiled"]
    print(f"# First forward + backward of jitted models, {device} (ms)\n")
    print("| model | " + " | ".join(cols) + " |\n| --- |" + " --- |" * len(cols))
    for r in results:
        print(f"| {r['row']} | " + " | ".join(str(r.get(c, "-")) for c in cols) + " |")


if __name__ == "__main__":
    main()
