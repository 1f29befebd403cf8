"""Reductions (sum, prod, max, min) and var / var_mean. The output keeps each reduced axis as a
reduction IterDomain (nvFuser's convention); keepdim re-inserts it as a broadcast."""
from __future__ import annotations

import math
import numbers
from typing import Optional, Sequence

from ..errors import FusionDefinitionError
from ..ir import (BinaryOpType, BroadcastOp, DataType, IterType, ReductionOp, ReductionOpType,
                  TensorView, VarMeanOp)
from .common import axes_of, check_keepdim, check_tensor, listed, copy_id, given_dtype, new_tensor
from .pointwise import binary, cast, computed
from .shape import set as set_


def _reduction_axes(op: str, tv: TensorView, dims) -> tuple[int, ...]:
    """The axes a reduction of `tv` takes: `dims` normalised, every axis for None. An empty
    list is refused (nvFuser's rule), but for a 0-dim tensor, whose reduction is its element."""
    if dims is not None and not isinstance(dims, numbers.Integral):
        dims = listed(op, "dims", dims)
        if not dims and tv.ndim:
            raise FusionDefinitionError(f"{op}: no dims to reduce of {tv!r}; give them, or None for every dim")
    return axes_of(op, tv, dims)


def _reduced_ids(tv: TensorView, axes: tuple[int, ...]):
    f = tv.fusion
    return [copy_id(f, d, IterType.Reduction if k in axes else None)
            for k, d in enumerate(tv.domain.no_reductions())]


def _keepdim(out: TensorView, axes: tuple[int, ...], rank: int) -> TensorView:
    f = out.fusion
    kept = [d for d in out.domain.no_reductions()]
    ids, it = [], iter(kept)
    for k in range(rank):
        ids.append(f.new_id(1, iter_type=IterType.Broadcast) if k in axes else copy_id(f, next(it)))
    res = new_tensor(f, ids, out.dtype)
    f.add_expr(BroadcastOp(inputs=(out,), outputs=(res,),
                           is_broadcast=tuple(k in axes for k in range(rank))))
    return res


def reduce(kind: ReductionOpType, tv: TensorView, dims: Optional[Sequence[int]] = None,
           keepdim: bool = False, dtype: Optional[DataType] = None, *, dim: Optional[int] = None) -> TensorView:
    op = kind.name
    check_tensor(op, tv)
    check_keepdim(op, keepdim)
    if dim is not None:  # nvFuser's one-dim form, sum(t, dim=-1)
        if dims is not None:
            raise FusionDefinitionError(f"{op}: dims {dims!r} and dim {dim!r} both given; expected one of them")
        if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
            raise FusionDefinitionError(f"{op}: dim must be an int, got {dim!r} (dims= takes a list)")
        dims = [dim]
    if isinstance(dims, DataType):  # nvFuser's whole-tensor form, sum(t, DataType.Float)
        if dtype is not None:
            raise FusionDefinitionError(f"{op}: dtype given twice ({dims} and {dtype})")
        dims, dtype = None, dims
    axes = _reduction_axes(op, tv, dims)
    dtype = given_dtype(op, dtype)  # (nvFuser's default, DataType.Null: none given)
    tv = computed(op, tv)
    if dtype is not None:
        tv = cast(tv, dtype)
    out_dtype = tv.dtype
    wanted = None  # an integer or bool dtype asked for a sum or product, reached by a cast
    if kind in (ReductionOpType.sum, ReductionOpType.prod) and out_dtype.category < 2:
        # PyTorch sums integers and bools in int64 unless asked for another type, which the
        # int64 result wraps into as eager's does
        wanted = dtype if dtype is not None and dtype is not DataType.Int else None
        out_dtype = DataType.Int
        if tv.dtype is not DataType.Int:
            tv = cast(tv, DataType.Int)
    if kind in (ReductionOpType.max, ReductionOpType.min) and tv.ndim:
        for k in axes:
            d = tv.domain.no_reductions()[k]
            if d.extent == 0:
                raise FusionDefinitionError(f"{op}: cannot reduce the empty axis {k} of {tv!r}")
    f = tv.fusion
    if tv.ndim == 0:  # (PyTorch reduces a 0-dim tensor over dim 0 to its one element)
        out = set_(tv)
    else:
        out = new_tensor(f, _reduced_ids(tv, axes), out_dtype)
        f.add_expr(ReductionOp(inputs=(tv,), outputs=(out,), kind=kind, axes=axes))
    if wanted is not None:
        out = cast(out, wanted)
    return _keepdim(out, axes, tv.ndim) if keepdim else out


def var_mean(tv: TensorView, dims: Optional[Sequence[int]] = None, correction: int = 1,
             keepdim: bool = False) -> tuple[TensorView, TensorView]:
    return _var_mean("var_mean", tv, dims, correction, keepdim)


def _var_mean(op: str, tv: TensorView, dims: Optional[Sequence[int]], correction: int,
              keepdim: bool) -> tuple[TensorView, TensorView]:
    """var_mean, its errors naming `op` (`var` or `var_mean`)."""
    check_tensor(op, tv)
    check_keepdim(op, keepdim)
    tv = computed(op, tv)
    if tv.dtype.category != 2:
        raise FusionDefinitionError(f"{op}: needs a floating tensor, got {tv.dtype} in {tv!r}")
    if isinstance(correction, bool) or not isinstance(correction, int) or correction < 0:
        raise FusionDefinitionError(f"{op}: correction must be a non-negative int, got {correction!r}")
    axes = _reduction_axes(op, tv, dims)
    if tv.ndim == 0:  # one element: its mean, and a variance of 0 (nan past 0 degrees of freedom)
        spread = binary(BinaryOpType.sub, tv, tv)  # (nan for an infinite element, as eager's)
        return binary(BinaryOpType.mul, spread, 1.0 if correction == 0 else math.nan), set_(tv)
    f = tv.fusion
    var = new_tensor(f, _reduced_ids(tv, axes), tv.dtype)
    mean = new_tensor(f, _reduced_ids(tv, axes), tv.dtype)
    f.add_expr(VarMeanOp(inputs=(tv,), outputs=(var, mean), axes=axes, correction=correction))
    if keepdim:
        return _keepdim(var, axes, tv.ndim), _keepdim(mean, axes, tv.ndim)
    return var, mean


def var(tv: TensorView, dims: Optional[Sequence[int]] = None, correction: int = 1,
        keepdim: bool = False) -> TensorView:
    return _var_mean("var", tv, dims, correction, keepdim)[0]
