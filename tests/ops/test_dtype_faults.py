"""Less common dtypes against eager: faults a probe found (fifty-sixth session), each a test
that failed before its fix."""
import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition
from tests.helpers import make


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_lerp_with_a_weight_below_minus_half_and_an_infinite_end_is_nan(dtype):
    """The kernel chose its formula by w < 0.5 where ATen's takes |w| < 0.5: inf where eager
    gives NaN."""
    start = torch.tensor([1.0, float("inf"), 2.0, -3.0], dtype=dtype)
    end = torch.tensor([float("inf"), 0.5, -1.0, 4.0], dtype=dtype)
    weight = torch.tensor([-0.75, -0.5, -2.0, 0.25], dtype=dtype)
    with FusionDefinition() as fd:
        s, e, w = (fd.from_pytorch(t) for t in (start, end, weight))
        fd.add_output(fd.ops.lerp(s, e, w))
    torch.testing.assert_close(fd.execute([start, end, weight])[0], torch.lerp(start, end, weight), equal_nan=True)


@pytest.mark.parametrize("value, build, want", [
    (2 + 1j, lambda fd, s: fd.ops.mul(s, fd.define_scalar(1j)), (2 + 1j) * 1j),
    (2.0, lambda fd, s: fd.ops.add(s, fd.define_scalar(3 - 1j)), 2.0 + (3 - 1j)),
    (2 + 1j, lambda fd, s: fd.ops.cast(s, DataType.Double), 2.0),
    (2 + 1j, lambda fd, s: fd.ops.cast(s, DataType.Int), 2),
], ids=["complex-times-i", "double-plus-complex", "complex-to-double", "complex-to-int"])
def test_complex_scalar_arithmetic_with_a_scalar_input(value, build, want):
    """sympy's I had no Python form (NotImplementedError) and a complex cast to a real type
    called float() on it (TypeError)."""
    with FusionDefinition() as fd:
        t = fd.define_tensor([-1], contiguity=True, dtype=DataType.ComplexDouble)
        s = fd.define_scalar(dtype={complex: DataType.ComplexDouble, float: DataType.Double}[type(value)])
        fd.add_output(fd.ops.add(t, build(fd, s)))
    x = make((3,), torch.complex128)
    torch.testing.assert_close(fd.execute([x, value])[0], x + want)


def test_pad_of_a_complex_tensor_with_a_complex_value():
    x = make((2, 3), torch.complex64)
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.pad(fd.from_pytorch(x), [1, 1], fd.define_scalar(2 + 1j)))
    torch.testing.assert_close(fd.execute([x])[0], torch.constant_pad_nd(x, [1, 1], 2 + 1j))


@pytest.mark.parametrize("build", [
    lambda fd, t: fd.ops.maximum(t, t), lambda fd, t: fd.ops.minimum(t, t),
    lambda fd, t: fd.ops.isposinf(t), lambda fd, t: fd.ops.isneginf(t)],
    ids=["maximum", "minimum", "isposinf", "isneginf"])
def test_ops_eager_refuses_for_complex_are_refused_at_definition(build):
    """An InternalError from ATen at execute before."""
    with pytest.raises(fuser.FusionDefinitionError, match="complex"), FusionDefinition() as fd:
        build(fd, fd.define_tensor([-1], contiguity=True, dtype=DataType.ComplexFloat))


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64"])
def test_jit_all_of_a_wide_unsigned_tensor(dtype):
    """all()'s decomposition takes logical_not, which ATen lacks for these types: a raw
    NotImplementedError where eager computes it."""
    x = torch.tensor([[1, 2, 0], [3, 4, 5]]).to(getattr(torch, dtype))

    def f(x):
        return x.all(), x.all(1)

    got, want = fuser.jit(f)(x), f(x)
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_a_backward_run_inside_a_jitted_function_over_a_complex_view():
    """Dynamo traced fuser's backward frame, whose saved tensors (a complex view of a reshaped
    input) it could not fake: a raw InternalTorchDynamoError."""
    def step(a):
        a = a.detach().requires_grad_()
        torch.view_as_complex(a.reshape(-1, 2)).abs().sum().backward()
        return a.grad

    x = make((64,))
    torch.testing.assert_close(fuser.jit(step)(x), step(x))


@pytest.mark.parametrize("build", [
    lambda fd, b, i: fd.ops.abs(b), lambda fd, b, i: fd.ops.ceil(b), lambda fd, b, i: fd.ops.floor(b),
    lambda fd, b, i: fd.ops.round(b), lambda fd, b, i: fd.ops.trunc(b)],
    ids=["abs", "ceil", "floor", "round", "trunc"])
def test_ops_eager_refuses_for_bool_are_refused(build):
    """They computed a result where eager raises. (nextafter of integers stays Float, as in
    nvFuser: tests/ops/test_math_ops.py.)"""
    with pytest.raises(fuser.FusionDefinitionError, match="eager refuses it too"), FusionDefinition() as fd:
        build(fd, fd.define_tensor([-1], dtype=DataType.Bool), fd.define_tensor([-1], dtype=DataType.Int))


@pytest.mark.parametrize("f", [lambda t: torch.abs(t > 0), lambda t: torch.ceil(t > 0), lambda t: torch.pow(t > 0, t > 1),
                               lambda t: torch.nextafter(t, t + 1)], ids=["abs", "ceil", "pow", "nextafter"])
def test_jit_ops_eager_refuses_for_bool_or_integers_raise_eagers_error(f):
    x = torch.tensor([3, -2, 5])
    with pytest.raises(NotImplementedError) as eager:
        f(x)
    with pytest.raises(NotImplementedError) as got:
        fuser.jit(eval("lambda t: f(t)", {"f": f}))(x)
    assert str(got.value) == str(eager.value)
