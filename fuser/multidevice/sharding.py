"""The one place that maps between a tensor's logical (global) extents and its local sizes.

A logical axis is split by the transforms recorded on its TensorView. A leaf of that split tree
is *sharded* when it is a device axis (mesh_x, ...) in the loop domain, or, for stream chunks, a
stream axis in the allocation domain. Each sharded leaf contributes one index per rank (or per
stream iteration), so the local extent of the axis is the product of its other leaves' extents.
Binding, allocation, ShardByStream, validation and every op evaluation use these functions.
"""
from __future__ import annotations

import math
from typing import Optional

import sympy

from ..errors import UnsupportedError
from ..ir import IterDomain, Merge, TensorView
from ..ir.symbolic import Extent


def _leaves(tv: TensorView, d: IterDomain) -> list[IterDomain]:
    """The leaves of the split tree below logical axis `d`, in order."""
    dom = tv.domain
    children: dict[int, tuple[IterDomain, ...]] = {}
    for t in dom.transforms:
        if isinstance(t, Merge):
            if any(i is d for i in t.inputs) or any(id(i) in children for i in t.inputs):
                if any(o.is_device_dim or o.is_stream for o in dom.loop):
                    raise UnsupportedError(
                        f"sharding through a merge is not supported ({tv!r}); split each axis instead")
            continue
        children[id(t.input)] = t.outputs
    out, stack = [], [d]
    while stack:
        x = stack.pop(0)
        if id(x) in children:
            stack[0:0] = list(children[id(x)])
        else:
            out.append(x)
    return out


def _sharded(tv: TensorView, leaf: IterDomain, with_streams: bool) -> bool:
    dom = tv.domain
    if leaf.is_device_dim and any(leaf is x for x in dom.loop):
        return True
    return with_streams and leaf.is_stream and any(leaf is x for x in dom.maybe_allocation)


def _axis_extent(d: IterDomain) -> Extent:
    return d.expanded_extent if d.expanded_extent is not None else d.extent


def local_extents(tv: TensorView, with_streams: bool = False) -> list[Extent]:
    """Per logical non-reduction axis, the extent held locally: by one rank, and with
    `with_streams`, by one stream chunk where the allocation is stream-parallel."""
    if not tv.domain.transforms:
        return [_axis_extent(d) for d in tv.domain.no_reductions()]
    out = []
    for d in tv.domain.no_reductions():
        leaves = _leaves(tv, d)
        if len(leaves) == 1 or not any(_sharded(tv, x, with_streams) for x in leaves):
            out.append(_axis_extent(d))
            continue
        out.append(math.prod([x.extent for x in leaves if not _sharded(tv, x, with_streams)],
                             start=sympy.Integer(1)))
    return out


def sharding_factors(tv: TensorView, with_streams: bool = False) -> list[Optional[Extent]]:
    """Per logical non-reduction axis, the product of its sharded leaves' extents (None when the
    axis is not sharded): local size x factor = logical extent, for evenly divided axes."""
    out = []
    for d in tv.domain.no_reductions():
        if not tv.domain.transforms:
            out.append(None)
            continue
        sharded = [x.extent for x in _leaves(tv, d) if _sharded(tv, x, with_streams)]
        out.append(math.prod(sharded, start=sympy.Integer(1)) if sharded else None)
    return out


def is_sharded(tv: TensorView) -> bool:
    return any(f is not None for f in sharding_factors(tv))
