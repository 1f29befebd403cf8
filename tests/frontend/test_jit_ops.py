"""ATen op coverage of the lowering: small functions, each a family of ops, through
`fuser.jit` against eager on fresh random inputs. Every op here has a lowering, so nothing runs
as a fallback; the functions with no lowering are in test_jit.py."""
import math

import pytest
import torch
import torch.nn.functional as F

import fuser

from .jit_helpers import assert_close_to_eager


def arithmetic(x, y):
    return (torch.add(x, y, alpha=2), torch.sub(x, y, alpha=0.5), 1 - x, x * y, x / (y.abs() + 1),
            torch.div(x, 0.7, rounding_mode="floor"), torch.div(x, y.abs() + 1, rounding_mode="trunc"),
            x ** 2, x ** 3, (x.abs() + 0.1) ** 0.5, (x.abs() + 0.1) ** -0.5, (x.abs() + 1) ** -1,
            torch.pow(x.abs() + 0.5, y), torch.maximum(x, y), torch.minimum(x, y),
            torch.fmod(x, 0.6), torch.remainder(x, 0.6), torch.atan2(x, y))


def unary(x):
    p = x.abs() + 0.1
    return (x.abs(), -x, x.exp(), torch.exp2(x), torch.expm1(x), p.log(), p.log2(), p.log10(),
            torch.log1p(p), p.sqrt(), p.rsqrt(), p.reciprocal(), x.sin(), x.cos(), x.sigmoid(),
            x.relu(), F.silu(x), torch.erf(x), x.floor(), x.ceil(), x.round(), x.trunc(),
            x.sign(), F.gelu(x), F.leaky_relu(x, 0.2), F.hardtanh(x, -0.5, 0.5))


def comparisons(x, y, m):
    return (x < y, x <= 0.2, x > y, x >= y, x == x, x != y, torch.where(x > 0, x, y),
            torch.where(m, x, 0.0), x.masked_fill(m, -1.0), torch.clamp(x, -0.3, 0.4),
            x.clamp(min=0.1), x.clamp(max=-0.1), torch.logical_and(m, x > 0),
            torch.logical_or(m, x > 0), ~m, torch.isnan(x), torch.lerp(x, y, 0.3))


def casts(x, i):
    return (x.to(torch.float16).to(torch.float32), x.to(torch.bfloat16), i.float() / 3,
            (x > 0).to(torch.int64) + i, x.double() * 2, i.to(torch.int32) * 2)


def reductions(x):
    return (x.sum(), x.sum(-1), x.sum((0, 2), keepdim=True), x.mean(), x.mean(1, keepdim=True),
            x.amax(-1), x.amin(0, keepdim=True), x.var(-1), x.var(1, correction=0, keepdim=True),
            x.std(-1), torch.var_mean(x, -1), x.prod(-1), x.max(), x.logsumexp(-1),
            (x > 0).sum(-1), x.norm(dim=-1))


def normalizations(x, w, b):
    return (torch.softmax(x, -1), torch.softmax(x, 0), torch.log_softmax(x, -1),
            F.layer_norm(x, (x.shape[-1],), w, b), F.layer_norm(x, x.shape[1:]),
            F.rms_norm(x, (x.shape[-1],), w, eps=1e-5))


def views(x):
    n = x.shape[0]
    return (x.view(n, -1) * 2, x.permute(2, 0, 1) + 1, x.transpose(0, 1) - 1,
            x.unsqueeze(1).expand(n, 3, *x.shape[1:]) * 0.5, x[:, :1].squeeze(1) + 3,
            x[:, 1:, ::2] * 2, x[:, -1] + 1, x.select(2, 0) * 3, x.reshape(-1)[:5] + 1,
            x.flatten(1).t() * 2)


def joins(x, y):
    a, b = x.split(2, dim=-1)
    c, d, e = x.chunk(3, dim=0)
    return (torch.cat([x, y], -1) * 2, torch.stack([x, y]) + 1, a * b, c + d - e,
            F.pad(x, (1, 2)), torch.unbind(x, 1)[1] * 2)


def creation(x):
    n = x.shape[0]
    return (x + torch.ones_like(x), torch.zeros(n, 3) + x[:, :3], torch.full((n, 2), 2.5) * x[:, :2],
            torch.arange(n) * 2 + x.sum(-1).long(), x.new_full((4,), 7.0) + x[0, :4],
            torch.tensor(3.0) * x)


def matmuls(x, w, b, v):
    return (x @ w.t(), F.linear(x, w, b), torch.addmm(b, x, w.t()), torch.addmm(b, x, w.t(), beta=0.5, alpha=2.0),
            torch.bmm(v, v.transpose(1, 2)) + 1, torch.matmul(v, x.t()) * 2, w.t().mv(b))


def _r(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype)


CASES = {
    "arithmetic": (arithmetic, lambda: (_r(5, 7), _r(5, 7))),
    "unary": (unary, lambda: (_r(5, 7),)),
    "comparisons": (comparisons, lambda: (_r(5, 7), _r(5, 7), torch.rand(5, 7) > 0.5)),
    "casts": (casts, lambda: (_r(5, 7), torch.randint(-4, 5, (5, 7)))),
    "reductions": (reductions, lambda: (_r(3, 5, 7),)),
    "normalizations": (normalizations, lambda: (_r(4, 6, 10), _r(10), _r(10))),
    "views": (views, lambda: (_r(3, 4, 6),)),
    "joins": (joins, lambda: (_r(6, 4), _r(6, 4))),
    "creation": (creation, lambda: (_r(5, 6),)),
    "matmuls": (matmuls, lambda: (_r(5, 8), _r(6, 8), _r(6), _r(3, 5, 8))),
}
# ops of these families that have no lowering on purpose (they run through ATen)
EXPECTED_FALLBACKS: dict = {}


@pytest.mark.parametrize("name", list(CASES))
def test_op_family_matches_eager(name):
    fn, make = CASES[name]
    args = make()
    jitted = fuser.jit(fn)
    got, want = _flat(jitted(*args)), _flat(fn(*args))
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        if w.dtype in (torch.bool, torch.int64, torch.int32):
            assert g.dtype == w.dtype and torch.equal(g, w), f"{name} output {k}"
        elif name == "casts" and w.dtype is torch.float32 and k == 0:
            torch.testing.assert_close(g, w, rtol=1e-3, atol=1e-3)  # a half rounding kept
        else:
            assert_close_to_eager(g, w)
    info = jitted.cache_info()
    assert info.fallback_ops == EXPECTED_FALLBACKS.get(name, 0), info
    assert info.fusions >= 1


def _flat(values) -> list:
    out = []
    for v in values:
        out += _flat(v) if isinstance(v, (tuple, list)) else [v]
    return out


def test_half_precision_families():
    fn, make = CASES["normalizations"]
    args = [a.to(torch.bfloat16) for a in make()]
    ref = fn(*[a.float() for a in args])
    got, want = fuser.jit(fn)(*args), fn(*args)
    for g, w, r in zip(got, want, ref):
        assert_close_to_eager(g, w, r)


def test_tanh_gelu_is_lowered_as_x_sigmoid_and_stays_accurate_in_its_tail():
    """F.gelu(approximate="tanh") becomes x * sigmoid(2z) (the same function): one exp instead
    of a tanh, and no cancellation in 1 + tanh(z) for very negative x, where eager's fp32
    result loses most of its digits."""
    def gelu(x):
        return F.gelu(x, approximate="tanh")

    jitted = fuser.jit(gelu)
    x = torch.cat([torch.linspace(-9.0, -3.0, 64), torch.randn(64)]).reshape(8, 16)
    report = str(fuser.explain(gelu, x))
    assert "sigmoid" in report and "tanh(" not in report.split("-- Triton --")[0]
    xd = x.double()  # F.gelu in fp64 cancels too (below about -7): the sigmoid form is exact
    exact = xd * torch.sigmoid(2 * math.sqrt(2 / math.pi) * (xd + 0.044715 * xd ** 3))
    torch.testing.assert_close(F.gelu(xd, approximate="tanh")[-64:], exact[-64:])
    torch.testing.assert_close(jitted(x).double(), exact, rtol=2e-5, atol=1e-30)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_floating_floor_division_is_atens(dtype):
    # not floor(x / y): 1 // 0.1 is 9 in eager, floor(1 / 0.1) is 10
    def f(x, y):
        return (torch.div(x, 0.1, rounding_mode="floor"), x // -0.3, torch.floor_divide(x, y),
                torch.div(x, y, rounding_mode="floor"), x // 0.0, 0.7 // y)

    gen = torch.Generator().manual_seed(11)
    x = torch.cat([torch.tensor([1.0, 2.0, 0.3, 0.7, 3.0, -1.0, 0.0, -0.0, float("inf"), float("nan")]),
                   torch.randn(54, generator=gen) * 4]).to(dtype)
    y = torch.cat([torch.tensor([0.1, -0.1, 0.0, -0.0, 0.5, -2.0, 3.0, -3.0, 1.0, 1.0]),
                   torch.randn(54, generator=gen)]).to(dtype)
    for got, want in zip(fuser.jit(f)(x, y), f(x, y), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
        assert torch.equal(torch.signbit(got[got == 0]), torch.signbit(want[want == 0]))
