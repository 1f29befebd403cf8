"""Rewrite every resharding expr into local compute plus exactly one Communication.

After propagation each tensor says how it is sharded. An expr is *resharding* when an input
axis and the output axis it maps to are sharded differently. The rewrite, per mesh axis:

- a `set` whose input is sharded on an axis its output is not: an **allgather**; when the
  output splits that axis onto streams instead, the allgather happens chunk by chunk inside the
  stream loop (a **broadcast** of chunk j from the rank that holds it, overlapped with the
  consumer of chunk j - 1);
- a `set` from replicated to sharded: a local **shard** (a slice, nothing sent);
- a `set` moving the device axis to another axis: an **all-to-all**;
- a reduction (linear, matmul, sum, ...) whose contracted axis is sharded: the op runs locally
  on its shards into a *partial* tensor (its reduction axis keeps the device split), then an
  **allreduce** (output replicated) or a **reduce-scatter** (output sharded on a row axis);
  a linear's bias is added after the reduction, once;
- any other op whose input is sharded differently from what its output needs: a `set` of that
  input to the needed sharding (decomposed as above) is inserted before it, and an output
  sharding that no input provides is computed whole and then sliced.

After this pass every compute expr is local (its inputs' and output's shardings agree axis by
axis) and every Communication moves data along one mesh axis.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from ..errors import UnsupportedError
from ..ir import (BinaryOp, BinaryOpType, BroadcastOp, CastOp, DataType, Expr, Fusion, IterDomain, IterType,
                  LinearOp, LoadStoreOp, LoadStoreOpType, MatmulOp, ParallelType, ReductionOp,
                  ReductionOpType, TensorView, tensor_domain)
from ..multidevice.axis_map import axis_pairs, mapped_input_axis, mapped_output_axis
from ..multidevice.communication import Collective, Communication
from ..multidevice.sharding import device_axes, stream_leaf
from ..multidevice.transform import like, replay_splits


def decompose_reshardings(fusion: Fusion) -> Fusion:
    if not any(tv.device_mesh is not None for tv in fusion.tensors()):
        return fusion
    out: list[Expr] = []
    for e in list(fusion.exprs):
        out += _decompose(fusion, e)
    fusion.exprs = out
    return fusion


# ---------------------------------------------------------------------------------------------


def _sharded_axes(tv: TensorView) -> dict[ParallelType, IterDomain]:
    """Device axes among the iteration axes. A device split of a reduction axis marks a tensor
    summed over that mesh axis (the output of an allreduce) or still to be summed (a partial);
    only reductions and their collectives look at it."""
    return {pt: d for pt, d in device_axes(tv).items() if not d.is_reduction}


def _pos(tv: TensorView, d: Optional[IterDomain]) -> Optional[int]:
    if d is None:
        return None
    return next(k for k, x in enumerate(tv.domain.no_reductions()) if x is d)


def _tv_inputs(e: Expr) -> list[TensorView]:
    return list({id(v): v for v in e.inputs if isinstance(v, TensorView)}.values())


def _decompose(f: Fusion, e: Expr) -> list[Expr]:
    outs = [o for o in e.outputs if isinstance(o, TensorView)]
    ins = _tv_inputs(e)
    if not outs or all(v.device_mesh is None for v in ins + outs):  # (an op of no tensor input,
        # iota or a random op, is computed whole then sliced: its values index logical positions)
        return [e]
    out = outs[0]
    if isinstance(e, LoadStoreOp) and e.kind is LoadStoreOpType.set:
        comm = _communication(e.inp, out)
        return [comm if comm is not None else e]
    contracted = _contracted(e, out, ins)
    if len(contracted) > 1:
        raise UnsupportedError(f"{e.op_name}: contraction sharded on two mesh axes {list(contracted)}")
    bias = e.inputs[2] if isinstance(e, LinearOp) and len(e.inputs) == 3 and contracted else None
    before: list[Expr] = []
    replaced: dict[int, TensorView] = {}
    for p in ins:
        if p is bias:
            continue
        target = _needed(e, p, out, contracted)
        if _same(_sharded_axes(p), target):
            continue
        q = _resharded(p, target, e, out, contracted)
        before += _decompose(f, LoadStoreOp(inputs=(p,), outputs=(q,)))
        replaced[id(p)] = q
    inputs = tuple(replaced.get(id(v), v) for v in e.inputs)
    if contracted:
        if len(outs) > 1:
            raise UnsupportedError(
                f"{e.op_name} (var, var_mean, std or welford) over a sharded axis is not supported: "
                f"write it with sums over that axis (the means of x and of x * x), which shard")
        return before + _partial_then_reduce(f, e, inputs, out, next(iter(contracted)), bias)
    missing = _underived(dataclasses.replace(e, inputs=inputs), inputs, out)  # (the op as it will read them)
    if not missing:
        return before + [dataclasses.replace(e, inputs=inputs)]
    if len(outs) > 1:
        raise UnsupportedError(f"{e.op_name}: sharding {len(outs)} outputs that no input provides")
    # computed whole (on the mesh axes no input shards), then this rank's slice is kept
    whole = like(out, keep=lambda x: x.parallel_type not in missing,
                 skip_axes=frozenset(id(_sharded_axes(out)[pt]) for pt in missing))
    local = dataclasses.replace(e, inputs=inputs, outputs=(whole,))
    return before + [local] + _decompose(f, LoadStoreOp(inputs=(whole,), outputs=(out,)))


def _contracted(e: Expr, out: TensorView, ins: list[TensorView]) -> dict[ParallelType, tuple[TensorView, IterDomain]]:
    """Mesh axes on which some input is sharded along an axis the op reduces, each with the
    first such input and its axis (where an operand resharded onto the contraction takes its
    split from)."""
    found: dict = {}
    for p in ins:
        for pt, a in device_axes(p).items():
            b = mapped_output_axis(e, p, out, a)
            if b is not None and b.is_reduction and pt not in found:
                found[pt] = (p, a)
    return found


def _needed(e: Expr, p: TensorView, out: TensorView, contracted) -> dict[ParallelType, IterDomain]:
    """The device axes `p` must have for `e` to be local."""
    need = {}
    out_axes = _sharded_axes(out)
    for pt in set(_sharded_axes(p)) | set(out_axes) | set(contracted):
        if pt in contracted:
            # p's own split where it is on a reduced axis already (`sum(x, [0, 1])` of x split
            # on axis 1: a local sum, then the allreduce), else the first reduced axis
            reduced = [a for a, b in axis_pairs(e, p, out) if b.is_reduction]
            have = _sharded_axes(p).get(pt)
            a = have if any(have is r for r in reduced) else next(iter(reduced), None)
        else:
            b = out_axes.get(pt)
            a = None if b is None else mapped_input_axis(e, p, out, b)
        if a is not None and not a.is_broadcast:
            need[pt] = a
    return need


def _same(have: dict, need: dict) -> bool:
    return set(have) == set(need) and all(have[k] is need[k] for k in have)


def _resharded(p: TensorView, need: dict, e: Expr, out: TensorView, contracted: dict) -> TensorView:
    """A copy of `p` sharded as `need` says: each device split copied from `p` where it has it,
    for a contracted mesh axis from the input sharded on the contraction, else from the
    output's matching axis. When `p`'s device axis is gathered and the output splits the
    matching axis onto streams, the copy takes that stream split: the gather then runs chunk
    by chunk inside the stream loop."""
    have = _sharded_axes(p)
    q = like(p, skip_axes=frozenset(id(d) for d in p.domain.logical))  # same extents, unsplit
    twin = {id(a): b for a, b in zip(p.domain.logical, q.domain.logical)}
    for pt, a in need.items():
        if have.get(pt) is a:
            src, src_axis = p, a
        elif pt in contracted:  # (the output's reduction axis may not carry the split)
            src, src_axis = contracted[pt]
        else:
            src, src_axis = out, mapped_output_axis(e, p, out, a)
        replay_splits(src, src_axis, q, twin[id(a)], keep=lambda x, pt=pt: x.parallel_type is pt)
    found = stream_leaf(out)
    if found is not None:
        a = mapped_input_axis(e, p, out, found[1].input)
        gathered = [x for pt, x in have.items() if need.get(pt) is not x]
        if a is not None and any(a is x for x in gathered):
            replay_splits(out, found[1].input, q, twin[id(a)], keep=lambda x: x.is_stream)
    return q


def _underived(e: Expr, inputs, out: TensorView) -> set[ParallelType]:
    """Mesh axes the output is sharded on that no input provides through the op."""
    missing = set()
    for pt, b in _sharded_axes(out).items():
        if not any(isinstance(p, TensorView) and _sharded_axes(p).get(pt) is not None
                   and mapped_output_axis(e, p, out, _sharded_axes(p)[pt]) is b for p in inputs):
            missing.add(pt)
    return missing


# ---------------------------------------------------------------------------------------------


def _communication(p: TensorView, q: TensorView) -> Optional[Communication]:
    """The collective that turns `p` into `q` (same logical shape), None if none is needed."""
    have, need = _sharded_axes(p), _sharded_axes(q)
    pts = [pt for pt in set(have) | set(need) if _pos(p, have.get(pt)) != _pos(q, need.get(pt))]
    if not pts:
        return None
    if len(pts) > 1:
        raise UnsupportedError(f"resharding {p!r} to {q!r} moves data along {len(pts)} mesh axes; "
                               f"one collective per mesh axis is supported")
    pt = pts[0]
    mesh = p.device_mesh or q.device_mesh
    a, b = have.get(pt), need.get(pt)
    kw = dict(inputs=(p,), outputs=(q,), mesh=mesh, parallel_type=pt)
    if a is not None and b is None:
        found = stream_leaf(q)
        if found is not None and _pos(q, found[1].input) == _pos(p, a):
            _check_chunks(p, a, q, found[1])
            return Communication(collective=Collective.broadcast, in_axis=_pos(p, a),
                                 out_axis=_pos(q, found[1].input), **kw)
        return Communication(collective=Collective.allgather, in_axis=_pos(p, a), **kw)
    if a is None:
        return Communication(collective=Collective.shard, out_axis=_pos(q, b), **kw)
    return Communication(collective=Collective.all_to_all, in_axis=_pos(p, a), out_axis=_pos(q, b), **kw)


def _check_chunks(p: TensorView, a: IterDomain, q: TensorView, split) -> None:
    d = int(p.device_mesh.size_of(next(pt for pt, x in device_axes(p).items() if x is a)))
    s = split.factor if not split.inner_split else None
    if s is None or not s.is_Integer or int(s) % d:
        raise UnsupportedError(
            f"gathering {p!r} chunk by chunk onto streams needs an outer split by a multiple of "
            f"the {d} devices (so each chunk lives on one device); {q!r} has {split.factor}")


def _partial_then_reduce(f: Fusion, e: Expr, inputs, out: TensorView, pt: ParallelType,
                         bias: Optional[TensorView]) -> list[Expr]:
    """`e` on local shards into a partial sum, then the collective that finishes the sum."""
    scatter = _sharded_axes(out).get(pt)
    skip = frozenset(id(d) for d in out.domain.logical if d.is_reduction) | (
        frozenset() if scatter is None else frozenset({id(scatter)}))
    # a half or bf16 sum's (or product's) partials and their collective stay fp32, rounded once
    # after it, as the one-device kernel rounds: rounded before, [1000, 0.5 | -1000, 0.5] sums
    # to 0 where eager gives 1
    wide = isinstance(e, ReductionOp) and e.kind in (ReductionOpType.sum, ReductionOpType.prod) \
        and out.dtype in (DataType.Half, DataType.BFloat16)
    partial = like(out, keep=lambda x: x.parallel_type is not pt, skip_axes=skip,
                   dtype=DataType.Float if wide else None)
    # the reduction axis of the partial keeps the contracted device split: "summed locally,
    # still to be summed over the mesh axis"
    src = next(p for p in inputs if isinstance(p, TensorView) and pt in device_axes(p))
    a = device_axes(src)[pt]
    r = mapped_output_axis(dataclasses.replace(e, inputs=inputs), src, out, a)
    r_partial = partial.domain.logical[next(k for k, d in enumerate(out.domain.logical) if d is r)]
    replay_splits(src, a, partial, r_partial, keep=lambda x: x.parallel_type is pt)
    ins = tuple(v for v in inputs if v is not bias)
    local = dataclasses.replace(e, inputs=ins, outputs=(partial,))
    reduce = e.kind if isinstance(e, ReductionOp) else ReductionOpType.sum
    if not isinstance(e, (LinearOp, MatmulOp, ReductionOp)):
        raise UnsupportedError(f"{e.op_name} with a contraction sharded on {pt.value}")
    target = out if bias is None and not wide else like(out, dtype=partial.dtype)
    kind = Collective.allreduce if scatter is None else Collective.reduce_scatter
    comm = Communication(inputs=(partial,), outputs=(target,), collective=kind, mesh=out.device_mesh,
                         parallel_type=pt, out_axis=_pos(out, scatter), reduce=reduce)
    if wide:  # (a ReductionOp: no bias)
        return [local, comm] + _decompose(f, CastOp(inputs=(target,), outputs=(out,), dtype=out.dtype))
    if bias is None:
        return [local, comm]
    # the bias is added once, after the sum: out = reduced + broadcast(bias)
    n = len(out.domain.no_reductions())
    ids = [f.new_id(1, iter_type=IterType.Broadcast) for _ in range(n - 1)]
    b_id = bias.domain.no_reductions()[0]
    ids.append(f.new_id(b_id.extent))
    bias_b = f.new_tensor(tensor_domain(ids, True), bias.dtype)
    bias_b.device_mesh = bias.device_mesh
    replay_splits(bias, b_id, bias_b, ids[-1])
    bcast = BroadcastOp(inputs=(bias,), outputs=(bias_b,), is_broadcast=tuple([True] * (n - 1) + [False]))
    add = BinaryOp(inputs=(target, bias_b), outputs=(out,), kind=BinaryOpType.add)
    return [local, comm] + _decompose(f, bcast) + _decompose(f, add)
