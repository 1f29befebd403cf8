"""Propagate meshes, device splits and stream splits from annotated tensors to the others.

A tensor the user gave a mesh keeps exactly the sharding the user wrote: a `set` into a tensor
with a mesh and no split asks for a replicated tensor, and gets an allgather. Every other
tensor, in definition order, takes the mesh of its producers and the device and stream splits
of the producer axes that map to its unsplit axes (`axis_map`), for the parallel types it does
not use yet: a tensor the user only split onto streams still gets its device splits. For
linear and matmul the weight goes first, so the contraction axis and the weight's output axis
get the weight's sharding, and an activation that disagrees is the one resharded.

Fusion inputs without a mesh get the fusion's mesh, unsplit: the user passes them whole.
A stream split never lands on a reduction axis (a reduction across stream chunks is not one
loop), and no parallel type is used twice in one tensor.
"""
from __future__ import annotations

from ..ir import Expr, Fusion, LinearOp, MatmulOp, ParallelType, TensorView
from ..multidevice.axis_map import axis_pairs
from ..multidevice.sharding import axis_leaves
from ..multidevice.transform import is_split, replay_splits


def propagate_shardings(fusion: Fusion) -> Fusion:
    annotated = {id(tv) for tv in fusion.tensors() if tv.device_mesh is not None}
    meshes = {tv.device_mesh for tv in fusion.tensors() if tv.device_mesh is not None}
    default = next(iter(meshes)) if len(meshes) == 1 else None
    for v in fusion.inputs():
        if isinstance(v, TensorView) and v.device_mesh is None:
            v.device_mesh = default
    for e in fusion.exprs:
        producers = _reference_order(e)
        for out in e.outputs:
            if not isinstance(out, TensorView) or id(out) in annotated:
                continue
            if out.device_mesh is None:
                out.device_mesh = next((p.device_mesh for p in producers if p.device_mesh), default)
            for p in producers:
                _propagate(e, p, out)
    return fusion


def _reference_order(e: Expr) -> list[TensorView]:
    ins = [v for v in e.inputs if isinstance(v, TensorView)]
    if isinstance(e, (LinearOp, MatmulOp)) and len(ins) >= 2:
        ins = [ins[1], ins[0], *ins[2:]]  # the weight first
    return list({id(v): v for v in ins}.values())


def _parallel_leaves(tv: TensorView, d) -> set[ParallelType]:
    loop = set(map(id, tv.domain.loop))
    return {x.parallel_type for x in axis_leaves(tv, d)
            if id(x) in loop and (x.is_device_dim or x.is_stream)}


def _propagate(e: Expr, p: TensorView, out: TensorView) -> None:
    used = {d.parallel_type for d in out.domain.loop if d.is_device_dim or d.is_stream}
    for a, b in axis_pairs(e, p, out):
        if b.is_broadcast or a.is_broadcast or is_split(out, b):
            continue
        types = _parallel_leaves(p, a)
        if b.is_reduction:
            types.discard(ParallelType.stream)
        if not types or types & used:
            continue
        keep_stream = not b.is_reduction
        replay_splits(p, a, out, b, keep=lambda x: x.is_device_dim or (keep_stream and x.is_stream))
        used |= types
