"""Type promotions of the jit's rules that cut fusions: a `where` of two numbers (two 0-dim
constants, each inlined as a number because of the other, left the where no tensor value), and
integer math under a float64 default dtype (the FusionDefinition API promotes integers to Float,
eager to the default dtype). Each runs through `fuser.jit` without a fallback, in one kernel,
against eager on fresh random data."""
import pytest
import torch

import fuser
from tests.helpers import fresh_jit

NAN, INF = float("nan"), float("inf")


def _assert_equal(got, want):
    """Same dtype, shape and values (NaN where eager's is)."""
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def _check_fused(jitted, kernels=1):
    info = jitted.cache_info()
    assert info.fallback_ops == 0 and info.kernels == kernels, info


@pytest.fixture
def double_default():
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


def _mask(shape=(6, 40)):
    mask = torch.rand(shape) > 0.3
    mask[:, 0] = True  # (every softmax row keeps a score)
    return mask


# -- where of two numbers -----------------------------------------------------------------------


def attention_bias_softmax(scores, mask):
    bias = torch.where(mask, 0.0, float("-inf"))  # the usual additive attention mask
    return torch.softmax(scores + bias, -1)


def test_additive_attention_mask_fuses_with_the_softmax():
    scores, mask = torch.randn(6, 40), _mask()
    jitted = fuser.jit(attention_bias_softmax)
    torch.testing.assert_close(jitted(scores, mask), attention_bias_softmax(scores, mask))
    _check_fused(jitted)


BF16, F64 = torch.bfloat16, torch.float64
WHERE_OF_NUMBERS = {
    "-inf": lambda m: torch.where(m, 0.0, -INF),
    "nan": lambda m: torch.where(m, NAN, 1.5),
    "ints": lambda m: torch.where(m, 3, -7),
    "int32": lambda m: torch.where(m, torch.full([], 2**31 - 1, dtype=torch.int32),
                                   torch.full([], -5, dtype=torch.int32)),
    "bools": lambda m: torch.where(m, True, False),
    "bf16": lambda m: torch.where(m, torch.full([], 0.1, dtype=BF16), torch.full([], 0.3, dtype=BF16)),
    # (digits past fp32's: a where of two literals in a kernel computes in fp32)
    "f64": lambda m: torch.where(m, torch.full([], 0.1, dtype=F64), torch.full([], 1e-300, dtype=F64)),
    "bf16-f64": lambda m: torch.where(m, torch.full([], 0.1, dtype=BF16), torch.full([], 0.3, dtype=F64)),
    "tensor-constants": lambda m: torch.where(m, torch.tensor(0.1), torch.tensor(-2.5)),
}


@pytest.mark.parametrize("fn", WHERE_OF_NUMBERS.values(), ids=WHERE_OF_NUMBERS.keys())
def test_where_of_two_numbers_fuses_as_eager(fn):
    mask = _mask()
    jitted = fuser.jit(fn)
    _assert_equal(jitted(mask), fn(mask))
    _check_fused(jitted)


def test_where_of_two_numbers_under_a_double_default_keeps_their_digits(double_default):
    def fn(m):
        return torch.where(m, 0.1, 0.2)
    mask = _mask()
    jitted = fuser.jit(fn)
    _assert_equal(jitted(mask), fn(mask))
    _check_fused(jitted)


CONSTANTS_ONLY = {
    "mul": lambda x: x + torch.tensor(2.0) * torch.tensor(3.0),
    # two f64 constants beside an f32 one promote to f64: neither f64 one may become a number
    # because of the other
    "f64-f64-f32": lambda x: torch.addcmul(torch.full([], 0.1, dtype=F64), torch.full([], 0.2, dtype=F64),
                                           torch.full([], 0.3)) + x,
}


@pytest.mark.parametrize("fn", CONSTANTS_ONLY.values(), ids=CONSTANTS_ONLY.keys())
def test_op_of_constants_only_fuses_as_eager(fn):
    x = torch.randn(6, 40, dtype=F64)
    jitted = fuser.jit(fn)
    _assert_equal(jitted(x), fn(x))
    _check_fused(jitted)


# -- integer math under a float64 default dtype -------------------------------------------------


def _integers(shape=(6, 40)):
    """Integers past 2**24, which fp32 cannot hold: a product computed in fp32 loses digits."""
    return torch.randint(-(1 << 30), 1 << 30, shape)


INTEGER_MATH = {
    "mul": lambda i, j, m: i * 1.5,
    "div": lambda i, j, m: i / j,
    "div-number": lambda i, j, m: i / 3,
    "add": lambda i, j, m: i + 0.1,
    "rsub": lambda i, j, m: 0.1 - i,
    "floordiv": lambda i, j, m: i // 0.7,
    "div-trunc": lambda i, j, m: torch.div(i, 0.7, rounding_mode="trunc"),
    "fmod": lambda i, j, m: torch.fmod(i, 0.7),
    "remainder": lambda i, j, m: torch.remainder(i, 0.7),
    "pow": lambda i, j, m: j ** 1.5,
    "number-pow": lambda i, j, m: 1.01 ** j,
    "where": lambda i, j, m: torch.where(m, i, 0.1),
    "clamp": lambda i, j, m: torch.clamp(i, min=0.5),
    "clamp-max": lambda i, j, m: torch.clamp(i, max=-0.5),
    "bool-mul": lambda i, j, m: m * 0.1,
    "int32": lambda i, j, m: i.to(torch.int32) * 0.1 + i.to(torch.int32) / 7,
}


@pytest.mark.parametrize("fn", INTEGER_MATH.values(), ids=INTEGER_MATH.keys())
def test_integer_math_under_a_double_default_fuses_in_double(fn, double_default):
    i, j, m = _integers(), torch.randint(1, 100, (6, 40)), _mask()
    jitted = fuser.jit(fn)
    got, want = jitted(i, j, m), fn(i, j, m)
    assert got.dtype == want.dtype == torch.float64
    if fn is INTEGER_MATH["pow"] or fn is INTEGER_MATH["number-pow"]:  # (a pow's last ulp)
        torch.testing.assert_close(got, want, rtol=1e-14, atol=0)
    else:
        _assert_equal(got, want)
    _check_fused(jitted)


def test_integer_exp_and_sum_under_a_double_default_fuse_in_double(double_default):
    def fn(i, x):
        return torch.exp(i * 1.5e-8 + x) / (i / 3 + 1).sum(-1, keepdim=True) + torch.sqrt(i.abs())
    i, x = _integers(), torch.randn(6, 40)
    jitted = fuser.jit(fn)
    got, want = jitted(i, x), fn(i, x)
    assert got.dtype == want.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=1e-13, atol=0)  # (fp32 would be 1e-7 off)
    _check_fused(jitted)


@pytest.mark.parametrize("default", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["mul", "div", "sqrt"])
def test_integer_math_under_a_half_default_rounds_the_integer_first(default, name):
    """Eager converts the integer operand to the bf16 / half result type before computing:
    integers past 256 (bf16) or 2048 (half) round there first."""
    fn = {"mul": lambda i: i * 1.5, "div": lambda i: i / 3, "sqrt": lambda i: torch.sqrt(i)}[name]
    i = torch.randint(250, 60000, (64,))
    old = torch.get_default_dtype()
    torch.set_default_dtype(default)
    try:
        jitted = fresh_jit(fn)
        got, want = jitted(i), fn(i)
    finally:
        torch.set_default_dtype(old)
    assert got.dtype == want.dtype and torch.equal(got, want)
    assert jitted.cache_info().fallback_ops == 0


def test_a_bf16_tensor_plus_a_large_integer_tensor_rounds_the_integer_first():
    def fn(x, i):
        return x + i
    x = torch.randn(64).to(torch.bfloat16)
    i = torch.randint(250, 100000, (64,))
    assert torch.equal(fresh_jit(fn)(x, i), fn(x, i))
