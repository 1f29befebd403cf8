"""where, clamp, lerp and cast against eager PyTorch."""
import pytest
import torch

from fuser import DataType

from tests.helpers import ALL_DTYPES, TORCH_TO_DT, cases, dtype_name, make, run_and_check

f32, bf16, f16, i64, i32, b8 = (torch.float32, torch.bfloat16, torch.float16, torch.int64,
                                torch.int32, torch.bool)

# -- where -----------------------------------------------------------------------------------

WHERE_CASES = [  # (id, a shape, a dtype, b shape, b dtype)
    ("f32", (3, 5), f32, (3, 5), f32),
    ("bcast", (1, 5), f32, (3, 1), f32),
    ("int-float", (3, 5), i64, (3, 5), f32),
    ("bf16-f16", (3, 5), bf16, (1, 5), f16),
    ("i32-i64", (3, 5), i32, (3, 5), i64),
    ("bool-int", (3, 5), b8, (3, 5), i64),
    ("bf16", (3, 5), bf16, (3, 5), bf16),
    ("size0", (0, 5), f32, (0, 5), f32),
]


@pytest.mark.parametrize("sa,da,sb,db,backend", cases(
    [pytest.param(*c[1:], id=c[0]) for c in WHERE_CASES]))
def test_where_tensors(sa, da, sb, db, backend):
    shape = torch.broadcast_shapes(sa, sb)
    cond = make(shape, b8)
    a, b = make(sa, da), make(sb, db)
    run_and_check(lambda fd, c, x, y: fd.ops.where(c, x, y), torch.where, [cond, a, b], backend=backend)


WHERE_SCALARS = [  # (id, tensor dtype, scalar, tensor position)
    ("f32-float", f32, 0.5, 1), ("f32-int", f32, 2, 2), ("int-float", i64, 0.5, 2),
    ("int-int", i64, -3, 1), ("bf16-float", bf16, 0.5, 2), ("bool-bool", b8, True, 1),
]


@pytest.mark.parametrize("dtype,scalar,pos,backend", cases(
    [pytest.param(*c[1:], id=c[0]) for c in WHERE_SCALARS]))
def test_where_tensor_and_scalar(dtype, scalar, pos, backend):
    cond, x = make((3, 5), b8), make((3, 5), dtype)

    def build(fd, c, t):
        return fd.ops.where(c, t, scalar) if pos == 1 else fd.ops.where(c, scalar, t)

    def ref(c, t):
        return torch.where(c, t, scalar) if pos == 1 else torch.where(c, scalar, t)

    run_and_check(build, ref, [cond, x], backend=backend)


def test_where_two_int_scalars():
    cond = make((3, 5), b8)
    run_and_check(lambda fd, c: fd.ops.where(c, 1, -2), lambda c: torch.where(c, 1, -2), [cond])


def test_where_of_two_scalars_keeps_their_type_as_nvfuser():
    """nvFuser's where of two scalar values has their type (a Python float is a Double);
    PyTorch's would be the default dtype, which fuser.jit keeps (below)."""
    cond = make((3, 5), b8)
    run_and_check(lambda fd, c: fd.ops.where(c, 1.5, 2.5), lambda c: torch.where(c, 1.5, 2.5).double(), [cond])
    run_and_check(lambda fd, c: fd.ops.where(c, fd.define_scalar(1.5, DataType.Float), 2.5),
                  lambda c: torch.where(c, 1.5, 2.5).double(), [cond])  # (Float and Double: Double)
    run_and_check(lambda fd, c: fd.ops.where(c, fd.define_scalar(3, DataType.Int32), fd.define_scalar(5, DataType.Int32)),
                  lambda c: torch.where(c, 3, 5).int(), [cond])


def test_jit_where_of_two_numbers_is_the_default_dtype():
    import fuser

    cond = make((3, 5), b8)
    out = fuser.jit(lambda c: torch.where(c, 1.5, 2.5))(cond)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.where(cond, 1.5, 2.5))


# -- clamp -----------------------------------------------------------------------------------

CLAMP_CASES = [  # (id, dtype, lo, hi)
    ("f32", f32, -0.5, 0.5), ("bf16", bf16, -0.5, 0.5), ("f16", f16, -1.0, 0.25),
    ("int", i64, -2, 3), ("int32", i32, -2, 3), ("f32-int-bounds", f32, -1, 1),
]


@pytest.mark.parametrize("dtype,lo,hi,backend", cases([pytest.param(*c[1:], id=c[0]) for c in CLAMP_CASES]))
def test_clamp_scalar_bounds(dtype, lo, hi, backend):
    x = make((3, 5), dtype)
    run_and_check(lambda fd, t: fd.ops.clamp(t, lo, hi), lambda t: torch.clamp(t, lo, hi), [x], backend=backend)


@pytest.mark.parametrize("backend", ["aten", "kernel"])
def test_clamp_tensor_bounds(backend):
    x, lo, hi = make((3, 5)), make((3, 5)) - 1, make((1, 5)) + 1
    run_and_check(lambda fd, t, a, b: fd.ops.clamp(t, a, b), torch.clamp, [x, lo, hi], backend=backend)


@pytest.mark.parametrize("backend", ["aten", "kernel"])
def test_clamp_nan_propagates(backend):
    x = make((3, 5))
    x[1, 2] = float("nan")
    run_and_check(lambda fd, t: fd.ops.clamp(t, -0.5, 0.5), lambda t: torch.clamp(t, -0.5, 0.5), [x], backend=backend)


def test_clamp_int_tensor_float_bounds_promotes():
    x = make((3, 5), i64)
    run_and_check(lambda fd, t: fd.ops.clamp(t, -2.5, 3.5), lambda t: torch.clamp(t, -2.5, 3.5), [x])


# -- lerp ------------------------------------------------------------------------------------

LERP_CASES = [  # (id, start shape, end shape, weight: shape or Python float, dtype)
    ("scalar-weight", (3, 5), (3, 5), 0.3, f32),
    ("tensor-weight", (3, 5), (3, 5), (3, 5), f32),
    ("bcast", (3, 5), (1, 5), (3, 1), f32),
    ("bf16", (3, 5), (3, 5), 0.75, bf16),
    ("f16-tensor-weight", (2, 3, 4), (2, 3, 4), (2, 3, 4), f16),
]


@pytest.mark.parametrize("sa,sb,w,dtype,backend", cases([pytest.param(*c[1:], id=c[0]) for c in LERP_CASES]))
def test_lerp(sa, sb, w, dtype, backend):
    a, b = make(sa, dtype), make(sb, dtype)
    if isinstance(w, float):
        run_and_check(lambda fd, x, y: fd.ops.lerp(x, y, w), lambda x, y: torch.lerp(x, y, w), [a, b],
                      backend=backend)
    else:
        wt = torch.rand(w).to(dtype)
        run_and_check(lambda fd, x, y, z: fd.ops.lerp(x, y, z), torch.lerp, [a, b, wt], backend=backend)


# -- cast ------------------------------------------------------------------------------------

CAST_TARGETS = ALL_DTYPES + (torch.float64,)
CAST_CASES = [pytest.param(src, dst, id=f"{dtype_name(src)}-to-{dtype_name(dst)}")
              for src in ALL_DTYPES for dst in CAST_TARGETS]


@pytest.mark.parametrize("src,dst,backend", cases(CAST_CASES, backends=("aten",)) + cases(
    [p for p in CAST_CASES if p.values[0] in (f32, bf16, b8, i64)], backends=("kernel",)))
def test_cast(src, dst, backend):
    # floats scaled so that integer casts see several distinct values, and exact halves excluded
    x = make((3, 5), src) if not src.is_floating_point else (make((3, 5), f32) * 4 + 0.1).to(src)
    run_and_check(lambda fd, t: fd.ops.cast(t, TORCH_TO_DT[dst]), lambda t: t.to(dst), [x], backend=backend)


@pytest.mark.parametrize("backend", ["aten", "kernel"])
def test_cast_noncontiguous_and_size1(backend):
    a = make((5, 3), torch.bfloat16).t()
    b = make((1, 5), torch.float32)
    run_and_check(lambda fd, x, y: fd.ops.add(fd.ops.cast(x, TORCH_TO_DT[f32]), y),
                  lambda x, y: x.float() + y, [a, b], decl=[{"stride_order": [0, 1]}, None], backend=backend)


@pytest.mark.parametrize("flag", [True, False])
def test_where_constant_bool_condition_is_a_boolean(flag):
    """A constant Bool condition is written True/False: as the int 1 Triton warned that a
    non-boolean condition will be refused by a later release."""
    import warnings

    x, y = make((4, 5)), make((4, 5))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*non-boolean.*")
        run_and_check(lambda fd, a, b: fd.ops.where(fd.define_scalar(flag), a, b),
                      lambda a, b: a if flag else b, [x, y], backend="kernel")
