"""Lowering rules composed of fuser's ops for ATen ops that ran through ATen before: any and all
(whole-tensor and over dims, of any dtype), logical_xor, copysign, hypot, fmax and fmin.
Each runs through `fuser.jit` without a fallback, fused with its neighbours, against eager on
fresh random data with NaN, inf, +-0 and empty tensors, forward and backward."""
import pytest
import torch

import fuser

from .jit_helpers import check_forward_backward

NAN, INF = float("nan"), float("inf")


def _special(dtype, n=64, seed=0):
    """n values of `dtype`: random ones with zeros, -0.0, NaN and infinities among them (floats)."""
    gen = torch.Generator().manual_seed(seed)
    if dtype is torch.bool:
        return torch.rand(n, generator=gen) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(-3, 4, (n,), generator=gen).to(dtype)
    x = torch.randn(n, generator=gen) * 3
    x[torch.randperm(n, generator=gen)[:12]] = torch.tensor([0.0, -0.0, NAN, -NAN, INF, -INF] * 2)
    return x.to(dtype)


def _assert_equal(got, want, zero_signs=True):
    """Same dtype, shape and values (NaN where eager's is, and with `zero_signs` the sign of
    each zero)."""
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
        if zero_signs and w.is_floating_point():
            assert torch.equal(torch.signbit(g[w == 0]), torch.signbit(w[w == 0]))


def _check_no_fallback(jitted):
    info = jitted.cache_info()
    assert info.fallback_ops == 0, info


# -- any and all --------------------------------------------------------------------------------


def any_all(x):
    return (x.any(), x.all(), x.any(-1), x.all(0), torch.any(x, 1, keepdim=True),
            torch.all(x, -1, keepdim=True), torch.ops.aten.any.dims(x, [0, 2]),
            torch.ops.aten.all.dims(x, [1], True), torch.ops.aten.any.dims(x, []),
            torch.count_nonzero(x, -1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32, torch.bool])
def test_any_all_match_eager(dtype):
    x = _special(dtype, 4 * 6 * 5, seed=1).reshape(4, 6, 5)
    if dtype.is_floating_point:  # rows all nonzero, all zero, and one with only a NaN nonzero
        x[0, 0] = 1.5
        x[1, 1] = 0.0
        x[2, 2] = torch.tensor([0.0, NAN, 0.0, -0.0, 0.0])
    jitted = fuser.jit(any_all)
    _assert_equal(jitted(x), any_all(x))
    _check_no_fallback(jitted)


@pytest.mark.parametrize("shape", [(0, 5), (4, 0), (0,)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_any_all_of_empty_tensors(shape, dtype):
    """Any of no elements is False, all True, as in eager (a max refuses an empty axis)."""
    def f(x):
        return x.any(), x.all(), x.any(-1), x.all(-1), x.any(0, keepdim=True), x.all(0, keepdim=True)

    x = torch.ones(shape, dtype=dtype)
    jitted = fuser.jit(f)
    _assert_equal(jitted(x), f(x))
    _check_no_fallback(jitted)


def test_any_of_a_bf16_value_eager_rounds_to_zero():
    """A bf16 product is tested as eager stores it: 1e-21 * 1e-21 is 0 in bf16 (its smallest
    subnormal is 9e-41), not in the fp32 a kernel computes it in."""
    def f(x, y):
        return (x * y).any(-1), (x * y).all(-1), torch.logical_xor(x * y, y)

    x = torch.full((3, 8), 1e-21, dtype=torch.bfloat16)
    y = (torch.rand(3, 8) + 0.5).to(torch.bfloat16) * 1e-21
    y[1] = 1.0
    jitted = fuser.jit(f)
    _assert_equal(jitted(x, y), f(x, y))
    _check_no_fallback(jitted)


def test_any_fuses_with_its_neighbours_in_one_kernel():
    def f(x, m):
        return x.abs().any(-1) & m

    x, m = torch.randn(16, 40), torch.rand(16) > 0.3
    x[3] = 0.0
    jitted = fuser.jit(f)
    _assert_equal([jitted(x, m)], [f(x, m)])
    info = jitted.cache_info()
    assert (info.fallback_ops, info.fusions, info.kernels) == (0, 1, 1), info


def test_any_of_long_rows_matches_eager():
    """Rows longer than one tile take a looped or split reduction of the bool maximum."""
    def f(x):
        return (x > 3.5).any(-1), (x > -3.5).all(-1), (x > 4.0).any()

    x = torch.randn(3, 3000)
    x[0, 2999] = 5.0
    x[1, 1500] = -5.0
    jitted = fuser.jit(f)
    _assert_equal(jitted(x), f(x))
    _check_no_fallback(jitted)


# -- logical_xor -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtypes", [(torch.bool, torch.bool), (torch.float32, torch.bool),
                                    (torch.int64, torch.float32), (torch.bfloat16, torch.int32)])
def test_logical_xor_matches_eager(dtypes):
    def f(x, y):
        return torch.logical_xor(x, y), torch.logical_xor(x != 1, y) | (y == 0)

    x, y = (_special(dt, 60, seed=k) for k, dt in enumerate(dtypes))
    jitted = fuser.jit(f)
    _assert_equal(jitted(x, y), f(x, y))
    _check_no_fallback(jitted)


# -- copysign ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                    (torch.int64, torch.int64), (torch.bfloat16, torch.float32),
                                    (torch.int32, torch.float32)])
def test_copysign_matches_eager(dtypes):
    def f(x, y):
        return torch.copysign(x, y), torch.copysign(x, -0.0), torch.copysign(x, 2), x.copysign(y.sign())

    x, y = _special(dtypes[0], 64, seed=2), _special(dtypes[1], 64, seed=3)
    jitted = fuser.jit(f)
    _assert_equal(jitted(x, y), f(x, y))
    _check_no_fallback(jitted)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_copysign_forward_backward(dtype):
    def f(x, y):
        return torch.copysign(x, y) * 2.0

    args = (torch.randn(6, 9, dtype=dtype, requires_grad=True),
            torch.randn(6, 9, dtype=dtype, requires_grad=True))
    jitted = fuser.jit(f)
    check_forward_backward(f, jitted, args)
    _check_no_fallback(jitted)


# -- hypot -------------------------------------------------------------------------------------


def test_hypot_of_large_small_and_special_values():
    """No overflow or underflow of the squares: hypot(1e30, 1e30) and hypot(1e-30, 1e-30) are
    1.4e30 and 1.4e-30; inf beside a NaN is inf."""
    x = torch.tensor([1e30, 1e-30, 3e38, 1e-40, 0.0, -0.0, INF, NAN, -INF, NAN, 3.0, -5.0, 1e30, 0.0])
    y = torch.tensor([1e30, -1e-30, 3e38, 2e-40, 0.0, 0.0, NAN, INF, 2.0, 1.0, -4.0, 12.0, 1e-30, -7.0])
    x = torch.cat([x, torch.randn(50) * 10 ** torch.randint(-20, 20, (50,)).float()])
    y = torch.cat([y, torch.randn(50) * 10 ** torch.randint(-20, 20, (50,)).float()])
    jitted = fuser.jit(torch.hypot)
    torch.testing.assert_close(jitted(x, y), torch.hypot(x, y), rtol=1e-6, atol=0, equal_nan=True)
    _check_no_fallback(jitted)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_hypot_forward_backward(dtype):
    def f(x, y):
        return torch.hypot(x, y) - x

    args = (torch.randn(5, 12, dtype=dtype, requires_grad=True),
            torch.randn(12, dtype=dtype, requires_grad=True))
    jitted = fuser.jit(f)
    check_forward_backward(f, jitted, args, reference_dtype=torch.float64)
    _check_no_fallback(jitted)


def test_hypot_sum_is_one_kernel():
    def f(x, y):
        return torch.hypot(x, y).sum()

    x, y = torch.randn(8, 50), torch.randn(8, 50)
    jitted = fuser.jit(f)
    torch.testing.assert_close(jitted(x, y), f(x, y), rtol=1e-5, atol=1e-5)
    info = jitted.cache_info()
    assert (info.fallback_ops, info.fusions, info.kernels) == (0, 1, 1), info


# -- fmax and fmin -----------------------------------------------------------------------------


def fmax_fmin(x, y):
    return torch.fmax(x, y), torch.fmin(x, y), torch.fmax(y, x), torch.fmin(y, x)


@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                    (torch.int64, torch.int64), (torch.bfloat16, torch.float32),
                                    (torch.int32, torch.float32)])
def test_fmax_fmin_ignore_nan(dtypes):
    """The operand that is not NaN wins; NaN only where both are. (On a tie of 0.0 and -0.0
    either is right: eager's CPU kernels return the first in fp32, the second in bf16.)"""
    x, y = _special(dtypes[0], 64, seed=4), _special(dtypes[1], 64, seed=5)
    if dtypes[0].is_floating_point and dtypes[1].is_floating_point:
        x[:6] = torch.tensor([NAN, NAN, 0.0, -0.0, INF, 1.0])
        y[:6] = torch.tensor([NAN, 2.0, -0.0, 0.0, NAN, -INF])
    jitted = fuser.jit(fmax_fmin)
    _assert_equal(jitted(x, y), fmax_fmin(x, y), zero_signs=False)
    _check_no_fallback(jitted)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fmax_fmin_forward_backward(dtype):
    def f(x, y):
        return torch.fmax(x, y) * 3.0 + torch.fmin(x, y * 0.5)

    x, y = torch.randn(6, 10, dtype=dtype), torch.randn(6, 10, dtype=dtype)
    x[0, :3] = NAN
    y[1, :3] = NAN
    args = (x.requires_grad_(), y.requires_grad_())
    jitted = fuser.jit(f)
    check_forward_backward(f, jitted, args)
    _check_no_fallback(jitted)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_hypot_of_integers_raises_as_eager(dtype):
    """Eager has no integer hypot (review: fuser computed truncated square roots)."""
    x = torch.randint(0, 5, (6,)).to(dtype)
    with pytest.raises(NotImplementedError):
        torch.hypot(x, x)
    with pytest.raises(NotImplementedError):
        fuser.jit(torch.hypot)(x, x)
