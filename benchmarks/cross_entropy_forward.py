"""A cross entropy's forward alone on the GPU against the reductions it is made of: the loss of
bf16 logits [rows, vocab] (a llama-sized 8192 x 32000 by default), the same loss with label
smoothing, a logsumexp of the same logits (the loss without its target's logit), and the
logsumexp minus the target's logit gathered from the input. Each through fuser.jit and
torch.compile, timed by do_bench once fuser's launch forms have been timed
(`fuser.finish_tuning`), with a clone's time as the scale (a read of the logits at copy speed
takes half of it). Not suite rows: the loss should take about the logsumexp's time, since both
read the logits once (lead 11 of docs/performance.md).

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/cross_entropy_forward.py [--shape 8192x32000]
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)

import fuser  # noqa: E402


def cross_entropy(x, target):
    return F.cross_entropy(x.float(), target)


def cross_entropy_smoothed(x, target):
    return F.cross_entropy(x.float(), target, label_smoothing=0.1)


def logsumexp(x, target):
    return torch.logsumexp(x.float(), -1).mean()


def logsumexp_minus_picked(x, target):
    return (torch.logsumexp(x.float(), -1) - x.gather(1, target[:, None]).squeeze(1).float()).mean()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="8192x32000", help="rows x vocabulary")
    opts = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("cross_entropy_forward.py times GPU kernels: no CUDA device here")
    from triton.testing import do_bench

    rows, vocab = (int(n) for n in opts.shape.split("x"))
    torch.manual_seed(0)
    x = torch.randn(rows, vocab, device="cuda", dtype=torch.bfloat16)
    target = torch.randint(0, vocab, (rows,), device="cuda")
    clone = do_bench(lambda: x.clone(), warmup=25, rep=200) * 1e3
    print(f"clone {clone:.1f} us (a read of the logits at copy speed: {clone / 2:.1f} us)")
    for fn in (cross_entropy, cross_entropy_smoothed, logsumexp, logsumexp_minus_picked):
        for label, make in (("fuser.jit", fuser.jit), ("torch.compile", lambda f: torch.compile(f, dynamic=False))):
            impl = make(fn)
            with torch.no_grad():
                want = fn(x, target)
                got = impl(x, target)
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
                fuser.finish_tuning()
                impl(x, target)  # (the call that times fuser's launch forms)
                us = do_bench(lambda: impl(x, target), warmup=25, rep=200) * 1e3
            print(f"{fn.__name__:24s} {label:14s} {us:8.1f} us", flush=True)


if __name__ == "__main__":
    main()
