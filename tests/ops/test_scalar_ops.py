"""Ops on scalars only. nvFuser's definitions (Thunder's among them) compute sizes and constants
from scalar inputs: comparisons, fmod, casts, signbit. Each result is checked against eager's
op on 0-dim float64 / int64 tensors, on values bound at execution and on known ones."""
import math

import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition

SPECIAL = [2.5, -0.75, 0.0, -0.0, 1.0, -1.0, 3.0, float("inf"), float("-inf"), float("nan")]

UNARY = ["reciprocal", "sqrt", "rsqrt", "exp", "log", "exp2", "expm1", "log2", "log10", "log1p",
         "sin", "cos", "tan", "tanh", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
         "atanh", "erf", "erfc", "lgamma", "sigmoid", "neg", "abs", "floor", "ceil", "trunc", "round",
         "signbit", "isnan", "isinf", "isfinite", "isposinf", "isneginf", "logical_not"]


def _eager_unary(name, v):
    x = torch.tensor(v, dtype=torch.float64)
    return getattr(torch, name)(x).double()


def _scaled(fd, t, s):
    """t * s in Double: a scalar's value reaches a tensor, whatever its type."""
    return fd.ops.mul(t, fd.ops.cast(s, DataType.Double))


def _run(build, scalars, decl):
    t = torch.rand(3, dtype=torch.float64) + 0.5
    with FusionDefinition() as fd:
        tv = fd.define_tensor([-1], contiguity=True, dtype=DataType.Double)
        ss = [fd.define_scalar(dtype=d) if known is None else fd.define_scalar(known, dtype=d)
              for known, d in decl]
        for s in build(fd, *ss):
            fd.add_output(_scaled(fd, tv, s))
    inputs = [t] + [v for v, (known, _) in zip(scalars, decl) if known is None]
    return t, fd.execute(inputs)


@pytest.mark.parametrize("known", [False, True], ids=["input", "known"])
@pytest.mark.parametrize("name", UNARY)
def test_unary_of_a_double_scalar(name, known):
    values = SPECIAL if name not in ("logical_not",) else [0.0, 2.5, float("nan")]
    for v in values:
        t, (out,) = _run(lambda fd, s: [getattr(fd.ops, name)(s)], [v],
                         [(v if known else None, DataType.Double)])
        torch.testing.assert_close(out, t * _eager_unary(name, v), equal_nan=True,
                                   msg=lambda m: f"{name}({v}): {m}")


def test_unary_of_an_int_scalar_input():
    """An Int input: float functions give a Double, neg and abs stay integers, signbit a Bool."""
    for v in (7, -3, 0):
        t, outs = _run(lambda fd, s: [fd.ops.sqrt(s), fd.ops.neg(s), fd.ops.abs(s), fd.ops.signbit(s),
                                      fd.ops.bitwise_not(s), fd.ops.exp(s)], [v], [(None, DataType.Int)])
        x = torch.tensor(v)
        want = [torch.sqrt(x), -x, x.abs(), torch.signbit(x), ~x, torch.exp(x)]
        for o, w in zip(outs, want):
            torch.testing.assert_close(o, t * w.double(), equal_nan=True)


BINARY = {
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
    "fmod": torch.fmod, "remainder": torch.remainder, "pow": torch.pow, "atan2": torch.atan2,
    "truediv": torch.true_divide, "nextafter": torch.nextafter, "logical_and": torch.logical_and,
    "logical_or": torch.logical_or,
}


@pytest.mark.parametrize("known", [False, True], ids=["input", "known"])
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_of_double_scalars(name, known):
    pairs = [(7.5, 2.0), (-7.5, 2.0), (7.5, -2.0), (1.0, 0.0), (-0.0, 3.0), (2.0, float("inf")),
             (float("nan"), 1.0), (0.0, -1.0), (-8.0, 1.0 / 3.0)]
    for a, b in pairs:
        decl = [(a if known else None, DataType.Double), (b if known else None, DataType.Double)]
        t, (out,) = _run(lambda fd, x, y: [getattr(fd.ops, name)(x, y)], [a, b], decl)
        want = BINARY[name](torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64))
        torch.testing.assert_close(out, t * want.double(), equal_nan=True, msg=lambda m: f"{name}({a}, {b}): {m}")


INT_BINARY = {
    "div": lambda a, b: torch.div(a, b, rounding_mode="trunc"), "fmod": torch.fmod, "mod": torch.fmod,
    "remainder": torch.remainder, "bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or,
    "bitwise_xor": torch.bitwise_xor, "gcd": torch.gcd, "lt": torch.lt, "ne": torch.ne,
    "bitwise_left_shift": torch.bitwise_left_shift, "bitwise_right_shift": torch.bitwise_right_shift,
    "pow": torch.pow,
}


@pytest.mark.parametrize("known", [False, True], ids=["input", "known"])
@pytest.mark.parametrize("name", sorted(INT_BINARY))
def test_binary_of_int_scalars(name, known):
    """Integer division truncates toward zero (C's, nvFuser's), fmod keeps the dividend's sign
    and remainder the divisor's."""
    for a, b in [(7, 2), (-7, 2), (7, -2), (-7, -2), (12, 3), (0, 5)]:
        if name in ("bitwise_left_shift", "bitwise_right_shift", "pow") and b < 0:
            continue
        decl = [(a if known else None, DataType.Int), (b if known else None, DataType.Int)]
        t, (out,) = _run(lambda fd, x, y: [getattr(fd.ops, name)(x, y)], [a, b], decl)
        want = INT_BINARY[name](torch.tensor(a), torch.tensor(b))
        torch.testing.assert_close(out, t * want.double(), msg=lambda m: f"{name}({a}, {b}): {m}")


def test_thunder_floor_division_sizes_a_reshape():
    """Thunder's lowering of `192 // n` (nvFuser's test_reshape_dynamic): signbit, fmod, ne and
    bitwise_and of scalars, the size computed in doubles, used as a reshape's extent."""
    def define(fd):
        n = fd.define_scalar(None, dtype=DataType.Int)
        x = fd.define_tensor([-1, -1, -1], contiguity=True)
        s3 = fd.ops.mul(fd.define_scalar(1, dtype=DataType.Int), n)
        negative = fd.ops.ne(fd.ops.signbit(s3), fd.define_scalar(False, dtype=DataType.Bool))
        inexact = fd.ops.ne(fd.ops.cast(fd.ops.fmod(fd.define_scalar(192, dtype=DataType.Int), s3),
                                        dtype=DataType.Int), fd.define_scalar(0, dtype=DataType.Int))
        adjust = fd.ops.cast(fd.ops.bitwise_and(negative, inexact), dtype=DataType.Int)
        size = fd.ops.sub(fd.ops.mul(fd.define_scalar(192, dtype=DataType.Int), fd.ops.reciprocal(s3)), adjust)
        fd.add_output(fd.ops.sum(fd.ops.reshape(x, [n, size]), dims=[1]))

    with FusionDefinition() as fd:
        define(fd)
    for n, shape in ((32, (4, 8, 6)), (16, (2, 8, 12)), (64, (4, 8, 6))):
        x = torch.randn(shape)
        (out,) = fd.execute([n, x])
        torch.testing.assert_close(out, x.reshape(n, 192 // n).sum(1))
    with pytest.raises(fuser.FusionInputError, match="not an integer"):
        fd.execute([5, torch.randn(4, 8, 6)])  # 192 / 5 is no size


def test_integer_division_of_scalars_by_zero_is_an_error():
    with FusionDefinition() as fd:
        t = fd.define_tensor([-1], contiguity=True, dtype=DataType.Double)
        a, b = fd.define_scalar(dtype=DataType.Int), fd.define_scalar(dtype=DataType.Int)
        fd.add_output(_scaled(fd, t, fd.ops.fmod(a, b)))
    t = torch.rand(3, dtype=torch.float64)
    torch.testing.assert_close(fd.execute([t, 7, 3])[0], t)
    with pytest.raises(fuser.FusionInputError, match="fmod"):
        fd.execute([t, 7, 0])
    with pytest.raises(fuser.FusionDefinitionError, match="div of the scalars 1 and 0"):
        with FusionDefinition() as fd:
            fd.ops.div(fd.define_scalar(1, dtype=DataType.Int), fd.define_scalar(0, dtype=DataType.Int))


def test_scalar_ops_refuse_what_eager_refuses():
    with FusionDefinition() as fd:
        x = fd.define_scalar(dtype=DataType.Double)
        with pytest.raises(fuser.FusionDefinitionError, match="bitwise_and: needs integer or bool"):
            fd.ops.bitwise_and(x, x)
        with pytest.raises(fuser.FusionDefinitionError, match="bitwise_not"):
            fd.ops.bitwise_not(x)
        fd.add_output(_scaled(fd, fd.define_tensor([-1], dtype=DataType.Double), x))


def test_known_scalars_fold_to_constants():
    with FusionDefinition() as fd:
        a = fd.ops.fmod(fd.define_scalar(-7, dtype=DataType.Int), fd.define_scalar(3, dtype=DataType.Int))
        b = fd.ops.lt(fd.define_scalar(2.0), fd.define_scalar(math.inf))
        c = fd.ops.signbit(fd.define_scalar(-0.0))
        fd.add_output(_scaled(fd, fd.define_tensor([-1], dtype=DataType.Double), a))
    assert (a.value, a.dtype) == (-1, DataType.Int)
    assert (b.value, b.dtype) == (True, DataType.Bool)
    assert (c.value, c.dtype) == (True, DataType.Bool)


@pytest.mark.parametrize("known", [False, True], ids=["input", "known"])
def test_where_of_scalars_only(known):
    """A scalar chosen by a scalar condition, in the values' promoted type (Int and Double give
    Double)."""
    for c, a, b in ((True, 3, 2.5), (False, 3, 2.5), (True, -1, float("nan"))):
        decl = [(c if known else None, DataType.Bool), (a if known else None, DataType.Int),
                (b if known else None, DataType.Double)]
        t, (out,) = _run(lambda fd, x, y, z: [fd.ops.where(x, y, z)], [c, a, b], decl)
        torch.testing.assert_close(out, t * (float(a) if c else b), equal_nan=True)
    with FusionDefinition() as fd:
        s = fd.ops.where(fd.define_scalar(dtype=DataType.Bool), fd.define_scalar(dtype=DataType.Int), 2.5)
        fd.add_output(_scaled(fd, fd.define_tensor([-1], dtype=DataType.Double), s))
    assert s.dtype is DataType.Double


@pytest.mark.parametrize("known", [True, False], ids=["constants", "inputs"])
def test_arithmetic_of_bool_scalars_is_bool_as_eager(known):
    """True + True is True (eager's bool tensors): known pairs raised sympy's raw TypeError,
    pairs bound at execution held 2. sub is refused, as torch refuses it."""
    t = torch.randn(3)
    for op, want in (("add", True), ("mul", False), ("maximum", True), ("minimum", False)):
        with FusionDefinition() as fd:
            x = fd.from_pytorch(t)
            a, b = ((fd.define_scalar(True, dtype=DataType.Bool), fd.define_scalar(False, dtype=DataType.Bool))
                    if known else (fd.define_scalar(dtype=DataType.Bool), fd.define_scalar(dtype=DataType.Bool)))
            s = getattr(fd.ops, op)(a, b)
            assert s.dtype == DataType.Bool
            fd.add_output(fd.ops.add(x, fd.ops.cast(s, DataType.Float)))
        (out,) = fd.execute([t] if known else [t, True, False])
        want_t = getattr(torch, op)(torch.tensor(True), torch.tensor(False)) if op != "add" else \
            torch.tensor(True) + torch.tensor(False)
        assert bool(want_t) is want
        torch.testing.assert_close(out, t + float(want))
    with pytest.raises(fuser.FusionDefinitionError, match="sub with a Bool scalar"):
        with FusionDefinition() as fd:
            a = fd.define_scalar(True, dtype=DataType.Bool)
            fd.ops.sub(a, a)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 1e30])
def test_a_known_scalar_cast_to_int_outside_its_range_is_refused(value):
    with pytest.raises(fuser.FusionDefinitionError, match="cast"):
        with FusionDefinition() as fd:
            fd.ops.cast(fd.define_scalar(value, dtype=DataType.Double), DataType.Int)


@pytest.mark.parametrize("op, want", [("add", 3), ("mul", 2), ("maximum", 2)])
@pytest.mark.parametrize("known", [True, False], ids=["constants", "inputs"])
def test_a_bool_scalar_beside_an_int_counts_as_its_0_or_1(op, want, known):
    """torch.tensor(True) + 2 is 3: sympy's True has no integer algebra (a raw TypeError)."""
    t = torch.randn(3)
    with FusionDefinition() as fd:
        x = fd.from_pytorch(t)
        a = fd.define_scalar(True, dtype=DataType.Bool) if known else fd.define_scalar(dtype=DataType.Bool)
        s = getattr(fd.ops, op)(a, fd.define_scalar(2, dtype=DataType.Int))
        fd.add_output(fd.ops.add(x, fd.ops.cast(s, DataType.Float)))
    torch.testing.assert_close(fd.execute([t] if known else [t, True])[0], t + want)


def test_a_runtime_cast_to_int_outside_64_bits_is_refused():
    t = torch.randn(2, dtype=torch.float64)
    with FusionDefinition() as fd:
        x = fd.from_pytorch(t)
        d = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(fd.ops.add(x, fd.ops.cast(fd.ops.cast(d, DataType.Int), DataType.Double)))
    torch.testing.assert_close(fd.execute([t, 2.5])[0], t + 2)
    with pytest.raises(fuser.FusionInputError, match="1e\\+30 is out of the range"):
        fd.execute([t, 1e30])
