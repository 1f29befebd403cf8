"""A runtime scalar cast to a narrow integer type converts as eager converts it
(torch.tensor(v).to(t)): an integer wraps (two's complement), whether the cast value is used by
a kernel (whose argument of that type wraps it) or on the host (a fill value, a cast to a float,
an ATen segment), so one scalar has one value. A float the type cannot hold is refused (eager's
conversion is undefined), and so is a constant beyond the type (as before).
Subtraction with a bool operand, and a power of bools with a tensor exponent, are refused as
eager refuses them."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.errors import FusionDefinitionError, FusionInputError
from fuser.runtime import FusionExecutorCache

BACKENDS = pytest.mark.parametrize("use_kernels", [True, False], ids=["kernel", "aten"])


def _ints(n, dtype, seed):
    return torch.randint(-1000, 1000, (n,), dtype=dtype, generator=torch.Generator().manual_seed(seed))


def _int32_uses(fd, t, s32):
    """An Int32 scalar used in a kernel beside an int32 tensor, as a fill value, beside an Int
    tensor and cast to a Double."""
    fd.add_output(fd.ops.add(t, s32))
    fd.add_output(fd.ops.full([3], s32, DataType.Int))
    fd.add_output(fd.ops.mul(fd.ops.cast(t, DataType.Int), s32))
    fd.add_output(fd.ops.add(fd.ops.cast(t, DataType.Double), fd.ops.cast(s32, DataType.Double)))


def _int32_eager(t, v):
    w = torch.tensor(v).to(torch.int32)
    return [t + w, torch.full((3,), w.item()), t.long() * w, t.double() + w.double()]


def _check(got, want):
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=0, atol=0)


@BACKENDS
@pytest.mark.parametrize("value", [2**31 + 5, 2**40 + 7, -2**31 - 3, 2**63 - 1, 123456])
def test_a_runtime_int_cast_to_int32_wraps_everywhere_as_eager(value, use_kernels):
    t = _ints(40, torch.int32, 1)
    with FusionDefinition() as fd:
        x = fd.from_pytorch(t)
        _int32_uses(fd, x, fd.ops.cast(fd.define_scalar(DataType.Int), DataType.Int32))
    _check(FusionExecutorCache(fd.fusion, use_kernels=use_kernels).execute([t, value]), _int32_eager(t, value))


def test_a_constant_cast_to_int32_beyond_its_range_is_refused_not_given_a_second_value():
    """A constant beyond the type is refused when defined (as an Int32 fill of it is, after
    eager's torch.full); one in range converts as eager's."""
    with pytest.raises(FusionDefinitionError, match="cast: the DataType.Int32 scalar result 2147483653"):
        with FusionDefinition() as fd:
            fd.ops.cast(fd.define_scalar(2**31 + 5, dtype=DataType.Int), DataType.Int32)
    t = _ints(40, torch.int32, 2)
    with FusionDefinition() as fd:
        x = fd.from_pytorch(t)
        _int32_uses(fd, x, fd.ops.cast(fd.define_scalar(-2**31, dtype=DataType.Int), DataType.Int32))
    _check(fd.execute([t]), _int32_eager(t, -2**31))


@pytest.mark.parametrize("value, want", [(-2.7, -2), (2147483647.9, 2**31 - 1), (-2147483648.5, -2**31)])
def test_a_double_cast_to_int32_truncates(value, want):
    t = _ints(40, torch.int32, 3)
    with FusionDefinition() as fd:
        x = fd.from_pytorch(t)
        _int32_uses(fd, x, fd.ops.cast(fd.define_scalar(DataType.Double), DataType.Int32))
    _check(fd.execute([t, value]), _int32_eager(t, want))


@pytest.mark.parametrize("value", [3e9, -2147483649.0])
def test_a_double_beyond_int32_cast_to_it_is_refused(value):
    """Eager's conversion is undefined (x86 gives -2**31, a GPU saturates): refused, as a
    Double beyond int64 cast to an Int is."""
    t = _ints(40, torch.int32, 4)
    with FusionDefinition() as fd:
        x = fd.from_pytorch(t)
        _int32_uses(fd, x, fd.ops.cast(fd.define_scalar(DataType.Double), DataType.Int32))
    with pytest.raises(FusionInputError, match="out of the range of a 32-bit integer"):
        fd.execute([t, value])
    with pytest.raises(FusionDefinitionError, match="cast: the scalar .* cannot become DataType.Int32"):
        with FusionDefinition() as fd:
            fd.ops.cast(fd.define_scalar(value, dtype=DataType.Double), DataType.Int32)


def test_an_int_past_64_bits_is_refused_rather_than_wrapped_by_a_cast():
    """s * s is exact: past int64 it is refused, not hidden by the cast's wrap."""
    t = _ints(40, torch.int32, 5)
    with FusionDefinition() as fd:
        x = fd.from_pytorch(t)
        s = fd.define_scalar(DataType.Int)
        _int32_uses(fd, x, fd.ops.cast(fd.ops.mul(s, s), DataType.Int32))
    _check(fd.execute([t, 3037000]), _int32_eager(t, 3037000 ** 2))
    with pytest.raises(FusionInputError, match="the Int scalar .* out of the range of a 64-bit integer"):
        fd.execute([t, 3037000500])  # (its square is within a uint64's range, past an int64's)


@BACKENDS
@pytest.mark.parametrize("value", [-1, -12345, 2**62 + 3])
def test_a_runtime_int_cast_to_uint64_wraps_as_eager(value, use_kernels):
    t = torch.randint(0, 2**62, (40,), dtype=torch.int64, generator=torch.Generator().manual_seed(6)).to(torch.uint64)
    d = torch.randn(40, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    with FusionDefinition() as fd:
        x, y = fd.from_pytorch(t), fd.from_pytorch(d)
        u = fd.ops.cast(fd.define_scalar(DataType.Int), DataType.UInt64)
        fd.add_output(fd.ops.bitwise_xor(x, u))
        fd.add_output(fd.ops.full([3], u, DataType.UInt64))
        fd.add_output(fd.ops.add(y, fd.ops.cast(u, DataType.Double)))
    w = torch.tensor(value).to(torch.uint64)
    want = [t ^ w, torch.full((3,), w.item(), dtype=torch.uint64), d + w.double()]
    _check(FusionExecutorCache(fd.fusion, use_kernels=use_kernels).execute([t, d, value]), want)


@BACKENDS
@pytest.mark.parametrize("value", [2**64 - 1, 2**63 + 9, 2**32 + 17])
def test_a_uint64_cast_to_int_and_int32_wraps_as_eager(value, use_kernels):
    a, b = _ints(40, torch.int64, 8), _ints(40, torch.int32, 9)
    with FusionDefinition() as fd:
        x, y = fd.from_pytorch(a), fd.from_pytorch(b)
        u = fd.define_scalar(DataType.UInt64)
        fd.add_output(fd.ops.add(x, fd.ops.cast(u, DataType.Int)))
        fd.add_output(fd.ops.add(y, fd.ops.cast(u, DataType.Int32)))
        fd.add_output(fd.ops.full([3], fd.ops.cast(u, DataType.Int32), DataType.Int))
    w = torch.tensor([value], dtype=torch.uint64)
    want = [a + w.to(torch.int64), b + w.to(torch.int32), torch.full((3,), w.to(torch.int32).item())]
    _check(FusionExecutorCache(fd.fusion, use_kernels=use_kernels).execute([a, b, value]), want)


@BACKENDS
@pytest.mark.parametrize("value", [2**32, 2**32 + 1, -7])
def test_a_cast_to_bool_is_nonzero_of_the_converted_value(value, use_kernels):
    """Int -> Bool is nonzero of the Int; Int -> Int32 -> Bool of the wrapped Int32 (2**32 is 0)."""
    t = torch.randn(40, generator=torch.Generator().manual_seed(10))
    with FusionDefinition() as fd:
        x = fd.from_pytorch(t)
        s = fd.define_scalar(DataType.Int)
        for flag in (fd.ops.cast(s, DataType.Bool), fd.ops.cast(fd.ops.cast(s, DataType.Int32), DataType.Bool)):
            fd.add_output(fd.ops.mul(x, flag))
            fd.add_output(fd.ops.full([3], flag, DataType.Bool))
    want = []
    for flag in (torch.tensor(value).to(torch.bool), torch.tensor(value).to(torch.int32).to(torch.bool)):
        want += [t * flag, torch.full((3,), flag.item())]
    _check(FusionExecutorCache(fd.fusion, use_kernels=use_kernels).execute([t, value]), want)


# -- bool operands that eager refuses ---------------------------------------------------------------


def _bool_tensor(fd):
    return fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Bool)


@pytest.mark.parametrize("make", [
    lambda fd: fd.ops.sub(_bool_tensor(fd), _bool_tensor(fd)),
    lambda fd: fd.ops.sub(_bool_tensor(fd), fd.define_scalar(True, dtype=DataType.Bool)),
    lambda fd: fd.ops.sub(_bool_tensor(fd), 1),
    lambda fd: fd.ops.sub(fd.define_tensor(shape=[-1], dtype=DataType.Float), True),
    lambda fd: fd.ops.sub(1.5, _bool_tensor(fd)),
], ids=["bool-bool", "bool-bool_scalar", "bool-int", "float-bool_scalar", "float-bool"])
def test_sub_with_a_bool_operand_is_refused_as_eager(make):
    # (eager: "Subtraction, the `-` operator, with a bool tensor is not supported")
    x = torch.rand(8, generator=torch.Generator().manual_seed(11)) > 0.5
    with pytest.raises(RuntimeError, match="Subtraction"):
        x - x
    with pytest.raises(FusionDefinitionError, match="sub: not defined for a bool operand"):
        with FusionDefinition() as fd:
            make(fd)


@pytest.mark.parametrize("make", [
    lambda fd: fd.ops.pow(_bool_tensor(fd), _bool_tensor(fd)),
    lambda fd: fd.ops.pow(fd.define_scalar(True, dtype=DataType.Bool), _bool_tensor(fd)),
    lambda fd: fd.ops.pow(_bool_tensor(fd), fd.define_tensor(shape=[], dtype=DataType.Bool)),
], ids=["bool-bool", "bool_scalar-bool", "bool-0dim_bool"])
def test_pow_of_bools_with_a_tensor_exponent_is_refused_as_eager(make):
    x = torch.rand(8, generator=torch.Generator().manual_seed(12)) > 0.5
    with pytest.raises(NotImplementedError, match="pow"):
        x ** x
    with pytest.raises(FusionDefinitionError, match="pow: not defined for bool operands"):
        with FusionDefinition() as fd:
            make(fd)


@pytest.mark.parametrize("exponent", [True, False])
def test_a_bool_tensor_to_a_bool_scalar_power_is_computed_as_eager(exponent):
    x = torch.rand(40, generator=torch.Generator().manual_seed(13)) > 0.5
    with FusionDefinition() as fd:
        a = fd.from_pytorch(x)
        fd.add_output(fd.ops.pow(a, exponent))
        fd.add_output(fd.ops.pow(a, fd.define_scalar(exponent, dtype=DataType.Bool)))
    _check(fd.execute([x]), [x ** exponent] * 2)


@pytest.mark.parametrize("value", [2**31, -2**31 - 1, 2**40])
def test_a_defined_int32_constant_beyond_its_range_is_refused(value):
    """define_scalar(2**31 + 5, Int32) was accepted: the kernel's literal wrapped it while a
    host use of the same scalar would not (eager's torch.tensor(value, dtype=int32) refuses)."""
    with pytest.raises(RuntimeError):
        torch.tensor(value, dtype=torch.int32)
    with pytest.raises(FusionDefinitionError, match="out of the range"):
        with FusionDefinition() as fd:
            fd.define_scalar(value, dtype=DataType.Int32)


def test_a_defined_int32_constant_at_its_bounds_is_kept():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], dtype=DataType.Int32)
        fd.add_output(fd.ops.add(t, fd.define_scalar(2**31 - 1, dtype=DataType.Int32)))
        fd.add_output(fd.ops.add(t, fd.define_scalar(-2**31, dtype=DataType.Int32)))
    x = torch.randint(-5, 5, (7,), dtype=torch.int32)
    hi, lo = fd.execute([x])
    assert torch.equal(hi, x + torch.tensor(2**31 - 1, dtype=torch.int32))
    assert torch.equal(lo, x + torch.tensor(-2**31, dtype=torch.int32))
