"""A division by a softmax's sum, sum(exp(x - max(x))), multiplies by its reciprocal, one
division a row (`KernelPlan.softmax_sums`): that sum is at least 1 or NaN (0 for an empty row),
so the reciprocal is a normal number and the product differs from the quotient by rounding
alone. Any other divisor keeps its division."""
import math
import re

import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition
from fuser.schedulers import heuristics

from tests.codegen.test_online_softmax import softmax_fd

RECIPROCAL = "* (1.0 / T"


def divides(code: str) -> bool:
    """Whether the kernel's code (not its header's IR) divides one value by another."""
    return re.search(r"\(T\d+ / T\d+\)", code) is not None
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


def divided_by(shift: bool, guard: bool = False):
    """x / sum(exp(x - m)) with m the row's max (`shift`) or without a shift; `guard`: the max
    made 0 where infinite (logsumexp's shift, whose sum may be 0 or inf)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        e = fd.ops.exp(x)
        if shift:
            m = fd.ops.max(x, [-1], True)
            if guard:
                m = fd.ops.where(fd.ops.eq(fd.ops.abs(m), math.inf), 0.0, m)
            e = fd.ops.exp(fd.ops.sub(x, m))
        fd.add_output(fd.ops.div(x, fd.ops.sum(e, [-1], True)))
    return fd


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("looped", [False, True])
def test_softmax_multiplies_by_its_sums_reciprocal(monkeypatch, dtype, looped, device):
    if looped:
        monkeypatch.setattr(heuristics, "MAX_PERSISTENT", 32)
    x = (torch.randn(7, 300, device=device) * 4).to(dtype)
    fd = softmax_fd(dtype)
    (y,) = fd.execute([x])
    torch.testing.assert_close(y, torch.softmax(x.float(), -1).to(dtype), rtol=TOL[dtype], atol=TOL[dtype])
    code = fd.last_triton_code()
    assert RECIPROCAL in code and not divides(code), code  # (a looped row: once a loop)


@pytest.mark.parametrize("shift,guard", [(False, False), (True, True)])
def test_other_divisors_keep_their_division(shift, guard, device):
    """sum(exp(x)) may be subnormal or overflow, and logsumexp's guarded shift's sum is 0 or
    inf on rows of -inf or inf: those divide."""
    x = torch.randn(5, 40, device=device) * 3
    fd = divided_by(shift, guard)
    (y,) = fd.execute([x])
    ref = x / torch.exp(x - x.amax(-1, keepdim=True) if shift else x).sum(-1, keepdim=True)
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-6)
    code = fd.last_triton_code()
    assert RECIPROCAL not in code and divides(code), code


def test_reciprocal_on_special_rows_matches_eager(device):
    """Rows of -inf, a +inf, a NaN, a single finite value among -inf, and values whose
    exp(x - max) underflow: the reciprocal's product gives what eager's quotient gives."""
    inf, nan = math.inf, math.nan
    x = torch.randn(6, 50, device=device) * 30
    x[0, :] = -inf
    x[1, 7] = inf
    x[2, 3] = nan
    x[3, :] = -inf
    x[3, 11] = 2.0
    x[4, :] = torch.linspace(-200.0, 0.0, 50)
    (y,) = softmax_fd(torch.float32).execute([x])
    torch.testing.assert_close(y, torch.softmax(x, -1), rtol=1e-5, atol=1e-7, equal_nan=True)


def test_jitted_softmax_takes_the_reciprocal(device):
    x = torch.randn(6, 96, device=device).to(torch.bfloat16)
    def f(t):
        return torch.softmax(t.float(), -1).to(t.dtype)
    torch.testing.assert_close(fuser.jit(f)(x), f(x), rtol=2e-2, atol=2e-2)
    assert RECIPROCAL in str(fuser.explain(f, x))


def test_few_long_rows_readers_take_the_split_sums_reciprocal(small_splits):
    """Over a few long rows the statistics split over programs and a pointwise kernel divides
    by the sum it reads as an input (schedulers/plan.py StatisticsParts): that kernel takes the
    reciprocal too."""
    x = (torch.randn(3, 1000) * 4).to(torch.bfloat16)

    def f(t):
        return torch.softmax(t.float(), -1).to(t.dtype)
    torch.testing.assert_close(fuser.jit(f)(x), f(x), rtol=2e-2, atol=1e-5)
    code = "\n".join(t for fusion in fuser.explain(f, x).fusions for t in fusion.triton)
    readers = code.split("split in one kernel")[-1]
    assert "pointwise" in readers and RECIPROCAL in readers and not divides(readers), readers
