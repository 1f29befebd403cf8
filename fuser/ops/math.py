"""Elementwise math built from other ops, with nvFuser's names: addcmul, threshold, and the
parts of a complex tensor (real, imag). The single ops (asin, gcd, ...) are UnaryOpType and
BinaryOpType members built by ops/pointwise.py."""
from __future__ import annotations

from ..errors import FusionDefinitionError
from ..ir import BinaryOpType, DataType, Scalar, TensorView, TernaryOpType, UnaryOpType, promote
from .common import Operand, as_val, fusion_of
from .pointwise import binary, cast, check_real_scalar, result_type, ternary, unary
from .shape import set as _copy

B = BinaryOpType
_HALF_WIDTH = (DataType.Half, DataType.BFloat16)


def addcmul(input: Operand, tensor1: Operand, tensor2: Operand, value: Operand = 1) -> TensorView:
    """input + value * tensor1 * tensor2, in the type PyTorch promotes the three tensors to
    (`value` is converted to it: truncated for integers, as eager and nvFuser do); half and
    bf16 compute in fp32 and round once, as eager's addcmul does."""
    op = "addcmul"
    fusion = fusion_of(op, input, tensor1, tensor2, value)
    input, tensor1, tensor2, value = (as_val(fusion, v, op) for v in (input, tensor1, tensor2, value))
    if isinstance(value, TensorView):
        raise FusionDefinitionError(f"addcmul: value must be a scalar, got tensor {value!r}")
    if any(isinstance(v, TensorView) for v in (input, tensor1, tensor2)):
        dtype = result_type(input, tensor1, tensor2)
    else:  # scalars keep nvFuser's scalar types (a Python float is a Double)
        dtype = promote(input.dtype, tensor1.dtype, tensor2.dtype)
    if dtype.is_boolean:
        raise FusionDefinitionError("addcmul: not defined for bool operands (eager refuses them too)")
    check_real_scalar(op, "value", value, dtype)
    compute = DataType.Float if dtype in _HALF_WIDTH else dtype
    input, tensor1, tensor2 = (cast(v, compute) if isinstance(v, TensorView) and v.dtype is not compute else v
                               for v in (input, tensor1, tensor2))
    value = cast(value, compute)
    scaled = tensor1 if value.is_constant and value.value == 1 else binary(B.mul, value, tensor1)
    out = binary(B.add, input, binary(B.mul, scaled, tensor2))
    return out if out.dtype is dtype else cast(out, dtype)


def threshold(x: Operand, threshold: Operand, value: Operand):
    """`value` where x <= threshold, else x (NaN stays NaN), as torch.nn.functional.threshold.
    The result has x's type, `value` converted to it. As in eager, an integer x compares with
    the threshold converted to its type (truncated), a half or bf16 x compares in fp32."""
    op = "threshold"
    fusion = fusion_of(op, x, threshold, value)
    x, threshold, value = (as_val(fusion, v, op) for v in (x, threshold, value))
    for what, v in (("threshold", threshold), ("value", value)):
        if not isinstance(v, Scalar):
            raise FusionDefinitionError(f"threshold: {what} must be a scalar, got tensor {v!r}")
    if x.dtype.is_boolean or x.dtype.is_complex:
        what = "tensor" if isinstance(x, TensorView) else "scalar"
        raise FusionDefinitionError(f"threshold: needs an integer or floating {what}, got {x.dtype} {what} {x!r}")
    for what, v in (("threshold", threshold), ("value", value)):
        check_real_scalar(op, what, v, x.dtype)
    compare = DataType.Float if x.dtype in _HALF_WIDTH else x.dtype
    below = binary(B.le, x if compare is x.dtype else cast(x, compare), cast(threshold, compare))
    return ternary(TernaryOpType.where, below, cast(value, x.dtype), x)


def real(x: Operand):
    """The real part of a complex tensor or scalar; of a real tensor, a copy of it, of a real
    scalar, the scalar (as nvFuser)."""
    x = as_val(fusion_of("real", x), x, "real")
    if x.dtype.is_complex:
        return unary(UnaryOpType.real, x)
    return x if isinstance(x, Scalar) else _copy(x)


def imag(x: Operand):
    """The imaginary part of a complex tensor or scalar (a real one has none: an error, as nvFuser)."""
    return unary(UnaryOpType.imag, x)
