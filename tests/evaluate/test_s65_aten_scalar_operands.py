"""The ATen evaluator given Python numbers where ATen wants tensors or refuses the value.

where, clamp and lerp with a scalar operand (the condition, a bound, lerp's end) run through
ATen wherever a fusion does not take a generated kernel (an empty or 0-dim tensor, a complex
one, `use_kernels=False`, `fd.validate`'s reference): ATen has no Python-number form of those
operands. A full or pad fill value beyond a complex64's range is inf, as a cast converts it
(docs/nvfuser.md), where torch.full and constant_pad_nd refuse it."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.runtime import FusionExecutorCache

BACKENDS = pytest.mark.parametrize("use_kernels", [True, False], ids=["kernel", "aten"])

TERNARY = [  # (id, builder, eager)
    ("lerp-number-end", lambda fd, t: fd.ops.lerp(t, 2.0, 0.5),
     lambda x: torch.lerp(x, torch.full_like(x, 2.0), 0.5)),
    ("lerp-number-start", lambda fd, t: fd.ops.lerp(0.25, t, 0.3),
     lambda x: torch.lerp(torch.full_like(x, 0.25), x, 0.3)),
    ("where-bool-scalar", lambda fd, t: fd.ops.where(fd.define_scalar(True), 1.0, t),
     lambda x: torch.where(torch.tensor(True), torch.tensor(1.0, dtype=x.dtype), x)),
    ("where-false-scalar", lambda fd, t: fd.ops.where(fd.define_scalar(False), 1.0, t),
     lambda x: torch.where(torch.tensor(False), torch.tensor(1.0, dtype=x.dtype), x)),
    ("clamp-number-min", lambda fd, t: fd.ops.clamp(t, 0.0, fd.ops.abs(t)),
     lambda x: torch.clamp(x, torch.zeros_like(x), x.abs())),
    ("clamp-number-max", lambda fd, t: fd.ops.clamp(t, fd.ops.neg(fd.ops.abs(t)), 0.5),
     lambda x: torch.clamp(x, -x.abs(), torch.full_like(x, 0.5))),
]
SHAPES = [  # (id, shape, dtype): those that ran through ATen and failed, and the kernel's case
    ("3x4-f32", (3, 4), torch.float32), ("0x4-f32", (0, 4), torch.float32), ("0dim-f32", (), torch.float32),
    ("3x4-f16", (3, 4), torch.float16), ("3x4-c64", (3, 4), torch.complex64),
]


def _random(shape, dtype):
    return torch.randn(shape, dtype=torch.float32).to(dtype) if not dtype.is_complex else torch.randn(shape, dtype=dtype)


def _close(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    tol = {torch.float16: 1e-3}.get(want.dtype, 1e-5)
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


@BACKENDS
@pytest.mark.parametrize("build,eager,shape,dtype", [  # (clamp of complex tensors is refused, as in eager)
    pytest.param(b, e, s, d, id=f"{op}-{shape_id}") for op, b, e in TERNARY for shape_id, s, d in SHAPES
    if not (d.is_complex and op.startswith("clamp"))])
def test_ternary_scalar_operands_as_eager(build, eager, shape, dtype, use_kernels):
    x = _random(shape, dtype)
    with FusionDefinition() as fd:
        fd.add_output(build(fd, fd.from_pytorch(x)))
    got = FusionExecutorCache(fd.fusion, use_kernels=use_kernels).execute([x])[0]
    _close(got, eager(x))


def test_validate_of_ternary_scalar_operands():
    """fd.validate compares with fuser's ATen evaluation, which raised for every shape."""
    x = torch.randn(3, 4)
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        fd.add_output(fd.ops.lerp(t, 2.0, 0.5))
        fd.add_output(fd.ops.where(fd.define_scalar(True), 1.0, t))
        fd.add_output(fd.ops.clamp(t, 0.0, fd.ops.abs(t)))
    outs = fd.validate([x])
    for got, want in zip(outs, [torch.lerp(x, torch.full_like(x, 2.0), 0.5), torch.ones_like(x),
                                torch.clamp(x, torch.zeros_like(x), x.abs())], strict=True):
        _close(got, want)


# -- fill values beyond the type's range: inf, as a cast gives ----------------------------------

@BACKENDS
@pytest.mark.parametrize("fill,dtype", [(1e300, torch.complex64), (-1e300, torch.complex64),
                                        (1e300 - 1e300j, torch.complex64), (1e300, torch.float32),
                                        (1e6, torch.float16)])
def test_full_fill_beyond_range_is_cast(fill, dtype, use_kernels):
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.full([2, 3], fill, DataType.from_torch(dtype)))
    got = FusionExecutorCache(fd.fusion, use_kernels=use_kernels).execute([])[0]
    wide = torch.complex128 if isinstance(fill, complex) else torch.float64
    want = torch.tensor(fill, dtype=wide).to(dtype).expand(2, 3)
    assert got.dtype == dtype and torch.equal(got, want)


@BACKENDS
@pytest.mark.parametrize("given", [False, True], ids=["constant", "input"])
def test_complex_pad_value_beyond_range_is_cast(given, use_kernels):
    x = torch.randn(3, 4, dtype=torch.complex64)
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        fd.add_output(fd.ops.pad(t, [1, 2], fd.define_scalar(DataType.Double) if given else -1e300))
    got = FusionExecutorCache(fd.fusion, use_kernels=use_kernels).execute([x, -1e300] if given else [x])[0]
    want = torch.constant_pad_nd(x, [1, 2], float("-inf"))
    assert got.dtype == want.dtype and torch.equal(got, want)


@BACKENDS
def test_fill_beyond_range_beside_kernel_ops(use_kernels):
    """The fill used in arithmetic (a kernel where one is taken) gives what eager gives for inf."""
    x = torch.randn(3, 4)
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        fd.add_output(fd.ops.mul(fd.ops.pad(t, [1, 1], 1e300), fd.ops.full([3, 6], -1e300, DataType.Float)))
    got = FusionExecutorCache(fd.fusion, use_kernels=use_kernels).execute([x])[0]
    want = torch.constant_pad_nd(x, [1, 1], float("inf")) * float("-inf")
    assert got.dtype == want.dtype and torch.equal(got, want)
