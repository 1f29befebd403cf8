"""Allocation order inference: a FusionDefinition's outputs take the memory order of an input.

nvFuser's pre-segmentation pass of that name (csrc/preseg_passes/allocation_order_inference.cpp)
gives each output without an allocation domain the order of a reference input, so a pointwise
result of a transposed or channels-last input comes back laid out as eager's does (`.view` on
it works, a channels-last network stays channels-last), and its kernel reads and writes in the
same order. fuser.jit needs none of this: its lowering lays each output out as the traced graph
did (lowering.py).

Axes map as the kernels map them (`schedulers/axes.py`): elementwise ops and casts position by
position, reductions an input axis to its reduction axis, broadcast, squeeze and permute the axes
they keep. A broadcast axis is not the concrete axis it meets (a bias's broadcast row axis is no
axis of the bias), and a reshape maps nothing: its output stays row-major.

The reference of an output is the input it depends on with the most non-broadcast axes mapping
onto the output's axes. Inputs tied at the most that would lay the output out differently give
none, as in nvFuser (`a.t() + b` has no better guess in either operand's order), and an output
whose reference is row-major stays row-major, as eager's result of row-major operands is (an
outer product's broadcast axis stays innermost, so its `.view` works; nvFuser's pass would move
that axis outermost). A fusion of row-major inputs alone, the common case, is left as it is at
once. Walking the reference's allocation from its innermost axis out, each axis that maps onto
an output axis becomes the next-innermost of the output; the walk stops at the first
non-broadcast axis that maps onto none (a reshape's, a reduced one that a keepdim broadcast put
back), and the output's unmapped axes go outermost in logical order. So a sum over H of a
channels-last [N, C, H, W] is laid out [N, W, C].
"""
from __future__ import annotations

from typing import Optional, Sequence

from ..ir import Fusion, IterDomain, TensorView
from ..ir.fusion import live_exprs
from ..multidevice.sharding import is_distributed
# (the kernels' own axis mapping, reused so that a layout and the loop axes it drives agree)
from ..schedulers.axes import UnionFind, axis_pairs


def infer_allocation_order(fusion: Fusion, keep: Sequence[TensorView] = ()) -> None:
    """Sets the allocation domain of each output of `fusion` that has none, is not in `keep`
    (outputs written into an input) and is not an input, where its reference input's order
    gives it one other than row-major. A distributed fusion is left as it is: its allocations
    are the sharding passes' to lay out."""
    inputs = [v for v in fusion.inputs() if isinstance(v, TensorView)]
    if all(_is_row_major(tv) for tv in inputs):
        return  # (no reference to follow: checked first, as it costs nothing)
    if any(is_distributed(tv) for tv in fusion.tensors()):
        return
    exprs = live_exprs(fusion.exprs, fusion.outputs())
    axes = _axis_classes(exprs)
    depends = _input_dependencies(exprs, inputs)
    skipped = {id(v) for v in list(keep) + inputs}
    for out in fusion.outputs():
        if id(out) in skipped or out.domain.allocation is not None or out.domain.loop != out.domain.logical:
            continue  # (an explicit layout, an alias, or a loop the user scheduled)
        ref = _reference(out, [tv for tv in inputs if id(tv) in depends.get(id(out), ())], axes)
        if ref is None or _is_row_major(ref):
            continue
        order = _mapped_order(ref, out, axes)
        if order != out.domain.no_reductions():
            # the domain's own setter: `set_allocation_domain` would be recorded, and repr(fd)
            # prints what the user wrote (the rebuilt definition infers the same order)
            out.domain.set_allocation(order, True)


def _is_row_major(tv: TensorView) -> bool:
    """Whether tv's non-broadcast axes lie in memory in logical order (a broadcast axis holds
    no elements to lay out, so where it lies is no matter)."""
    order = tv.domain.allocation_order()
    if order is None:
        return True
    logical = tv.domain.no_reductions()
    kept = [k for k in order if not logical[k].is_broadcast]
    return kept == sorted(kept)


def _axis_classes(exprs: Sequence) -> UnionFind:
    """IterDomains that are one axis across the fusion, as the kernels map them, but for a
    broadcast meeting a concrete axis (it is not that axis: nvFuser's exact map)."""
    classes = UnionFind()
    for e in exprs:
        for a, b in axis_pairs(e):
            if a.is_broadcast == b.is_broadcast:
                classes.union(a, b)
    return classes


def _input_dependencies(exprs: Sequence, inputs: Sequence[TensorView]) -> dict[int, set[int]]:
    """id(tensor) -> the ids of the input tensors it is computed from."""
    depends = {id(tv): {id(tv)} for tv in inputs}
    for e in exprs:
        found = set().union(*(depends.get(id(v), set()) for v in e.inputs))
        for o in e.outputs:
            depends[id(o)] = found
    return depends


def _class_of(d: IterDomain, classes: UnionFind) -> int:
    classes.add(d)
    return classes.find(id(d))


def _axes_by_class(tv: TensorView, classes: UnionFind) -> Optional[dict[int, IterDomain]]:
    """tv's logical axes by their class; None where two share one (`x + x.t()` of a square x:
    which of them leads is then no question of layout)."""
    found = {_class_of(d, classes): d for d in tv.domain.logical}
    return found if len(found) == len(tv.domain.logical) else None


def _reference(out: TensorView, inputs: Sequence[TensorView], classes: UnionFind) -> Optional[TensorView]:
    """Of the inputs `out` is computed from, the one with the most non-broadcast axes mapping
    onto its non-reduction axes; None where none maps an axis, or where inputs tied at the most
    would lay `out` out differently (nvFuser's rule: then only an input mapping more axes is
    a reference)."""
    targets = _axes_by_class(out, classes)
    if targets is None:
        return None
    best, most = None, 0
    for tv in inputs:
        if _axes_by_class(tv, classes) is None:
            continue
        found = [targets.get(_class_of(d, classes)) for d in tv.domain.no_reductions() if not d.is_broadcast]
        count = sum(1 for d in found if d is not None and not d.is_reduction)
        if count > most:
            best, most = tv, count
        elif count == most and best is not None and not _same_order(tv, best, out, classes):
            best = None
    return best


def _same_order(a: TensorView, b: TensorView, out: TensorView, classes: UnionFind) -> bool:
    """Whether references `a` and `b` lay `out` out alike."""
    return all(x is y for x, y in zip(_mapped_order(a, out, classes), _mapped_order(b, out, classes)))


def _allocated(tv: TensorView) -> list[IterDomain]:
    """tv's non-reduction logical axes in its memory order, outer to inner."""
    logical = tv.domain.no_reductions()
    order = tv.domain.allocation_order()
    return logical if order is None else [logical[k] for k in order]


def _mapped_order(ref: TensorView, out: TensorView, classes: UnionFind) -> list[IterDomain]:
    """`out`'s non-reduction axes laid out after `ref` (module docstring)."""
    targets = _axes_by_class(out, classes)
    inner: list[IterDomain] = []  # innermost first
    for d in reversed(_allocated(ref)):
        mapped = targets.get(_class_of(d, classes))
        if mapped is None:
            if d.is_broadcast:
                continue  # (a broadcast holds no elements to lay out)
            break
        if not mapped.is_reduction and all(mapped is not x for x in inner):
            inner.append(mapped)
    outer = [d for d in out.domain.no_reductions() if all(d is not x for x in inner)]
    return outer + inner[::-1]
