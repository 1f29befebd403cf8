"""ATen math ops with nvFuser counterparts of ops/math.py's group: inverse trigonometric and
hyperbolic functions, special functions, float classification, nextafter, gcd, shifts,
addcmul and threshold. AOTAutograd's core-ATen decompositions already rewrite some of them
(frac to trunc, isneginf and isreal to comparisons, addcmul and threshold to mul, add, le and
where); their rules here take them where they arrive whole (other decomposition tables)."""
from __future__ import annotations

import torch

from ...ir import TensorView
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


@register(aten.addcmul.default)
def _addcmul(b, node, x, tensor1, tensor2, value=1):
    return b.fd.ops.addcmul(x, tensor1, tensor2, value)


@register("prims::fma")  # (by name: Inductor's prims exist only once it is imported)
def _fma(b, node, a, x, c):
    """a * x + c, rounded once to the traced type: Dynamo's own form of `addcmul_` and
    `addcdiv_` with a value, and of `add_` with a tensor alpha (an AdamW step's updates)."""
    ops = b.fd.ops
    a, x, c = (upcast(b, v) if isinstance(v, TensorView) else v for v in (a, x, c))
    return ops.add(ops.mul(a, x), c)


@register(aten.threshold.default)
def _threshold(b, node, x, threshold, value):
    for v in (threshold, value):  # (eager refuses numbers its tensor's type cannot hold)
        refuse_overflow(v, node.meta["val"].dtype, "threshold")
    return b.fd.ops.threshold(x, threshold, value)


# frac's gradient is the incoming one: traced as x - trunc(x), whose trunc has a zero gradient,
# made by empty_permuted and filled; as an empty tensor's values are undefined, zeros are one
# choice (shape.py's rule for the other empty creators)
register(aten.empty_permuted.default, kind=Kind.creation)(_zeros)
