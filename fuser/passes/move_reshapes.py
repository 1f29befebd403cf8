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
The fusion given is never changed: a clone is rewritten, or the same fusion comes back when no
reshape moves.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from ..ir import BinaryOp, CastOp, Expr, Fusion, ReshapeOp, TensorView, TernaryOp, UnaryOp
from ..ops.common import copy_id, new_tensor

_ELEMENTWISE = (UnaryOp, CastOp, BinaryOp, TernaryOp)


def move_reshapes(fusion: Fusion) -> Fusion:
    if not any(isinstance(e, ReshapeOp) for e in fusion.exprs) or _next_move(fusion) is None:
        return fusion  # (nothing to move: no clone made)
    f = fusion.clone()
    for _ in range(4 * len(f.exprs)):  # each move takes a reshape one op nearer an edge
        step = _next_move(f)
        if step is None:
            break
        step()
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
        if _reaches_input(r.inp, uses, at_inputs):
            return lambda r=r: _hoist(f, r, uses)
        if _reaches_output(r.out, uses):
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


def _reaches_output(b: TensorView, uses: _Uses) -> bool:
    """Whether the walk down from a reshape's output through its single elementwise users
    ends at a fusion output that nothing else reads (at least one op down)."""
    steps = 0
    while True:
        users = uses.users.get(id(b), [])
        if id(b) in uses.outputs:
            return steps > 0 and not users
        if len(users) != 1 or _lone_operand(users[0]) is not b:
            return False
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
    new = [ReshapeOp(inputs=(x,), outputs=(x2,)),
           dataclasses.replace(p, inputs=tuple(x2 if v is x else v for v in p.inputs), outputs=(out,))]
    _splice(f, p, r, new, at=p)  # (what p reads is made before p; r's readers come after r)
    _replace_uses(f, r.out, out)


def _sink(f: Fusion, r: ReshapeOp, uses: _Uses) -> None:
    """c(reshape(a)) -> reshape(c(a))"""
    c = uses.users[id(r.out)][0]
    computed = _like(f, r.inp, c.out.dtype)
    out = _like(f, c.out, c.out.dtype)
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
