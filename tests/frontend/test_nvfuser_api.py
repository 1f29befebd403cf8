"""Parts of nvFuser's FusionDefinition API beyond ops: define_tensor from sizes and strides,
compute_tensor_descriptor, define_vector, outputs aliasing inputs (in-place updates) and
fd.validate. Each follows nvFuser's documented behaviour, checked against eager PyTorch."""
import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition, compute_tensor_descriptor
from tests.helpers import assert_eager, make


@pytest.mark.parametrize("tensor,contiguity,stride_order", [
    (lambda: make((2, 3)), [True, True], [1, 0]),
    (lambda: make((3, 2)).t(), [True, True], [0, 1]),  # column-major: dim 1 outermost
    (lambda: make((4, 6))[:, ::2], [True, False], [1, 0]),  # strides (6, 2): 6 = 2 * 3
    (lambda: make((5, 6))[:, :3].t(), [False, True], [0, 1]),  # strides (1, 6): contiguity by memory order
    (lambda: make((3,)).unsqueeze(1).expand(3, 4), [True, None], [1, 0]),  # stride 0 keeps its place
    (lambda: make((2, 1, 3)), [True, None, True], [2, 1, 0]),
])
def test_compute_tensor_descriptor(tensor, contiguity, stride_order):
    t = tensor()
    assert compute_tensor_descriptor(t.shape, t.stride()) == (contiguity, stride_order)


@pytest.mark.parametrize("tensor", [
    lambda: make((5, 6))[:, :3].t(),
    lambda: make((3,)).unsqueeze(1).expand(3, 4),
    lambda: make((2, 4, 3)).permute(2, 0, 1),
    lambda: make((2, 1, 3)),
])
def test_define_tensor_from_sizes_and_strides(tensor):
    t = tensor()
    with FusionDefinition() as fd:
        x = fd.define_tensor(sizes=t.shape, strides=t.stride(), dtype=DataType.Float)
        fd.add_output(fd.ops.mul(fd.ops.exp(x), 2.0))
    assert_eager(fd.execute([t])[0], t.exp() * 2.0)
    # the printed definition (nvFuser's shape / contiguity / stride_order form) runs again
    scope: dict = {"DataType": DataType, "FusionDefinition": FusionDefinition}
    exec(repr(fd), scope)
    with FusionDefinition() as again:
        scope["nvfuser_fusion"](again)
    assert_eager(again.execute([t])[0], t.exp() * 2.0)


def test_define_tensor_needs_one_form():
    with pytest.raises(fuser.FusionDefinitionError, match="sizes and strides"):
        with FusionDefinition() as fd:
            fd.define_tensor(shape=[-1], sizes=[3], strides=[1])
    with pytest.raises(fuser.FusionDefinitionError, match="sizes and strides"):
        with FusionDefinition() as fd:
            fd.define_tensor(sizes=[3])


def test_define_vector_takes_a_list_or_tuple_at_execution():
    x = make((2, 3, 4))
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        fd.add_output(fd.ops.sum(fd.ops.reshape(t, fd.define_vector(2)), dims=[0]))
    for shape in ([6, 4], (4, 6)):
        assert_eager(fd.execute([x, shape])[0], x.reshape(shape).sum(0))
    assert_eager(fd.execute([x, 12, 2])[0], x.reshape(12, 2).sum(0))  # or its scalars one by one
    with pytest.raises(fuser.FusionInputError, match="input 0"):
        fd.execute([[1.0, 2.0], [6, 4]])  # a list where the tensor goes is not spread


def test_alias_input_updates_the_input_in_place():
    x = make((4, 5))
    expected_x, expected_out = x + 1.0, x + 3.0
    with FusionDefinition() as fd:
        t0 = fd.from_pytorch(x)
        t1 = fd.ops.add(t0, 1.0)
        fd.add_output(t1, alias_input=t0)
        fd.add_output(fd.ops.add(t1, 2.0))
    outs = fd.execute([x])
    assert len(outs) == 1  # the aliased output is hidden
    assert_eager(outs[0], expected_out)
    assert_eager(x, expected_x)
    assert "alias_input=tv0" in repr(fd)


def test_outputs_of_an_aliased_value_return_the_input():
    x = make((2, 3))
    expected = torch.where(x > 0, x, 0.0)
    with FusionDefinition() as fd:
        t0 = fd.from_pytorch(x)
        t1 = fd.ops.where(fd.ops.gt(t0, 0.0), t0, 0.0)
        fd.add_output(t1)
        fd.add_output(t1, alias_input=t0)
        fd.add_output(t0)
    outs = fd.execute([x])
    assert len(outs) == 2
    assert all(o.data_ptr() == x.data_ptr() for o in outs)
    assert_eager(x, expected)


def test_a_view_output_of_a_written_input_shows_the_write_and_validates():
    """A permute of an input that an alias writes is a view of it (as nvFuser's), showing the
    written values; fd.validate's reference wrote into other tensors than its views read, and
    refused the definition (fifty-fifth session)."""
    x = make((4, 6))
    before = x.clone()
    with FusionDefinition() as fd:
        t0 = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.add(t0, 1.0), alias_input=t0)
        fd.add_output(fd.ops.permute(t0, [1, 0]))
        fd.add_output(fd.ops.set(t0))
    view, copy = fd.execute([x])
    assert_eager(x, before + 1)
    assert view.data_ptr() == x.data_ptr() and torch.equal(view, x.t())
    assert torch.equal(copy, before)
    fd.validate([make((4, 6))])


def test_alias_into_a_strided_input():
    base = make((4, 8))
    x = base[:, ::2]
    expected = x * 2
    with FusionDefinition() as fd:
        t0 = fd.from_pytorch(x)
        fd.add_output(fd.ops.mul(t0, 2.0), alias_input=t0)
    assert fd.execute([x]) == []
    assert_eager(base[:, ::2], expected)


def test_bad_aliases_are_definition_errors():
    with pytest.raises(fuser.FusionDefinitionError, match="alias_input must be a tensor input"):
        with FusionDefinition() as fd:
            t0 = fd.define_tensor([-1], contiguity=True)
            t1 = fd.ops.exp(t0)
            fd.add_output(fd.ops.exp(t1), alias_input=t1)
    with pytest.raises(fuser.FusionDefinitionError, match="dtype"):
        with FusionDefinition() as fd:
            t0 = fd.define_tensor([-1], contiguity=True, dtype=DataType.BFloat16)
            fd.add_output(fd.ops.cast(t0, DataType.Float), alias_input=t0)
    with pytest.raises(fuser.FusionDefinitionError, match="already the alias"):
        with FusionDefinition() as fd:
            t0 = fd.define_tensor([-1], contiguity=True)
            fd.add_output(fd.ops.exp(t0), alias_input=t0)
            fd.add_output(fd.ops.sin(t0), alias_input=t0)
    with pytest.raises(fuser.FusionDefinitionError, match="dims"):
        with FusionDefinition() as fd:
            t0 = fd.define_tensor([-1, -1], contiguity=True)
            fd.add_output(fd.ops.sum(t0, dims=[1]), alias_input=t0)


def test_alias_with_another_extent_conflicts_at_binding():
    with FusionDefinition() as fd:
        t0 = fd.define_tensor([-1], contiguity=True)
        t1 = fd.define_tensor([-1], contiguity=True)
        fd.add_output(fd.ops.exp(t1), alias_input=t0)  # t0 and t1 must have one length now
    with pytest.raises(fuser.ExtentConflictError):
        fd.execute([make((3,)), make((4,))])


def test_validate_against_the_aten_evaluation_and_given_references():
    x, w = make((6, 40)), make((40,))
    with FusionDefinition() as fd:
        t0, t1 = fd.from_pytorch(x), fd.from_pytorch(w)
        s = fd.ops.sum(fd.ops.mul(t0, t1), dims=[1])
        fd.add_output(s)
        fd.add_output(fd.ops.gt(s, 0.0))
    outs = fd.validate([x, w])
    assert_eager(outs[0], (x * w).sum(1))
    fd.validate([x, w], [(x * w).sum(1), (x * w).sum(1) > 0])
    with pytest.raises(fuser.ValidationError, match="output 0 .*differs"):
        fd.validate([x, w], [(x * w).sum(1) + 0.1, (x * w).sum(1) > 0])
    with pytest.raises(fuser.ValidationError, match="output 1 .*differs.* in \\d+ of 6"):
        fd.validate([x, w], [(x * w).sum(1), (x * w).sum(1) <= 0])
    with pytest.raises(fuser.ValidationError, match="2 outputs but 1"):
        fd.validate([x, w], [(x * w).sum(1)])


def test_validate_a_random_op_without_a_seed_draws_the_executions_numbers():
    """The ATen reference drew its own seed from PyTorch's generator, so validate refused every
    unseeded random definition; it now draws the execution's, and leaves the generator where
    one execution leaves it."""
    x = make((4, 6))
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        fd.add_output(fd.ops.add(fd.ops.rand_like(t), t))
        fd.add_output(fd.ops.uniform(fd.define_scalar(-1.0), fd.define_scalar(2.0), [3, 5]))
    torch.manual_seed(7)
    first = fd.validate([x])
    after_validate = torch.rand(3)
    torch.manual_seed(7)
    assert all(torch.equal(a, b) for a, b in zip(fd.execute([x]), first))
    assert torch.equal(torch.rand(3), after_validate)


def test_validate_with_an_alias_compares_with_the_inputs_before_the_update():
    x = make((3, 4))
    before = x.clone()
    with FusionDefinition() as fd:
        t0 = fd.from_pytorch(x)
        t1 = fd.ops.mul(t0, 3.0)
        fd.add_output(t1, alias_input=t0)
        fd.add_output(fd.ops.exp(t1))
    (out,) = fd.validate([x])
    assert_eager(out, (before * 3).exp())
    assert_eager(x, before * 3)


def test_validate_keeps_an_expanded_input_expanded():
    """The reference run copies the inputs keeping their strides: a dim declared expanded (stride
    0) stays so (a dense copy would be refused by the definition's contiguity)."""
    x = make((6, 1, 8)).expand(6, 4, 8)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor([6, 4, 8], contiguity=[True, None, True])
        fd.add_output(fd.ops.sum(fd.ops.exp(t0), dims=[1]))
    (out,) = fd.validate([x])
    assert_eager(out, x.exp().sum(1))


def test_define_scalar_with_only_a_dtype_is_an_input():
    x = make((3,))
    with FusionDefinition() as fd:
        t0 = fd.from_pytorch(x)
        s = fd.define_scalar(DataType.Int)
        fd.add_output(fd.ops.mul(t0, s))
    assert s.dtype is DataType.Int
    assert_eager(fd.execute([x, 3])[0], x * 3)


def test_shape_of_a_broadcast_is_usable_and_printable():
    """t1_b.shape() after broadcast_in_dim gives the broadcast's size; a static extent is the
    constant it is (1 for a plain broadcast), and repr names each one."""
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True])
        t1 = fd.define_tensor(shape=[-1, 1, -1], contiguity=[True, None, True])
        t1_b = fd.ops.broadcast_in_dim(t1, t0.shape(), [0, 1, 2])
        fd.add_output(fd.ops.broadcast_in_dim(t1, t1_b.shape(), [0, 1, 2]))
        fd.add_output(fd.ops.mul(t0, t1.shape()[1]))
    assert t1.shape()[1].value == 1
    x, y = make((2, 3, 4)), make((2, 1, 4))
    outs = fd.execute([x, y])
    assert_eager(outs[0], y.expand(2, 3, 4))
    assert_eager(outs[1], x * 1)
    scope: dict = {"DataType": DataType, "FusionDefinition": FusionDefinition}
    exec(repr(fd), scope)
    with FusionDefinition() as again:
        scope["nvfuser_fusion"](again)
    assert_eager(again.execute([x, y])[0], y.expand(2, 3, 4))


# -- call forms of nvFuser's binding that its tests use ---------------------------------------

@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
def test_reductions_take_one_dim_by_keyword(op):
    """nvFuser's `ops.sum(arg, dim: int, keepdim=False, dtype=Null)` overload (test_python_direct)."""
    x = make((3, 5))
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        fd.add_output(getattr(fd.ops, op)(t, dim=-1))
        fd.add_output(getattr(fd.ops, op)(t, dim=0, keepdim=True))
    last, first = fd.execute([x])
    ref = {"sum": torch.sum, "prod": torch.prod, "max": torch.amax, "min": torch.amin}[op]
    assert_eager(last, ref(x, -1))
    assert_eager(first, ref(x, 0, keepdim=True))
    with pytest.raises(fuser.FusionDefinitionError, match=f"{op}: dims \\[0\\] and dim 1 both given"):
        with FusionDefinition() as fd:
            getattr(fd.ops, op)(fd.define_tensor([-1, -1], contiguity=True), [0], dim=1)


def test_broadcast_in_dim_wraps_negative_dims():
    """nvFuser wraps broadcast_dims as any dim (test_alphafold3's layer norm: [-1])."""
    x, w = make((3, 4)), make((4,))
    with FusionDefinition() as fd:
        tx, tw = fd.from_pytorch(x), fd.from_pytorch(w)
        fd.add_output(fd.ops.mul(tx, fd.ops.broadcast_in_dim(tw, shape=fd.ops.shape(tx), broadcast_dims=[-1])))
    (out,) = fd.execute([x, w])
    assert_eager(out, x * w)
    with pytest.raises(fuser.FusionDefinitionError, match="broadcast_dims \\[-3\\] must be increasing"):
        with FusionDefinition() as fd:
            fd.ops.broadcast_in_dim(fd.define_tensor([-1], contiguity=True), shape=[2, 4], broadcast_dims=[-3])


def test_tensor_dtype_is_also_a_method():
    """nvFuser's `tv.dtype()`; fuser's `tv.dtype` is the type itself, and calling it gives it."""
    with FusionDefinition() as fd:
        t = fd.define_tensor([-1], contiguity=True, dtype=DataType.BFloat16)
        assert t.dtype() is t.dtype is DataType.BFloat16
        fd.add_output(fd.ops.cast(fd.ops.exp(t), dtype=t.dtype()))
    x = make((6,), torch.bfloat16)
    (out,) = fd.execute([x])
    assert_eager(out, torch.exp(x.float()).bfloat16())


def test_print_math_and_domain_text_as_nvfusers():
    """`fd.fusion.print_math()`, `str(tv.domain())` and `str(tv.axis(k))` in nvFuser's text
    (its test_fusion_definition_print), before and after an execution."""
    with FusionDefinition() as fd:
        t0, t1 = fd.define_tensor(shape=[2, 4, 8]), fd.define_tensor(shape=[2, 4, 8])
        fd.add_output(fd.ops.add(t0, t1))
    math_text = ("Inputs:\n  T0_g_float[iS0{2}, iS1{4}, iS2{8}]\n  T1_g_float[iS3{2}, iS4{4}, iS5{8}]\n"
                 "Outputs:\n  T2_g_float[iS6{2}, iS7{4}, iS8{8}]\n\n%kernel_math {\n"
                 "T2_g_float[iS6{2}, iS7{4}, iS8{8}]\n   = T0_g_float[iS0{2}, iS1{4}, iS2{8}]\n"
                 "   + T1_g_float[iS3{2}, iS4{4}, iS5{8}];\n} // %kernel_math \n\n")
    assert fd.fusion.print_math() == math_text
    assert str(t0.domain()) == str(t0.domain) == "[iS0{2}, iS1{4}, iS2{8}]"
    assert str(t1.axis(0)) == "iS3{2}"
    x, y = make((2, 4, 8)), make((2, 4, 8))
    assert_eager(fd.execute([x, y])[0], x + y)
    assert fd.fusion.print_math() == math_text and str(t1.domain()) == "[iS3{2}, iS4{4}, iS5{8}]"
