"""Faults of the definition API found by probing it as an nvFuser user would (forty-seventh
session), each checked against eager PyTorch or nvFuser's documented rule."""
import math

import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition
from tests.helpers import assert_eager, make


def test_scalar_value_takes_its_dtype():
    # nvFuser converts a Val's value to its dtype when it is made
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Int)
        y = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
        s = fd.define_scalar(3.7, dtype=DataType.Int)
        b = fd.define_scalar(0.5, dtype=DataType.Bool)
        fd.add_output(fd.ops.mul(x, s))
        fd.add_output(fd.ops.mul(y, s))
        fd.add_output(fd.ops.mul(y, b))
        fd.add_output(fd.ops.full([2], s, DataType.Float))
    xi, yf = make((5,), torch.int64), make((5,))
    outs = fd.execute([xi, yf])
    assert_eager(outs[0], xi * 3)
    assert_eager(outs[1], yf * 3)
    assert_eager(outs[2], yf * True)
    assert_eager(outs[3], torch.full((2,), 3.0))
    assert "3.7" not in repr(fd)  # the repr rebuilds the converted value


def test_scalar_value_that_its_dtype_cannot_hold():
    with FusionDefinition() as fd:
        with pytest.raises(fuser.FusionDefinitionError, match="complex value"):
            fd.define_scalar(1 + 1j, DataType.Double)
        with pytest.raises(fuser.FusionDefinitionError, match="integers are finite"):
            fd.define_scalar(math.inf, DataType.Int)
        fd.add_output(fd.ops.exp(fd.define_tensor(shape=[-1], contiguity=True)))


def test_double_with_complex_float_is_complex_double():
    # PyTorch keeps the double's precision: float64 with complex64 gives complex128
    with FusionDefinition() as fd:
        d = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Double)
        c = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.ComplexFloat)
        f = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.add(d, c))
        fd.add_output(fd.ops.mul(d, 1j))
        fd.add_output(fd.ops.mul(f, fd.define_scalar(2j, DataType.ComplexDouble)))
    dt, ct, ft = make((4,), torch.float64), make((4,), torch.complex64), make((4,))
    outs = fd.execute([dt, ct, ft])
    assert_eager(outs[0], dt + ct)
    assert_eager(outs[1], dt * 1j)
    assert_eager(outs[2], ft * 2j)


@pytest.mark.parametrize("base,exponent,expected", [(7, -2, 0), (-1, -3, -1), (-1, -2, 1), (1, -5, 1), (3, 2, 9)])
def test_integer_power_of_scalars_is_the_same_known_or_bound(base, exponent, expected):
    results = []
    for known in (True, False):
        with FusionDefinition() as fd:
            a, b = ((fd.define_scalar(base), fd.define_scalar(exponent)) if known
                    else (fd.define_scalar(DataType.Int), fd.define_scalar(DataType.Int)))
            fd.add_output(fd.ops.full([1], fd.ops.pow(a, b), DataType.Int))
        results.append(fd.execute([] if known else [base, exponent])[0].item())
    assert results == [expected, expected]


def test_integer_zero_to_a_negative_power_is_an_error():
    with FusionDefinition() as fd:
        a, b = fd.define_scalar(DataType.Int), fd.define_scalar(DataType.Int)
        fd.add_output(fd.ops.full([1], fd.ops.pow(a, b), DataType.Int))
    with pytest.raises(fuser.FusionInputError, match="negative"):
        fd.execute([0, -1])


def test_validate_checks_the_reference_dtype_and_kind():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Int)
        fd.add_output(fd.ops.div(x, 2))
    a = torch.tensor([7, -7, 5])
    with pytest.raises(fuser.ValidationError, match="torch.int64, its reference torch.float32"):
        fd.validate([a], [a / 2])
    with pytest.raises(fuser.ValidationError, match="reference output 0 is a float"):
        fd.validate([a], [3.0])
    fd.validate([a], [torch.div(a, 2, rounding_mode="trunc")])


@pytest.mark.parametrize("build,reference", [
    (lambda fd, x: fd.ops.sum(x, [0]), lambda t: t.sum(0)),
    (lambda fd, x: fd.ops.max(x, [-1]), lambda t: t.amax(-1)),
    (lambda fd, x: fd.ops.sum(x, [0], True, dtype=DataType.Double), lambda t: t.sum(0, True, dtype=torch.float64)),
    (lambda fd, x: fd.ops.var_mean(x, [0], correction=0)[0], lambda t: torch.var_mean(t, 0, correction=0)[0]),
    (lambda fd, x: fd.ops.var_mean(x, [0], correction=0)[1], lambda t: torch.var_mean(t, 0, correction=0)[1]),
    (lambda fd, x: fd.ops.var(x, [0], correction=1), lambda t: torch.full((), math.nan)),
    (lambda fd, x: fd.ops.div(fd.ops.exp(x), fd.ops.sum(fd.ops.exp(x), [0], True)), lambda t: torch.softmax(t, 0)),
])
def test_reduction_of_a_zero_dim_tensor_is_its_element(build, reference):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Float)
        fd.add_output(build(fd, x))
    t = make(())
    assert_eager(fd.execute([t])[0], reference(t))


def test_reduction_over_no_dims_is_refused():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True)
        with pytest.raises(fuser.FusionDefinitionError, match="no dims to reduce"):
            fd.ops.sum(x, [])
        fd.add_output(fd.ops.sum(x, None))


def test_alias_of_an_expanded_output_keeps_the_input_shape():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True)
        s = fd.ops.sum(x, [1], True)
        fd.add_output(fd.ops.expand(s, x.shape()), alias_input=x)
    a = make((3, 4))
    expected = a.sum(1, keepdim=True).expand(3, 4).clone()
    assert fd.execute([a]) == []
    assert_eager(a, expected)


def test_alias_into_an_expanded_input_is_refused():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=False)
        fd.add_output(fd.ops.mul(x, 2.0), alias_input=x)
    with pytest.raises(fuser.FusionInputError, match="input 0 .* expanded"):
        fd.execute([make((4,)).expand(3, 4)])


def test_alias_of_a_view_of_the_same_input():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True)
        fd.add_output(fd.ops.permute(x, [1, 0]), alias_input=x)
    a = make((3, 3))
    expected = a.t().clone()
    fd.execute([a])
    assert_eager(a, expected)


def test_values_of_another_definition_are_refused():
    with FusionDefinition() as fd1:
        a = fd1.define_tensor(shape=[-1], contiguity=True)
        fd1.add_output(fd1.ops.exp(a))
    with FusionDefinition() as fd2:
        y = fd2.define_tensor(shape=[-1, -1], contiguity=True)
        with pytest.raises(fuser.FusionDefinitionError, match="shape entry .* another fusion definition"):
            fd2.ops.reshape(y, [a.size(0), -1])
        with pytest.raises(fuser.FusionDefinitionError, match="shape entry .* another fusion definition"):
            fd2.ops.full([a.size(0)], 1.0, DataType.Float)
        with pytest.raises(fuser.FusionDefinitionError, match="another fusion definition"):
            fd2.add_output(a)
        fd2.add_output(fd2.ops.exp(y))
    t = make((2, 3))
    assert_eager(fd2.execute([t])[0], t.exp())


def test_errors_name_the_op_that_fixed_an_extent():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True)
        z = fd.define_tensor(shape=[-1, -1], contiguity=True)
        fd.add_output(fd.ops.add(fd.ops.reshape(x, [3, -1]), z))
    with pytest.raises(fuser.FusionInputError, match=r"reshape of T0.* to \[3, -1\]: 10 elements do not divide into 3"):
        fd.execute([make((5, 2)), make((3, 5))])
    a, b = make((3, 2)), make((3, 2))
    assert_eager(fd.execute([a, b])[0], a.reshape(3, -1) + b)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True)
        fd.add_output(fd.ops.squeeze(x, [1]))
    with pytest.raises(fuser.FusionInputError, match=r"axis 1: size 3, but the definition declares 1 \(squeeze"):
        fd.execute([make((2, 3))])
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True)
        fd.add_output(fd.ops.expand(x, [4, 3]))
    with pytest.raises(fuser.FusionInputError, match=r"declares 4 \(expand: axis 0"):
        fd.execute([make((2, 3))])


def test_bad_arguments_are_fuser_errors():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=True)
        v = fd.define_vector(2)
        fd.add_output(fd.ops.reshape(x, v))
    with pytest.raises(fuser.FusionInputError, match=r"input 1: a define_vector\(2\) takes a list of 2 values, got 1"):
        fd.execute([make((6,)), [6]])
    t = make((6,))
    assert_eager(fd.execute([t, [2, 3]])[0], t.reshape(2, 3))
    with pytest.raises(fuser.FusionInputError, match="expects a list of inputs, got NoneType"):
        fd.execute(None)
    with FusionDefinition() as fd:
        with pytest.raises(fuser.FusionDefinitionError, match="shape must be a list"):
            fd.define_tensor(shape=5, contiguity=True)
        fd.add_output(fd.ops.exp(fd.define_tensor(shape=[5], contiguity=True)))


def test_an_empty_view_is_a_dense_layout():
    # strides (4, 1) for a [3, 0] view: PyTorch calls it contiguous, and no element is addressed
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True)
        fd.add_output(fd.ops.mul(x, 2.0))
    empty = make((3, 4))[:, :0]
    assert_eager(fd.execute([empty])[0], empty * 2.0)
