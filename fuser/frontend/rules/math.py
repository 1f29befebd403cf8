"""ATen math ops with nvFuser counterparts of ops/math.py's group: inverse trigonometric and
hyperbolic functions, special functions, float classification, nextafter, gcd, shifts,
addcmul and threshold; and copysign and hypot, composed of other ops. AOTAutograd's core-ATen
decompositions already rewrite some of them (frac to trunc, isneginf and isreal to
comparisons, addcmul and threshold to mul, add, le and where); their rules here take them
where they arrive whole (other decomposition tables)."""
from __future__ import annotations

import math

import torch
from torch.fx import Node

from ...ir import DataType, TensorView
from . import Kind, LoweringError, refuse_overflow, register
from .pointwise import _binary_rule, _unary_rule, upcast
from .shape import _zeros

aten = torch.ops.aten

_UNARY = ("acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "sinh", "erfc", "erfinv",
          "lgamma", "frac", "signbit", "isneginf", "isposinf")
for _name in _UNARY:
    register(getattr(aten, _name).default)(_unary_rule(_name))


@register(aten.isreal.default)
def _isreal(b, node, x):
    if not isinstance(x, TensorView):
        raise LoweringError("isreal of a number")
    return b.fd.ops.isreal(x)


# binary ops, every overload: a Python number on either side is an operand like a tensor
_BINARY = {
    aten.nextafter: "nextafter", aten.gcd: "gcd",
    aten.bitwise_left_shift: "bitwise_left_shift", aten.__lshift__: "bitwise_left_shift",
    aten.bitwise_right_shift: "bitwise_right_shift", aten.__rshift__: "bitwise_right_shift",
}
for _op, _name in _BINARY.items():
    for _overload in ("default", "Tensor", "Scalar", "Tensor_Scalar", "Scalar_Tensor"):
        if hasattr(_op, _overload):
            register(getattr(_op, _overload))(_binary_rule(_name))


# composed of other ops (fuser has no op of their own)


def _in_result_type(b, node, v):
    """v in the node's traced result type (a number or a tensor: cast where it differs)."""
    want = DataType.from_torch(b.meta(node).dtype)
    return v if isinstance(v, TensorView) and v.dtype is want else b.fd.ops.cast(v, want)


@register(aten.copysign.Tensor, aten.copysign.Scalar)
def _copysign(b, node, x, y):
    """|x| with y's sign bit (that of a -0.0 or a NaN included), in eager's promoted type:
    integers become floats."""
    ops = b.fd.ops
    magnitude = ops.abs(_in_result_type(b, node, x))
    if isinstance(y, (bool, int, float)):
        return ops.neg(magnitude) if math.copysign(1.0, y) < 0 else magnitude
    return ops.where(ops.signbit(y), ops.neg(magnitude), magnitude)


@register(aten.hypot.default)
def _hypot(b, node, x, y):
    """sqrt(x^2 + y^2) without squaring x or y, which overflows past 1.8e19 in fp32 and
    underflows below 1e-19: the larger magnitude times sqrt(1 + r^2), r the smaller over it
    (within a few ulp of eager's). inf where either is infinite (beside a NaN too, as IEEE's
    hypot), else NaN where either is NaN, 0 for two zeros. Half and bf16 compute in fp32."""
    if not node.meta["val"].dtype.is_floating_point:  # (eager has no integer hypot: through
        raise LoweringError("hypot of integer operands (eager has no kernel for them)")  # ATen, it raises)
    ops = b.fd.ops
    ax, ay = (ops.abs(upcast(b, _in_result_type(b, node, v))) for v in (x, y))
    big, small = ops.maximum(ax, ay), ops.minimum(ax, ay)
    ratio = ops.truediv(small, big)
    scaled = ops.mul(big, ops.sqrt(ops.add(ops.mul(ratio, ratio), 1.0)))
    finite = ops.where(ops.eq(big, 0.0), big, scaled)  # (0 / 0 for two zeros)
    out = ops.where(ops.logical_or(ops.isinf(ax), ops.isinf(ay)), math.inf, finite)
    return _in_result_type(b, node, out)


@register(aten.addcmul.default)
def _addcmul(b, node, x, tensor1, tensor2, value=1):
    return b.fd.ops.addcmul(x, tensor1, tensor2, value)


@register("prims::fma")  # (by name: Inductor's prims exist only once it is imported)
def _fma(b, node, a, x, c):
    """a * x + c, rounded once to the traced type: Dynamo's own form of `addcmul_` and
    `addcdiv_` with a value, and of `add_` with a tensor alpha (an AdamW step's updates)."""
    ops = b.fd.ops
    unrounded = _product_for_fma(b, node)
    a, x, c = (upcast(b, v) if isinstance(v, TensorView) else v for v in (a, x, c))
    if unrounded is None:
        return ops.add(ops.mul(a, x), c)
    is_product, t1, t2 = unrounded
    # in eager's kernels' order: addcmul's (value * t1) * t2 (CPU and CUDA alike), addcdiv's
    # value * (t1 / t2) (CUDA's; the CPU's (value * t1) / t2 may differ in the last bit)
    scaled = ops.mul(ops.mul(x, t1), t2) if is_product else ops.mul(x, ops.div(t1, t2))
    return ops.add(scaled, c)


_HALF_WIDTH = (torch.float16, torch.bfloat16)


def _product_for_fma(b, node):
    """(whether it multiplies, t1, t2 in fp32) of the fma's first operand, where it is the
    16-bit product or quotient Dynamo made for `addcmul_` or `addcdiv_` with a value (`torch.mul(t1,
    t2)`, then the fma): eager's kernels compute `self + value * (t1 op t2)` in fp32 and round
    once, where the traced mul rounded the product to the 16-bit type first (1-17% of the
    elements a unit off). Dynamo's node has the fma's own source position, a product the user
    wrote (`a.add_(b * c, alpha=t)`, whose rounding eager keeps) its own; a number for the
    fma's factor is a value (`add_`'s fma has a tensor alpha), which tells them apart where no
    source positions were recorded (code without a source file). None otherwise."""
    src = node.args[0]
    if not (isinstance(src, Node) and src.target in (aten.mul.Tensor, aten.div.Tensor) and len(src.users) == 1):
        return None
    traced = src.meta.get("val")
    if not (isinstance(traced, torch.Tensor) and traced.dtype in _HALF_WIDTH):
        return None
    position = src.meta.get("stack_trace")
    made_by_dynamo = isinstance(node.args[1], (int, float)) or (
        position is not None and position == node.meta.get("stack_trace"))
    if not made_by_dynamo:
        return None
    operands = [b.values.get(v) if isinstance(v, Node) else None for v in src.args]
    if not all(isinstance(v, TensorView) for v in operands):
        return None  # (a number operand, or one computed outside this fusion)
    lhs, rhs = (upcast(b, v) for v in operands)
    return src.target is aten.mul.Tensor, lhs, rhs


@register(aten.threshold.default)
def _threshold(b, node, x, threshold, value):
    for v in (threshold, value):  # (eager refuses numbers its tensor's type cannot hold)
        refuse_overflow(v, node.meta["val"].dtype, "threshold")
    return b.fd.ops.threshold(x, threshold, value)


# frac's gradient is the incoming one: traced as x - trunc(x), whose trunc has a zero gradient,
# made by empty_permuted and filled; as an empty tensor's values are undefined, zeros are one
# choice (shape.py's rule for the other empty creators)
register(aten.empty_permuted.default, kind=Kind.creation)(_zeros)
