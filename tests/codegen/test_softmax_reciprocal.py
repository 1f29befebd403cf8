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


TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


def divides(code: str) -> bool:
    """Whether the kernel's code (not its header's IR) divides one value by another."""
    return re.search(r"\(T\d+ / T\d+\)", code) is not None


def kernels(fn, *args) -> str:
    return "\n".join(t for fusion in fuser.explain(fn, *args).fusions for t in fusion.triton)


def divided_by(shift: bool, guard: bool = False):
    """e / sum(e), e = exp(x - m) with m the row's max (`shift`) or exp(x) without a shift;
    `guard`: the max made 0 where infinite (logsumexp's shift, whose sum may be 0 or inf)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        e = fd.ops.exp(x)
        if shift:
            m = fd.ops.max(x, [-1], True)
            if guard:
                m = fd.ops.where(fd.ops.eq(fd.ops.abs(m), math.inf), 0.0, m)
            e = fd.ops.exp(fd.ops.sub(x, m))
        fd.add_output(fd.ops.div(e, fd.ops.sum(e, [-1], True)))
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


@pytest.mark.parametrize("looped", [False, True])
@pytest.mark.parametrize("shift,guard", [(False, False), (True, True)])
def test_other_divisors_keep_their_division(monkeypatch, shift, guard, looped, device):
    """sum(exp(x)) may be subnormal or overflow, and logsumexp's guarded shift's sum is 0 or
    inf on rows of -inf or inf: those divide. A row of -100s sums exp(x) to about 1.5e-42, a
    subnormal whose reciprocal is inf, where each exp(x) / s is 1/40."""
    if looped:
        monkeypatch.setattr(heuristics, "MAX_PERSISTENT", 32)
    x = torch.randn(5, 40, device=device) * 3
    x[1] = -100.0
    fd = divided_by(shift, guard)
    (y,) = fd.execute([x])
    e = torch.exp(x.double() - x.double().amax(-1, keepdim=True) if shift else x.double())
    torch.testing.assert_close(y, (e / e.sum(-1, keepdim=True)).float(), rtol=1e-4, atol=1e-6)
    code = fd.last_triton_code()
    assert RECIPROCAL not in code and divides(code), code


def test_only_the_softmax_sum_takes_the_reciprocal(device):
    """A kernel holding a softmax and another division by sum(exp(x)) (unshifted) takes the
    reciprocal of the softmax's sum alone."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        e = fd.ops.exp(fd.ops.sub(x, fd.ops.max(x, [-1], True)))
        fd.add_output(fd.ops.div(e, fd.ops.sum(e, [-1], True)))
        fd.add_output(fd.ops.div(fd.ops.exp(x), fd.ops.sum(fd.ops.exp(x), [-1], True)))
    x = torch.full((3, 50), -100.0, device=device)
    softmax, unshifted = fd.execute([x])
    torch.testing.assert_close(softmax, torch.full_like(x, 1 / 50))
    torch.testing.assert_close(unshifted, torch.full_like(x, 1 / 50), rtol=1e-4, atol=0)
    code = fd.last_triton_code()
    assert code.count(RECIPROCAL) == 1 and divides(code), code


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
    assert RECIPROCAL in kernels(f, x)


def test_few_long_rows_readers_take_the_split_sums_reciprocal(small_splits):
    """Over a few long rows the statistics split over programs and a pointwise kernel divides
    by the sum it reads as an input (schedulers/plan.py StatisticsParts): that kernel takes the
    reciprocal too, and gives eager's values on rows of -inf, inf, NaN and underflowing terms."""
    x = torch.randn(5, 1000) * 30
    x[0] = -math.inf
    x[1, 7] = math.inf
    x[2, 3] = math.nan
    x[3] = torch.linspace(-200.0, 0.0, 1000)

    def f(t):
        return torch.softmax(t, -1)
    torch.testing.assert_close(fuser.jit(f)(x), f(x), rtol=1e-5, atol=1e-7, equal_nan=True)
    readers = kernels(f, x).split("split in one kernel")[-1]
    assert "pointwise" in readers and RECIPROCAL in readers and not divides(readers), readers


def test_few_long_rows_divided_by_a_plain_sum_keep_the_division(small_splits):
    """x / x.sum(-1) takes the same two-kernel form; its readers' divisor is no softmax sum."""
    def f(t):
        return t / t.sum(-1, keepdim=True)
    x = torch.rand(3, 1000) + 0.5
    torch.testing.assert_close(fuser.jit(f)(x), f(x), rtol=1e-5, atol=1e-7)
    code = kernels(f, x)
    readers = code.split("split in one kernel")[-1]
    assert "split in one kernel" in code and "pointwise" in readers, code
    assert RECIPROCAL not in readers and divides(readers), readers
