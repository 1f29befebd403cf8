"""Cases a review pass found failing: expanded axes through slice, reshape, pad and cat; bool
arithmetic with a constant; runtime sizes that make an op undefined; repr of non-finite
constants. Each runs on the ATen evaluator and on generated kernels."""
import pytest
import torch
import torch.nn.functional as F

import fuser
from fuser import DataType, FusionDefinition
from tests.helpers import backend_env

BACKENDS = ["aten", "kernel"]


def run(build, args, backend):
    with FusionDefinition() as fd:
        build(fd)
    with backend_env(backend):
        return fd.execute(args)


@pytest.mark.parametrize("backend", BACKENDS)
def test_expanded_axis_through_slice_reshape_pad_cat(backend):
    x, y, u = torch.randn(1, 5), torch.randn(5), torch.randn(2, 5)

    def build(fd):
        t = fd.define_tensor([1, -1], contiguity=True, dtype=DataType.Float)
        v = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        w = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        e = fd.ops.expand(t, [6, t.shape()[1]])
        fd.add_output(fd.ops.slice(e, [1, 0], [5, t.shape()[1]], [2, 1]))
        fd.add_output(fd.ops.reshape(fd.ops.broadcast_in_dim(v, [3, v.shape()[0]], [1]), [15]))
        fd.add_output(fd.ops.pad(e, [0, 0, 1, 1], 2.0))
        fd.add_output(fd.ops.cat([fd.ops.expand(t, [3, t.shape()[1]]), w], 0))

    sliced, reshaped, padded, joined = run(build, [x, y, u], backend)
    assert torch.equal(sliced, x.expand(6, 5)[1:5:2])
    assert torch.equal(reshaped, y.expand(3, 5).reshape(15))
    assert torch.equal(padded, F.pad(x.expand(6, 5), [0, 0, 1, 1], value=2.0))
    assert torch.equal(joined, torch.cat([x.expand(3, 5), u]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_bool_arithmetic_with_a_constant(backend):
    b = torch.tensor([True, False, True])

    def build(fd):
        t = fd.define_tensor([-1], contiguity=True, dtype=DataType.Bool)
        fd.add_output(fd.ops.mul(t, True))
        fd.add_output(fd.ops.add(t, True))

    prod, total = run(build, [b], backend)
    assert torch.equal(prod, b * True) and torch.equal(total, b + True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_runtime_sizes_that_leave_an_op_undefined_are_input_errors(backend):
    def max_of_rows(fd):
        t = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.max(t, [1]))

    with pytest.raises(fuser.FusionInputError, match="size 0 on reduced axis 1"):
        run(max_of_rows, [torch.randn(4, 0)], backend)

    def full_of_size(fd):
        s = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.full([s], 1.0, DataType.Float))

    with pytest.raises(fuser.FusionInputError, match="negative"):
        run(full_of_size, [-2], backend)


def test_repr_of_non_finite_constants_runs():
    with FusionDefinition() as fd:
        t = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.add(fd.ops.pad(t, [1, 1], float("-inf")), float("nan")))
    ns = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(repr(fd), ns)  # noqa: S102 - the printed definition is the thing under test
    with FusionDefinition() as again:
        ns["nvfuser_fusion"](again)
    assert again.fusion.structural_hash() == fd.fusion.structural_hash()


def test_repr_keeps_scheduling_calls_where_they_were_made():
    with FusionDefinition() as fd:
        t = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        y = fd.ops.exp(t)
        y.split(1, 2)
        fd.add_output(fd.ops.neg(y))
    text = repr(fd)
    assert text.index(".split(1, 2") < text.index("fd.ops.neg")
    ns = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(text, ns)  # noqa: S102
    with FusionDefinition() as again:
        ns["nvfuser_fusion"](again)
    assert again.fusion.structural_hash() == fd.fusion.structural_hash()


def test_sum_and_prod_keep_an_integer_or_bool_dtype_asked_for():
    # computed in int64, then wrapped into the asked type as eager's result is
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Int32)
        fd.add_output(fd.ops.sum(x, [1], dtype=DataType.Int32))
        fd.add_output(fd.ops.prod(x, [1], False, DataType.Int32))
        fd.add_output(fd.ops.sum(x, [0], dtype=DataType.Bool))
        fd.add_output(fd.ops.sum(x, [1]))
    x = torch.tensor([[2**30, 2**30, 5], [1, 2, 3], [0, 0, -7]], dtype=torch.int32)
    want = [x.sum(1, dtype=torch.int32), x.prod(1, dtype=torch.int32), x.sum(0, dtype=torch.bool), x.sum(1)]
    for got, expected in zip(fd.execute([x]), want, strict=True):
        assert got.dtype == expected.dtype and torch.equal(got, expected)


def test_abs_of_a_complex_tensor_is_its_real_magnitude():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.ComplexFloat)
        fd.add_output(fd.ops.abs(x))
    x = torch.tensor([3 + 4j, -1j, -2.5 + 0j], dtype=torch.complex64)
    (got,) = fd.execute([x])
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, x.abs())


def test_a_definition_that_ran_cannot_change():
    # its runtimes were compiled from it: a later output or op would reach some layouts only
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.mul(x, 2.0))
    x = torch.randn(5)
    fd.execute([x])
    with pytest.raises(fuser.FusionDefinitionError, match="the fusion is final"):
        fd.add_output(fd.ops.add(fd.fusion.inputs()[0], 1.0))
    with pytest.raises(fuser.FusionDefinitionError, match="the fusion is final"):
        fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
    (out,) = fd.execute([x])  # still the definition it was
    torch.testing.assert_close(out, x * 2.0)


def test_pow_of_negative_infinity_by_a_non_integer_follows_c():
    # C's pow, which eager calls: (-inf) ** 2.5 is inf, (-inf) ** -2.5 is 0 (not nan)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.pow(x, 2.5))
        fd.add_output(fd.ops.pow(x, -2.5))
    x = torch.tensor([-float("inf"), float("inf"), 4.0, -4.0, -0.0])
    for got, want in zip(fd.execute([x]), (x.pow(2.5), x.pow(-2.5)), strict=True):
        torch.testing.assert_close(got, want, equal_nan=True)


def test_an_op_refused_on_a_final_definition_changes_nothing():
    # refused before it unifies the operands' extents (which would bind y's size to x's)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
        y = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.mul(x, 2.0))
        fd.add_output(fd.ops.mul(y, 3.0))
    fd.execute([torch.randn(5), torch.randn(7)])
    with pytest.raises(fuser.FusionDefinitionError, match="the fusion is final"):
        fd.ops.add(x, y)
    a, b = torch.randn(1), torch.arange(7.0)
    got_a, got_b = fd.execute([a, b])
    torch.testing.assert_close(got_b, b * 3.0)
    torch.testing.assert_close(got_a, a * 2.0)
    assert [t.shape for t in fd.execute([torch.randn(0), torch.randn(3)])] == [(0,), (3,)]
