"""Binary ops against eager PyTorch: dtype pairs (with PyTorch's type promotion), broadcasting,
size-0 / size-1 / strided inputs, and Python-scalar operands on either side."""
import pytest
import torch

from fuser import DataType
from tests.helpers import cases, covering, dtype_name, make, run, run_and_check, assert_eager

def nvfuser_div(a, b):
    """nvFuser's div: C's truncating division of integers, true division otherwise."""
    if torch.result_type(a, b).is_floating_point:
        return torch.true_divide(a, b)
    return torch.div(a, b, rounding_mode="trunc")


BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": nvfuser_div,
    "pow": torch.pow, "maximum": torch.maximum, "minimum": torch.minimum, "fmod": torch.fmod,
    "remainder": torch.remainder, "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le,
    "gt": torch.gt, "ge": torch.ge, "logical_and": torch.logical_and,
    "logical_or": torch.logical_or, "bitwise_and": torch.bitwise_and,
    "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor, "atan2": torch.atan2,
}
COMPARISONS = {"eq", "ne", "lt", "le", "gt", "ge"}
TENSOR_ONLY = {"maximum", "minimum", "atan2", "logical_and", "logical_or"}  # no Scalar overload in ATen
DIVISION = {"div", "fmod", "remainder"}


f32, bf16, f16, i64, i32, b8 = (torch.float32, torch.bfloat16, torch.float16, torch.int64,
                                torch.int32, torch.bool)
DTYPE_PAIRS = [(f32, f32), (bf16, bf16), (f16, f16), (bf16, f16), (i64, f32), (f32, i32),
               (i32, i64), (i64, i64), (b8, i64), (b8, b8), (bf16, f32), (i32, bf16)]


def operands(name, shape_a, da, shape_b, db):
    """Random operands; divisors are non-zero and integer exponents non-negative, so eager
    neither raises nor divides by zero (which differs between integer kernels)."""
    a = make(shape_a, da)
    integral = not (da.is_floating_point or db.is_floating_point)
    b = make(shape_b, db, nonzero=name in DIVISION and db != b8,
             positive=name == "pow" and integral and db != b8)
    return a, b


def eager_accepts(name, da, db) -> bool:
    try:
        BINARY[name](*operands(name, (2, 2), da, (2, 2), db))
        return True
    except (RuntimeError, NotImplementedError, TypeError):
        return False


def _op(name):
    return lambda fd, x, y: getattr(fd.ops, name)(x, y)


DTYPE_CASES = [pytest.param(n, da, db, id=f"{n}-{dtype_name(da)}-{dtype_name(db)}")
               for n in BINARY for da, db in DTYPE_PAIRS if eager_accepts(n, da, db)]
# generated kernels run through Triton's interpreter on CPU (slow): a subset of the pairs
KERNEL_PAIRS = {(f32, f32), (bf16, f16), (i64, f32), (i32, i64), (b8, b8), (bf16, bf16)}


def dtype_cases():
    aten = cases(DTYPE_CASES, backends=("aten",))
    kernel = cases([p for p in DTYPE_CASES if (p.values[1], p.values[2]) in KERNEL_PAIRS],
                   backends=("kernel",))
    return aten + kernel


def test_table_covers_every_op():
    for name in BINARY:
        assert sum(1 for p in DTYPE_CASES if p.values[0] == name) >= 3, name


@pytest.mark.parametrize("name,da,db,backend", dtype_cases())
def test_binary_dtypes(name, da, db, backend):
    a, b = operands(name, (3, 5), da, (3, 5), db)
    run_and_check(_op(name), BINARY[name], [a, b], backend=backend)


SHAPES = {  # (shape a, decl a, shape b, decl b)
    "bcast-row-col": ((3, 1), {}, (1, 5), {}),
    "bcast-rank": ((5,), {}, (2, 3, 5), {}),
    "bcast-rank-rev": ((2, 3, 5), {}, (3, 1), {}),
    "size0": ((0, 5), {}, (1, 5), {}),
    "size0-both": ((2, 0), {}, (2, 0), {}),
    "size1-symbolic": ((1, 5), {"size1_broadcast": False}, (1, 5), {"size1_broadcast": False}),
    "odd-3d": ((3, 5, 7), {}, (3, 5, 7), {}),
    "scalar-tensor": ((), {}, (3, 5), {}),
}


def _natural(name):
    return i64 if name.startswith("bitwise") else f32


SHAPE_CASES = [pytest.param(n, k, id=f"{n}-{k}") for n in BINARY for k in SHAPES]


KERNEL_SHAPES = {"bcast-row-col", "bcast-rank", "size0", "scalar-tensor", "size1-symbolic"}


def shape_cases():
    return (cases(SHAPE_CASES, backends=("aten",))
            + cases([p for p in SHAPE_CASES if p.values[1] in KERNEL_SHAPES], backends=("kernel",)))


@pytest.mark.parametrize("name,shapes,backend", shape_cases())
def test_binary_shapes(name, shapes, backend):
    sa, ka, sb, kb = SHAPES[shapes]
    a, b = operands(name, sa, _natural(name), sb, _natural(name))
    run_and_check(_op(name), BINARY[name], [a, b], decl=[ka, kb], backend=backend)


LAYOUT_CASES = [pytest.param(n, id=n) for n in BINARY]


@pytest.mark.parametrize("name,backend", cases(LAYOUT_CASES))
def test_binary_noncontiguous(name, backend):
    """One operand transposed (declared with stride_order), the other a strided slice."""
    dt = _natural(name)
    a = make((5, 3), dt).t()
    b = make((3, 10), dt, nonzero=name in DIVISION)[:, ::2]
    if name == "pow" and not dt.is_floating_point:
        b = b.abs()
    run_and_check(_op(name), BINARY[name], [a, b],
                  decl=[{"stride_order": [0, 1]}, {"contiguity": False}], backend=backend)


FLOAT_OPS = [n for n in BINARY if eager_accepts(n, f32, f32)]


@pytest.mark.parametrize("name,dtype,backend", cases(
    [pytest.param(n, d, id=f"{n}-{dtype_name(d)}") for n in FLOAT_OPS for d in (bf16, f16)],
    backends=("aten",)) + cases([pytest.param(n, bf16, id=f"{n}-bfloat16") for n in FLOAT_OPS],
                                backends=("kernel",)))
def test_binary_reduced_precision_in_fp32(name, dtype, backend):
    """bf16/fp16 operands cast to Float, combined, and the result cast back (booleans stay)."""
    a, b = make((3, 5), dtype), make((1, 5), dtype, nonzero=name in DIVISION)
    low = DataType.BFloat16 if dtype == bf16 else DataType.Half

    def build(fd, x, y):
        r = getattr(fd.ops, name)(fd.ops.cast(x, DataType.Float), fd.ops.cast(y, DataType.Float))
        return r if name in COMPARISONS or name.startswith("logical") else fd.ops.cast(r, low)

    def ref(x, y):
        r = BINARY[name](x.float(), y.float())
        return r if r.dtype == torch.bool else r.to(dtype)

    run_and_check(build, ref, [a, b], backend=backend)


# -- Python scalars as operands ------------------------------------------------------------

SCALARS = [2, -1.5, True]  # one of each category: int, float (negative), bool


def _category(v):
    if isinstance(v, torch.dtype):
        return 0 if v == b8 else (2 if v.is_floating_point else 1)
    return 0 if isinstance(v, bool) else (1 if isinstance(v, int) else 2)


def scalar_reference(name, x, s, first):
    """Eager with the Python scalar itself where ATen has such an overload; otherwise with
    torch.tensor(s), a 0-dim tensor that promotes like the Python scalar (its dtype is the
    default of the scalar's category)."""
    args = (s, x) if first else (x, s)
    try:
        return BINARY[name](*args)
    except TypeError:
        st = torch.tensor(s)
        return BINARY[name](st, x) if first else BINARY[name](x, st)


def _scalar_operand(name, dtype, first):
    return make((3, 5), dtype, nonzero=first and name in DIVISION,
                positive=first and name == "pow" and _category(dtype) < 2)


def scalar_combo_ok(name, dtype, s, first) -> bool:
    try:
        scalar_reference(name, _scalar_operand(name, dtype, first), s, first)
        return True
    except (RuntimeError, NotImplementedError):
        return False


def _higher_scalar(dtype, s):
    return _category(s) > _category(dtype)


SCALAR_CASES = [pytest.param(n, d, s, first,
                             id=f"{n}-{dtype_name(d)}-{s!r}-{'scalar_first' if first else 'tensor_first'}")
                for n in BINARY for d in (f32, bf16, i64, b8) for s in SCALARS
                for first in (False, True)
                if scalar_combo_ok(n, d, s, first)]


def scalar_cases():
    aten = cases(SCALAR_CASES, backends=("aten",))
    # the kernel path (interpreter, slow) on a subset: f32 and i64 tensors, -1.5 and 2 after the
    # tensor, 2 before it
    subset = [p for p in SCALAR_CASES if p.values[1] in (f32, i64)
              and ((not p.values[3] and p.values[2] in (-1.5, 2)) or (p.values[3] and p.values[2] == 2))]
    kernel = cases(subset, backends=("kernel",))
    return aten + kernel


@pytest.mark.parametrize("name,dtype,scalar,first,backend", scalar_cases())
def test_binary_python_scalar(name, dtype, scalar, first, backend):
    x = _scalar_operand(name, dtype, first)

    def build(fd, t):
        return getattr(fd.ops, name)(*((scalar, t) if first else (t, scalar)))

    run_and_check(build, lambda t: scalar_reference(name, t, scalar, first), [x], backend=backend)


@pytest.mark.parametrize("name,backend", cases([pytest.param(n, id=n) for n in ("logical_and", "logical_or")],
                                               ))
def test_logical_with_fractional_scalar_on_int_tensor(name, backend):
    x = covering((3, 5), i64)
    run_and_check(lambda fd, t: [getattr(fd.ops, name)(t, 0.5), getattr(fd.ops, name)(0.5, t)],
                  lambda t: [scalar_reference(name, t, 0.5, False), scalar_reference(name, t, 0.5, True)],
                  [x], backend=backend)


@pytest.mark.parametrize("name,dtype,backend", cases(
    [pytest.param(n, d, id=f"{n}-{dtype_name(d)}") for n in ("maximum", "minimum", "atan2")
     for d in (i64, i32, b8)]))
def test_binary_scalar_of_higher_category_tensor_only_ops(name, dtype, backend):
    """maximum(int tensor, 1.5) is float32 with the value 1.5 where the tensor is smaller."""
    x = covering((3, 5), dtype)  # every value in [-7, 7] (or both truth values): truncation shows
    scalars = (1.5, -1.5) if dtype != b8 else (2, -3)

    def build(fd, t):
        op = getattr(fd.ops, name)
        return [op(t, s) for s in scalars] + [op(s, t) for s in scalars]

    def ref(t):
        return ([scalar_reference(name, t, s, False) for s in scalars]
                + [scalar_reference(name, t, s, True) for s in scalars])

    run_and_check(build, ref, [x], backend=backend)


@pytest.mark.parametrize("name,dtype,backend", cases(
    [pytest.param(n, d, id=f"{n}-{dtype_name(d)}") for n in sorted(COMPARISONS) for d in (i64, i32, b8)],
    ))
def test_comparison_with_scalar_first(name, dtype, backend):
    x = covering((3, 5), dtype)
    scalars = (1.5, -1.5) if dtype != b8 else (2, -3)
    run_and_check(lambda fd, t: [getattr(fd.ops, name)(s, t) for s in scalars],
                  lambda t: [scalar_reference(name, t, s, True) for s in scalars], [x], backend=backend)


@pytest.mark.parametrize("name,backend", cases([pytest.param(n, id=n) for n in sorted(COMPARISONS)]))
def test_comparison_with_scalar_first_same_category(name, backend):
    """The scalar-first form with a scalar of the tensor's own category agrees with eager."""
    x = covering((3, 5), i64)
    run_and_check(lambda fd, t: [getattr(fd.ops, name)(s, t) for s in (1, -2)],
                  lambda t: [scalar_reference(name, t, s, True) for s in (1, -2)], [x], backend=backend)


# -- scalars defined with fd.define_scalar (bound at execution) ------------------------------

@pytest.mark.parametrize("name,dtype,sdtype,first,backend", cases(
    [pytest.param(n, d, sd, first, id=f"{n}-{dtype_name(d)}-{sd.name}-{'first' if first else 'second'}")
     for n in ("sub", "div", "pow", "lt")
     for d, sd in ((f32, DataType.Double), (i64, DataType.Double), (i64, DataType.Int),
                   (bf16, DataType.Double), (i32, DataType.Int))
     for first in (False, True)]))
def test_binary_defined_scalar(name, dtype, sdtype, first, backend):
    value = 1.75 if sdtype is DataType.Double else 3
    x = make((3, 5), dtype, nonzero=first and name == "div", positive=first and name == "pow")

    def build(fd, t, s):
        return getattr(fd.ops, name)(*((s, t) if first else (t, s)))

    fd, (out,) = run(build, [x, value], decl=[None, {"dtype": sdtype}], backend=backend)
    assert_eager(out, scalar_reference(name, x, value, first))


# -- comparisons of half and bf16 with a wider operand ----------------------------------------

# values on both sides of 0.1 rounded to each type, and 0.1 rounded itself (half: 0.0999755859375,
# bf16: 0.10009765625): eager rounds the other operand to the tensor's type, then compares
_NEAR_A_TENTH = {f16: [0.0999755859375, 0.1000213623046875, 0.0999, 0.5, -0.1],
                 bf16: [0.10009765625, 0.099609375, 0.1, 3.0, -0.1]}


@pytest.mark.parametrize("name,dtype,backend", cases(
    [pytest.param(n, d, id=f"{n}-{dtype_name(d)}") for n in sorted(COMPARISONS) for d in (f16, bf16)]))
def test_half_width_comparison_rounds_the_other_operand_to_its_type(name, dtype, backend):
    """`x < 0.1` on half or bf16 compares with 0.1 rounded to x's type, as eager on the CPU and
    CUDA does (arithmetic keeps the number in fp32): a Python number, a scalar bound at
    execution and a 0-dim fp32 tensor, on either side."""
    x = torch.tensor(_NEAR_A_TENTH[dtype], dtype=dtype).reshape(1, -1)
    zero_dim = torch.tensor(0.1)
    op = getattr(torch, name)

    def build(fd, t, s, z):
        fop = getattr(fd.ops, name)
        return [fop(t, 0.1), fop(0.1, t), fop(t, s), fop(s, t), fop(t, z)]

    def ref(t, s, z):
        return [op(t, 0.1), scalar_reference(name, t, 0.1, True), op(t, s),
                scalar_reference(name, t, s, True), op(t, z)]

    run_and_check(build, ref, [x, 0.1, zero_dim], decl=[None, {"dtype": DataType.Double}, None], backend=backend)


@pytest.mark.parametrize("dtype,backend", cases([pytest.param(d, id=dtype_name(d)) for d in (f16, bf16)]))
def test_half_width_comparison_with_a_scalar_declared_in_its_type(dtype, backend):
    """A scalar declared half or bf16 still holds a Python float: bound at execution or
    constant, it is rounded to that type before the comparison, as eager rounds 0.1."""
    x = torch.tensor(_NEAR_A_TENTH[dtype], dtype=dtype).reshape(1, -1)
    dt = DataType.Half if dtype is f16 else DataType.BFloat16

    def build(fd, t, s):
        c = fd.define_scalar(0.1, dtype=dt)
        return [fd.ops.eq(t, s), fd.ops.lt(t, s), fd.ops.le(c, t), fd.ops.gt(t, c)]

    run_and_check(build, lambda t, s: [t == 0.1, t < 0.1, t >= 0.1, t > 0.1], [x, 0.1],
                  decl=[None, {"dtype": dt}], backend=backend)


def test_double_pow_is_exact_where_eager_is():
    """On the CPU the interpreter's pow was exp2(b log2 |a|) at fp64: 7.0 ** 3.0 gave
    343.00000000000017 and DBL_MAX ** 1 inf; fp64 pow runs through ATen there now."""
    a = torch.tensor([7.0, 1e300, torch.finfo(torch.float64).max, 1.5, 2.5], dtype=torch.float64)
    b = torch.tensor([3.0, 1.0, 1.0, 100.0, -7.0], dtype=torch.float64)
    _, (out,) = run(lambda fd, x, y: fd.ops.pow(x, y), [a, b], backend="kernel")
    torch.testing.assert_close(out, a ** b, rtol=0, atol=0)
