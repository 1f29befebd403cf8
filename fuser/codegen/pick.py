"""A pick by a load: the sum over a row of `where(position == index, v, 0)`, with one index per
row (how the lowering writes a gather of one element per row: a cross entropy's target logit,
frontend/rules/shape.py), is `v` at that one position. A kernel computes it as `v` read at
the row's index, once a row, where the sum took a compare, a select and an add per element of
the row in the pass over it (in a looped cross entropy forward, ALU-bound at bf16, the pick
cost as much as a third of the kernel's time).

`v` is computed under a view (codegen/resize.py) that reads the reduced axis at the index, so
its loads take one element a row, masked to the tensor's size. An index out of the row picks
nothing, as the sum does: 0. Taken where `v` is computed from loads and element-wise ops alone
(a value read at another position needs nothing that the pass over the row computes), in a
kernel whose reduced dim is that one loop axis, reduced in line or in a loop but not split."""
from __future__ import annotations

from typing import Optional

from ..ir import (BinaryOp, BinaryOpType, BroadcastOp, CastOp, DataType, ExpandOp, Expr, IotaOp, ReductionOp,
                  ReductionOpType, Scalar, TensorView, TernaryOp, TernaryOpType, UnaryOp)

# the ops `v` may be computed with: element-wise (no random numbers, no resize, no reduction)
_ELEMENTWISE = (UnaryOp, BinaryOp, TernaryOp, CastOp, BroadcastOp, ExpandOp)


def pick_parts(writer, e: Expr) -> Optional[tuple[TensorView, TensorView, int]]:
    """(the picked value v, the row's index, the reduced loop axis) where `e` is such a pick
    that `writer` can read by a load; else None."""
    if not (isinstance(e, ReductionOp) and e.kind is ReductionOpType.sum and e.out.dtype.is_floating):
        return None
    axis = _reduced_axis(writer)
    if axis is None:
        return None
    producer = writer.producer
    select = producer.get(id(e.inp))
    if not (isinstance(select, TernaryOp) and select.kind is TernaryOpType.where
            and _is_zero(select.inputs[2]) and isinstance(select.inputs[1], TensorView)):
        return None
    test = producer.get(id(select.inputs[0]))
    if not (isinstance(test, BinaryOp) and test.kind is BinaryOpType.eq):
        return None
    for position, index in (test.inputs, reversed(test.inputs)):
        if _positions_along(writer, position, axis) and isinstance(index, TensorView) \
                and index.dtype in (DataType.Int, DataType.Int32) and axis not in writer.axes.spans(index):
            break
    else:
        return None
    v = select.inputs[1]
    if not _elementwise_from_loads(writer, v):
        return None
    return v, index, axis


def emit_pick(writer, e: Expr) -> bool:
    """Bind `e` in the program scope as its value read at the row's index, where `e` is a pick
    (`pick_parts`); False where it is not."""
    parts = pick_parts(writer, e)
    if parts is None:
        return False
    v, index, axis = parts
    ps = writer.program_scope
    t = writer.operand(ps, index, index.dtype)
    inside = f"T{e.out.name}_hit"
    ps.lines.append(f"{inside} = ({t} >= 0) & ({t} < {writer.reduced_count()})")
    start = len(ps.lines)
    view = writer.shifted((), axis, f"tl.where({inside}, {t}, 0)")
    writer.pick_indices.add(dict(view)[axis])
    value = writer.under(view, lambda: writer.operand(ps, v, e.out.dtype))
    # its loads are one element a row, no pass over the row (the eviction hints count passes)
    ps.lines[start:] = writer.unhinted(ps.lines[start:])
    # (+ 0.0: a picked -0.0 sums to +0.0 beside the row's other zeros)
    writer.bind(ps, e.out, f"tl.where({inside}, {value}, 0.0) + 0.0")
    return True


def _reduced_axis(writer) -> Optional[int]:
    """The reduced tile dim's one loop axis, where it is one (else there is no one index
    along it)."""
    if writer.split is not None or writer.view or not writer.PICKS_BY_LOAD:
        return None
    run = writer.layout.super_axes
    reduced = [j for j, d in enumerate(writer.super_dim) if d == writer.red]
    return run[reduced[0]][0] if len(reduced) == 1 and len(run[reduced[0]]) == 1 else None


def _is_zero(v) -> bool:
    return isinstance(v, Scalar) and v.is_constant and v.value == 0


def _positions_along(writer, v, axis: int) -> bool:
    """Whether `v` is 0, 1, 2, ... along loop axis `axis` (an iota, through broadcasts and
    casts to integers), varying along no other axis."""
    e = writer.producer.get(id(v))
    # (a cast to a narrower integer or to bool would wrap the positions)
    while isinstance(e, (BroadcastOp, ExpandOp)) or (isinstance(e, CastOp) and e.out.dtype in (DataType.Int, DataType.Int32)):
        e = writer.producer.get(id(e.inputs[0]))
    # (a floating iota holds rounded positions past its mantissa: 256 for bf16)
    if not isinstance(e, IotaOp) or e.out.dtype not in (DataType.Int, DataType.Int32) \
            or not all(isinstance(s, Scalar) and s.is_constant for s in e.inputs[1:]):
        return False
    start, step = e.inputs[1].value, e.inputs[2].value
    return start == 0 and step == 1 and writer.axes.spans(v) == {axis} == writer.axes.spans(e.out)


def _elementwise_from_loads(writer, v: TensorView) -> bool:
    """Whether `v` is computed in the kernel from its inputs by element-wise ops alone."""
    stack, seen = [v], set()
    while stack:
        u = stack.pop()
        if not isinstance(u, TensorView) or id(u) in seen or id(u) in writer.kernel_inputs:
            continue
        seen.add(id(u))
        e = writer.producer.get(id(u))
        if not isinstance(e, _ELEMENTWISE):
            return False
        stack.extend(e.inputs)
    return True
