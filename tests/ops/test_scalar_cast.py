"""Scalars compute as eager computes on Python numbers. A cast converts the value: a runtime
scalar (a define_scalar input) when the execution binds it, a constant when the definition is
written; truncated toward zero for an integer, nonzero for a bool, rounded to the nearest value
of a float type. Arithmetic on float scalars is IEEE double arithmetic, never simplified as
algebra (s - s is nan for s = inf); on integers it is exact, and a value beyond int64 is an
input error."""
import math

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.errors import FusionInputError
from fuser.ir.symbolic import CAST_BFLOAT16, CAST_FLOAT, CAST_HALF, convert_scalar


def _definition(constant=None):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Int)
        s = fd.define_scalar(dtype=DataType.Double) if constant is None else fd.define_scalar(constant)
        fd.add_output(fd.ops.add(x, fd.ops.cast(s, DataType.Int)))
        fd.add_output(fd.ops.mul(fd.ops.cast(x, DataType.Float), fd.ops.cast(s, DataType.Bool)))
        fd.add_output(fd.ops.add(fd.ops.cast(x, DataType.Float), fd.ops.cast(s, DataType.Half)))
        fd.add_output(fd.ops.add(fd.ops.cast(x, DataType.Double), fd.ops.cast(s, DataType.Float)))
    return fd


def _eager(x, s):
    return [x + int(s), x.float() * bool(s), x.float() + torch.tensor(s).half().float(),
            x.double() + torch.tensor(s, dtype=torch.float32).double()]


@pytest.mark.parametrize("value", [2.7, -2.7, 0.0, 1e-9, 70000.5])
def test_a_runtime_scalar_is_converted_at_execution(value):
    fd = _definition()
    x = torch.tensor([-5, 0, 5, 123])
    for got, want in zip(fd.execute([x, value]), _eager(x, value), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_constant_is_converted_when_defined():
    x = torch.tensor([-5, 0, 5, 123])
    for got, want in zip(_definition(2.7).execute([x]), _eager(x, 2.7), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_nan_cast_to_an_integer_is_an_input_error():
    fd = _definition()
    with pytest.raises(FusionInputError, match="cannot cast nan to an integer"):
        fd.execute([torch.tensor([1, 2]), math.nan])


@pytest.mark.parametrize("value", [2.7, 1 / 3, 65519.0, 65520.0, 3.4e38, 3.5e38, -1e-30, 1.0000001])
def test_conversions_round_to_nearest_as_torch_does(value):
    for code, dtype in ((CAST_FLOAT, torch.float32), (CAST_HALF, torch.float16), (CAST_BFLOAT16, torch.bfloat16)):
        assert convert_scalar(code, value) == torch.tensor(value, dtype=torch.float64).to(dtype).item(), (code, value)


def test_a_reshape_by_a_zero_scalar_is_an_input_error_naming_the_extent():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        s = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.reshape(x, [s, -1]))
    assert fd.execute([torch.randn(2, 6), 3])[0].shape == (3, 4)
    with pytest.raises(FusionInputError, match="division by zero"):
        fd.execute([torch.randn(2, 6), 0])


@pytest.mark.parametrize("build,scalar,want", [
    (lambda fd, x, s: fd.ops.mul(x, fd.ops.sub(s, s)), math.inf, math.nan),
    (lambda fd, x, s: fd.ops.add(x, fd.ops.mul(s, 0.0)), math.nan, math.nan),
    (lambda fd, x, s: fd.ops.reciprocal(fd.ops.mul(x, fd.ops.add(s, 0.0))), -0.0, math.inf),
    (lambda fd, x, s: fd.ops.mul(x, fd.ops.mul(fd.ops.mul(s, 10.0), 0.1)), 1e308, math.inf),
    (lambda fd, x, s: fd.ops.add(x, fd.ops.maximum(s, 1.0)), math.nan, math.nan),
    (lambda fd, x, s: fd.ops.add(x, fd.ops.minimum(s, 1.0)), -2.5, -1.5),
])
def test_float_scalar_arithmetic_is_ieee(build, scalar, want):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Double)
        s = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(build(fd, x, s))
    (got,) = fd.execute([torch.ones(3, dtype=torch.float64), scalar])
    torch.testing.assert_close(got, torch.full((3,), want, dtype=torch.float64), equal_nan=True)


def test_constant_float_scalars_fold_as_ieee():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
        inf = fd.define_scalar(math.inf)
        fd.add_output(fd.ops.add(x, fd.ops.mul(inf, 0.0)))
        fd.add_output(fd.ops.add(x, fd.ops.maximum(fd.define_scalar(math.nan), 1.0)))
    for got in fd.execute([torch.ones(2)]):
        assert bool(got.isnan().all())


def test_an_integer_scalar_result_beyond_int64_is_an_input_error():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Int)
        s = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.add(x, fd.ops.mul(s, s)))
    x = torch.tensor([1, 2])
    assert torch.equal(fd.execute([x, 3])[0], x + 9)
    with pytest.raises(FusionInputError, match="out of the range of a 64-bit integer"):
        fd.execute([x, 2**40])
