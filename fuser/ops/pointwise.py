"""Elementwise ops: unary, binary, ternary and cast, with PyTorch's type promotion and
implicit broadcasting. Scalar-only arithmetic gives a Scalar (its value a sympy expression)."""
from __future__ import annotations

import sympy

from ..errors import FusionDefinitionError, UnsupportedError
from ..ir import (BinaryOp, BinaryOpType, CastOp, DataType, Scalar, TensorView, TernaryOp,
                  TernaryOpType, UnaryOp, UnaryOpType, promote)
from ..ir.scalar_functions import SCALAR_FUNCTION_CODES, scalar_fn
from ..ir.symbolic import (CAST_BFLOAT16, CAST_BOOL, CAST_DOUBLE, CAST_FLOAT, CAST_HALF, CAST_INT, CAST_INT32,
                           CAST_UINT64, FLOAT_ADD, FLOAT_MAX, FLOAT_MIN, FLOAT_MUL, FLOAT_SUB, convert_scalar,
                           float_op, floatOp, scalarCast, scalarFn)
from ..ir.types import as_complex_of, default_dtype_of_category, int_range
from .common import (Operand, as_val, broadcast_ids, broadcast_to_rank, check_computable, fusion_of,
                     new_tensor, value_dtype)

U, B = UnaryOpType, BinaryOpType

# unary ops whose integer or boolean input gives a float result (PyTorch's int-to-float ops)
_FLOAT_RESULT = {U.exp, U.exp2, U.expm1, U.log, U.log2, U.log10, U.log1p, U.sqrt, U.rsqrt,
                 U.reciprocal, U.sin, U.cos, U.tan, U.tanh, U.sigmoid, U.silu, U.erf,
                 U.acos, U.acosh, U.asin, U.asinh, U.atan, U.atanh, U.cosh, U.sinh, U.erfc,
                 U.erfinv, U.erfcinv, U.lgamma}
_BOOL_RESULT_UNARY = {U.isnan, U.isinf, U.isfinite, U.logical_not, U.signbit, U.isneginf,
                      U.isposinf, U.isreal}
_COMPARISON = {B.eq, B.ne, B.lt, B.le, B.gt, B.ge, B.logical_and, B.logical_or}
_INTEGER_ONLY = {B.bitwise_and, B.bitwise_or, B.bitwise_xor}
# ops of integers only, bool excluded (as in eager and nvFuser); mod is C's `%`, which nvFuser
# defines for integers only (fmod and remainder are its floating forms)
_STRICTLY_INTEGER = {B.bitwise_left_shift, B.bitwise_right_shift, B.logical_right_shift, B.gcd, B.mod}
_FLOAT_BINARY = {B.truediv, B.atan2, B.nextafter}


def result_type(*operands: Operand) -> DataType:
    """PyTorch's result_type: dimensioned tensors, then 0-dim tensors, then scalars; a lower
    tier only counts when its category is higher."""
    _check_uint64_mix(operands)
    tiers: list[list[DataType]] = [[], [], []]
    for v in operands:
        if isinstance(v, TensorView):
            tiers[0 if v.ndim else 1].append(v.dtype)
        elif isinstance(v, Scalar):
            tiers[2].append(v.dtype)
    if not tiers[0] and not tiers[1]:
        # only Python or defined scalars: PyTorch's default type of their category
        return default_dtype_of_category(promote(*tiers[2]).category)
    result = None
    for tier in tiers:
        if not tier:
            continue
        t = promote(*tier)
        if result is None:
            result = t
        elif t.category > result.category:
            # a higher-category scalar takes the default type of its category, not its width;
            # a complex one keeps a double's precision (PyTorch's combine_categories)
            if t.is_complex and result.is_floating:
                result = as_complex_of(result)
            else:
                result = t if tier is tiers[1] else default_dtype_of_category(t.category)
    return result


def _check_uint64_mix(operands) -> None:
    # PyTorch refuses to promote uint64 with another integer or bool tensor (which type holds
    # both?); a Python integer takes the tensor's type
    ints = {v.dtype for v in operands if isinstance(v, TensorView) and v.dtype.category < 2}
    if DataType.UInt64 in ints and len(ints) > 1:
        others = ", ".join(repr(d) for d in sorted(ints - {DataType.UInt64}, key=lambda d: d.name))
        raise FusionDefinitionError(f"DataType.UInt64 does not promote with {others} (as in PyTorch); "
                                    f"cast the operands to one type first")


def computed(op: str, v: Operand) -> Operand:
    """An operand as arithmetic takes it: an fp8 tensor cast to Float first, as nvFuser computes
    fp8 (PyTorch has no fp8 arithmetic), so add(fp8, fp8) gives Float."""
    check_computable(op, v)
    if isinstance(v, TensorView) and v.dtype.is_float8:
        return cast(v, DataType.Float)
    return v


def _elementwise_output(op: str, tvs: list[TensorView], dtype: DataType) -> TensorView:
    fusion = tvs[0].fusion
    rank = max(tv.ndim for tv in tvs)
    return new_tensor(fusion, broadcast_ids(fusion, op, [broadcast_to_rank(t, rank) for t in tvs]), dtype)


def _aligned(tvs: list[TensorView]) -> list[TensorView]:
    rank = max(tv.ndim for tv in tvs)
    return [broadcast_to_rank(t, rank) for t in tvs]


def unary(kind: UnaryOpType, x: Operand):
    fusion = fusion_of(kind.value, x)
    x = as_val(fusion, x, kind.value)
    if not isinstance(x, TensorView):
        return _scalar_unary(kind, x)
    x = computed(kind.value, x)
    out = _elementwise_output(kind.value, [x], _unary_result(kind, x, DataType.Float))
    fusion.add_expr(UnaryOp(inputs=(x,), outputs=(out,), kind=kind))
    return out


def _unary_result(kind: UnaryOpType, x: Scalar | TensorView, floating: DataType) -> DataType:
    """The type of `kind` of x, refusing what eager refuses. `floating` is what a float
    function of an integer or bool operand gives: Float for a tensor (PyTorch's default
    dtype), Double for a scalar (nvFuser's scalar types)."""
    what = "tensor" if isinstance(x, TensorView) else "scalar"
    dtype = x.dtype
    if kind in (U.isposinf, U.isneginf) and dtype.is_complex:
        raise FusionDefinitionError(f"{kind.value}: not defined for complex {what} {x!r} (eager refuses it too)")
    if kind in _BOOL_RESULT_UNARY:
        return DataType.Bool
    if kind in _FLOAT_RESULT and dtype.category < 2:
        return floating
    if kind in (U.abs, U.real, U.imag) and dtype.is_complex:  # the magnitude or a part: real, as in eager
        return DataType.Float if dtype is DataType.ComplexFloat else DataType.Double
    if kind is U.bitwise_not and not (dtype.is_integral or dtype.is_boolean):
        raise FusionDefinitionError(f"bitwise_not: needs an integer or bool {what}, got {dtype} {what} {x!r}")
    if kind in (U.relu, U.neg, U.abs, U.ceil, U.floor, U.round, U.trunc) and dtype.is_boolean:
        raise FusionDefinitionError(f"{kind.value}: not defined for bool {what} {x!r} (eager refuses it too)")
    if kind is U.frac and not dtype.is_floating:
        raise FusionDefinitionError(f"frac: needs a floating {what}, got {dtype} {what} {x!r}")
    if kind in (U.real, U.imag):  # (ops/math.py takes real of a real tensor as a copy)
        raise FusionDefinitionError(f"{kind.value}: needs a complex {what}, got {dtype} {what} {x!r}")
    return dtype


def binary(kind: BinaryOpType, a: Operand, b: Operand):
    fusion = fusion_of(kind.value, a, b)
    a, b = as_val(fusion, a, kind.value), as_val(fusion, b, kind.value)
    if not isinstance(a, TensorView) and not isinstance(b, TensorView):
        return _scalar_binary(kind, a, b)
    a, b = computed(kind.value, a), computed(kind.value, b)
    compute = result_type(a, b)
    _check_ordered(kind, compute, a, b)
    _check_integer_operands(kind, compute, a, b)
    if kind in _COMPARISON:
        dtype = DataType.Bool
        # eager converts a 0-dim tensor to the common type before comparing (half < a float32
        # 0-dim tensor compares in half); once broadcast to the other's rank its own type
        # would decide the comparison's
        a, b = (cast(v, compute) if isinstance(v, TensorView) and v.ndim == 0 and v.dtype is not compute
                else v for v in (a, b))
    elif kind in _FLOAT_BINARY and compute.category < 2:
        dtype = DataType.Float
    else:
        dtype = compute
        a, b = _integers_rounded(compute, (a, b))
    tvs = _aligned([v for v in (a, b) if isinstance(v, TensorView)])
    it = iter(tvs)
    a, b = (next(it) if isinstance(v, TensorView) else v for v in (a, b))
    out = _elementwise_output(kind.value, tvs, dtype)
    fusion.add_expr(BinaryOp(inputs=(a, b), outputs=(out,), kind=kind))
    return out


def _integers_rounded(compute: DataType, operands: tuple) -> tuple:
    """Integer and bool tensors among `operands`, cast to a half or bf16 `compute` type first:
    eager converts every tensor operand to the common type (int32 594 + bf16 1.117 is 592 +
    1.117, 594 being 592 in bf16), where a kernel would widen the integer to fp32 directly.
    Python numbers and 0-dim tensors are not converted (eager takes a 0-dim CPU tensor as a
    number, kept at fp32 for half math)."""
    if compute not in (DataType.Half, DataType.BFloat16):
        return operands
    return tuple(cast(v, compute) if isinstance(v, TensorView) and v.ndim and (v.dtype.is_integral or v.dtype.is_boolean)
                 else v for v in operands)


def _check_ordered(kind: BinaryOpType, compute: DataType, a: Operand, b: Operand) -> None:
    if kind in (B.maximum, B.minimum) and compute.is_complex:  # (complex numbers have no order)
        raise FusionDefinitionError(f"{kind.value}: not defined for complex operands ({_dtypes(a, b)}); eager "
                                    f"refuses it too")


def check_real_scalar(op: str, what: str, v: Operand, result: DataType) -> None:
    """Refuse a complex scalar given to an op whose result is real (a real tensor's addcmul
    value, threshold), as eager refuses it ("value cannot be converted"): a cast
    to the real type would drop its imaginary part without a word."""
    if isinstance(v, Scalar) and v.dtype.is_complex and not result.is_complex:
        raise FusionDefinitionError(f"{op}: {what} is the complex scalar {v!r}, which a {result} result cannot "
                                    f"hold (eager refuses it too); give a real {what}, or complex tensors")


def _check_integer_operands(kind: BinaryOpType, compute: DataType, a: Operand, b: Operand) -> None:
    if kind in _INTEGER_ONLY and not (compute.is_integral or compute.is_boolean):
        raise FusionDefinitionError(f"{kind.value}: needs integer or bool operands, got {compute}")
    if kind in _STRICTLY_INTEGER and not compute.is_integral:
        hint = "; for floating operands use fmod or remainder" if kind is B.mod else ""
        raise FusionDefinitionError(f"{kind.value}: needs integer operands, got {_dtypes(a, b)}{hint}")
    if kind in (B.fmod, B.remainder) and compute.is_boolean:
        raise FusionDefinitionError(f"{kind.value}: not defined for two bool operands (eager refuses it "
                                    f"too); cast them to an integer type")
    if kind is B.div and compute.is_boolean:
        raise FusionDefinitionError("div: truncating division of two bool operands is not defined "
                                    "(eager refuses it too); cast them to an integer type, or use truediv")
    if kind is B.sub and (a.dtype.is_boolean or b.dtype.is_boolean):  # (a bool beside any type, as eager's)
        raise FusionDefinitionError(f"sub: not defined for a bool operand ({_dtypes(a, b)}; eager refuses it "
                                    f"too); use logical_xor for two bools, or cast to an integer type first")
    if kind is B.pow and compute.is_boolean and isinstance(b, TensorView):  # (x ** True is x in eager)
        raise FusionDefinitionError(f"pow: not defined for bool operands with a tensor exponent ({_dtypes(a, b)}; "
                                    f"eager refuses it too); cast them to an integer type")


def _dtypes(a: Scalar | TensorView, b: Scalar | TensorView) -> str:
    return " and ".join(f"{v.dtype} {'tensor' if isinstance(v, TensorView) else 'scalar'}" for v in (a, b))


# Ops on scalars only (nvFuser's definitions compute sizes and constants with them, Thunder's
# with comparisons, fmod and casts): a known value is computed at once; an input's value when
# it is bound, in a scalarFn (symbolic.SCALAR_FUNCTIONS: IEEE doubles for floats, exact
# integers), or in sympy's algebra where extents need it (integer +, -, *, max, min, neg, abs
# and the division of non-negative integers).


# what a complex scalar takes: its parts, its magnitude, its negation and its classification
_COMPLEX_SCALAR_UNARY = (U.real, U.imag, U.isreal, U.abs, U.neg, U.isnan, U.isinf, U.isfinite)


def _scalar_unary(kind: UnaryOpType, x: Scalar) -> Scalar:
    if x.dtype.is_complex and kind not in _COMPLEX_SCALAR_UNARY:
        raise UnsupportedError(f"{kind.value} of a {x.dtype} scalar is not supported; use a tensor (complex "
                               f"scalars take {', '.join(k.value for k in _COMPLEX_SCALAR_UNARY)})")
    dtype = _unary_result(kind, x, DataType.Double)
    _check_integers_fit(kind.value, dtype, x)
    code = SCALAR_FUNCTION_CODES[kind.name]
    if x.value is not None:
        return _known(x.fusion, kind.value, dtype, python_value(scalar_fn(code, x.value), dtype))
    if kind in (U.neg, U.abs) and dtype.is_integral:  # (integer algebra, for extents)
        return x.fusion.new_scalar(dtype, expr=-x.expr if kind is U.neg else sympy.Abs(x.expr))
    return x.fusion.new_scalar(dtype, expr=scalarFn(code, x.expr))


def _scalar_binary(kind: BinaryOpType, a: Scalar, b: Scalar) -> Scalar:
    fusion = a.fusion
    compute = promote(a.dtype, b.dtype)
    _check_ordered(kind, compute, a, b)
    if kind in _COMPARISON:
        dtype = DataType.Bool
    elif kind in _FLOAT_BINARY and not compute.is_floating:
        dtype = DataType.Double
    else:
        dtype = compute
    _check_integers_fit(kind.value, dtype, a, b)
    algebra = {B.add: lambda x, y: x + y, B.sub: lambda x, y: x - y, B.mul: lambda x, y: x * y,
               B.maximum: sympy.Max, B.minimum: sympy.Min}.get(kind)
    if algebra is not None and (a.dtype.is_boolean or b.dtype.is_boolean):
        if kind is B.sub:  # (as torch refuses a Bool operand of a subtraction)
            raise FusionDefinitionError("sub with a Bool scalar is not supported (as torch's); use "
                                        "logical_xor, or cast it to Int first")
        if dtype.is_boolean:  # True + True is True, as eager's bool tensors add: in Int, converted
            return cast(_scalar_binary(kind, cast(a, DataType.Int), cast(b, DataType.Int)), DataType.Bool)
        if not (dtype.is_floating or dtype.is_complex):  # (sympy's True has no integer algebra)
            a, b = (cast(v, dtype) if v.dtype.is_boolean else v for v in (a, b))
    if algebra is not None:
        if dtype.is_floating:  # IEEE doubles, not sympy's exact algebra (see floatOp)
            code = {B.add: FLOAT_ADD, B.sub: FLOAT_SUB, B.mul: FLOAT_MUL, B.maximum: FLOAT_MAX,
                    B.minimum: FLOAT_MIN}[kind]
            if a.value is not None and b.value is not None:
                return fusion.new_scalar(dtype, value=float_op(code, a.value, b.value))
            return fusion.new_scalar(dtype, expr=floatOp(code, a.expr, b.expr))
        if dtype.is_complex and a.value is not None and b.value is not None and kind in (B.add, B.sub, B.mul):
            return fusion.new_scalar(dtype, value=algebra(complex(a.value), complex(b.value)))  # (Python's)
        if a.value is not None and b.value is not None and dtype.is_integral:
            return _known(fusion, kind.value, dtype, int(algebra(a.expr, b.expr)))
        return fusion.new_scalar(dtype, expr=algebra(a.expr, b.expr))
    code = SCALAR_FUNCTION_CODES.get(kind.name)
    if code is None or compute.is_complex:
        raise UnsupportedError(f"{kind.value} of two scalars ({_dtypes(a, b)}) is not supported; use a tensor")
    _check_integer_operands(kind, compute, a, b)
    if a.value is not None and b.value is not None:
        try:
            value = scalar_fn(code, a.value, b.value)
        except (ArithmeticError, ValueError) as err:  # an integer division by zero
            raise FusionDefinitionError(f"{kind.value} of the scalars {a.value} and {b.value}: {err}") from None
        return _known(fusion, kind.value, dtype, python_value(value, dtype))
    if kind is B.div and not dtype.is_floating and a.expr.is_nonnegative and b.expr.is_nonnegative:
        return fusion.new_scalar(dtype, expr=sympy.floor(a.expr / b.expr))  # (truncation is floor here)
    return fusion.new_scalar(dtype, expr=scalarFn(code, a.expr, b.expr))


def _check_integers_fit(op: str, result: DataType, *operands: Scalar, wrapped: bool = False) -> None:
    """Integer scalars computed at execution are exact Python integers, and only a result's
    value is checked against 64 bits when it is bound (BindingTable.evaluate). One that turns
    into a float here (a cast, float arithmetic, a float function), or that a cast to another
    integer type wraps into that type's range (`wrapped`), hides from that check: an Int
    product past 64 bits would be rounded to a double where the same constant is refused
    (_known). So each execution checks the integer itself fits its type (Fusion.finite), where
    it depends on a scalar input (extents alone are sizes of tensors that exist)."""
    if not (result.is_floating or result.is_complex or wrapped):
        return
    fusion = operands[0].fusion
    inputs = {v.expr for v in fusion.inputs() if isinstance(v, Scalar)}
    for v in operands:
        if (v.dtype.is_integral and v.value is None and not isinstance(v.expr, sympy.Symbol)
                and not inputs.isdisjoint(v.expr.free_symbols)):
            held = str(v.dtype.to_torch()).removeprefix("torch.")  # (binding.py's rule names)
            check = (v.expr, f"{op}: the {v.dtype.name} scalar", f"fits {held}")
            if check not in fusion.finite:
                fusion.finite.append(check)


def _known(fusion, op: str, dtype: DataType, value) -> Scalar:
    """A constant result. An integer beyond its type's range is refused, as a Python int past
    64 bits is: a kernel's literal would wrap it where a cast to a float would not, two values
    for one scalar (`1 << 63` as an Int operand and as a Double)."""
    if dtype.is_integral and type(value) is int:
        low, high = int_range(dtype)
        if not low <= value < high:
            raise FusionDefinitionError(f"{op}: the {dtype} scalar result {value} is out of its type's range "
                                        f"[{low}, {high}); compute it in a tensor (whose integers wrap "
                                        f"as eager's do) or as a Double")
    return fusion.new_scalar(dtype, value=value)


def _scalar_where(cond: Scalar, a: Scalar, b: Scalar) -> Scalar:
    """A scalar chosen by a scalar condition, in the values' promoted type."""
    if a.dtype.is_complex or b.dtype.is_complex:
        raise UnsupportedError("where of complex scalars is not supported; use a tensor")
    dtype = promote(a.dtype, b.dtype)
    if cond.value is not None:
        return cast(a if cond.value else b, dtype)  # (a known value converted, as cast does)
    operands = [cast(v, dtype).expr for v in (a, b)]
    return cond.fusion.new_scalar(dtype, expr=scalarFn(SCALAR_FUNCTION_CODES["where"], cond.expr, *operands))


def _scalar_clamp_or_lerp(kind: TernaryOpType, a: Scalar, b: Scalar, c: Scalar) -> Scalar:
    """clamp(x, min, max) or lerp(start, end, weight) of scalars, as eager's of 0-dim tensors, in
    the operands' promoted type (nvFuser's scalar types: an Int beside a Double gives Double)."""
    dtype = promote(a.dtype, b.dtype, c.dtype)
    if kind is TernaryOpType.clamp and (dtype.is_boolean or dtype.is_complex):
        raise FusionDefinitionError(f"clamp: not defined for {dtype} scalars (eager refuses it too)")
    if kind is TernaryOpType.lerp and dtype.category < 2:
        raise FusionDefinitionError(f"lerp: needs floating operands, got {_dtypes(a, b)} and {c.dtype} scalar")
    a, b, c = (cast(v, dtype) for v in (a, b, c))
    code = SCALAR_FUNCTION_CODES[kind.name]
    if a.value is not None and b.value is not None and c.value is not None:
        return _known(a.fusion, kind.value, dtype, python_value(scalar_fn(code, a.value, b.value, c.value), dtype))
    return a.fusion.new_scalar(dtype, expr=scalarFn(code, a.expr, b.expr, c.expr))


def ternary(kind: TernaryOpType, a: Operand, b: Operand, c: Operand):
    fusion = fusion_of(kind.value, a, b, c)
    a, b, c = (as_val(fusion, v, kind.value) for v in (a, b, c))
    check_computable(kind.value, a, b, c)
    if kind is TernaryOpType.where and not a.dtype.is_boolean:  # (as nvFuser's and eager's where)
        what = "tensor" if isinstance(a, TensorView) else "scalar"
        raise FusionDefinitionError(f"where: the condition must be a bool {what}, got {a.dtype} {a!r}; "
                                    f"compare it first (ne(cond, 0))")
    if not any(isinstance(v, TensorView) for v in (a, b, c)):
        return _scalar_where(a, b, c) if kind is TernaryOpType.where else _scalar_clamp_or_lerp(kind, a, b, c)
    # a where between tensors of one fp8 type selects exactly (PyTorch has it); otherwise fp8
    # operands compute in Float
    same_fp8 = (kind is TernaryOpType.where and isinstance(b, TensorView) and isinstance(c, TensorView)
                and b.dtype.is_float8 and b.dtype is c.dtype)
    if not same_fp8:
        a, b, c = (computed(kind.value, v) for v in (a, b, c))
    if kind is TernaryOpType.where:
        # two scalar values keep their own type, as in nvFuser (a Python float is a Double);
        # PyTorch's would be the default dtype of their category (the jit rule asks for it)
        both_scalars = isinstance(b, Scalar) and isinstance(c, Scalar)
        dtype = promote(b.dtype, c.dtype) if both_scalars else result_type(b, c)
    elif kind is TernaryOpType.clamp:
        dtype = result_type(a, b, c)
        if dtype.is_complex:  # (as the scalar clamp; a complex bound of a real tensor promotes to it)
            named = ", ".join(f"{what} {v!r} ({v.dtype})" for what, v in zip(("input", "min", "max"), (a, b, c))
                              if v.dtype.is_complex)
            raise FusionDefinitionError(f"clamp: not defined for complex operands, got {named}; eager refuses "
                                        f"them too")
    else:  # lerp: start, end, weight
        dtype = result_type(a, b, c)
        if dtype.category < 2:
            raise FusionDefinitionError(f"lerp: needs floating operands, got {dtype}")
    if kind is TernaryOpType.where:
        b, c = _integers_rounded(dtype, (b, c))
    else:
        a, b, c = _integers_rounded(dtype, (a, b, c))
    tvs = [v for v in (a, b, c) if isinstance(v, TensorView)]
    aligned = iter(_aligned(tvs))
    a, b, c = (next(aligned) if isinstance(v, TensorView) else v for v in (a, b, c))
    out = _elementwise_output(kind.value, [v for v in (a, b, c) if isinstance(v, TensorView)], dtype)
    fusion.add_expr(TernaryOp(inputs=(a, b, c), outputs=(out,), kind=kind))
    return out


def cast(x: Operand, dtype: DataType):
    dtype = value_dtype("cast", dtype)
    fusion = fusion_of("cast", x)
    x = as_val(fusion, x, "cast")
    if x.dtype is not dtype:
        check_computable("cast", x)
        if dtype.is_opaque:
            raise UnsupportedError(f"cast: torch cannot convert values to {dtype!r}")
    if isinstance(x, Scalar):
        if dtype.is_float8:
            raise UnsupportedError(f"cast: scalars of {dtype!r} are not supported; cast a tensor")
        if x.value is not None:
            try:
                value = python_value(x.value, dtype)
            except (ValueError, OverflowError) as err:  # nan, inf, or a float the integer type cannot hold
                raise FusionDefinitionError(f"cast: the scalar {x.value} cannot become {dtype}: {err}") from None
            return _known(fusion, "cast", dtype, value)  # (an integer beyond the type's range refused)
        _check_integers_fit("cast", dtype, x, wrapped=dtype.is_integral and dtype is not x.dtype)
        if dtype is x.dtype or dtype.is_complex:
            return fusion.new_scalar(dtype, expr=x.expr)
        return fusion.new_scalar(dtype, expr=scalarCast(x.expr, _cast_code(dtype)))
    out = _elementwise_output("cast", [x], dtype)
    fusion.add_expr(CastOp(inputs=(x,), outputs=(out,), dtype=dtype))
    return out


def python_value(value, dtype: DataType):
    """A Python number converted as a cast to `dtype` converts it (bool, a float truncated to
    an integer or rounded to the dtype's precision, complex). An integer stays whole where a
    runtime scalar's cast to a signed type wraps it (convert_scalar): a constant beyond the
    type's range is refused by _known (an Int32 `1 << 31`, an Int32 fill of 2**40 as eager's
    torch.full refuses it), never given a value; a UInt64 one wraps, as torch converts -1."""
    if dtype.is_complex:
        return complex(value)
    if isinstance(value, complex) and not dtype.is_boolean:
        value = value.real  # (eager keeps the real part, with a warning)
    if dtype.is_integral and type(value) is int:
        return value % (1 << 64) if dtype is DataType.UInt64 else value
    return convert_scalar(_cast_code(dtype), value)


def _cast_code(dtype: DataType) -> int:
    if dtype.is_boolean:
        return CAST_BOOL
    if dtype.is_integral:  # (Index is an int64)
        return {DataType.Int32: CAST_INT32, DataType.UInt64: CAST_UINT64}.get(dtype, CAST_INT)
    return {DataType.Float: CAST_FLOAT, DataType.Half: CAST_HALF,
            DataType.BFloat16: CAST_BFLOAT16}.get(dtype, CAST_DOUBLE)
