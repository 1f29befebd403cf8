"""Type promotion follows PyTorch: the IR output dtype and the executed output's dtype both
equal eager's (dimensioned tensors, then 0-dim tensors, then Python scalars)."""
import pytest
import torch

from fuser import DataType
from tests.helpers import TORCH_TO_DT, make, run

f32, f64, bf16, f16, i64, i32, b8 = (torch.float32, torch.float64, torch.bfloat16, torch.float16,
                                     torch.int64, torch.int32, torch.bool)

# (id, input (shape, dtype) list, fusion builder, eager reference)
PROMOTIONS = [
    ("int-tensor+float-scalar", [((3,), i64)], lambda fd, a: fd.ops.add(a, 1.5), lambda a: a + 1.5),
    ("int32-tensor+float-scalar", [((3,), i32)], lambda fd, a: fd.ops.mul(a, 0.5), lambda a: a * 0.5),
    ("bool-tensor+float-scalar", [((3,), b8)], lambda fd, a: fd.ops.add(a, 0.5), lambda a: a + 0.5),
    ("bf16+f16", [((3,), bf16), ((3,), f16)], lambda fd, a, b: fd.ops.add(a, b), lambda a, b: a + b),
    ("bf16+f32", [((3,), bf16), ((3,), f32)], lambda fd, a, b: fd.ops.mul(a, b), lambda a, b: a * b),
    ("int/int", [((3,), i64), ((3,), i64)], lambda fd, a, b: fd.ops.truediv(a, b), lambda a, b: a / b),
    ("int32/int-scalar", [((3,), i32)], lambda fd, a: fd.ops.truediv(a, 2), lambda a: a / 2),
    # nvFuser's div divides integers as C does (truncating), in their type
    ("int/int-div", [((3,), i64), ((3,), i64)], lambda fd, a, b: fd.ops.div(a, b),
     lambda a, b: torch.div(a, b, rounding_mode="trunc")),
    ("int32/int-scalar-div", [((3,), i32)], lambda fd, a: fd.ops.div(a, 2),
     lambda a: torch.div(a, 2, rounding_mode="trunc")),
    ("eq-float", [((3,), f32), ((3,), f32)], lambda fd, a, b: fd.ops.eq(a, b), lambda a, b: a == b),
    ("lt-int-float", [((3,), i64), ((3,), f32)], lambda fd, a, b: fd.ops.lt(a, b), lambda a, b: a < b),
    ("ge-scalar", [((3,), bf16)], lambda fd, a: fd.ops.ge(a, 0.0), lambda a: a >= 0.0),
    ("int32+int64", [((3,), i32), ((3,), i64)], lambda fd, a, b: fd.ops.add(a, b), lambda a, b: a + b),
    ("int32+int-scalar", [((3,), i32)], lambda fd, a: fd.ops.add(a, 2), lambda a: a + 2),
    ("bool+bool", [((3,), b8), ((3,), b8)], lambda fd, a, b: fd.ops.logical_or(a, b), torch.logical_or),
    ("bool+int-scalar", [((3,), b8)], lambda fd, a: fd.ops.add(a, 3), lambda a: a + 3),
    ("f16*float-scalar", [((3,), f16)], lambda fd, a: fd.ops.mul(a, 1.5), lambda a: a * 1.5),
    ("bf16*int-scalar", [((3,), bf16)], lambda fd, a: fd.ops.mul(a, 3), lambda a: a * 3),
    ("int+0dim-double", [((3,), i64), ((), f64)], lambda fd, a, b: fd.ops.add(a, b), lambda a, b: a + b),
    ("f32+0dim-double", [((3,), f32), ((), f64)], lambda fd, a, b: fd.ops.add(a, b), lambda a, b: a + b),
    ("0dim-int+bool", [((), i64), ((3,), b8)], lambda fd, a, b: fd.ops.add(a, b), lambda a, b: a + b),
    ("exp-int", [((3,), i64)], lambda fd, a: fd.ops.exp(a), torch.exp),
    ("sqrt-bool", [((3,), b8)], lambda fd, a: fd.ops.sqrt(a), torch.sqrt),
    ("abs-int32", [((3,), i32)], lambda fd, a: fd.ops.abs(a), torch.abs),
    ("sum-int32", [((2, 3), i32)], lambda fd, a: fd.ops.sum(a, [0]), lambda a: a.sum(0)),
    ("sum-bool", [((2, 3), b8)], lambda fd, a: fd.ops.sum(a, [1]), lambda a: a.sum(1)),
    ("max-int32", [((2, 3), i32)], lambda fd, a: fd.ops.max(a, [1]), lambda a: a.amax(1)),
    ("where-int-float-scalar", [((3,), b8), ((3,), i64)], lambda fd, c, a: fd.ops.where(c, a, 0.5),
     lambda c, a: torch.where(c, a, 0.5)),
    ("where-bf16-f32", [((3,), b8), ((3,), bf16), ((3,), f32)], lambda fd, c, a, b: fd.ops.where(c, a, b),
     torch.where),
    ("cat-bf16-f16", [((2,), bf16), ((3,), f16)], lambda fd, a, b: fd.ops.cat([a, b], 0),
     lambda a, b: torch.cat([a, b])),
    ("pow-int-float-scalar", [((3,), i64)], lambda fd, a: fd.ops.pow(a, 0.5), lambda a: a ** 0.5),
]


@pytest.mark.parametrize("specs,build,ref", [pytest.param(*p[1:], id=p[0]) for p in PROMOTIONS])
def test_promotion(specs, build, ref):
    ins = [make(s, d, positive=True) for s, d in specs]  # positive: no nan from pow or sqrt
    fd, (out,) = run(build, ins, backend="aten")
    expected = ref(*ins)
    assert out.dtype == expected.dtype
    assert fd.fusion.outputs()[0].dtype is TORCH_TO_DT[expected.dtype]  # the IR agrees, before running
    torch.testing.assert_close(out, expected, equal_nan=True)


@pytest.mark.parametrize("tensor_dtype,scalar_dtype,value", [
    (i64, DataType.Double, 2.5), (f32, DataType.Double, 2.5), (bf16, DataType.Double, 0.5),
    (i32, DataType.Int, 3), (b8, DataType.Int, 3),
])
def test_promotion_with_defined_scalar(tensor_dtype, scalar_dtype, value):
    """A defined (execution-time) scalar promotes like a Python scalar of its category."""
    x = make((3,), tensor_dtype)
    fd, (out,) = run(lambda fd, t, s: fd.ops.mul(t, s), [x, value], decl=[None, {"dtype": scalar_dtype}],
                     backend="aten")
    expected = x * value
    assert out.dtype == expected.dtype
    assert fd.fusion.outputs()[0].dtype is TORCH_TO_DT[expected.dtype]
    torch.testing.assert_close(out, expected)


_BIG_INTS = torch.tensor([594, 4097, 2**31 - 1, 2**31 - 1], dtype=i32)


@pytest.mark.parametrize("half", [f16, bf16])
@pytest.mark.parametrize("backend", ["kernel", "aten"])
@pytest.mark.parametrize("op", ["add", "mul", "lerp"])
def test_an_integer_tensor_is_rounded_to_a_half_type_first(half, backend, op):
    """Eager converts an integer tensor to the common half or bf16 type before the math
    (int32 594 + bf16 1.117 is 592 + 1.117); fuser widened it to fp32 directly: 596, and
    `2**31 - 1` times a small fp16 gave 32768 where eager gives inf (then inf times 0, NaN)."""
    other = torch.tensor([1.1171875, 0.5, 1.5e-5, 0.0], dtype=half)
    build = {"add": lambda fd, a, b: fd.ops.add(a, b), "mul": lambda fd, a, b: fd.ops.mul(a, b),
             "lerp": lambda fd, a, b: fd.ops.lerp(b, a, b)}[op]
    ref = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "lerp": lambda a, b: torch.lerp(b, a.to(half), b)}[op]
    _, (out,) = run(build, [_BIG_INTS, other], backend=backend)
    torch.testing.assert_close(out, ref(_BIG_INTS, other), equal_nan=True, rtol=0, atol=0)


def test_jit_integer_and_half_tensors_round_as_eager():
    import fuser

    def f(i, h):
        return (i * h + i) / 2

    h = torch.tensor([1.1171875, 0.5, 1.5e-5, 0.0], dtype=bf16)
    torch.testing.assert_close(fuser.jit(f)(_BIG_INTS, h), f(_BIG_INTS, h), equal_nan=True, rtol=0, atol=0)


def test_a_zero_dim_integer_tensor_stays_a_number_for_half_math():
    """Eager takes a 0-dim CPU tensor as a number (fp32 for half math): h * tensor(2049) is
    3 * 2049 = 6147, not 3 * 2048 (a review's find: the rounding above took it too)."""
    h = torch.tensor([3.0, 1.0], dtype=f16)
    n = torch.tensor(2049)
    _, (out,) = run(lambda fd, a, b: fd.ops.mul(a, b), [h, n], backend="kernel")
    torch.testing.assert_close(out, h * n, rtol=0, atol=0)
