"""Meta inference: infer_meta(fusion, args, table) runs the ATen rules on meta tensors and gives
eager's output shapes; an IR extent that disagrees with what an op produces is an
InternalError naming the op and the extent (invariant 3)."""
import re

import pytest
import sympy
import torch
import torch.nn.functional as F

import fuser
from fuser import DataType, FusionDefinition
from fuser.evaluate import bind_inputs, evaluate_fusion, infer_meta
from tests.helpers import make


def many_ops():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1, -1], contiguity=True)
        w = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.linear(x, w))
        fd.add_output(fd.ops.reshape(x, [x.shape()[0], -1]))
        fd.add_output(fd.ops.permute(x, [2, 0, 1]))
        fd.add_output(fd.ops.sum(x, [1], True))
        fd.add_output(fd.ops.cat([x, x], 1))
        fd.add_output(fd.ops.pad(x, [1, 2]))
        fd.add_output(fd.ops.slice(x, [0, 1, 0], [2, 3, 4], [1, 1, 3]))
        fd.add_output(fd.ops.matmul(x, fd.ops.permute(w, [1, 0])))
        fd.add_output(fd.ops.var_mean(x, [0, 2])[0])
        fd.add_output(fd.ops.cast(fd.ops.gt(x, 0.0), DataType.Half))
        fd.add_output(fd.ops.expand(fd.ops.broadcast(fd.ops.sum(x, [2]), [False, False, True]), x.shape()))
    return fd


def many_ops_eager(x, w):
    return [F.linear(x, w), x.reshape(x.shape[0], -1), x.permute(2, 0, 1), x.sum(1, keepdim=True),
            torch.cat([x, x], 1), F.pad(x, [1, 2]), x[0:2, 1:3, 0:4:3], x @ w.t(),
            torch.var(x, [0, 2]) if x.numel() else torch.empty(x.shape[1]),  # (no dof warning)
            (x > 0).half(), x.sum(2, keepdim=True).expand(x.shape)]


@pytest.mark.parametrize("sizes", [((2, 3, 4), (5, 4)), ((1, 7, 3), (2, 3)), ((3, 0, 5), (4, 5))])
def test_infer_meta_gives_eager_shapes(sizes):
    fd = many_ops()
    x, w = make(sizes[0]), make(sizes[1])
    table = bind_inputs(fd.fusion, [x, w])
    metas = infer_meta(fd.fusion, [x, w], table)
    eager = many_ops_eager(x, w)
    assert len(metas) == len(eager)
    for m, e in zip(metas, eager):
        assert m.device.type == "meta"
        assert m.shape == e.shape and m.dtype == e.dtype


def test_infer_meta_of_the_seed_definition():
    from tests.ir.test_printer import seed_definition

    fd = seed_definition()
    x, w = make((6, 8), torch.bfloat16), make((2, 8), torch.bfloat16)
    (m,) = infer_meta(fd.fusion, [x, w], bind_inputs(fd.fusion, [x, w]))
    assert m.device.type == "meta" and m.shape == (6, 2) and m.dtype == torch.bfloat16


def test_infer_meta_keeps_strides_of_views():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, stride_order=[0, 1])
        fd.add_output(fd.ops.permute(x, [1, 0]))
    t = make((5, 3)).t()
    (m,) = infer_meta(fd.fusion, [t], bind_inputs(fd.fusion, [t]))
    assert m.shape == (5, 3) and m.stride() == t.t().stride()


def _exp_fusion():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.exp(x))
    return fd


@pytest.mark.parametrize("corrupt,extent_text", [
    (lambda e: sympy.Integer(7), "7"),
    (lambda e: e + 1, "( i0 + 1 )"),
    (lambda e: e * 2, "( i0 * 2 )"),
])
def test_wrong_ir_extent_is_an_internal_error(corrupt, extent_text):
    fd = _exp_fusion()
    out = fd.fusion.outputs()[0]
    d = out.domain.logical[0]
    d.extent = corrupt(d.extent)
    args = [make((3, 5))]
    table = bind_inputs(fd.fusion, args)
    with pytest.raises(fuser.InternalError) as info:
        infer_meta(fd.fusion, args, table)
    msg = str(info.value)
    assert "exp" in msg and extent_text in msg and "3" in msg
    with pytest.raises(fuser.InternalError, match="exp"):
        evaluate_fusion(fd.fusion, args, table)


def test_wrong_ir_extent_of_linear_is_an_internal_error():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        w = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.linear(x, w))
    fd.fusion.outputs()[0].domain.logical[1].extent = sympy.Integer(9)
    args = [make((3, 4)), make((5, 4))]
    with pytest.raises(fuser.InternalError) as info:
        infer_meta(fd.fusion, args, bind_inputs(fd.fusion, args))
    msg = str(info.value)
    assert re.search(r"LinearOp|linear", msg) and re.search(r"\b9\b", msg) and re.search(r"size 5\b", msg), msg


def test_wrong_ir_rank_is_an_internal_error():
    fd = _exp_fusion()
    out = fd.fusion.outputs()[0]
    out.domain.logical = out.domain.logical[:1]
    args = [make((3, 5))]
    with pytest.raises(fuser.InternalError, match="exp"):
        infer_meta(fd.fusion, args, bind_inputs(fd.fusion, args))


def test_internal_error_is_not_a_user_error():
    assert issubclass(fuser.InternalError, fuser.FuserError)
    assert not issubclass(fuser.InternalError, fuser.FusionInputError)
