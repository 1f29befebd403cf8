"""Scheduling one tensor like another: replaying split trees and parallel types.

Propagation copies a producer's device and stream splits onto the matching consumer axis;
the resharding pass and the host program make new tensors shaped like existing ones (partial
sums, chunk views). Both replay splits through the TensorView scheduling API, so the result is
an ordinary scheduled tensor that prints and shards like one written by hand.
"""
from __future__ import annotations

from typing import Callable, Optional

from ..errors import UnsupportedError
from ..ir import DataType, IterDomain, Merge, ParallelType, TensorView, tensor_domain

KeepLeaf = Callable[[IterDomain], bool]


def is_split(tv: TensorView, d: IterDomain) -> bool:
    return any(t.input is d for t in tv.domain.transforms if not isinstance(t, Merge)) or \
        any(d is x for t in tv.domain.transforms if isinstance(t, Merge) for x in t.inputs)


def replay_splits(src: TensorView, src_axis: IterDomain, dst: TensorView, dst_axis: IterDomain,
                  keep: Optional[KeepLeaf] = None) -> None:
    """Apply the splits below `src_axis` of `src` to `dst_axis` of `dst`, giving each new leaf
    the parallel type of its counterpart when `keep(counterpart)` (all of them by default)."""
    mapping = {id(src_axis): dst_axis}
    for t in src.domain.transforms_from([src_axis]):
        if isinstance(t, Merge):
            raise UnsupportedError(f"cannot replay a merge of {src!r} onto {dst!r}")
        target = mapping[id(t.input)]
        pos = next(k for k, d in enumerate(dst.domain.loop) if d is target)
        dst.domain.split(dst.fusion.new_id, pos, t.factor, t.inner_split)
        made = dst.domain.transforms[-1]
        for old, new in ((t.outer, made.outer), (t.inner, made.inner)):
            mapping[id(old)] = new
            if old.parallel_type is not ParallelType.serial and (keep is None or keep(old)):
                new.parallelize(old.parallel_type)


def like(src: TensorView, keep: Optional[KeepLeaf] = None, dtype: Optional[DataType] = None,
         skip_axes: frozenset = frozenset()) -> TensorView:
    """A new tensor of `src`'s fusion with the logical extents of `src` (reductions included),
    its mesh, and its splits replayed (leaves whose parallel type `keep` rejects stay serial;
    logical axes whose id is in `skip_axes` are not split at all)."""
    f = src.fusion
    ids = [f.new_id(d.extent, iter_type=d.iter_type, expanded_extent=d.expanded_extent)
           for d in src.domain.logical]
    out = f.new_tensor(tensor_domain(ids, True), dtype or src.dtype)
    out.device_mesh = src.device_mesh
    for a, b in zip(src.domain.logical, ids):
        if id(a) not in skip_axes:
            replay_splits(src, a, out, b, keep)
    return out


def set_stream_allocation(tv: TensorView) -> None:
    """Allocate `tv` one stream chunk at a time: its allocation domain lists each logical axis,
    the stream-split one as its leaves (stream leaf first), so the sharding math reads one
    chunk for it."""
    alloc = []
    for d in tv.domain.logical:
        kids = [t for t in tv.domain.transforms if not isinstance(t, Merge) and t.input is d]
        if kids and any(x.is_stream for x in kids[0].outputs):
            alloc += list(kids[0].outputs)
        else:
            alloc.append(d)
    tv.set_allocation_domain(alloc, True)
