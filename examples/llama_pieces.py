"""A llama-style block piece by piece through `fuser.jit`: RMSNorm, RoPE, per-head RMSNorm then
RoPE (qk-norm), SwiGLU MLP, causal attention with softmax, cross-entropy loss (plain and with
label smoothing). Each piece runs forward and backward against eager PyTorch on fresh random
inputs; with a GPU it also prints its speed against eager and
`torch.compile`.

    python examples/llama_pieces.py            # CPU: small sizes, kernels in Triton's interpreter
    python examples/llama_pieces.py --explain  # also print what fuser made of RMSNorm
    python examples/llama_pieces.py --pieces cross_entropy,ce_smoothed  # only those pieces

The pieces are plain PyTorch functions: fuser captures them with TorchDynamo, traces forward and
backward with AOTAutograd, and lowers the ATen graphs to fusions (generated Triton kernels, with
matmuls through cuBLAS in between).
"""
from __future__ import annotations

import argparse
import math
import types

import torch
import torch.nn.functional as F

import fuser


def rmsnorm(x, weight, eps: float = 1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def rope(x, cos, sin):
    """Rotary embedding of x [batch, seq, heads, head_dim] by cos, sin [seq, 1, head_dim]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def qk_norm_rope(q, weight, cos, sin):
    """Per-head RMSNorm, then the rotary embedding (the query and key path of qk-norm models)."""
    return rope(rmsnorm(q, weight), cos, sin)


def swiglu_mlp(x, w_gate, w_up, w_down):
    return F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)


def causal_attention(q, k, v):
    """q, k, v [batch, heads, seq, head_dim]; softmax in fp32."""
    seq = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    mask = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1)
    probs = torch.softmax(scores.masked_fill(mask, float("-inf")).float(), dim=-1).to(q.dtype)
    return probs @ v


def cross_entropy(logits, target):
    """logits [batch, seq, vocab], flattened as a model's loss does."""
    return F.cross_entropy(logits.float().flatten(0, 1), target.flatten())


def cross_entropy_smoothed(logits, target):
    """The same loss with label smoothing (0.1), as many training recipes set it."""
    return F.cross_entropy(logits.float().flatten(0, 1), target.flatten(), label_smoothing=0.1)


def make_inputs(device, dtype, small: bool):
    b, s, h, d = (2, 8, 2, 16) if small else (8, 1024, 32, 128)
    dim, hidden, vocab = h * d, (64 if small else 11008), (96 if small else 32000)
    r = lambda *shape, grad=True: torch.randn(*shape, device=device, dtype=dtype).requires_grad_(grad)  # noqa: E731
    angles = torch.randn(s, 1, d // 2, device=device)
    cos = torch.cat([angles.cos()] * 2, -1).to(dtype)
    sin = torch.cat([angles.sin()] * 2, -1).to(dtype)
    return {
        "rmsnorm": (rmsnorm, (r(b * s, dim), r(dim))),
        "rope": (rope, (r(b, s, h, d), cos, sin)),
        "qk_norm_rope": (qk_norm_rope, (r(b, s, h, d), r(d), cos, sin)),
        "swiglu_mlp": (swiglu_mlp, (r(b, s, dim), r(hidden, dim) / math.sqrt(dim),
                                    r(hidden, dim) / math.sqrt(dim), r(dim, hidden) / math.sqrt(hidden))),
        "causal_attention": (causal_attention, (r(b, h, s, d), r(b, h, s, d), r(b, h, s, d))),
        "cross_entropy": (cross_entropy, (r(b, s, vocab), torch.randint(0, vocab, (b, s), device=device))),
        "ce_smoothed": (cross_entropy_smoothed, (r(b, s, vocab), torch.randint(0, vocab, (b, s), device=device))),
    }


def leaf_copies(args):
    return [a.detach().clone().requires_grad_(a.requires_grad) if torch.is_tensor(a) else a for a in args]


def forward_backward(fn, args):
    """Outputs and the gradients of every input that requires grad."""
    out = fn(*args)
    wrt = [a for a in args if torch.is_tensor(a) and a.requires_grad]
    grads = torch.autograd.grad(out, wrt, torch.ones_like(out))
    return [out.detach(), *grads]


def max_relative_error(got, want) -> float:
    return max(((g.float() - w.float()).abs().max() / (w.float().abs().max() + 1e-6)).item()
               for g, w in zip(got, want))


def fresh(fn):
    """`fn` with a code object of its own: Dynamo keeps its traces by code object, and the
    check at small sizes traced these functions already (a trace after it has every size
    symbolic, docs/jit.md), so each compiler times its first trace at these sizes."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def speed(name, fn, args):
    """Forward + backward time of eager, torch.compile (dynamic shapes, as fuser.jit) and
    fuser.jit (GPU only)."""
    from triton.testing import do_bench

    contenders = {"eager": fn, "torch.compile": torch.compile(fresh(fn), dynamic=True), "fuser.jit": fuser.jit(fresh(fn))}
    times = {}
    for label, impl in contenders.items():
        a = leaf_copies(args)
        forward_backward(impl, a)  # (compiles)
        # fuser times a launch's other forms once they compiled in the background (its second
        # call starts them): timed before, a call would share the GIL with those compiles
        fuser.finish_tuning()
        forward_backward(impl, a)  # (the call that times the forms and keeps the fastest)
        times[label] = do_bench(lambda: forward_backward(impl, a), warmup=25, rep=200)
    line = "  ".join(f"{k} {v * 1e3:8.1f} us" for k, v in times.items())
    print(f"    {name:17s} {line}   fuser vs eager {times['eager'] / times['fuser.jit']:.2f}x, "
          f"vs torch.compile {times['torch.compile'] / times['fuser.jit']:.2f}x")


def chosen(pieces: dict, names) -> list:
    if not names:
        return list(pieces.items())
    unknown = set(names.split(",")) - set(pieces)
    if unknown:
        raise SystemExit(f"unknown pieces {sorted(unknown)}; the pieces: {', '.join(pieces)}")
    return [(k, v) for k, v in pieces.items() if k in names.split(",")]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--explain", action="store_true", help="print fuser.explain for RMSNorm")
    parser.add_argument("--pieces", help="comma-separated pieces to run (default: all)")
    opts = parser.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    torch.manual_seed(0)

    print(f"== forward and backward against eager ({device}) ==")
    for dtype in (torch.float32, torch.bfloat16):
        for name, (fn, args) in chosen(make_inputs(device, dtype, small=True), opts.pieces):
            jitted = fuser.jit(fn)
            got = forward_backward(jitted, leaf_copies(args))
            want = forward_backward(fn, leaf_copies(args))
            err = max_relative_error(got, want)
            limit = 1e-4 if dtype == torch.float32 else 5e-2
            status = "ok" if err <= limit else "MISMATCH"
            info = jitted.cache_info()
            print(f"  {str(dtype):15s} {name:17s} max rel. error {err:.1e} {status:8s} "
                  f"fusions {info.fusions}, kernels {info.kernels}, ATen fallbacks {info.fallback_ops}")
            assert err <= limit, f"{name} {dtype}: relative error {err}"

    if opts.explain:
        fn, args = make_inputs(device, torch.float32, small=True)["rmsnorm"]
        print(fuser.explain(fn, *args))

    if not cuda:
        print("\n(no GPU: timings against eager and torch.compile are printed on a CUDA machine)")
        return
    print("\n== forward + backward time on the GPU, bf16, llama-7B-like sizes ==")
    for name, (fn, args) in chosen(make_inputs(device, torch.bfloat16, small=False), opts.pieces):
        speed(name, fn, args)


if __name__ == "__main__":
    main()
