"""Unary ops against eager PyTorch: every op over every dtype eager accepts, layouts (size-0,
size-1, stride_order, non-contiguous, 0-dim), and bf16/fp16 computed in fp32. Each case runs
through the ATen evaluator and through generated kernels."""
import math

import pytest
import torch
import torch.nn.functional as F

from fuser import DataType, FusionDefinition
from tests.helpers import ALL_DTYPES, TORCH_TO_DT, FLOAT_DTYPES, cases, dtype_name, make, run_and_check

UNARY = {
    "abs": torch.abs, "neg": torch.neg, "exp": torch.exp, "exp2": torch.exp2, "log": torch.log,
    "log1p": torch.log1p, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal,
    "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
    "relu": torch.relu, "silu": F.silu, "erf": torch.erf, "floor": torch.floor, "ceil": torch.ceil,
    "round": torch.round, "sign": torch.sign, "isnan": torch.isnan, "isinf": torch.isinf,
    "logical_not": torch.logical_not, "bitwise_not": torch.bitwise_not,
}
BOOL_RESULT = {"isnan", "isinf", "logical_not"}

def eager_accepts(ref, dtype) -> bool:
    try:
        ref(make((2, 2), dtype))
        return True
    except (RuntimeError, NotImplementedError, TypeError):
        return False


def _op(name):
    return lambda fd, x: getattr(fd.ops, name)(x)


def _natural_dtype(name):
    return torch.int64 if name == "bitwise_not" else torch.float32


DTYPE_CASES = [pytest.param(name, dt, id=f"{name}-{dtype_name(dt)}")
               for name, ref in UNARY.items() for dt in ALL_DTYPES if eager_accepts(ref, dt)]


def test_table_covers_every_op():
    for name in UNARY:
        assert sum(1 for p in DTYPE_CASES if p.values[0] == name) >= 3, name


@pytest.mark.parametrize("name,dtype,backend", cases(DTYPE_CASES))
def test_unary_dtypes(name, dtype, backend):
    x = make((3, 5), dtype)
    run_and_check(_op(name), UNARY[name], [x], backend=backend)


def _layout(kind, dtype):
    """(input tensor, keywords for tests.helpers.define) for one layout."""
    if kind == "size0":
        return make((0, 5), dtype), {}
    if kind == "size1-broadcast":  # the size-1 dim declared as broadcast (1)
        return make((3, 1, 5), dtype), {}
    if kind == "size1-symbolic":  # the size-1 dim declared -1
        return make((1, 5), dtype), {"size1_broadcast": False}
    if kind == "transposed":  # t.t(): dim 0 moves fastest
        return make((5, 3), dtype).t(), {"stride_order": [0, 1]}
    if kind == "permuted3d":  # [2, 3, 4] with strides (1, 8, 2)
        return make((3, 4, 2), dtype).permute(2, 0, 1), {"stride_order": [0, 2, 1]}
    if kind == "strided":
        return make((3, 10), dtype)[:, ::2], {"contiguity": False}
    if kind == "0-dim":
        return make((), dtype), {}
    raise AssertionError(kind)


LAYOUTS = ["size0", "size1-broadcast", "size1-symbolic", "transposed", "permuted3d", "strided", "0-dim"]


def test_layouts_are_what_they_claim():
    assert _layout("transposed", torch.float32)[0].stride() == (1, 3)
    assert _layout("permuted3d", torch.float32)[0].stride() == (1, 8, 2)
    assert not _layout("strided", torch.float32)[0].is_contiguous()


LAYOUT_CASES = [pytest.param(n, lay, id=f"{n}-{lay}") for n in UNARY for lay in LAYOUTS]
KERNEL_LAYOUTS = {"size0", "transposed", "strided", "size1-symbolic"}  # the interpreter is slow


@pytest.mark.parametrize("name,layout,backend", cases(LAYOUT_CASES, backends=("aten",)) + cases(
    [p for p in LAYOUT_CASES if p.values[1] in KERNEL_LAYOUTS], backends=("kernel",)))
def test_unary_layouts(name, layout, backend):
    x, kw = _layout(layout, _natural_dtype(name))
    run_and_check(_op(name), UNARY[name], [x], decl=[kw], backend=backend)


FP32_MATH = [pytest.param(name, dt, id=f"{name}-{dtype_name(dt)}")
             for name, ref in UNARY.items() if eager_accepts(ref, torch.float32)
             for dt in (torch.bfloat16, torch.float16)]


@pytest.mark.parametrize("name,dtype,backend", cases(FP32_MATH, backends=("aten",)) + cases(
    [p for p in FP32_MATH if p.values[1] == torch.bfloat16], backends=("kernel",)))
def test_unary_reduced_precision_in_fp32(name, dtype, backend):
    """The canonical bf16/fp16 pattern: cast to Float, compute, cast back."""
    x = make((3, 5), dtype)
    if name in BOOL_RESULT:
        x[0, 0], x[1, 1] = float("nan"), float("inf")
    low = TORCH_TO_DT[dtype]

    def build(fd, a):
        return fd.ops.cast(getattr(fd.ops, name)(fd.ops.cast(a, DataType.Float)), low)

    fd, _ = run_and_check(build, lambda a: UNARY[name](a.float()).to(dtype), [x], backend=backend)
    op_expr = fd.fusion.exprs[1]  # cast, op, cast: the op really reads and writes fp32
    assert op_expr.inputs[0].dtype is DataType.Float
    assert op_expr.outputs[0].dtype is (DataType.Bool if name in BOOL_RESULT else DataType.Float)


SPECIAL = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1e-3, -2.5, 3.5]



SPECIAL_CASES = [pytest.param(name, dt, id=f"{name}-{dtype_name(dt)}")
                 for name, ref in UNARY.items() for dt in FLOAT_DTYPES if eager_accepts(ref, dt)]


@pytest.mark.parametrize("name,dtype,backend", cases(SPECIAL_CASES))
def test_unary_special_values(name, dtype, backend):
    """nan, +-inf and +-0 give eager's values (random values around them)."""
    x = make((2, 8), dtype)
    x[0] = torch.tensor(SPECIAL, dtype=dtype)
    run_and_check(_op(name), UNARY[name], [x], backend=backend)


@pytest.mark.parametrize("name,value,dtype,expected,expected_dtype", [
    ("reciprocal", 2.0, DataType.Double, 0.5, DataType.Double),
    ("reciprocal", 0.0, DataType.Double, float("inf"), DataType.Double),
    ("reciprocal", -0.0, DataType.Double, float("-inf"), DataType.Double),
    ("sqrt", 4, DataType.Int, 2.0, DataType.Double),
    ("sqrt", -1.0, DataType.Double, float("nan"), DataType.Double),
    ("log", 0.0, DataType.Double, float("-inf"), DataType.Double),
    ("rsqrt", 0.25, DataType.Float, 2.0, DataType.Float),
    ("neg", 3, DataType.Int, -3, DataType.Int),
    ("abs", -2.5, DataType.Double, 2.5, DataType.Double),
    ("floor", -2.5, DataType.Double, -3.0, DataType.Double),
    ("exp", 1000.0, DataType.Double, float("inf"), DataType.Double),
])
def test_unary_of_a_scalar_of_known_value(name, value, dtype, expected, expected_dtype):
    """nvFuser's definitions compute constants with unary ops (`reciprocal(define_scalar(2.0))`):
    the value in IEEE doubles, as eager computes on Python floats."""
    x = make((4,))
    with FusionDefinition() as fd:
        t = fd.define_tensor([-1], contiguity=True)
        s = getattr(fd.ops, name)(fd.define_scalar(value, dtype=dtype))
        fd.add_output(fd.ops.mul(t, s))
    assert s.dtype is expected_dtype
    assert s.value == expected or (expected != expected and s.value != s.value)
    torch.testing.assert_close(fd.execute([x])[0], x * expected, equal_nan=True)


@pytest.mark.parametrize("backend", ["aten", "kernel"])
def test_ieee_functions_of_scalar_inputs(backend):
    """reciprocal, sqrt, rsqrt, exp and log of a scalar input: computed in IEEE doubles when the
    input is bound (1 / 0.0 is inf), an Int input giving a Double."""
    x = make((5,))

    def build(fd, t, s, n):
        r = fd.ops.mul(fd.ops.reciprocal(s), fd.ops.rsqrt(n))
        return [fd.ops.mul(t, r), fd.ops.mul(t, fd.ops.exp(fd.ops.log(fd.ops.sqrt(s))))]

    for s, n in ((4.0, 16), (0.0, 4)):
        run_and_check(build, lambda t, s, n: [t * ((1 / s if s else float("inf")) / math.sqrt(n)), t * math.sqrt(s)],
                      [x, s, n], decl=[None, {"dtype": DataType.Double}, {"dtype": DataType.Int}],
                      backend=backend)


@pytest.mark.parametrize("name,a,b,expected", [
    ("truediv", 1.0, 4, 0.25), ("truediv", 3, 2, 1.5), ("truediv", -1.0, 0.0, float("-inf")),
    ("truediv", 0.0, 0.0, float("nan")), ("nextafter", 1.0, 2.0, 1.0000000000000002),
])
def test_binary_of_scalars_of_known_value(name, a, b, expected):
    with FusionDefinition() as fd:
        s = getattr(fd.ops, name)(fd.define_scalar(a), fd.define_scalar(b))
        t = fd.define_tensor([-1], contiguity=True)
        fd.add_output(fd.ops.mul(t, s))
    assert not s.is_tensor() and t.is_tensor()
    assert s.dtype is DataType.Double
    assert s.value == expected or (expected != expected and s.value != s.value)
