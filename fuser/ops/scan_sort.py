"""Scans (cumsum, cumprod, cummax, cummin), sorting (argsort, sort) and topk. They run as ATen
calls in evaluator segments (their Expr classes are not kernel ops); the builders here fix
their shapes and dtypes as nvFuser does: a scan keeps its input's dtype (no int64 promotion,
unlike eager's cumsum of an int32 tensor), indices are Int (int64)."""
from __future__ import annotations

from typing import Any

import sympy

from ..errors import FusionDefinitionError
from ..ir import (BinaryOpType, DataType, IterType, Scalar, ScanOp, SortOp, TensorView, TopKOp)
from .common import as_dim, as_val, check_tensor, copy_id, fusion_of, new_tensor
from .pointwise import binary, cast
from .shape import set as _set


SCAN_NAMES = {BinaryOpType.add: "cumsum", BinaryOpType.mul: "cumprod",
              BinaryOpType.maximum: "cummax", BinaryOpType.minimum: "cummin"}


def _dim(op: str, tv: TensorView, dim: Any) -> int:
    n = tv.ndim
    dim = as_dim(op, dim)
    if not -max(n, 1) <= dim < max(n, 1):
        raise FusionDefinitionError(f"{op}: dim {dim} is out of range for {tv!r} with {n} dims")
    return dim % n if n else 0


def _like(tv: TensorView, dim: int, dtype: DataType) -> TensorView:
    """An output shaped like `tv`. An expanded broadcast along `dim` becomes a real axis of its
    expanded size: the scan or the sort gives each position along it its own value."""
    f = tv.fusion
    ids = [copy_id(f, d) for d in tv.domain.no_reductions()]
    if ids and ids[dim].expanded_extent is not None:
        ids[dim] = f.new_id(ids[dim].size)
    return new_tensor(f, ids, dtype)


def scan(op_type: BinaryOpType, arg: TensorView, dim: int, init: Any = None) -> TensorView:
    """out[..., i, ...] = init (op) arg[..., 0, ...] (op) ... (op) arg[..., i, ...] along `dim`;
    without `init`, the op's identity. A scan along a broadcast dim copies its input."""
    op = SCAN_NAMES[op_type]
    check_tensor(op, arg)
    if arg.dtype.is_boolean and op_type in (BinaryOpType.add, BinaryOpType.mul):
        raise FusionDefinitionError(f"{op}: not defined for the bool tensor {arg!r}; cast it first")
    if arg.dtype.is_complex and op_type in (BinaryOpType.maximum, BinaryOpType.minimum):
        raise FusionDefinitionError(f"{op}: complex tensor {arg!r} has no order")
    d = _dim(op, arg, dim)
    f = arg.fusion
    along = arg.domain.no_reductions()[d] if arg.ndim else None
    if along is None or (along.is_broadcast and along.expanded_extent is None):
        out = _set(arg)
    else:
        out = _like(arg, d, arg.dtype)
        f.add_expr(ScanOp(inputs=(arg,), outputs=(out,), op_type=op_type, dim=d))
    if init is None:
        return out
    # the identity is where the scan starts; another start value folds into every element,
    # in the scan's dtype (a Python float init must not promote an int scan)
    combined = binary(op_type, as_val(f, init, op), out)
    return cast(combined, arg.dtype) if combined.dtype is not arg.dtype else combined


def cumsum(arg: TensorView, dim: int, init: Any = None) -> TensorView:
    return scan(BinaryOpType.add, arg, dim, init)


def cumprod(arg: TensorView, dim: int, init: Any = None) -> TensorView:
    return scan(BinaryOpType.mul, arg, dim, init)


def cummax(arg: TensorView, dim: int, init: Any = None) -> TensorView:
    """The running maximum's values (nvFuser returns no indices)."""
    return scan(BinaryOpType.maximum, arg, dim, init)


def cummin(arg: TensorView, dim: int, init: Any = None) -> TensorView:
    return scan(BinaryOpType.minimum, arg, dim, init)


def _check_order(op: str, arg: TensorView) -> None:
    check_tensor(op, arg)
    if arg.dtype.is_complex:
        raise FusionDefinitionError(f"{op}: complex tensor {arg!r} has no order")


def sort(arg: TensorView, dim: int = -1, descending: bool = False,
         stable: bool = False) -> tuple[TensorView, TensorView]:
    """(values, indices) as torch.sort: a fuser extension (nvFuser has argsort only)."""
    op = "sort"
    _check_order(op, arg)
    d = _dim(op, arg, dim)
    values, indices = _like(arg, d, arg.dtype), _like(arg, d, DataType.Int)
    arg.fusion.add_expr(SortOp(inputs=(arg,), outputs=(values, indices), dim=d,
                               descending=bool(descending), stable=bool(stable)))
    return values, indices


def argsort(arg: TensorView, dim: int, descending: bool = False, stable: bool = False) -> TensorView:
    _check_order("argsort", arg)
    _dim("argsort", arg, dim)
    return sort(arg, dim, descending, stable)[1]


def topk(arg: TensorView, k: Any, dim: int = -1, largest: bool = True,
         sorted: bool = False) -> tuple[TensorView, TensorView]:  # noqa: A002 - nvFuser's name
    """(values, indices) of the k largest (or smallest) along `dim`. `k` is an int or an
    integer Scalar (a fusion input: the output's extent along `dim` is then its symbol, and k
    is checked against the axis at execution)."""
    op = "topk"
    _check_order(op, arg)
    if arg.dtype.is_boolean:  # (sort and argsort take bool; topk does not, on the CPU)
        raise FusionDefinitionError(f"{op}: not defined for the bool tensor {arg!r} (PyTorch's topk refuses "
                                    f"bool); cast it first")
    f = fusion_of(op, arg, *([k] if isinstance(k, Scalar) else []))
    d = _dim(op, arg, dim)
    if isinstance(k, Scalar):
        if not k.dtype.is_integral:
            raise FusionDefinitionError(f"{op}: k must be an integer scalar, got {k!r} of {k.dtype}")
        k_val = k
    elif isinstance(k, bool) or not isinstance(k, int):
        raise FusionDefinitionError(f"{op}: k must be an int or an integer scalar, got {k!r}")
    else:
        k_val = as_val(f, k, op)
    k_expr = sympy.sympify(k_val.expr)
    if k_expr.is_Integer and k_expr < 0:
        raise FusionDefinitionError(f"{op}: k = {k_expr} must be non-negative")
    ids = [copy_id(f, x) for x in arg.domain.no_reductions()]
    if ids:
        axis = arg.domain.no_reductions()[d]
        if k_expr.is_Integer and axis.size.is_Integer and k_expr > axis.size:
            raise FusionDefinitionError(
                f"{op}: k = {k_expr} is larger than axis {d} of {arg!r}, of size {axis.size}")
        ids[d] = f.new_id(k_expr, iter_type=IterType.Broadcast if k_expr == 1 and axis.extent == axis.size
                          and axis.is_broadcast else IterType.Iteration)
    elif k_expr.is_Integer and k_expr != 1:
        raise FusionDefinitionError(f"{op}: k = {k_expr} for the 0-dim tensor {arg!r}; only 1 is possible")
    values, indices = new_tensor(f, ids, arg.dtype), new_tensor(f, [copy_id(f, x) for x in ids], DataType.Int)
    f.add_expr(TopKOp(inputs=(arg, k_val), outputs=(values, indices), dim=d, largest=bool(largest),
                      sorted=bool(sorted)))
    return values, indices
