"""The online softmax pass of a looped reduction: the row maximum m = max(x) and the sum
s = sum(exp(x - m)) in one pass over the row instead of two, so a looped softmax (rows beyond
the registers) reads its input twice, not three times.

Each lane keeps a running maximum and a sum relative to it; when a chunk raises the maximum,
the sum is rescaled by exp(old - new). After the pass the lanes' maxima reduce to m and their
sums, rescaled to m, add up to s. Where the unfused sum meets inf - inf (a row whose maximum is
+inf, -inf or NaN) it is NaN, and so is this one; an empty row sums to 0, as before.

Taken where a kernel computes max(x) over the looped dim and sum(exp(x - max)) of the same x
(softmax, log-softmax, logsumexp, cross entropy), in fp32, outside split reductions."""
from __future__ import annotations

from typing import Optional

from ..ir import (BinaryOp, BinaryOpType, BroadcastOp, Expr, ExpandOp, LoadStoreOp, ReductionOp, ReductionOpType,
                  UnaryOp, UnaryOpType)
from .types import compute_type

_VIEWS = (BroadcastOp, ExpandOp, LoadStoreOp)


def online_sum_partner(writer, e: Expr) -> Optional[ReductionOp]:
    """The sum(exp(x - max)) to compute in `e`'s pass, where `e` is max(x); or None."""
    if writer.split is not None or not _fp32_reduction(e, ReductionOpType.max):
        return None
    for s in writer.plan.exprs:
        if not _fp32_reduction(s, ReductionOpType.sum) or writer.program_scope.lookup(id(s.out)):
            continue
        exp = writer.producer.get(id(s.inp))
        if not (isinstance(exp, UnaryOp) and exp.kind is UnaryOpType.exp):
            continue
        sub = writer.producer.get(id(exp.inp))
        if isinstance(sub, BinaryOp) and sub.kind is BinaryOpType.sub and sub.inputs[0] is e.inp \
                and _view_source(writer, sub.inputs[1]) is e.out and writer.reduce_dims(s) == writer.reduce_dims(e):
            return s
    return None


def _fp32_reduction(e: Expr, kind: ReductionOpType) -> bool:
    return isinstance(e, ReductionOp) and e.kind is kind and compute_type(e.out.dtype) == "tl.float32" \
        and compute_type(e.inp.dtype) == "tl.float32"


def _view_source(writer, v):
    """The value `v` views (through broadcasts, expands and sets), or `v`."""
    e = writer.producer.get(id(v))
    while isinstance(e, _VIEWS):
        v = e.inputs[0]
        e = writer.producer.get(id(v))
    return v


def emit_online_softmax(writer, m: ReductionOp, s: ReductionOp) -> None:
    """Emit the pass computing max `m` and sum `s` together, and bind both."""
    ps, rd = writer.program_scope, writer.red
    shape, mask = writer.reduce_shape(m), writer.reduce_mask(m)
    big, small = f"acc{m.out.name}", f"acc{s.out.name}"
    ps.lines += [f"{big} = tl.full({shape}, float('-inf'), tl.float32)",
                 f"{small} = tl.full({shape}, 0.0, tl.float32)"]
    body = writer.loop_scope()
    x = writer.operand(body, m.inp, m.out.dtype)
    body.lines += [
        f"{big}_new = _max_nan({big}, tl.where({mask}, {x}, float('-inf')))",
        # a lane whose maximum rose rescales its sum (-inf to -inf: nothing seen yet, kept)
        f"{small} = tl.where({big} == {big}_new, {small}, {small} * tl.exp({big} - {big}_new))",
        f"{small} = {small} + tl.where(({mask}) & ({x} != float('-inf')), tl.exp({x} - {big}_new), 0.0)",
        f"{big} = {big}_new",
    ]
    writer.close_loop(body)
    top = f"T{m.out.name}"
    writer.bind(ps, m.out, f"tl.reduce({big}, {rd}, _max_nan, keep_dims=True)")
    ps.lines.append(f"{small}_row = tl.sum(tl.where({big} == float('-inf'), 0.0, {small} * tl.exp({big} - {top})), "
                    f"axis={rd}, keep_dims=True)")
    finite = f"({top} == {top}) & (tl.abs({top}) != float('inf'))"
    empty = f"tl.where({writer.reduced_count()} > 0, float('nan'), 0.0)"
    writer.bind(ps, s.out, f"tl.where({finite}, {small}_row, {empty})")
