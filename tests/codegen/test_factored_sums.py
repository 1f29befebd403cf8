"""A looped sum whose product's constant factors wait on another reduction (reductions.py
`_factored`): it shares that reduction's pass only where that reduction is computed in the same
pass, and otherwise waits as before. Cases where the factor's reduction waits on another, is an
online softmax pair's, or is itself a factored sum; each against eager PyTorch."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.schedulers import heuristics

F32 = DataType.Float


@pytest.fixture(autouse=True)
def looped(monkeypatch):
    monkeypatch.setattr(heuristics, "MAX_PERSISTENT", 32)  # rows of 100: looped kernels


def row_sum(fd, v):
    return fd.ops.sum(v, [-1], True)


def define(body):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=F32)
        g = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=F32)
        for out in body(fd, x, g, x.shape()[1]):
            fd.add_output(out)
    return fd


def rms_factor(fd, x, g, n):
    """sum(g * x * rstd), rstd from sum(x * x): rstd's reduction is ready, so one pass."""
    r = fd.ops.rsqrt(fd.ops.add(fd.ops.div(row_sum(fd, fd.ops.mul(x, x)), n), 1e-6))
    return r, row_sum(fd, fd.ops.mul(fd.ops.mul(g, x), r))


def factor_after_two_reductions(fd, x, g, n):
    # the factor's reduction (the variance) waits on the mean: no shared pass
    m = fd.ops.div(row_sum(fd, x), n)
    c = fd.ops.sub(x, m)
    r = fd.ops.rsqrt(fd.ops.add(fd.ops.div(row_sum(fd, fd.ops.mul(c, c)), n), 1e-5))
    return [fd.ops.mul(g, row_sum(fd, fd.ops.mul(fd.ops.mul(g, x), r)))]


def factor_of_a_factored_sum(fd, x, g, n):
    # f2's factor exp(f1) waits on f1, itself factored into the sum(x * x) pass
    _, f1 = rms_factor(fd, x, g, n)
    return [row_sum(fd, fd.ops.mul(x, fd.ops.exp(f1)))]


def factor_of_a_softmax(fd, x, g, n):
    # the factor 1 / sum(exp(x - max)) comes from an online softmax pair, which takes its own pass
    e = fd.ops.exp(fd.ops.sub(x, fd.ops.max(x, [-1], True)))
    s = row_sum(fd, e)
    return [fd.ops.mul(g, row_sum(fd, fd.ops.mul(fd.ops.mul(g, x), fd.ops.reciprocal(s)))), fd.ops.div(e, s)]


def rms_backward(fd, x, g, n):
    r, f = rms_factor(fd, x, g, n)
    return [fd.ops.mul(r, fd.ops.sub(g, fd.ops.mul(fd.ops.mul(x, r), fd.ops.div(f, n))))]


def reference(kind, x, g):
    rs = lambda v: v.sum(-1, keepdim=True)  # noqa: E731
    r = torch.rsqrt(rs(x * x) / x.shape[1] + 1e-6)
    if kind == "factor_after_two_reductions":
        c = x - x.mean(-1, keepdim=True)
        return [g * rs(g * x * torch.rsqrt(rs(c * c) / x.shape[1] + 1e-5))]
    if kind == "factor_of_a_factored_sum":
        return [rs(x * torch.exp(rs(g * x * r)))]
    if kind == "factor_of_a_softmax":
        p = torch.softmax(x, -1)
        return [g * rs(g * x / rs(torch.exp(x - x.amax(-1, keepdim=True)))), p]
    return [r * (g - x * r * rs(g * x * r) / x.shape[1])]


CASES = {"factor_after_two_reductions": (factor_after_two_reductions, 3),
         "factor_of_a_factored_sum": (factor_of_a_factored_sum, 2),
         "factor_of_a_softmax": (factor_of_a_softmax, None),
         "rms_backward": (rms_backward, 2)}


@pytest.mark.parametrize("kind", list(CASES))
def test_factored_sums(kind, device):
    body, passes = CASES[kind]
    fd = define(body)
    x, g = torch.randn(5, 100, device=device) * 0.5, torch.randn(5, 100, device=device)
    for actual, expected in zip(fd.execute([x, g]), reference(kind, x, g)):
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)
    if passes is not None:  # loops over the row in the looped kernel
        assert fd.last_triton_code().count("for c_start in") == passes
