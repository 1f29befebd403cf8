"""Unary ops against eager PyTorch: every op over every dtype eager accepts, layouts (size-0,
size-1, stride_order, non-contiguous, 0-dim), and bf16/fp16 computed in fp32."""
import pytest
import torch
import torch.nn.functional as F

from fuser import DataType
from tests.helpers import (ALL_DTYPES, FLOAT_DTYPES, TORCH_TO_DT, dtype_name, make, run,
                           run_and_check)

UNARY = {
    "abs": torch.abs, "neg": torch.neg, "exp": torch.exp, "exp2": torch.exp2, "log": torch.log,
    "log1p": torch.log1p, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal,
    "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
    "relu": torch.relu, "silu": F.silu, "erf": torch.erf, "floor": torch.floor, "ceil": torch.ceil,
    "round": torch.round, "sign": torch.sign, "isnan": torch.isnan, "isinf": torch.isinf,
    "logical_not": torch.logical_not, "bitwise_not": torch.bitwise_not,
}


def _eager_accepts(ref, dtype) -> bool:
    try:
        ref(make((2, 2), dtype))
        return True
    except (RuntimeError, NotImplementedError, TypeError):
        return False


DTYPE_CASES = [pytest.param(name, dt, id=f"{name}-{dtype_name(dt)}")
               for name, ref in UNARY.items() for dt in ALL_DTYPES if _eager_accepts(ref, dt)]


def _op(name):
    return lambda fd, x: getattr(fd.ops, name)(x)


def _natural_dtype(name):
    return torch.int64 if name == "bitwise_not" else torch.float32


def test_table_covers_every_op():
    # every op of the table is exercised by at least three dtypes eager accepts
    for name in UNARY:
        assert sum(1 for p in DTYPE_CASES if p.values[0] == name) >= 3, name


@pytest.mark.parametrize("name,dtype", DTYPE_CASES)
def test_unary_dtypes(name, dtype):
    x = make((3, 5), dtype)
    run_and_check(_op(name), UNARY[name], [x])


def _layout(kind, dtype):
    """(input tensor, define_tensor keywords) for one layout."""
    if kind == "size0":
        return make((0, 5), dtype), {}
    if kind == "size1-broadcast":
        return make((3, 1, 5), dtype), {}  # the size-1 dim is declared as broadcast (1)
    if kind == "size1-symbolic":
        return make((1, 5), dtype), {"static": False}  # declared -1 below
    if kind == "transposed":
        return make((5, 3), dtype).t(), {"stride_order": [0, 1]}
    if kind == "permuted3d":  # [2, 3, 4] with strides (1, 8, 2): dim 0 fastest, dim 1 slowest
        return make((3, 4, 2), dtype).permute(2, 0, 1), {"stride_order": [0, 2, 1]}
    if kind == "strided":
        return make((3, 10), dtype)[:, ::2], {"contiguity": False}
    if kind == "0-dim":
        return make((), dtype), {}
    raise AssertionError(kind)


LAYOUTS = ["size0", "size1-broadcast", "size1-symbolic", "transposed", "permuted3d", "strided", "0-dim"]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_layouts(name, layout):
    x, kw = _layout(layout, _natural_dtype(name))
    if layout == "size1-symbolic":
        def build(fd, _):
            return getattr(fd.ops, name)(fd_input[0])
        from fuser import FusionDefinition
        with FusionDefinition() as fd:
            t = fd.define_tensor([-1, -1], contiguity=True, dtype=TORCH_TO_DT[x.dtype])
            fd.add_output(getattr(fd.ops, name)(t))
        (out,) = fd.execute([x])
        from tests.helpers import assert_eager
        assert_eager(out, UNARY[name](x))
        return
    run_and_check(_op(name), UNARY[name], [x], decl=[kw])


FP32_MATH = [pytest.param(name, dt, id=f"{name}-{dtype_name(dt)}")
             for name, ref in UNARY.items() if _eager_accepts(ref, torch.float32)
             for dt in (torch.bfloat16, torch.float16)]


@pytest.mark.parametrize("name,dtype", FP32_MATH)
def test_unary_reduced_precision_in_fp32(name, dtype):
    """The canonical bf16/fp16 pattern: cast to Float, compute, cast back."""
    x = make((3, 5), dtype)
    low = TORCH_TO_DT[dtype]

    def build(fd, a):
        y = getattr(fd.ops, name)(fd.ops.cast(a, DataType.Float))
        return fd.ops.cast(y, low)

    fd, _ = run_and_check(build, lambda a: UNARY[name](a.float()).to(dtype), [x])
    # the IR really computes in fp32: the op's input and output are Float tensors
    op_expr = fd.fusion.exprs[1]
    assert op_expr.inputs[0].dtype is DataType.Float
    assert fd.fusion.outputs()[0].dtype is TORCH_TO_DT[dtype]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_unary_special_values(dtype):
    """nan and inf flow through isnan / isinf / abs / neg exactly as in eager."""
    x = make((3, 5), dtype)
    x[0, 0], x[1, 1], x[2, 2] = float("nan"), float("inf"), float("-inf")
    run_and_check(lambda fd, a: [fd.ops.isnan(a), fd.ops.isinf(a), fd.ops.abs(a), fd.ops.neg(a)],
                  lambda a: [torch.isnan(a), torch.isinf(a), torch.abs(a), torch.neg(a)], [x])
