"""Arg-reductions: argmax, argmin, and max / min along a dim with their indices. Each is the
extreme along the dim and the first position that reaches it, a reduction of positions:

    indices = min(where(x == max(x) | isnan(x), position, n))

The first position wins ties, and NaN counts as the extreme (the maximum's NaN propagates, so
no element equals it and the NaN positions alone are kept), as eager's. The extreme and the
positions reduce over the same dim: the reduction schedulers take both into one kernel, any dim
and the flattened tensor alike, and its writer computes them in one pass of running (value,
position) pairs (schedulers/plan.py `arg_pairs`, codegen/online_arg.py), which also splits few
long rows across programs."""
from __future__ import annotations

import torch

from ...ir import DataType
from . import Kind, LoweringError, register

aten = torch.ops.aten


def _refuse(x, dim, op: str) -> None:
    """Forms eager refuses (a bool argmax, a dim out of range, an empty axis) run through ATen,
    which raises as eager does."""
    if x.dtype.is_boolean and op in ("argmax", "argmin"):
        raise LoweringError(f"{op} of the bool tensor {x!r} (eager refuses bool input)")
    if x.dtype.is_complex:
        raise LoweringError(f"{op} of the complex tensor {x!r} (complex numbers have no order)")
    rank = max(x.ndim, 1)  # (a 0-d tensor takes dim 0 or -1)
    if dim is not None and not -rank <= dim < rank:
        raise LoweringError(f"{op}: dim {dim} is out of range for {x!r}, expected one in [{-rank}, {rank})")
    ids = x.domain.no_reductions()
    for k in range(x.ndim) if dim is None or not x.ndim else [dim % x.ndim]:
        if ids[k].extent == 0:
            raise LoweringError(f"{op} along the empty axis {k} of {x!r} (eager refuses it)")


def _first_extreme(b, x, d: int, largest: bool, keepdim: bool):
    """(the extreme of `x` along axis `d`, the first position reaching it), int64 positions."""
    ops = b.fd.ops
    extreme = (ops.max if largest else ops.min)(x, [d], True)
    reached = ops.eq(x, extreme)
    if x.dtype.is_floating:
        reached = ops.logical_or(reached, ops.isnan(x))
    n = ops.size(x, d)
    positions = ops.broadcast(ops.iota(n, 0, 1, DataType.Int), [k != d for k in range(x.ndim)])
    indices = ops.min(ops.where(reached, positions, n), [d], keepdim)
    if not keepdim:
        extreme = ops.squeeze(extreme, [d])
    return extreme, indices


def _arg_extreme(b, x, dim, keepdim: bool, largest: bool):
    """argmax / argmin: along `dim`, or over the flattened tensor for dim None (its shape kept
    as ones with keepdim, as eager's)."""
    op = "argmax" if largest else "argmin"
    _refuse(x, dim, op)
    ops = b.fd.ops
    if x.ndim == 0:  # (one element: position 0)
        return ops.full([], 0, DataType.Int)
    if dim is not None:
        return _first_extreme(b, x, dim % x.ndim, largest, keepdim)[1]
    rank = x.ndim
    if rank > 1:
        x = ops.reshape(x, [-1])
    indices = _first_extreme(b, x, 0, largest, False)[1]
    return ops.reshape(indices, [1] * rank) if keepdim else indices


@register(aten.argmax.default, kind=Kind.reduction)
def _argmax(b, node, x, dim=None, keepdim=False):
    return _arg_extreme(b, x, dim, keepdim, largest=True)


@register(aten.argmin.default, kind=Kind.reduction)
def _argmin(b, node, x, dim=None, keepdim=False):
    return _arg_extreme(b, x, dim, keepdim, largest=False)


def _extreme_along(b, x, dim, keepdim: bool, largest: bool):
    """torch.max(x, dim) / torch.min(x, dim): (values, indices)."""
    _refuse(x, dim, "max" if largest else "min")
    ops = b.fd.ops
    if x.ndim == 0:  # (dim 0 or -1 of one element: itself, at position 0)
        return ops.set(x), ops.full([], 0, DataType.Int)
    return _first_extreme(b, x, dim % x.ndim, largest, keepdim)


@register(aten.max.dim, kind=Kind.reduction)
def _max_dim(b, node, x, dim, keepdim=False):
    return _extreme_along(b, x, dim, keepdim, largest=True)


@register(aten.min.dim, kind=Kind.reduction)
def _min_dim(b, node, x, dim, keepdim=False):
    return _extreme_along(b, x, dim, keepdim, largest=False)
