"""The ATen evaluator's dispatch: one rule per Expr class in `RULES` (registered by
`evaluate/aten.py` and `evaluate/matmul.py`), the rules that write into a given tensor, and the
plain torch function some ops are. A missing rule raises an error naming the op.

Rules receive the op, its input values (tensors or Python scalars) and an EvalContext, and
return the output values. Sizes always come from `ctx.shape(tv)`, which asks the sharding math
for local sizes, so an op evaluated on a shard or a stream chunk produces the chunk.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from ..errors import FuserError, FusionInputError, InternalError, UnsupportedError
from ..ir import BinaryOp, Expr, TernaryOp, UnaryOp
from ..ir.printer import format_expr

RULES: dict[type, Callable[[Expr, list, Any], list]] = {}


def rule(cls):
    def register(fn):
        RULES[cls] = fn
        return fn
    return register


def evaluate_expr(expr: Expr, args: list, ctx) -> list:
    fn = RULES.get(type(expr))
    if fn is None:
        raise UnsupportedError(f"no ATen evaluation for op {expr.op_name}")
    if isinstance(expr, _POINTWISE) and ctx is not None:
        args = _local_broadcasts(expr, args, ctx)
    try:
        return fn(expr, args, ctx)
    except FuserError:  # (a rule's own error, which names the input: RuntimeErrors below are ATen's)
        raise
    except NotImplementedError as err:  # (a RuntimeError: ATen lacks most kernels for uint64, fp8)
        dtypes = ", ".join(repr(v.dtype) for v in expr.inputs)
        raise UnsupportedError(f"{expr.op_name}: ATen has no kernel for it on {dtypes} operands "
                               f"on this device ({err}); cast the operands to a type it has") from err
    except torch.OutOfMemoryError:
        raise
    except (RuntimeError, IndexError, ValueError, TypeError) as err:
        # the binder checked every input's size, dtype and layout against the IR, so ATen
        # refusing the op is fuser's bug (ops with data-dependent failures, indexing, raise a
        # FusionInputError of their own); the CPU allocator's failure is no bug: it passes
        if "can't allocate memory" in str(err):
            raise
        if "Storage size calculation overflowed" in str(err):  # (sizes from scalars: the caller's)
            raise FusionInputError(f"{expr.op_name}: its output would have more bytes than a 64-bit size "
                                   f"counts ({err}); check the sizes given") from None
        raise InternalError(f"ATen raised evaluating {expr.op_name} on {_describe(args)}: {err}\n"
                            f"{format_expr(expr)}") from err


def _local_broadcasts(expr: Expr, args: list, ctx) -> list:
    """The arguments of a pointwise op with each expanded broadcast whose size differs from the
    output's local size on its axis (where the output's axis is no broadcast) narrowed to its
    one value. An expanded operand keeps the extent it was expanded to while the op runs on a
    shard or a stream chunk of the others (`x - broadcast_in_dim(max(x), x.shape())` with x's
    rows split onto streams): ATen refused it, or broadcast a chunk of one row to the whole."""
    axes = getattr(expr, "_expanded_operands", None)
    if axes is None:
        axes = expr._expanded_operands = [
            (j, k) for j, v in enumerate(expr.inputs) if hasattr(v, "domain")
            for k, d in enumerate(v.domain.no_reductions()) if d.is_broadcast and d.expanded_extent is not None]
    if not axes:
        return args
    shape = ctx.shape(expr.outputs[0])
    result = expr.outputs[0].domain.no_reductions()
    out = list(args)
    for j, k in axes:
        a = out[j]
        # (a broadcast holds one value along its axis however ATen laid it out: an expand's
        # stride 0, or an op's dense copy of it; an output broadcast on that axis keeps the
        # size its operands give, for the output check to judge)
        if isinstance(a, torch.Tensor) and k < a.ndim and a.shape[k] not in (0, shape[k]) \
                and not result[k].is_broadcast:
            out[j] = a.narrow(k, 0, 1)
    return out


_POINTWISE = (UnaryOp, BinaryOp, TernaryOp)


def _describe(args: list) -> str:
    return ", ".join(f"{tuple(a.shape)} {str(a.dtype).removeprefix('torch.')} on {a.device.type}"
                     if isinstance(a, torch.Tensor) else repr(a) for a in args)


# Rules that write an op's result into a given tensor (a chunk view of a preallocated output,
# inside a stream loop) instead of allocating one: (expr, args, ctx, dsts) -> outputs.
INTO_RULES: dict[type, Callable[[Expr, list, Any, list], list]] = {}


def evaluate_expr_into(expr: Expr, args: list, ctx, dsts: list) -> list:
    """`evaluate_expr`, with output k written into `dsts[k]` where that is not None. linear and
    matmul compute straight into it; other ops compute, then copy. A result whose shape differs
    from its destination is returned uncopied, for the output check to report against the IR."""
    fn = INTO_RULES.get(type(expr))
    if fn is not None:
        done = fn(expr, args, ctx, dsts)
        if done is not None:
            return done
    out = []
    for d, v in zip(dsts, evaluate_expr(expr, args, ctx)):
        if d is None or not isinstance(v, torch.Tensor) or v.shape != d.shape:
            out.append(v)
        else:
            out.append(d.copy_(v))
    return out


# the torch function that an op's rule applies to its inputs and nothing else
FUNCTION_FORMS: dict[type, Callable[..., torch.Tensor]] = {}


def function_form(e: Expr) -> "Callable[..., torch.Tensor] | None":
    """The torch function that the rule of `e` applies to its inputs and nothing else (no
    sizes asked, no context): a ready program calls it directly instead of the rule
    (runtime/ready.py). None for other ops."""
    return FUNCTION_FORMS.get(type(e))
