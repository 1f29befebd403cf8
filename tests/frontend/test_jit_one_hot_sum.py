"""The sum along a row of a one-hot (`scatter(zeros, d, index, v)`, one index per row) times a
factor constant along the row is the value at the index (frontend/rules/shape.py
one_hot_row_sum): cross entropy's backward needs no pass over the vocabulary before writing
its gradient, so its kernel is pointwise."""
import pytest
import torch
import torch.nn.functional as F

import fuser
from fuser.frontend.backend import backend_for
from fuser.schedulers.plan import Template

from .jit_helpers import check_forward_backward


def _templates(kind: str) -> list[Template]:
    """The kernel templates of the last jitted call's `kind` program ("inference", "backward")."""
    program = next(p for p in backend_for().records[-1].programs if p.kind == kind)
    return [launcher.plan.template for step in program.fusion_steps for rt in step.fd.cache.runtimes()
            for launcher in rt.launchers.values()]


def test_cross_entropy_backward_is_one_pointwise_kernel():
    def loss(logits, target):
        return F.cross_entropy(logits.float(), target)

    logits = torch.randn(10, 33, dtype=torch.bfloat16, requires_grad=True)
    target = torch.randint(0, 33, (10,))
    target[3] = -100  # ignored: its row's gradient is zero
    check_forward_backward(loss, fuser.jit(loss), (logits, target))
    assert _templates("backward") == [Template.pointwise]


def _one_hot(rows: int, cols: int, index, dtype, dim: int = 1, value: float = -1.0):
    shape = (rows, cols)
    return torch.zeros(shape, dtype=dtype).scatter(dim, index, value)


@pytest.mark.parametrize("keepdim", [True, False])
def test_one_hot_times_a_row_factor_sums_to_the_value_at_the_index(keepdim):
    def f(q, index):
        return (_one_hot(q.shape[0], 7, index, q.dtype) * q).sum(1, keepdim=keepdim)

    q = torch.randn(6, 1)
    index = torch.randint(0, 7, (6, 1))
    jitted = fuser.jit(f)
    torch.testing.assert_close(jitted(q, index), f(q, index))
    assert _templates("inference") == [Template.pointwise]
    # the other positions' 0 * q terms: NaN where q is not finite, as in eager's sum
    q = torch.tensor([[1.0], [float("inf")], [float("-inf")], [float("nan")], [2.0], [-3.0]])
    torch.testing.assert_close(jitted(q, index), f(q, index), equal_nan=True)


def test_one_hot_of_one_column_and_a_number_factor_and_a_column_one_hot():
    def one_column(q, index):  # (no other position: an infinite q stays infinite)
        return (_one_hot(q.shape[0], 1, index, q.dtype) * q).sum(1)

    q = torch.tensor([[float("inf")], [2.0], [-1.5]])
    index = torch.zeros(3, 1, dtype=torch.int64)
    torch.testing.assert_close(fuser.jit(one_column)(q, index), one_column(q, index))

    def scaled(x, index):  # a number factor, the one-hot's dtype kept
        return (_one_hot(x.shape[0], x.shape[1], index, x.dtype, value=3.0) * 0.5).sum(1) + x.sum(1)

    x = torch.randn(5, 9, dtype=torch.float16)
    index = torch.randint(0, 9, (5, 1))
    torch.testing.assert_close(fuser.jit(scaled)(x, index), scaled(x, index), rtol=5e-3, atol=5e-3)

    def columns(q, index):  # one index per column, summed over the rows
        return (_one_hot(5, q.shape[1], index, q.dtype, dim=0) * q).sum(0)

    q = torch.randn(1, 8)
    index = torch.randint(0, 5, (1, 8))
    torch.testing.assert_close(fuser.jit(columns)(q, index), columns(q, index))


@pytest.mark.parametrize("dtype,value", [(torch.bfloat16, 1 / 3), (torch.float16, 0.1)])
def test_the_value_at_the_index_is_the_one_hot_dtype_s(dtype, value):
    # eager stores the scattered value in the half-precision one-hot first (1/3 in bf16 is
    # 0.333984375), then multiplies: so does the sum that replaces it (found by review)
    def f(q, index):
        return (torch.zeros(q.shape[0], 7, dtype=dtype).scatter(1, index, value) * q).sum(1)

    gen = torch.Generator().manual_seed(0)
    q = (torch.randn(8, 1, generator=gen) * 100).to(dtype)
    index = torch.randint(0, 7, (8, 1), generator=gen)
    jitted = fuser.jit(f)
    assert torch.equal(jitted(q, index), f(q, index))
    assert _templates("inference") == [Template.pointwise]


def test_an_integer_one_hot_is_summed_as_it_is():
    def f(q, index):  # int64 one-hot times an int factor: the sum is int64, as eager's
        return (torch.zeros(q.shape[0], 7, dtype=torch.int64).scatter(1, index, 3) * q).sum(1)

    q = torch.randint(-5, 5, (6, 1))
    index = torch.randint(0, 7, (6, 1))
    jitted = fuser.jit(f)
    assert torch.equal(jitted(q, index), f(q, index))
    assert jitted.cache_info().fallback_ops == 0


def test_a_factor_varying_along_the_row_is_summed_as_it_is():
    def f(x, index):
        return (_one_hot(x.shape[0], x.shape[1], index, x.dtype) * x).sum(1)

    x = torch.randn(6, 11)
    index = torch.randint(0, 11, (6, 1))
    jitted = fuser.jit(f)
    torch.testing.assert_close(jitted(x, index), f(x, index))
    assert _templates("inference") == [Template.inner_reduction]
