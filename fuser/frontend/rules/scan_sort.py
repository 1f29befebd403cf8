"""Scans, sorting and topk. They become the IR's ScanOp, SortOp and TopKOp, which run as ATen
calls inside the fusion (like matmuls), between the generated kernels of their neighbours.
triu and tril need no rule: the decompositions turn them into iota comparisons and a where."""
from __future__ import annotations

import torch

from ...ir import DataType
from . import Kind, register

aten = torch.ops.aten


def _accumulated(b, x, dtype):
    """The input of a cumsum or cumprod in eager's result type: `dtype` where given, int64
    for integer and bool inputs."""
    if dtype is not None:
        return b.fd.ops.cast(x, DataType.from_torch(dtype))
    if not (x.dtype.is_floating or x.dtype.is_complex) and x.dtype is not DataType.Int:
        return b.fd.ops.cast(x, DataType.Int)
    return x


@register(aten.cumsum.default, kind=Kind.matmul)
def _cumsum(b, node, x, dim, *, dtype=None):
    return b.fd.ops.cumsum(_accumulated(b, x, dtype), dim)


@register(aten.cumprod.default, kind=Kind.matmul)
def _cumprod(b, node, x, dim, *, dtype=None):
    return b.fd.ops.cumprod(_accumulated(b, x, dtype), dim)


def _running_extreme(b, x, dim, scan):
    """(values, indices) of eager's cummax or cummin. The index at position j is the last
    position i <= j where x[i] equals the running extreme (ties take the later position, as
    eager's), or is NaN (which then stays the extreme): a running maximum of those
    positions."""
    ops = b.fd.ops
    values = scan(x, dim)
    if x.ndim == 0:
        return values, ops.full([], 0, DataType.Int)
    d = dim % x.ndim
    reached = ops.eq(x, values)
    if x.dtype.is_floating:
        reached = ops.logical_or(reached, ops.isnan(x))
    positions = ops.broadcast(ops.iota(ops.size(x, d), 0, 1, DataType.Int),
                              [k != d for k in range(x.ndim)])
    return values, ops.cummax(ops.where(reached, positions, 0), d)


@register(aten.cummax.default, kind=Kind.matmul)
def _cummax(b, node, x, dim):
    return _running_extreme(b, x, dim, b.fd.ops.cummax)


@register(aten.cummin.default, kind=Kind.matmul)
def _cummin(b, node, x, dim):
    return _running_extreme(b, x, dim, b.fd.ops.cummin)


@register(aten.sort.default, kind=Kind.matmul)
def _sort(b, node, x, dim=-1, descending=False):
    return b.fd.ops.sort(x, dim, descending, False)


@register(aten.sort.stable, kind=Kind.matmul)
def _sort_stable(b, node, x, *, stable=None, dim=-1, descending=False):
    return b.fd.ops.sort(x, dim, descending, bool(stable))


@register(aten.topk.default, kind=Kind.matmul)
def _topk(b, node, x, k, dim=-1, largest=True, sorted=True):
    return b.fd.ops.topk(x, k, dim, largest, sorted)


@register(aten.flip.default, kind=Kind.movement)
def _flip(b, node, x, dims):
    """Positions read backwards along each dim: an index_select by a descending iota (the
    backward of a cumsum or cumprod flips, scans and flips back)."""
    ops = b.fd.ops
    for d in dims:
        d = d % x.ndim
        along = x.domain.no_reductions()[d]
        if along.is_broadcast and along.expanded_extent is None:
            continue  # one position: nothing to reverse
        n = ops.size(x, d)
        x = ops.index_select(x, ops.iota(n, ops.sub(n, 1), -1, DataType.Int), d)
    return x
