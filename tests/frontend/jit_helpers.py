"""Helpers for the `fuser.jit` tests: run a function through fuser and eager on the same fresh
random inputs, forward and backward, and compare with dtype-aware tolerances."""
from __future__ import annotations

import math
from typing import Callable, Sequence

import torch

# (rtol, atol) for comparing fuser against eager in the same dtype. Fused kernels keep
# intermediates in fp32 where eager rounds each op to the tensor's dtype, so half types get the
# tolerance of a few roundings.
TOL = {torch.float32: (1e-4, 1e-4), torch.float64: (1e-7, 1e-7),
       torch.bfloat16: (3e-2, 3e-2), torch.float16: (5e-3, 5e-3)}


def clone_args(args: Sequence) -> list:
    return [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
            for a in args]


def as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _dense(t: torch.Tensor) -> bool:
    """Whether `t` covers its storage span without gaps or overlaps (any axis order)."""
    step = 1
    for size, stride in sorted(((n, s) for n, s in zip(t.shape, t.stride()) if n > 1), key=lambda p: p[1]):
        if stride != step:
            return False
        step *= size
    return True


def assert_same_layout(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """fuser's result is laid out as eager's (strides of the axes longer than 1), where eager's
    is dense: outputs take eager's strides (docs/jit.md)."""
    if _dense(expected) and actual.numel() > 1:
        want = [(s, n) for s, n in zip(expected.stride(), expected.shape) if n > 1]
        got = [(s, n) for s, n in zip(actual.stride(), actual.shape) if n > 1]
        assert got == want, f"strides {actual.stride()}, eager's {expected.stride()} (shape {tuple(actual.shape)})"


def assert_close_to_eager(actual, expected, reference=None, layout: bool = False):
    """`actual` (fuser) matches `expected` (eager, same dtype). For half types with a
    `reference` (the same computation in fp32), fuser's error against it must also be no
    worse than about twice eager's: rounding differences compound through matmuls. `layout`:
    also eager's strides (forward outputs; a backward's gradients follow AOTAutograd's trace,
    which takes the incoming gradients as contiguous)."""
    references = as_tuple(reference) if reference is not None else [None] * len(as_tuple(actual))
    # the call's scale: its largest reference value, over every output
    call_scale = max((r.double().abs().max().item() for r in references
                      if isinstance(r, torch.Tensor) and r.numel() and r.is_floating_point()), default=0.0)
    for a, e, r in zip(as_tuple(actual), as_tuple(expected), references):
        if e is None:
            assert a is None
            continue
        assert a.dtype == e.dtype and a.shape == e.shape, (a.dtype, a.shape, e.dtype, e.shape)
        if layout:
            assert_same_layout(a, e)
        if r is not None and e.dtype in (torch.bfloat16, torch.float16):
            err = (a.double() - r.double()).abs().max().item()
            eager_err = (e.double() - r.double()).abs().max().item()
            scale = r.double().abs().max().item() + 1e-6
            # beside 1% of the largest reference value, torch.testing's default absolute
            # tolerance for half types: where every value is so small that 1% falls below the
            # dtype's resolution (a gradient that is fp32 rounding noise of about 1e-7, which the
            # reference repeats when the program casts to fp32 itself, `x.float()`; fuzz seed
            # 900304)
            floor = 1e-5
            if math.isnan(eager_err) and not math.isnan(err):
                # eager's half intermediates made a NaN the reference has not (F.normalize's eps
                # of 1e-12 is 0 in fp16, so a zero row is 0 / 0); fuser's fp32 ones did not
                assert err <= 1e-2 * scale + floor, (err, eager_err, scale)
                continue
            if eager_err > scale:
                # an output below eager's own rounding (a gradient that cancels to zero beside
                # others of size 6: fuzz seed 12095): both are rounding noise, whose size follows
                # the order of the roundings, not the output; over 30 draws of that program eager's
                # and fuser's errors had the same median and either was 2.5x the other's at times
                scale = max(scale, call_scale)
            assert err <= 2.5 * eager_err + 1e-2 * scale + floor, (err, eager_err, scale)
            continue
        rtol, atol = TOL.get(e.dtype, (0, 0))
        torch.testing.assert_close(a, e, rtol=rtol, atol=atol)


def check_forward_backward(fn: Callable, jitted: Callable, args: Sequence, reference_dtype=None):
    """Forward outputs and gradients of every input that requires grad, fuser vs eager."""
    ours, theirs = clone_args(args), clone_args(args)
    out, ref = jitted(*ours), fn(*theirs)
    high = None
    if reference_dtype is not None:
        hi_args = [a.detach().to(reference_dtype).requires_grad_(a.requires_grad)
                   if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
        high = fn(*hi_args)
    assert_close_to_eager(out, ref, high, layout=True)
    wrt = [k for k, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad]
    if not wrt:
        return
    outs = [o for o in as_tuple(out) if isinstance(o, torch.Tensor) and o.requires_grad]
    refs = [o for o in as_tuple(ref) if isinstance(o, torch.Tensor) and o.requires_grad]
    grads = [torch.randn_like(o) for o in refs]
    got = torch.autograd.grad(outs, [ours[k] for k in wrt], grads)
    want = torch.autograd.grad(refs, [theirs[k] for k in wrt], grads)
    high_grads = None
    if high is not None:
        his = [o for o in as_tuple(high) if isinstance(o, torch.Tensor) and o.requires_grad]
        hi_in = [h for h in hi_args if isinstance(h, torch.Tensor) and h.requires_grad]
        high_grads = torch.autograd.grad(his, hi_in, [g.to(reference_dtype) for g in grads])
    assert_close_to_eager(got, want, high_grads)


def assert_compile_names_the_op_without_derivative(fn: Callable, x: torch.Tensor) -> None:
    """`torch.compile(fn, backend="fuser")(x)`, x needing grad, through an op torch cannot
    differentiate: fuser's UnsupportedError inside Dynamo's error, saying what to do; under
    torch.no_grad() eager's values."""
    import warnings

    import pytest

    import fuser

    compiled = torch.compile(fn, backend="fuser")
    with warnings.catch_warnings(), pytest.raises(Exception) as caught:
        warnings.simplefilter("ignore")
        compiled(x)
    inner = getattr(caught.value, "inner_exception", caught.value)
    assert isinstance(inner, fuser.UnsupportedError), repr(caught.value)
    assert "op torch cannot differentiate" in str(inner) and "torch.no_grad()" in str(inner)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), fn(x))
