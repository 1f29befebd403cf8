"""Move reshapes to the edges of a single-device fusion, through elementwise ops, so that they
do not cut the kernels around them.

A reshape runs through ATen (kernels cannot contain one), so a reshape between two fusible ops
splits them into two kernels with the value written to memory between them: the cross entropy
of `logits.float().flatten(0, 1)` cast the logits to fp32 in one kernel and reduced them in
another. An elementwise op commutes with a reshape when its only operand with dims is the
reshaped value (the others are scalars or 0-dim tensors), so:

- hoist: a reshape of `f(x)` becomes `f` of the reshaped `x`, repeatedly, when that walk reaches
  a fusion input (a view of an input is free);
- sink: `f` of a reshaped value becomes the reshape of `f` of the value, repeatedly, when that
  walk reaches a fusion output (a view of a kernel's output is free).

Each value along a walk has one use and is not a fusion output (nothing is computed twice).

A moved value keeps its layout: an output's allocation order (fuser.jit's is the traced one,
the layout eager's later views of it rely on) goes to the op that now writes it, and the value a
sunk reshape reads is laid out so that the reshape is a view in that order (`x.t().reshape(5,
2, 3).exp()` is the exp of the [5, 6] transpose written column-major, viewed). A reshape to an
output that nothing moves reads its computed input laid out so too (group norm's [N, G, C/G,
H, W] result written N, H, W, G, C/G for a channels-last output). Where no layout of its input
makes a reshape that view, it does not sink.

The fusion given is never changed: a clone is rewritten, or the same fusion comes back when no
reshape moves and no input of a reshape needs a layout.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

import sympy

from ..ir import BinaryOp, CastOp, Expr, Fusion, LoadStoreOp, ReshapeOp, TensorView, TernaryOp, UnaryOp
from ..ops.common import copy_id, new_tensor

_ELEMENTWISE = (UnaryOp, CastOp, BinaryOp, TernaryOp)


def move_reshapes(fusion: Fusion) -> Fusion:
    if not any(isinstance(e, ReshapeOp) for e in fusion.exprs) or (
            _next_move(fusion) is None and not _reshape_layouts(fusion)):
        return fusion  # (nothing to move or lay out: no clone made)
    f = fusion.clone()
    for _ in range(4 * len(f.exprs)):  # each move takes a reshape one op nearer an edge
        step = _next_move(f)
        if step is None:
            break
        step()
    for source, order, out in _reshape_layouts(f):
        if order is None:
            _copy_to_layout(f, out)
        else:
            _lay_out(source, order)
    return f


def _lone_operand(e: Expr) -> Optional[TensorView]:
    """The one operand of an elementwise op that has dims, when it has the output's extents (the
    other operands are scalars or 0-dim tensors, which broadcast to any shape)."""
    if not isinstance(e, _ELEMENTWISE):
        return None
    found = [v for v in e.inputs if isinstance(v, TensorView) and v.ndim > 0]
    if len({id(v) for v in found}) != 1:
        return None
    x = found[0]
    dims, out = x.domain.no_reductions(), e.out.domain.no_reductions()
    if len(dims) != len(out) or any(a.expanded_extent is not None for a in dims) \
            or any(a.extent != b.extent for a, b in zip(dims, out)):
        return None
    return x


class _Uses:
    def __init__(self, f: Fusion):
        self.producer = {id(o): e for e in f.exprs for o in e.outputs}
        self.users: dict[int, list[Expr]] = {}
        for e in f.exprs:
            for v in {id(v): v for v in e.inputs}.values():
                self.users.setdefault(id(v), []).append(e)
        self.outputs = {id(o) for o in f.outputs()}
        self.inputs = {id(v) for v in f.inputs()}

    def single_use(self, v: TensorView) -> bool:
        return id(v) not in self.outputs and len(self.users.get(id(v), [])) == 1


def _next_move(f: Fusion):
    uses = _Uses(f)
    # inputs and views of them (reshapes of reshapes of an input): the edge a hoist ends at
    at_inputs = set(uses.inputs)
    for e in f.exprs:
        if isinstance(e, ReshapeOp) and id(e.inp) in at_inputs:
            at_inputs.add(id(e.out))
    for r in f.exprs:
        if not isinstance(r, ReshapeOp) or id(r.inp) in at_inputs:
            continue  # (a view of an input stays: moving it down would be undone by a hoist)
        if any(d.expanded_extent is not None for d in r.inp.domain.no_reductions()):
            continue  # an expanded input: the op moved before the reshape would materialize it
        if _reaches_input(r.inp, uses, at_inputs) and _memory_order(r.out) is not None:
            return lambda r=r: _hoist(f, r, uses)
        end = _output_reached(r.out, uses)
        if end is not None and _source_order(r.inp, r.out, _memory_order(end)) is not None:
            return lambda r=r: _sink(f, r, uses)
    return None


def _reaches_input(a: TensorView, uses: _Uses, at_inputs: set[int]) -> bool:
    """Whether the walk up from a reshape's input through single-use elementwise producers
    with a lone operand ends at a fusion input or a view of one."""
    while id(a) not in at_inputs:
        p = uses.producer.get(id(a))
        x = _lone_operand(p) if p is not None else None
        if x is None or not uses.single_use(a):
            return False
        a = x
    return True


def _output_reached(b: TensorView, uses: _Uses) -> Optional[TensorView]:
    """The fusion output that nothing else reads where the walk down from a reshape's output
    through its single elementwise users ends (at least one op down); None where it does not."""
    steps = 0
    while True:
        users = uses.users.get(id(b), [])
        if id(b) in uses.outputs:
            return b if steps > 0 and not users else None
        if len(users) != 1 or _lone_operand(users[0]) is not b:
            return None
        b, steps = users[0].out, steps + 1


def _like(f: Fusion, shape_of: TensorView, dtype) -> TensorView:
    return new_tensor(f, [copy_id(f, d) for d in shape_of.domain.no_reductions()], dtype)


def _replace_uses(f: Fusion, old: TensorView, new: TensorView) -> None:
    for e in f.exprs:
        if any(v is old for v in e.inputs):
            e.inputs = tuple(new if v is old else v for v in e.inputs)
    f.replace_output(old, new)


def _hoist(f: Fusion, r: ReshapeOp, uses: _Uses) -> None:
    """reshape(p(x)) -> p(reshape(x))"""
    p = uses.producer[id(r.inp)]
    x = _lone_operand(p)
    x2 = _like(f, r.out, x.dtype)
    out = _like(f, r.out, r.out.dtype)
    _lay_out(out, _memory_order(r.out))
    new = [ReshapeOp(inputs=(x,), outputs=(x2,)),
           dataclasses.replace(p, inputs=tuple(x2 if v is x else v for v in p.inputs), outputs=(out,))]
    _splice(f, p, r, new, at=p)  # (what p reads is made before p; r's readers come after r)
    _replace_uses(f, r.out, out)


def _sink(f: Fusion, r: ReshapeOp, uses: _Uses) -> None:
    """c(reshape(a)) -> reshape(c(a))"""
    c = uses.users[id(r.out)][0]
    computed = _like(f, r.inp, c.out.dtype)
    out = _like(f, c.out, c.out.dtype)
    order = _memory_order(c.out)  # (row-major but at the walk's last op, the output)
    _lay_out(out, order)
    _lay_out(computed, _source_order(r.inp, r.out, order))
    new = [dataclasses.replace(c, inputs=tuple(r.inp if v is r.out else v for v in c.inputs), outputs=(computed,)),
           ReshapeOp(inputs=(computed,), outputs=(out,))]
    _splice(f, r, c, new, at=c)  # (what c reads is made before c; c's readers come after c)
    _replace_uses(f, c.out, out)


def _splice(f: Fusion, first: Expr, second: Expr, new: list[Expr], at: Expr) -> None:
    """Replace exprs `first` and `second` of `f` by `new`, placed where `at` (one of them) was."""
    pos = next(k for k, e in enumerate(f.exprs) if e is at)
    pos -= sum(1 for e in f.exprs[:pos] if e is first or e is second)
    f.exprs[:] = [e for e in f.exprs if e is not first and e is not second]
    f.exprs[pos:pos] = new


# ---------------------------------------------------------------------------------------------
# Layouts through a reshape


def _memory_order(tv: TensorView) -> Optional[list[int]]:
    """`tv`'s memory order (its logical axes, outer to inner: row-major without an allocation
    domain that permutes them); None where a stream or device axis lays it out."""
    order = tv.domain.allocation_order()
    if order is not None:
        return order
    if any(d.is_stream or d.is_device_dim for d in tv.domain.allocation or ()):
        return None
    return list(range(len(tv.domain.no_reductions())))


def _lay_out(tv: TensorView, order: Optional[list[int]]) -> None:
    """`tv` allocated in `order` (its logical axes, outer to inner); row-major (or None) left
    as it is. (The domain's own setter: the fusion is a runtime's clone, closed to the user's
    API.)"""
    if order is not None and order != sorted(order):
        dims = tv.domain.no_reductions()
        tv.domain.set_allocation([dims[k] for k in order], True)


def _reshape_layouts(f: Fusion) -> list[tuple[TensorView, Optional[list[int]], TensorView]]:
    """(source, order, output) for each reshape to a laid-out fusion output (through a chain
    of reshapes, each one a view) that ATen would not give the output's layout: its computed
    source, laid out by nothing yet, with the memory order that makes the reshapes views in
    the output's order; or None where no order does, or the source's own layout (an output's,
    one set already) is another: the output is then a copy."""
    uses = _Uses(f)
    found = []
    for out in f.outputs():
        order = _memory_order(out) if isinstance(out, TensorView) else None
        if order is None or order == sorted(order) or not isinstance(uses.producer.get(id(out)), ReshapeOp):
            continue
        source = out
        while order is not None and isinstance(uses.producer.get(id(source)), ReshapeOp) and (
                source is out or (uses.single_use(source) and source.domain.allocation is None)):
            reshaped, source = source, uses.producer[id(source)].inp
            order = _source_order(source, reshaped, order)
        if order is not None and id(source) in uses.inputs:
            continue  # a view of an input, laid out as the input is (Dynamo guards its order)
        if order is not None and id(source) not in uses.outputs and source.domain.allocation is None:
            if order != sorted(order):
                found.append((source, order, out))
        elif order is None or _sized(source, order) != _sized(source, _memory_order(source)):
            found.append((source, None, out))
    return found


def _sized(tv: TensorView, order: Optional[list[int]]) -> Optional[list[int]]:
    """`order` without `tv`'s size-1 axes (their place in memory changes nothing)."""
    dims = tv.domain.no_reductions()
    return None if order is None else [k for k in order if dims[k].extent != 1]


def _copy_to_layout(f: Fusion, out: TensorView) -> None:
    """The reshape to `out` writes a row-major tensor that a copy (`set`) lays out as `out`."""
    r = next(e for e in f.exprs if isinstance(e, ReshapeOp) and e.out is out)
    reshaped = _like(f, out, out.dtype)
    _splice(f, r, r, [dataclasses.replace(r, outputs=(reshaped,)),
                      LoadStoreOp(inputs=(reshaped,), outputs=(out,))], at=r)


def _source_order(a: TensorView, b: TensorView, order: Optional[list[int]]) -> Optional[list[int]]:
    """The memory order of `a` that makes its reshape to `b` a view laid out in `order` (b's
    axes, outer to inner): the output's axes of each run of equal element count (`_runs`)
    must lie together and in order, and the run's input axes take their place. None where
    none does (or `order` is None). Size-1 axes hold no place: each of `a`'s follows the axis
    before it."""
    rank = len(a.domain.no_reductions())
    if order is None or order == sorted(order):
        return None if order is None else list(range(rank))
    runs = _runs(a, b)
    if runs is None:
        return None
    run_of = {k: run for run in runs for k in run[1]}
    placed = [k for k in order if k in run_of]
    found: list[int] = []
    while placed:
        ins, outs = run_of[placed[0]]
        if placed[:len(outs)] != outs:
            return None
        found += ins
        placed = placed[len(outs):]
    for k in range(rank):  # (ascending: the axis before a size-1 one is placed already)
        if k not in found:
            found.insert(found.index(k - 1) + 1 if k > 0 else 0, k)
    return found


def _runs(a: TensorView, b: TensorView) -> Optional[list[tuple[list[int], list[int]]]]:
    """A reshape from `a` to `b` as its shortest runs of consecutive axes of equal element
    count, (a's axes, b's axes) each, size-1 axes left out ([5, 6] to [5, 2, 3]: ([0], [0]),
    ([1], [1, 2])): a run ends where the element counts of the axes before it are the same
    expression on both sides. None where the extents do not show the whole counts equal."""
    def sized(tv):
        return [k for k, d in enumerate(tv.domain.no_reductions()) if d.extent != 1]

    def counts(tv, axes):  # the element count before each of `axes`, and of them all
        dims = tv.domain.no_reductions()
        return [sympy.expand(math.prod((dims[k].extent for k in axes[:n]), start=sympy.Integer(1)))
                for n in range(len(axes) + 1)]
    ins, outs = sized(a), sized(b)
    before_in, before_out = counts(a, ins), counts(b, outs)
    runs, i, j = [], 0, 0
    for n in range(1, len(ins) + 1):
        m = next((m for m in range(j + 1, len(outs) + 1) if before_out[m] == before_in[n]), None)
        if m is not None:
            runs.append((ins[i:n], outs[j:m]))
            i, j = n, m
    return runs if i == len(ins) and j == len(outs) else None
