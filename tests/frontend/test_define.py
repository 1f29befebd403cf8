"""FusionDefinition.define_tensor / define_scalar / from_pytorch, with nvFuser's stride_order:
stride_order[k] is the rank of dim k's stride, 0 the fastest-moving dim."""
import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition
from tests.helpers import assert_eager, backend_env, make


def exp_of(**define_kwargs):
    with FusionDefinition() as fd:
        x = fd.define_tensor(**define_kwargs)
        fd.add_output(fd.ops.exp(x))
    return fd


def test_transposed_tensor_is_stride_order_0_1():
    t = make((5, 3)).t()  # shape (3, 5), strides (1, 3)
    fd = exp_of(shape=[-1, -1], contiguity=True, stride_order=[0, 1])
    assert_eager(fd.execute([t])[0], t.exp())
    # its allocation domain lists dim 1 (the slowest) first
    x = fd.fusion.inputs()[0]
    assert x.get_allocation_domain() == [x.get_logical_domain()[1], x.get_logical_domain()[0]]


def test_permuted_3d_stride_order():
    t = make((2, 4, 3)).permute(0, 2, 1)  # shape (2, 3, 4), strides (12, 1, 3)
    fd = exp_of(shape=[-1, -1, -1], contiguity=True, stride_order=[2, 0, 1])
    assert_eager(fd.execute([t])[0], t.exp())


def test_stride_order_mismatch_is_an_input_error():
    fd = exp_of(shape=[-1, -1], contiguity=True, stride_order=[0, 1])
    with pytest.raises(fuser.FusionInputError, match=r"input 0 .*axis 0.*declared contiguous.*stride 1.*got 5"):
        fd.execute([make((3, 5))])  # row-major, but declared column-major


def test_contiguity_is_given_in_allocation_order_with_stride_order():
    # nvFuser's order: contiguity[0] is the outermost dim in memory (here dim 1)
    t = make((5, 6))[:, :3].t()  # shape (3, 5), strides (1, 6): dim 0 dense, dim 1 not
    fd = exp_of(shape=[-1, -1], contiguity=[False, True], stride_order=[0, 1])
    assert_eager(fd.execute([t])[0], t.exp())
    assert "contiguity=[False, True]" in repr(fd)
    strict = exp_of(shape=[-1, -1], contiguity=[True, True], stride_order=[0, 1])
    with pytest.raises(fuser.FusionInputError, match="axis 1.*stride 3.*got 6"):
        strict.execute([t])


@pytest.mark.parametrize("bad", [[0, 0], [1, 2], [0]])
def test_bad_stride_order_is_a_definition_error(bad):
    with pytest.raises(fuser.FusionDefinitionError, match="stride_order"):
        exp_of(shape=[-1, -1], contiguity=True, stride_order=bad)


@pytest.mark.parametrize("shape", [[-2, 3], [3.0], [True]])
def test_bad_shape_entry_is_a_definition_error(shape):
    with pytest.raises(fuser.FusionDefinitionError, match="shape"):
        exp_of(shape=shape, contiguity=True)


def test_bad_dtype_and_contiguity_length_are_definition_errors():
    with pytest.raises(fuser.FusionDefinitionError, match="dtype"):
        exp_of(shape=[-1], contiguity=True, dtype=torch.float32)
    with pytest.raises(fuser.FusionDefinitionError, match="contiguity"):
        exp_of(shape=[-1, -1], contiguity=[True])


def test_definition_without_outputs_is_an_error():
    with pytest.raises(fuser.FusionDefinitionError, match="no outputs"):
        with FusionDefinition() as fd:
            fd.define_tensor([-1], contiguity=True)


def test_static_and_broadcast_extents():
    with FusionDefinition() as fd:
        x = fd.define_tensor([3, 1, -1], contiguity=True)
        fd.add_output(fd.ops.neg(x))
    logical = x.get_logical_domain()
    assert [d.is_broadcast for d in logical] == [False, True, False]
    assert str(logical[0].extent) == "3"
    t = make((3, 1, 4))
    assert_eager(fd.execute([t])[0], -t)


@pytest.mark.parametrize("make_tensor,stride_order", [
    (lambda: make((3, 5)), None),
    (lambda: make((5, 3)).t(), [0, 1]),
    (lambda: make((2, 4, 3)).permute(2, 0, 1), [0, 2, 1]),
    (lambda: make((4, 3, 2)).permute(1, 2, 0), [1, 0, 2]),
])
def test_from_pytorch_derives_nvfuser_stride_order(make_tensor, stride_order):
    t = make_tensor()
    with FusionDefinition() as fd:
        x = fd.from_pytorch(t)
        fd.add_output(fd.ops.exp(x))
    if stride_order is None:
        assert "stride_order" not in repr(fd)
    else:
        assert f"stride_order={stride_order}" in repr(fd)
    assert_eager(fd.execute([t])[0], t.exp())


def test_define_scalar_input_and_constant():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True)
        s = fd.define_scalar(dtype=DataType.Double)
        c = fd.define_scalar(3)
        fd.add_output(fd.ops.add(fd.ops.mul(x, s), c))
    assert len(fd.fusion.inputs()) == 2 and c.dtype is DataType.Int
    t = make((4,))
    with backend_env("aten"):  # Double scalars in kernels: see tests/ops/test_binary.py K_DOUBLE_INPUT
        torch.testing.assert_close(fd.execute([t, 0.5])[0], t * 0.5 + 3)


def test_execute_accepts_a_tuple():
    fd = exp_of(shape=[-1], contiguity=True)
    t = make((4,))
    assert_eager(fd.execute((t,))[0], t.exp())


def test_ops_from_two_definitions_cannot_mix():
    with FusionDefinition() as fd1:
        a = fd1.define_tensor([-1], contiguity=True)
        fd1.add_output(a)
    with FusionDefinition() as fd2:
        b = fd2.define_tensor([-1], contiguity=True)
        with pytest.raises(fuser.FusionDefinitionError, match="belongs to another FusionDefinition"):
            fd2.ops.add(a, b)
        fd2.add_output(b)


def test_unknown_op_is_an_attribute_error():
    fd = FusionDefinition()
    with pytest.raises(AttributeError, match="no_such_op"):
        fd.ops.no_such_op


def test_static_extent_mismatch_between_operands_is_a_definition_error():
    with pytest.raises(fuser.FusionDefinitionError, match="3 and 4|4 and 3"):
        with FusionDefinition() as fd:
            a = fd.define_tensor([3], contiguity=True)
            b = fd.define_tensor([4], contiguity=True)
            fd.add_output(fd.ops.add(a, b))
