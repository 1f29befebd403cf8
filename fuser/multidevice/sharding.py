"""The one place that maps between a tensor's logical (global) extents and its local sizes.

A logical axis is split by the transforms recorded on its TensorView. A leaf of that split tree
is *sharded* when it is a device axis (mesh_x, ...) in the loop domain, or, for stream chunks, a
stream axis in the allocation domain. Each sharded leaf contributes one index per rank (or per
stream iteration), so the local extent of the axis is the product of its other leaves' extents.
Binding, allocation, ShardByStream, validation and every op evaluation use these functions.

Below the extent math: which axes are sharded (for the passes), where a rank sits in a mesh
and which ranks share its collectives, and the same mapping on real tensors (a rank's shard of
a full tensor, a stream chunk of a local tensor).
"""
from __future__ import annotations

import math
from typing import Optional

import sympy

from ..errors import FusionInputError, UnsupportedError
from ..ir import DeviceMesh, IterDomain, Merge, ParallelType, Split, TensorView
from ..ir.printer import format_transform
from ..ir.symbolic import Extent, compile_extent, is_static


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


def local_extents(tv: TensorView, with_streams: bool = False) -> list[Extent]:
    """Per logical non-reduction axis, the extent held locally: by one rank, and with
    `with_streams`, by one stream chunk where the allocation is stream-parallel."""
    if not tv.domain.transforms:
        return [d.size for d in tv.domain.no_reductions()]
    out = []
    for d in tv.domain.no_reductions():
        leaves = _leaves(tv, d)
        if len(leaves) == 1 or not any(_sharded(tv, x, with_streams) for x in leaves):
            out.append(d.size)
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


# ---------------------------------------------------------------------------------------------
# Which axes are sharded, and by what.


def axis_leaves(tv: TensorView, d: IterDomain) -> list[IterDomain]:
    """The leaves of the split tree below logical axis `d` (itself when it is not split)."""
    return _leaves(tv, d)


def device_axes(tv: TensorView) -> dict[ParallelType, IterDomain]:
    """Per device parallel type, the logical axis (reductions included) whose split tree holds
    a device leaf of that type in the loop domain."""
    out: dict[ParallelType, IterDomain] = {}
    if not tv.domain.transforms:
        return out
    loop = set(map(id, tv.domain.loop))
    for d in tv.domain.logical:
        for leaf in _leaves(tv, d):
            if leaf.is_device_dim and id(leaf) in loop:
                out[leaf.parallel_type] = d
    return out


def stream_leaf(tv: TensorView) -> Optional[tuple[IterDomain, Split]]:
    """The stream leaf of an iteration axis in the loop domain and the split that made it from a
    logical axis, or None. A stream leaf must be a direct output of a split of a logical axis."""
    loop = [d for d in tv.domain.loop if d.is_stream and not d.is_reduction]
    if not loop:
        return None
    if len(loop) > 1:
        raise UnsupportedError(f"{tv!r} has {len(loop)} stream axes; one is supported")
    leaf = loop[0]
    logical = set(map(id, tv.domain.logical))
    for t in tv.domain.transforms:
        if isinstance(t, Split) and (t.outer is leaf or t.inner is leaf):
            if id(t.input) not in logical:
                raise UnsupportedError(
                    f"{tv!r}: the stream axis {leaf!r} must come from splitting a logical axis "
                    f"directly, not from {t.input!r}")
            return leaf, t
    raise UnsupportedError(f"{tv!r}: the stream axis {leaf!r} is not made by a split")


def is_distributed(tv: TensorView) -> bool:
    """True when the tensor has a device mesh or a device or stream axis anywhere."""
    return tv.device_mesh is not None or any(
        d.is_device_dim or d.is_stream for d in tv.domain.all_ids())


# ---------------------------------------------------------------------------------------------
# Meshes: where a rank sits, and which ranks share its collective.

_MESH_AXIS = {ParallelType.mesh_x: -1, ParallelType.mesh_y: -2, ParallelType.mesh_z: -3}


def _coordinates(mesh: DeviceMesh, rank: int) -> tuple[int, ...]:
    if rank not in mesh.devices:
        raise FusionInputError(f"rank {rank} is not in {mesh!r}; every process must be in the "
                               f"mesh of the tensors it runs (launch as many processes as devices)")
    k = mesh.rank_index(rank)
    coords = []
    for extent in reversed(mesh.shape):
        coords.append(k % extent)
        k //= extent
    return tuple(reversed(coords))


def mesh_index(mesh: DeviceMesh, parallel_type: ParallelType, rank: int) -> int:
    """The index of `rank` along the mesh axis of `parallel_type` (its shard number)."""
    mesh.size_of(parallel_type)  # raises for an axis the mesh does not have
    return _coordinates(mesh, rank)[_MESH_AXIS[parallel_type]]


def team(mesh: DeviceMesh, parallel_type: ParallelType, rank: int) -> tuple[int, ...]:
    """The ranks that differ from `rank` only along the mesh axis of `parallel_type`, in mesh
    order: those that take part in a collective over that axis."""
    n = mesh.size_of(parallel_type)
    axis = len(mesh.shape) + _MESH_AXIS[parallel_type]
    coords = list(_coordinates(mesh, rank))
    out = []
    for j in range(n):
        coords[axis] = j
        flat = 0
        for c, extent in zip(coords, mesh.shape):
            flat = flat * extent + c
        out.append(mesh.devices[flat])
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Real tensors: a rank's shard of a full tensor, and a stream chunk of a local tensor. Leaf
# sizes come from the tensor's size and the (static) split factors, so uneven divisions are
# reported here, naming the tensor and axis.


def _leaf_sizes(tv: TensorView, d: IterDomain, size: int, where: str) -> dict[int, int]:
    sizes = {id(d): size}
    for t in tv.domain.transforms_from([d]):
        if not isinstance(t, Split):
            raise UnsupportedError(f"{where}: sharding through a merge is not supported")
        if not is_static(t.factor):
            raise UnsupportedError(f"{where}: split factor {t.factor} must be static to shard")
        n, f = sizes[id(t.input)], int(t.factor)
        if n % f:
            raise FusionInputError(
                f"{where}: size {n} does not divide evenly by the split factor {f} "
                f"({format_transform(t)}); sharded and stream-parallel axes must divide evenly")
        sizes[id(t.outer)], sizes[id(t.inner)] = (n // f, f) if t.inner_split else (f, n // f)
    return sizes


def _select(tv: TensorView, tensor, axis: int, d: IterDomain, global_size: int,
            present: list[IterDomain], chosen: dict[int, int], where: str):
    """Fix the leaves in `chosen` (leaf id -> index) of logical axis `d`, held in `tensor`'s
    dim `axis` as the leaves `present` (outer to inner)."""
    sizes = _leaf_sizes(tv, d, global_size, where)
    t = tensor.unflatten(axis, [sizes[id(x)] for x in present])
    kept = len(present)
    for k in reversed(range(len(present))):
        index = chosen.get(id(present[k]))
        if index is not None:
            t = t.select(axis + k, index)
            kept -= 1
    if kept > 1:
        return t.flatten(axis, axis + kept - 1)
    return t if kept == 1 else t.unsqueeze(axis)


def shard_tensor(full, tv: TensorView, rank: int):
    """This rank's shard of `full` (the whole logical tensor), replaying `tv`'s device splits:
    the local tensor a sharded fusion input expects. A replicated tensor comes back whole."""
    mesh = tv.device_mesh
    out = full
    for axis, d in enumerate(tv.domain.no_reductions()):
        leaves = _leaves(tv, d)
        loop = set(map(id, tv.domain.loop))
        chosen = {id(x): None for x in leaves if x.is_device_dim and id(x) in loop}
        if not chosen:
            continue
        if mesh is None:
            raise FusionInputError(f"T{tv.name} is sharded on axis {axis} but has no device mesh")
        for x in leaves:
            if id(x) in chosen:
                chosen[id(x)] = mesh_index(mesh, x.parallel_type, rank)
        out = _select(tv, out, axis, d, full.shape[axis], leaves, chosen, f"T{tv.name} axis {axis}")
    return out.contiguous()


def _stream_axis(tv: TensorView) -> Optional[tuple[int, IterDomain, IterDomain]]:
    """(position, logical axis, stream leaf) when the stream leaf is the outermost leaf of its
    logical axis in the allocation: the chunks are then consecutive blocks, the last one
    possibly shorter (a ceilDiv split). None when the allocation is not stream-parallel."""
    alloc = tv.domain.maybe_allocation
    leaf = next((d for d in alloc if d.is_stream and not d.is_reduction), None)
    if leaf is None:
        return None
    for k, d in enumerate(tv.domain.no_reductions()):
        leaves = _leaves(tv, d)
        if any(x is leaf for x in leaves):
            return (k, d, leaf) if leaves[0] is leaf else None
    return None


def local_sizes(tv: TensorView, table, with_streams: bool = False,
                stream_index: Optional[int] = None) -> tuple[int, ...]:
    """`local_extents` evaluated under a binding table. Inside a stream loop (`stream_index`
    given) the chunk of a stream-allocated tensor is the nominal chunk (its ceilDiv extent),
    except the last, which holds what is left: min(chunk, whole - index * chunk)."""
    sizes = [table.extent(e, f"T{tv.name} extent") for e in local_extents(tv, with_streams)]
    if with_streams and stream_index is not None:
        found = _stream_axis(tv)
        if found is not None:
            k = found[0]
            whole = table.extent(local_extents(tv)[k], f"T{tv.name} extent")
            sizes[k] = max(0, min(sizes[k], whole - stream_index * sizes[k]))
    return tuple(sizes)


def local_size_rules(tv: TensorView, with_streams: bool = False) -> list[tuple[Extent, Optional[Extent]]]:
    """Per logical non-reduction axis, what `local_sizes` computes its size from: (the local
    extent, and when the axis is cut into stream chunks whose last one holds what is left, the
    whole local extent; else None). Axes of two tensors with equal rules have equal local sizes
    under every table and stream index (a kernel iterating one loop axis over both asks this)."""
    rules: list[tuple[Extent, Optional[Extent]]] = [(e, None) for e in local_extents(tv, with_streams)]
    if with_streams:
        found = _stream_axis(tv)
        if found is not None:
            k = found[0]
            rules[k] = (rules[k][0], local_extents(tv)[k])
    return rules


class LocalSizes:
    """`local_sizes`, precompiled per tensor: a runtime asks the same tensors' sizes on every
    call, so each tensor's local extents are derived from its domains once and kept as compiled
    extent functions (owned by the runtime, never module-level). Same results as local_sizes."""

    def __init__(self):
        self._plans: dict[tuple[int, bool], tuple] = {}

    def _plan(self, tv: TensorView, with_streams: bool) -> tuple:
        fns = [compile_extent(e) for e in local_extents(tv, with_streams)]
        ragged = None
        if with_streams:
            found = _stream_axis(tv)
            if found is not None:
                ragged = (found[0], compile_extent(local_extents(tv)[found[0]]))
        plan = (tv, fns, ragged)  # tv kept alive: its id stays its own
        self._plans[(id(tv), with_streams)] = plan
        return plan

    def __call__(self, tv: TensorView, table, with_streams: bool = False,
                 stream_index: Optional[int] = None) -> tuple[int, ...]:
        plan = self._plans.get((id(tv), with_streams)) or self._plan(tv, with_streams)
        values = table.values
        try:
            sizes = [f(values) for f in plan[1]]
            if any(type(v) is not int or v < 0 for v in sizes):
                raise KeyError
            if stream_index is not None and plan[2] is not None:
                k, whole = plan[2]
                total = whole(values)
                if type(total) is not int or total < 0:
                    raise KeyError
                sizes[k] = max(0, min(sizes[k], total - stream_index * sizes[k]))
        except (KeyError, ArithmeticError, ValueError):
            # the slow path reports the unbound symbol, a fractional or negative extent, a division by zero
            return local_sizes(tv, table, with_streams, stream_index)
        return tuple(sizes)


class StreamChunker:
    """Views of one stream chunk of a tensor's local value, per stream index. `chunk_tv` is the
    chunk tensor (the source's splits plus a stream-parallel allocation); its sizes, the last
    chunk's included, come from `local_sizes`. Built once per execution, called per iteration."""

    __slots__ = ("tv", "table", "axis", "nominal", "generic", "sizes")

    def __init__(self, chunk_tv: TensorView, table, local_shape, where: str, sizes=local_sizes):
        found = stream_leaf(chunk_tv)
        if found is None:
            raise UnsupportedError(f"{where}: {chunk_tv!r} has no stream axis to chunk")
        self.tv, self.table, self.sizes = chunk_tv, table, sizes
        simple = _stream_axis(chunk_tv)
        if simple is not None:
            self.axis = simple[0]
            self.nominal = sizes(chunk_tv, table, True)[self.axis]
            self.generic = None
            return
        # a stream leaf inside the axis: the axis must divide evenly into its leaves
        leaf, split = found
        d = split.input
        axis = next(k for k, x in enumerate(chunk_tv.domain.no_reductions()) if x is d)
        factor = sharding_factors(chunk_tv)[axis]
        global_size = local_shape[axis] * (int(factor) if factor is not None else 1)
        loop = set(map(id, chunk_tv.domain.loop))
        present = [x for x in _leaves(chunk_tv, d) if not (x.is_device_dim and id(x) in loop)]
        _leaf_sizes(chunk_tv, d, global_size, where)  # reports an uneven split here
        self.axis, self.nominal = axis, None
        self.generic = (d, global_size, present, id(leaf), where)

    def __call__(self, tensor, index: int):
        if self.generic is None:
            size = self.sizes(self.tv, self.table, True, index)[self.axis]
            return tensor.narrow(self.axis, min(index * self.nominal, tensor.shape[self.axis]), size)
        d, size, present, leaf, where = self.generic
        return _select(self.tv, tensor, self.axis, d, size, present, {leaf: index}, where)
