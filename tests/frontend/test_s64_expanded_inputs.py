"""An input dim declared with contiguity None and a size other than 1 (`define_tensor`'s -1 or a
static size, `from_pytorch` of an expanded, stride-0 tensor) is nvFuser's expanded broadcast
(python_utils.cpp `getExpanded`): `bS1{1 ex i1}`, its expanded extent bound from the input's
size. fuser made it an ordinary axis, so `squeeze(..., squeeze_expanded=True)` of it was refused
at execution ("size 3, but the definition declares 1"). Also nvfuser_direct's
`fd.validate_definition()`."""
import pytest
import torch

from fuser import DataType, FusionDefinition, FusionDefinitionError, FusionInputError
from fuser.evaluate.binding import InputBinder, bind_inputs
from tests.helpers import BACKENDS, assert_eager, backend_env, make


def _expanded():
    return make((4, 1, 6)).expand(4, 3, 6)  # strides (6, 0, 1)


def _declare(fd, x, how):
    if how == "from_pytorch":
        return fd.from_pytorch(x)
    return fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, None, True], dtype=DataType.Float)


@pytest.mark.parametrize("how", ["from_pytorch", "define_tensor"])
def test_a_none_dim_of_size_other_than_one_is_an_expanded_broadcast(how):
    x = _expanded()
    with FusionDefinition() as fd:
        a = _declare(fd, x, how)
        fd.add_output(fd.ops.squeeze(a, [1], squeeze_expanded=True))
    assert str(a) == "T0_g_float[iS0{i0}, bS1{1 ex i1}, iS2{i2}]"
    assert a.axis(1).is_broadcast() and not a.axis(0).is_broadcast()
    (out,) = fd.execute([x])
    assert out.shape == (4, 6) and torch.equal(out, x[:, 0])


def test_a_static_size_declared_none_is_an_expanded_broadcast_of_that_size():
    x = _expanded()
    with FusionDefinition() as fd:
        a = fd.from_pytorch(x, static_sizes=True)
        fd.add_output(fd.ops.sum(a, [1]))
    assert str(a) == "T0_g_float[iS0{4}, bS1{1 ex 3}, iS2{6}]"
    assert_eager(fd.execute([x])[0], x.sum(1))


def test_the_expanded_dim_follows_the_stride_order():
    # contiguity is given in allocation order: with stride_order [0, 1] its first entry is dim 1's
    y = make((5, 1)).expand(5, 4)  # strides (1, 0)
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=[None, True], stride_order=[0, 1])
        fd.add_output(fd.ops.sum(a, [1]))
    assert str(a) == "T0_g_float[iS0{i0}, bS1{1 ex i1}]"
    assert_eager(fd.execute([y])[0], y.sum(1))


_OPS = {
    "add-a-full-tensor": (lambda fd, a, b: fd.ops.add(a, b), lambda x, y: x + y),
    "sum-over-the-expanded-dim": (lambda fd, a, b: fd.ops.sum(a, [1]), lambda x, y: x.sum(1)),
    "sum-beside-it": (lambda fd, a, b: fd.ops.sum(fd.ops.exp(a), [2]), lambda x, y: x.exp().sum(2)),
    "mul-then-sum-all": (lambda fd, a, b: fd.ops.sum(fd.ops.mul(a, b), [0, 1, 2]), lambda x, y: (x * y).sum()),
    "squeeze-expanded": (lambda fd, a, b: fd.ops.add(fd.ops.squeeze(a, [1], squeeze_expanded=True),
                                                     fd.ops.sum(b, [1])),
                         lambda x, y: x[:, 0] + y.sum(1)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", list(_OPS))
def test_ops_over_an_expanded_input_give_eagers_values(op, backend):
    build, reference = _OPS[op]
    x, y = _expanded(), make((4, 3, 6))
    with FusionDefinition() as fd:
        a, b = fd.from_pytorch(x), fd.from_pytorch(y)
        fd.add_output(build(fd, a, b))
    assert a.axis(1).is_broadcast()
    with backend_env(backend):
        (out,) = fd.execute([x, y])
    assert_eager(out, reference(x, y))


def test_the_expanded_size_meets_the_other_operands_extent():
    x, y = _expanded(), make((4, 5, 6))
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.add(fd.from_pytorch(x), fd.from_pytorch(y)))
    with pytest.raises(RuntimeError, match="3 from input 0 .*axis 1.* 5 from input 1"):
        fd.execute([x, y])


def test_a_size_one_is_taken_for_an_expanded_dim():
    x = make((4, 1, 6))
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, None, True])
        fd.add_output(fd.ops.sum(fd.ops.exp(a), [1]))
    assert_eager(fd.execute([x])[0], x.exp().sum(1))


def test_a_tensor_not_expanded_is_refused_for_an_expanded_dim_by_both_binders():
    # contiguity False around it: no stride chain refuses the dense tensor; its stride 6 on the
    # expanded dim would have been read as one element for all three
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1, -1], contiguity=[False, None, False])
        fd.add_output(fd.ops.squeeze(a, [1], squeeze_expanded=True))
    dense = make((4, 3, 6))
    message = (r"input 0 \(T0\) axis 1: declared an expanded broadcast \(bS1\{1 ex i1\}: .*\), so stride 0 "
               r"was expected, got stride 6")
    binder = InputBinder(fd.fusion)
    for bind in (binder.bind, lambda args: bind_inputs(fd.fusion, args)):
        with pytest.raises(FusionInputError, match=message):
            bind([dense])
    with pytest.raises(FusionInputError, match=message):
        fd.execute([dense])
    x = _expanded()
    assert dict(binder.bind([x]).values) == dict(bind_inputs(fd.fusion, [x]).values) == \
        {"i0": 4, "i1": 3, "i2": 6}
    assert torch.equal(fd.execute([x])[0], x[:, 0])


def test_repr_rebuilds_the_expanded_input():
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=[None, True])
        fd.add_output(fd.ops.sum(a, [0]))
    namespace = {"DataType": DataType, "FusionDefinition": FusionDefinition}
    exec(repr(fd), namespace)  # noqa: S102 - the repr under test
    with FusionDefinition() as again:
        namespace["nvfuser_fusion"](again)
    assert str(again.fusion.inputs()[0]) == str(a) == "T0_g_float[bS0{1 ex i0}, iS1{i1}]"
    x = make((1, 7)).expand(5, 7)
    assert_eager(again.execute([x])[0], x.sum(0))


def test_validate_definition_of_a_definition_that_can_run():
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.exp(fd.define_tensor([-1])))
    assert fd.validate_definition() == (True, None)


def test_validate_definition_names_what_is_wrong_without_raising():
    empty = FusionDefinition()
    ok, why = empty.validate_definition()
    assert not ok and "no outputs" in why
    with pytest.raises(FusionDefinitionError, match="execute: the definition has no outputs"):
        empty.execute([])

    broken = FusionDefinition()
    with pytest.raises(FusionDefinitionError):
        with broken:
            t = broken.define_tensor([-1])
            broken.add_output(broken.ops.exp(t))
            broken.ops.sum(t, [])  # an empty list of dims: refused
    ok, why = broken.validate_definition()
    assert not ok and "with-block raised (FusionDefinitionError" in why
    with pytest.raises(FusionDefinitionError, match="with-block raised"):
        broken.execute([make((3,))])
