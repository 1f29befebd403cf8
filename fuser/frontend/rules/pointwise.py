"""Elementwise ATen ops: unary and binary math, comparisons, where, clamp, casts, activations."""
from __future__ import annotations

import math
from typing import Optional

import torch

from ...ir import DataType, Scalar, TensorView
from ...ops.pointwise import python_value
from . import Kind, LoweringError, refuse_overflow, register

aten = torch.ops.aten
prims = torch.ops.prims

_UNARY = {
    aten.abs: "abs", aten.neg: "neg", aten.exp: "exp", aten.exp2: "exp2", aten.expm1: "expm1",
    aten.log: "log", aten.log2: "log2", aten.log10: "log10", aten.log1p: "log1p",
    aten.sqrt: "sqrt", aten.rsqrt: "rsqrt", aten.reciprocal: "reciprocal", aten.sin: "sin",
    aten.cos: "cos", aten.tan: "tan", aten.tanh: "tanh", aten.sigmoid: "sigmoid",
    aten.relu: "relu", aten.silu: "silu", aten.erf: "erf", aten.floor: "floor",
    aten.ceil: "ceil", aten.trunc: "trunc", aten.sign: "sign", aten.isnan: "isnan",
    aten.isinf: "isinf", aten.logical_not: "logical_not", aten.bitwise_not: "bitwise_not",
}


def in_traced_float(b, node, *operands) -> tuple:
    """`operands`, their integer and bool tensors cast to the node's floating result type
    where it is not Float, as eager converts each operand to the result type before
    computing. The FusionDefinition API promotes integers to Float (nvFuser's default of the
    category); under torch.set_default_dtype(torch.float64) eager's `i * 1.5`, `i / 3`,
    `exp(i)` are float64, and an integer beyond 2**24 would lose digits in fp32; under a bf16
    or half default they are the integer rounded to it first (computed in fp32, rounded again)."""
    want = DataType.from_torch(b.meta(node).dtype)
    if not want.is_floating or want is DataType.Float:
        return operands
    return tuple(b.fd.ops.cast(v, want) if isinstance(v, TensorView) and (v.dtype.is_integral or v.dtype.is_boolean)
                 else v for v in operands)


def _unary_rule(name):
    def rule(b, node, x):
        x, = in_traced_float(b, node, x)
        return getattr(b.fd.ops, name)(x)
    rule.__name__ = f"lower_{name}"
    return rule


for _op, _name in _UNARY.items():
    register(_op.default)(_unary_rule(_name))
register(aten.round.default)(_unary_rule("round"))


_BINARY = {
    aten.mul: "mul", aten.div: "truediv", aten.true_divide: "truediv", aten.maximum: "maximum",
    aten.minimum: "minimum", aten.fmod: "fmod", aten.remainder: "remainder", aten.atan2: "atan2",
    aten.eq: "eq", aten.ne: "ne", aten.lt: "lt", aten.le: "le", aten.gt: "gt", aten.ge: "ge",
    aten.logical_and: "logical_and", aten.logical_or: "logical_or",
    aten.bitwise_and: "bitwise_and", aten.bitwise_or: "bitwise_or", aten.bitwise_xor: "bitwise_xor",
}


def _binary_rule(name):
    def rule(b, node, x, y):
        x, y = in_traced_float(b, node, x, y)
        return getattr(b.fd.ops, name)(x, y)
    rule.__name__ = f"lower_{name}"
    return rule


_COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")


def rounded(b, x):
    """A half or bf16 value rounded to its dtype. Fused kernels keep such intermediates in fp32;
    a comparison must see what eager compares, or the mask of an amax/amin backward
    (`x == amax(x)`, with a saved, rounded amax) finds no maximum and divides by a count of 0."""
    if isinstance(x, TensorView) and x.dtype in (DataType.Half, DataType.BFloat16):
        return b.fd.ops.cast(b.fd.ops.cast(x, DataType.Float), x.dtype)
    return x


def _number_as(value, other):
    """A Python number compared with a half or bf16 tensor, as eager compares it: converted to
    that dtype first (`x <= 0.3` with x bf16 compares against 0.30078125)."""
    if isinstance(other, TensorView) and other.dtype in (DataType.Half, DataType.BFloat16) \
            and isinstance(value, (int, float)) and not isinstance(value, bool):
        return torch.tensor(value, dtype=other.dtype.to_torch()).item()
    return value


def _comparison_rule(name):
    def rule(b, node, x, y):
        x, y = _number_as(x, y), _number_as(y, x)
        return getattr(b.fd.ops, name)(rounded(b, x), rounded(b, y))
    rule.__name__ = f"lower_{name}"
    return rule


def _number_in_tensor_type_rule(name):
    """fmod and remainder of a half or bf16 tensor and a Python number: ATen's kernels take
    both operands in the tensor's type (`fmod(x, 0.1)` divides by half(0.1)); in fp32 the
    remainder near a multiple of 0.1 would differ by a whole divisor."""
    def rule(b, node, x, y):
        x, y = in_traced_float(b, node, x, y)
        return getattr(b.fd.ops, name)(_number_as(x, y), _number_as(y, x))
    rule.__name__ = f"lower_{name}"
    return rule


_RULE_OF = {**{name: _comparison_rule for name in _COMPARISONS},
            "fmod": _number_in_tensor_type_rule, "remainder": _number_in_tensor_type_rule}
for _op, _name in _BINARY.items():
    for _overload in ("Tensor", "Scalar", "Scalar_Tensor", "default"):
        if hasattr(_op, _overload):
            register(getattr(_op, _overload))(_RULE_OF.get(_name, _binary_rule)(_name))


def _scaled(b, node, y, alpha, op: str):
    """`y * alpha` of add's and sub's alpha (eager refuses an alpha its result type cannot hold),
    in fp32 for a half or bf16 `y`: eager's kernel rounds `x + alpha y` once, where a product
    of y's type was rounded before the sum too (an SGD step on bf16 parameters, 1 ulp off in a
    sixth of them). `_rounded_once` casts the sum back."""
    _refuse_alpha_kind(alpha, node.meta["val"].dtype, op)
    if alpha == 1:
        return y
    refuse_overflow(alpha, node.meta["val"].dtype, op)
    if isinstance(y, TensorView) and y.dtype in (DataType.BFloat16, DataType.Half):
        y = b.fd.ops.cast(y, DataType.Float)
    return b.fd.ops.mul(y, alpha)


def _alpha_kind(alpha) -> Optional[str]:
    """"bool", "int", "float" or "complex": the kind of number `alpha` is (a number bound at
    execution: its dtype's); None for anything else."""
    if isinstance(alpha, Scalar):
        dt = alpha.dtype
        return "bool" if dt.is_boolean else "int" if dt.is_integral else "complex" if dt.is_complex else "float"
    for kind in (bool, int, float, complex):  # (bool first: a bool is an int too)
        if isinstance(alpha, kind):
            return kind.__name__
    return None


def _refuse_alpha_kind(alpha, result: torch.dtype, op: str) -> None:
    """Eager checks alpha's kind against the result type (its alpha_check) before anything
    else, alpha 1 included: a bool alpha only for a bool result, a float one for a floating or
    complex result, a complex one for a complex result. Through ATen the node raises eager's
    error, where a kernel would truncate `y * 2.5` into an integer sum."""
    kind = _alpha_kind(alpha)
    refused = (kind == "bool" and result is not torch.bool) or \
        (kind == "float" and not (result.is_floating_point or result.is_complex)) or \
        (kind == "complex" and not result.is_complex)
    if refused:
        raise LoweringError(f"{op} with alpha={alpha!r}, a {kind} alpha for a {result} result (eager refuses it)")


def _rounded_once(b, node, out):
    """`out` in the node's result type (an fp32 sum of `_scaled`'s product, cast once)."""
    want = DataType.from_torch(node.meta["val"].dtype)
    return out if not isinstance(out, TensorView) or out.dtype is want else b.fd.ops.cast(out, want)


@register(aten.add.Tensor, aten.add.Scalar)
def _add(b, node, x, y, alpha=1):
    x, y = in_traced_float(b, node, x, y)
    return _rounded_once(b, node, b.fd.ops.add(x, _scaled(b, node, y, alpha, "add")))


def _no_bool_subtraction(x, y) -> None:
    """Eager refuses a subtraction with a bool operand; through ATen the node raises as eager
    does, where a kernel would return a number."""
    if any(isinstance(v, bool) or (isinstance(v, TensorView) and v.dtype is DataType.Bool) for v in (x, y)):
        raise LoweringError("a subtraction with a bool operand (eager refuses it)")


@register(aten.sub.Tensor, aten.sub.Scalar)
def _sub(b, node, x, y, alpha=1):
    _no_bool_subtraction(x, y)
    x, y = in_traced_float(b, node, x, y)
    return _rounded_once(b, node, b.fd.ops.sub(x, _scaled(b, node, y, alpha, "sub")))


@register(aten.rsub.Tensor, aten.rsub.Scalar)
def _rsub(b, node, x, y, alpha=1):
    _no_bool_subtraction(x, y)
    x, y = in_traced_float(b, node, x, y)
    return _rounded_once(b, node, b.fd.ops.sub(y, _scaled(b, node, x, alpha, "rsub")))


@register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(b, node, x, y, rounding_mode=None):
    if not b.meta(node).dtype.is_floating_point and rounding_mode is not None:
        return _integer_divide(b.fd.ops, x, y, rounding_mode)
    x, y = in_traced_float(b, node, x, y)
    q = b.fd.ops.truediv(x, y)
    if rounding_mode is None:
        return q
    if rounding_mode == "trunc":
        return b.fd.ops.trunc(q)
    # a Python-number dividend beside a half or bf16 tensor is converted to its dtype first, as
    # ATen's iterator converts it; a number divisor stays in fp32 (ATen reads it as a scalar)
    x = _number_as(x, y)
    return _floor_divide(b.fd.ops, x, y, b.fd.ops.truediv(x, y))


def _integer_divide(ops, x, y, rounding_mode):
    """Integer division as ATen's: nvFuser's div truncates (C's); floor mode is one less where
    the remainder is nonzero and the operands' signs differ (ATen's div_floor_integer)."""
    q = ops.div(x, y)
    if rounding_mode == "trunc":
        return q
    if not isinstance(x, TensorView) and not isinstance(y, TensorView):
        raise LoweringError("integer floor division of two scalars")
    r = ops.mod(x, y)  # (a tensor: one operand is)
    if isinstance(y, TensorView):
        signs_differ = ops.ne(ops.lt(r, 0), ops.lt(y, 0))
    elif isinstance(y, (int, bool)):
        signs_differ = ops.gt(r, 0) if y < 0 else ops.lt(r, 0)
    else:
        raise LoweringError("integer floor division by a scalar bound at execution")
    return ops.where(ops.logical_and(ops.ne(r, 0), signs_differ), ops.sub(q, 1), q)


def _floor_divide(ops, x, y, q):
    """Floating floor division as ATen computes it (its div_floor_floating), not floor(x / y):
    from the remainder, (x - fmod(x, y)) / y, one less where the remainder's sign is not the
    divisor's, then rounded to the nearest integer; a zero keeps the quotient's sign, a zero
    divisor gives x / y. floor(x / y) differs where x / y rounds up to an integer: 1 // 0.1 is
    9 in eager (and Python), floor(1 / 0.1) is 10."""
    mod = ops.fmod(x, y)
    div = ops.truediv(ops.sub(x, mod), y)
    mod_negative = ops.lt(mod, 0.0)
    if isinstance(y, (int, float)):
        other_sign = ops.logical_not(mod_negative) if y < 0 else mod_negative
        y_zero = y == 0
    else:
        if not isinstance(y, TensorView):  # a runtime scalar: as a tensor of the quotient's shape
            y = ops.where(ops.isnan(mod), y, y)
        other_sign = ops.ne(ops.lt(y, 0.0), mod_negative)
        y_zero = ops.eq(y, 0.0)
    div = ops.where(ops.logical_and(ops.ne(mod, 0.0), other_sign), ops.sub(div, 1.0), div)
    floored = ops.floor(div)
    floored = ops.where(ops.gt(ops.sub(div, floored), 0.5), ops.add(floored, 1.0), floored)
    result = ops.where(ops.ne(div, 0.0), floored, ops.mul(q, 0.0))
    if y_zero is False:
        return result
    return q if y_zero is True else ops.where(y_zero, q, result)


@register(aten.pow.Tensor_Scalar)
def _pow_scalar(b, node, x, e):
    """Small exponents as multiplications and roots, as ATen special-cases them."""
    ops = b.fd.ops
    x, = in_traced_float(b, node, x)
    if isinstance(e, (int, float)) and not isinstance(e, bool):
        if e == 1:
            return ops.set(x)
        if e == 2:
            return ops.mul(x, x)
        if e == 3:
            return ops.mul(ops.mul(x, x), x)
        if e == 0.5:
            return ops.sqrt(x)
        if e == -0.5:
            return ops.rsqrt(x)
        if e == -1 and x.dtype.is_floating:
            return ops.reciprocal(x)
        if e == -2 and x.dtype.is_floating:
            return ops.reciprocal(ops.mul(x, x))
    if not (x.dtype.is_floating or x.dtype.is_complex) and not isinstance(e, (float, bool)) \
            and not (isinstance(e, int) and e >= 0):
        # through ATen the node raises as eager does ("Integers to negative integer powers"),
        # for an exponent known only at execution too (an int argument, traced as a symbol)
        raise LoweringError("an integer tensor to a negative or execution-time integer power (eager "
                            "refuses negative ones)")
    return ops.pow(x, e)


@register(aten.pow.Tensor_Tensor, aten.pow.Scalar)
def _pow(b, node, x, e):
    return b.fd.ops.pow(*in_traced_float(b, node, x, e))


@register(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(b, node, cond, x, y):
    want = node.meta["val"].dtype
    if not want.is_floating_point:  # (eager checks a number against an integer result; a float one takes inf)
        for v in (x, y):
            refuse_overflow(v, want, "where")
    if not isinstance(x, TensorView) and not isinstance(y, TensorView):
        # two numbers: in the traced dtype, the first as a 0-dim tensor, whose type the result
        # takes (fd.ops.where would keep theirs, a Python float's Double; and a kernel's where
        # of two literals computes in fp32, a Double's digits lost)
        dt = DataType.from_torch(want)
        x, y = (python_value(v, dt) if isinstance(v, (bool, int, float)) else v for v in (x, y))
        x = b.fd.ops.full([], x, dt)
    return b.fd.ops.where(cond, *in_traced_float(b, node, x, y))


@register(aten.masked_fill.Scalar)
def _masked_fill(b, node, x, mask, value):
    # (kept whole rather than decomposed to where(mask, scalar_tensor(value), x), which loses
    # eager's check of the value against x's dtype)
    want = node.meta["val"].dtype
    refuse_overflow(value, want, "masked_fill")
    dt = DataType.from_torch(want)
    # (the number in x's type, as eager casts it: a number bound at execution too)
    value = python_value(value, dt) if isinstance(value, (bool, int, float)) else b.fd.ops.cast(value, dt)
    return b.fd.ops.where(mask, value, x)


def _bounded(b, x, bound, below: bool):
    """x held at or above `bound` (`below` False: at or below), as eager's std::max(x, bound):
    x itself on a tie, so -0.0 stays -0.0 against a bound of 0 (maximum gave +0.0), a NaN x
    stays NaN, and a NaN bound gives NaN."""
    ops = b.fd.ops
    past = ops.lt(x, bound) if not below else ops.gt(x, bound)
    if isinstance(bound, TensorView) and bound.dtype.is_floating:
        past = ops.logical_or(past, ops.isnan(bound))
    elif isinstance(bound, float) and math.isnan(bound):
        past = ops.logical_or(past, True)
    return ops.where(past, bound, x)


@register(aten.clamp.default, aten.clamp.Tensor)
def _clamp(b, node, x, min=None, max=None):
    for bound in (min, max):
        refuse_overflow(bound, node.meta["val"].dtype, "clamp")
    if min is None and max is None:
        return b.fd.ops.set(x)
    x, min, max = in_traced_float(b, node, x, min, max)
    out = x if min is None else _bounded(b, x, min, below=False)
    return out if max is None else _bounded(b, out, max, below=True)


@register(aten.clamp_min.default, aten.clamp_min.Tensor)
def _clamp_min(b, node, x, min):
    refuse_overflow(min, node.meta["val"].dtype, "clamp_min")
    return _bounded(b, *in_traced_float(b, node, x, min), below=False)


@register(aten.clamp_max.default, aten.clamp_max.Tensor)
def _clamp_max(b, node, x, max):
    refuse_overflow(max, node.meta["val"].dtype, "clamp_max")
    return _bounded(b, *in_traced_float(b, node, x, max), below=True)


@register(aten.hardtanh.default)
def _hardtanh(b, node, x, min_val=-1.0, max_val=1.0):
    return _bounded(b, _bounded(b, x, min_val, below=False), max_val, below=True)


@register(aten.logical_xor.default)
def _logical_xor(b, node, x, y):
    """Whether exactly one of x and y is nonzero (NaN is nonzero), of any dtypes."""
    ops = b.fd.ops
    x, y = (v if _is_bool(v) else ops.ne(rounded(b, v), 0) for v in (x, y))
    return ops.ne(x, y)


def _is_bool(v) -> bool:
    return isinstance(v, bool) or (isinstance(v, TensorView) and v.dtype is DataType.Bool)


def _nan_ignoring(b, node, x, y, larger: bool):
    """fmax (`larger`) or fmin: the larger (smaller) operand, the one that is not NaN where the
    other is (NaN only where both are), in the node's promoted type. On a tie of 0.0 and -0.0
    either is right (IEEE's fmax; eager's CPU kernels return x in fp32, y in bf16): x here."""
    ops = b.fd.ops
    x, y = rounded(b, x), rounded(b, y)
    take_y = ops.lt(x, y) if larger else ops.gt(x, y)
    if isinstance(x, TensorView) and x.dtype.is_floating:
        take_y = ops.logical_or(take_y, ops.isnan(x))
    elif isinstance(x, float) and math.isnan(x):
        take_y = ops.logical_or(take_y, True)
    out = ops.where(take_y, y, x)
    want = DataType.from_torch(b.meta(node).dtype)
    return out if out.dtype is want else ops.cast(out, want)


@register(aten.fmax.default)
def _fmax(b, node, x, y):
    return _nan_ignoring(b, node, x, y, larger=True)


@register(aten.fmin.default)
def _fmin(b, node, x, y):
    return _nan_ignoring(b, node, x, y, larger=False)


@register(aten.leaky_relu.default)
def _leaky_relu(b, node, x, negative_slope=0.01):
    ops = b.fd.ops
    return ops.where(ops.gt(x, 0), x, ops.mul(x, negative_slope))


@register(aten.lerp.Scalar, aten.lerp.Tensor)
def _lerp(b, node, start, end, weight):
    return b.fd.ops.lerp(start, end, weight)


def compute_dtype(x: TensorView) -> DataType:
    """Half and bf16 compute in fp32, as ATen's kernels do."""
    return DataType.Float if x.dtype in (DataType.Half, DataType.BFloat16) else x.dtype


def upcast(b, x: TensorView) -> TensorView:
    dt = compute_dtype(x)
    return x if dt is x.dtype else b.fd.ops.cast(x, dt)


@register(aten.gelu.default)
def _gelu(b, node, x, approximate="none"):
    ops = b.fd.ops
    xf = upcast(b, x)
    if approximate == "tanh":
        # 0.5 x (1 + tanh(z)) written as x sigmoid(2 z): the same function, one exp and one
        # division instead of a tanh (GELU is compute-bound on an H200 otherwise), and no
        # cancellation in 1 + tanh(z) where x is very negative
        inner2 = ops.mul(ops.add(xf, ops.mul(ops.mul(ops.mul(xf, xf), xf), 0.044715)),
                         2.0 * math.sqrt(2.0 / math.pi))
        y = ops.mul(xf, ops.sigmoid(inner2))
    elif approximate == "none":
        y = ops.mul(ops.mul(xf, 0.5), ops.add(ops.erf(ops.mul(xf, 1.0 / math.sqrt(2.0))), 1.0))
    else:
        raise LoweringError(f"gelu approximate={approximate!r}")
    return ops.cast(y, x.dtype) if y.dtype is not x.dtype else y


@register(aten.elu.default)
def _elu(b, node, x, alpha=1.0, scale=1.0, input_scale=1.0):
    """ELU (and SELU, CELU, which become it): scale x where x > 0, else alpha scale
    expm1(input_scale x), as ATen's kernel computes it (in fp32 for half types)."""
    for v in (alpha, scale, input_scale):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise LoweringError(f"elu with a parameter {v!r} that is not a number")
    ops = b.fd.ops
    xf = upcast(b, x)
    negative = ops.mul(ops.expm1(ops.mul(xf, float(input_scale))), float(alpha) * float(scale))
    y = ops.where(ops.le(xf, 0.0), negative, ops.mul(xf, float(scale)))
    return ops.cast(y, x.dtype) if y.dtype is not x.dtype else y


# -- casts and copies ---------------------------------------------------------------------------


def _cast_or_copy(b, x, dtype: torch.dtype):
    want = DataType.from_torch(dtype)
    out = b.fd.ops.set(x) if want is x.dtype else b.fd.ops.cast(x, want)
    if id(x) in b.constants:  # a copy of a constant is that constant, in the new type
        value = b.constants[id(x)]
        b.constants[id(out)] = (bool(value) if want.is_boolean else int(value) if want.is_integral
                                else float(value))
    return out


@register(aten._to_copy.default)
def _to_copy(b, node, x, dtype=None, layout=None, device=None, pin_memory=None,
             non_blocking=False, memory_format=None):
    src = b.input_meta(node)
    if device is not None and torch.device(device) != src.device:
        raise LoweringError(f"copies from {src.device} to {device}")
    if layout not in (None, torch.strided):
        raise LoweringError(f"layout {layout}")
    _check_format(memory_format)
    return _cast_or_copy(b, x, b.meta(node).dtype)


@register(prims.convert_element_type.default)
def _convert(b, node, x, dtype):
    return _cast_or_copy(b, x, dtype)


@register(aten.clone.default)
def _clone(b, node, x, memory_format=None):
    _check_format(memory_format)
    return _cast_or_copy(b, x, x.dtype.to_torch())


@register(prims.copy_strided.default)
def _copy_strided(b, node, x, stride):
    """A copy laid out with `stride` (the traced result's: an output takes its layout from it)."""
    return _cast_or_copy(b, x, x.dtype.to_torch())


@register(aten.lift_fresh_copy.default)
def _lift_fresh_copy(b, node, x):
    return _cast_or_copy(b, x, x.dtype.to_torch())


@register(aten.alias.default, kind=Kind.view)
def _alias(b, node, x):
    return x


@register(aten.copy.default)
def _copy(b, node, dst, src, non_blocking=False):
    """A new tensor shaped like `dst` holding `src` (broadcast and cast)."""
    from .shape import expand_to

    want = DataType.from_torch(b.meta(node).dtype)
    if not hasattr(src, "dtype"):  # a Python number (a lifted 0-dim constant): fill with it
        return b.fd.ops.full(b.out_shape(node), python_value(src, want), want)
    out = src if src.dtype is want else b.fd.ops.cast(src, want)
    return b.fd.ops.set(expand_to(b, out, b.out_shape(node)))


def _check_format(memory_format) -> None:
    if memory_format not in (None, torch.preserve_format, torch.contiguous_format):
        raise LoweringError(f"memory_format {memory_format}")
