"""Which axes a kernel iterates over: IterDomains of a group mapped to shared loop axes.

Elementwise ops map their operands' axes position by position (a broadcast axis joins the
concrete axes it meets that have one extent), reductions map input axes to the output's
reduction axes, broadcast, squeeze and permute map the axes they keep. Each resulting class is
one loop axis of the kernel; its extent is the extent of any concrete member (op construction
unified them). Classes of broadcasts only, and those of an axis a squeeze removes (size 1), are
no loop axes. The scheduler then decides which axes run across programs and which inside one.

Slice, pad and cat (resize ops) map an input axis onto the output's axis at an offset: both are
one loop axis, "resized", whose members have several extents. The kernel iterates it over the
extent of the group's outputs (which must agree) and reads the tensors before a resize at the
shifted index (codegen/resize.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from ..ir import (BinaryOp, BroadcastOp, CastOp, CatOp, ExpandOp, Expr, IterDomain, LoadStoreOp, PadOp,
                  PermuteOp, ReductionOp, SliceOp, SqueezeOp, TensorView, TernaryOp, UnaryOp, VarMeanOp)
from ..ir.symbolic import Extent
from ..segment.segments import RESIZED_OUTPUTS

_ELEMENTWISE = (UnaryOp, BinaryOp, TernaryOp, CastOp, LoadStoreOp, ExpandOp)


class UnionFind:
    def __init__(self):
        self.parent: dict[int, int] = {}
        self.ids: dict[int, IterDomain] = {}

    def add(self, d: IterDomain) -> None:
        if id(d) not in self.parent:
            self.parent[id(d)] = id(d)
            self.ids[id(d)] = d

    def find(self, k: int) -> int:
        while self.parent[k] != k:
            self.parent[k] = self.parent[self.parent[k]]
            k = self.parent[k]
        return k

    def union(self, a: IterDomain, b: IterDomain) -> None:
        self.add(a)
        self.add(b)
        ra, rb = self.find(id(a)), self.find(id(b))
        if ra != rb:
            self.parent[rb] = ra


def axis_pairs(e: Expr):
    """Pairs of (output id, input id) that are the same loop axis."""
    if isinstance(e, _ELEMENTWISE):
        outs = [o.domain.no_reductions() for o in e.outputs if isinstance(o, TensorView)]
        for v in e.inputs:
            if isinstance(v, TensorView):
                for out in outs:
                    yield from zip(out, v.domain.no_reductions())
    elif isinstance(e, (ReductionOp, VarMeanOp)):
        for o in e.outputs:
            yield from zip(o.domain.logical, e.inp.domain.no_reductions())
    elif isinstance(e, BroadcastOp):
        kept = [d for d, new in zip(e.out.domain.no_reductions(), e.is_broadcast) if not new]
        yield from zip(kept, e.inp.domain.no_reductions())
    elif isinstance(e, SqueezeOp):
        kept = [d for k, d in enumerate(e.inp.domain.no_reductions()) if k not in e.dims]
        yield from zip(e.out.domain.no_reductions(), kept)
    elif isinstance(e, PermuteOp):
        src = e.inp.domain.no_reductions()
        yield from zip(e.out.domain.no_reductions(), [src[k] for k in e.dims])
    elif isinstance(e, RESIZE_OPS):  # the dims it resizes are linked later (_resize_links)
        resized = resized_dims(e)
        for v in e.inputs:
            if isinstance(v, TensorView):
                for k, (o, i) in enumerate(zip(e.out.domain.no_reductions(), v.domain.no_reductions())):
                    if k not in resized:
                        yield o, i


def _resize_links(e: Expr):
    """(output id, input id) pairs of the dims a resize moves, both concrete (a size-1
    broadcast padded or concatenated does not vary along the axis)."""
    resized = resized_dims(e)
    for v in e.inputs:
        if isinstance(v, TensorView):
            for k, (o, i) in enumerate(zip(e.out.domain.no_reductions(), v.domain.no_reductions())):
                if k in resized and concrete_extent(o) is not None and concrete_extent(i) is not None:
                    yield o, i


RESIZE_OPS = (SliceOp, PadOp, CatOp)


def pad_widths(e: PadOp) -> dict[int, tuple[int, int]]:
    """Padded dim -> (left, right), from F.pad's order (last dim first)."""
    widths = [int(w.value) for w in e.inputs[2:]]
    n = e.out.ndim
    return {n - 1 - k: (widths[2 * k], widths[2 * k + 1]) for k in range(len(widths) // 2)}


def resized_dims(e: Expr) -> set[int]:
    """The dims a slice, pad or cat moves its input along (not the identity there)."""
    if isinstance(e, SliceOp):
        out, inp = e.out.domain.no_reductions(), e.inp.domain.no_reductions()
        return {k for k, (lo, _, step) in enumerate(e.ranges)
                if not (lo.is_constant and lo.value == 0 and step.value == 1 and out[k].extent == inp[k].extent)}
    if isinstance(e, PadOp):
        return {k for k, (lo, hi) in pad_widths(e).items() if lo or hi}
    if isinstance(e, CatOp):
        return {e.dim} if len(e.inputs) > 1 else set()
    return set()


def _keepdim_links(exprs: Sequence[Expr], reduced: set[int]):
    """(broadcast IterDomain, reduction IterDomain) where a broadcast puts a new axis back at
    the position a reduction of the group removed (`x.sum(-1, keepdim=True)`; elementwise ops
    between, a cast or a scale, and a squeeze of the kept axis broadcast again later, as a
    backward's sum, view and expand lower). `y - x.sum(-1, keepdim=True)` with x and y apart
    maps y's columns to x's reduced axis only through this link: without it they are two loop
    axes, and the kernel sums x's row again for each of y's columns."""
    # id(tv) -> the reduction output's logical axes (the reduced ones in place), for tensors
    # of its shape (`collapsed`) and of its keepdim shape, size-1 broadcasts there (`kept`)
    collapsed: dict[int, list[IterDomain]] = {}
    kept: dict[int, list[IterDomain]] = {}

    def fits(tv: TensorView, full: list[IterDomain], keepdim: bool) -> bool:
        axes = tv.domain.no_reductions()
        if not keepdim:
            return len(axes) == sum(not d.is_reduction for d in full)
        return len(axes) == len(full) and all(
            concrete_extent(a) is None for a, d in zip(axes, full) if d.is_reduction)

    for e in exprs:
        if isinstance(e, (ReductionOp, VarMeanOp)):
            for o in e.outputs:
                if id(o) in reduced:
                    collapsed[id(o)] = list(o.domain.logical)
        elif isinstance(e, _ELEMENTWISE):
            for form, keepdim in ((collapsed, False), (kept, True)):
                full = next((form[id(v)] for v in e.inputs if isinstance(v, TensorView) and id(v) in form), None)
                if full is not None and fits(e.out, full, keepdim):
                    form[id(e.out)] = full
        elif isinstance(e, BroadcastOp) and id(e.inp) in collapsed:
            full = collapsed[id(e.inp)]
            if list(e.is_broadcast) == [d.is_reduction for d in full]:
                kept[id(e.out)] = full
                new = [d for d, b in zip(e.out.domain.no_reductions(), e.is_broadcast) if b]
                yield from zip(new, [d for d in full if d.is_reduction])
        elif isinstance(e, SqueezeOp) and id(e.inp) in kept:
            full = kept[id(e.inp)]
            if sorted(e.dims) == [k for k, d in enumerate(full) if d.is_reduction]:
                collapsed[id(e.out)] = full


def concrete_extent(d: IterDomain) -> Optional[Extent]:
    if d.expanded_extent is not None:
        return d.expanded_extent
    return None if d.is_broadcast else d.extent


@dataclass
class LoopAxis:
    index: int
    extent: Extent
    is_reduction: bool
    members: list[IterDomain] = field(repr=False)


@dataclass
class KernelAxes:
    """The loop axes of a group, in the reference tensor's order, and each tensor's map from
    its logical axes (non-reduction) to loop axes (None: a broadcast that stays size 1)."""

    axes: list[LoopAxis]
    tensor_axes: dict[int, list[Optional[int]]]  # id(tv) -> loop axis per logical axis
    tensors: list[TensorView]
    reference: TensorView
    resized: frozenset[int] = frozenset()  # loop axes a slice, pad or cat moves tensors along
    aligned_outputs: bool = False  # analysed with `align_outputs` (outputs share their axes)
    # the analysis's union-find of axes, and per (broadcast class, extent) the first concrete
    # axis that class met: what `PointwiseAxes` extends
    links: Optional[tuple["UnionFind", dict]] = field(default=None, repr=False, compare=False)

    def of(self, tv: TensorView) -> list[Optional[int]]:
        return self.tensor_axes[id(tv)]

    def spans(self, tv: TensorView) -> set[int]:
        return {a for a in self.of(tv) if a is not None}

    def spans_all(self, tv: TensorView) -> bool:
        """Whether `tv` varies along every loop axis."""
        return self.spans(tv) == {a.index for a in self.axes}

    @property
    def reduction_axes(self) -> list[int]:
        return [a.index for a in self.axes if a.is_reduction]


def group_tensors(exprs: Sequence[Expr]) -> list[TensorView]:
    seen, out = set(), []
    for e in exprs:
        for v in list(e.inputs) + list(e.outputs):
            if isinstance(v, TensorView) and id(v) not in seen:
                seen.add(id(v))
                out.append(v)
    return out


def analyze_axes(exprs: Sequence[Expr], outputs: Sequence[TensorView] = (),
                 align_outputs: bool = False) -> tuple[Optional[KernelAxes], str]:
    """Map every tensor of the group onto shared loop axes, or say why that is impossible.
    `outputs` set the extents of resized axes. `align_outputs`: outputs of one rank and the
    same extents share their loop axes position by position (independent computations, rope
    of q and of k, iterated together rather than as an outer product)."""
    uf = UnionFind()
    tensors = group_tensors(exprs)
    reduced = {id(o) for e in exprs if isinstance(e, (ReductionOp, VarMeanOp)) for o in e.outputs}

    def ids_of(tv: TensorView) -> list[IterDomain]:
        # reduction axes matter only where this group reduces them (not a linear's contraction)
        return tv.domain.logical if id(tv) in reduced else tv.domain.no_reductions()

    for tv in tensors:
        for d in ids_of(tv):
            uf.add(d)
    # a broadcast axis meets concrete axes, maybe several (x * b and y * b, b [m, 1]): those
    # become one loop axis where their extents are the same expression, never otherwise (one
    # axis for [m, n] and [m, m * n] read the first out of bounds)
    met: list[tuple[IterDomain, IterDomain]] = []
    for e in exprs:
        for a, b in axis_pairs(e):
            if (concrete_extent(a) is None) == (concrete_extent(b) is None):
                uf.union(a, b)
            else:
                met.append((a, b) if concrete_extent(a) is None else (b, a))
    same_extent: dict[tuple, IterDomain] = {}
    for b, r in _keepdim_links(exprs, reduced):
        # the broadcast class meets the reduced axis first: a concrete axis of its extent joins
        # it (the normalization's loop axis), not an axis of its own the sum is redone along
        uf.union(same_extent.setdefault((uf.find(id(b)), concrete_extent(r)), r), r)
    for b, d in met:
        first = same_extent.setdefault((uf.find(id(b)), concrete_extent(d)), d)
        uf.union(first, d)
    if align_outputs:
        outs = [o for o in outputs if isinstance(o, TensorView)]
        for o in outs[1:]:
            a, b = outs[0].domain.no_reductions(), o.domain.no_reductions()
            if len(a) == len(b) and all(concrete_extent(x) == concrete_extent(y) for x, y in zip(a, b)):
                for x, y in zip(a, b):
                    if concrete_extent(x) is not None:
                        uf.union(x, y)
    # an axis a squeeze removes has size 1 in every execution (binding checks it), so like a
    # broadcast it is no loop axis: were it one, the squeeze's input would vary along a tile
    # dim its output does not, and the output's value would not fit its tile (a 0-d result of
    # a row-shaped operand)
    squeezed = [d for e in exprs if isinstance(e, SqueezeOp)
                for k, d in enumerate(e.inp.domain.no_reductions()) if k in e.dims and not d.is_broadcast]
    unit = {uf.find(id(d)) for d in squeezed}
    # a resize joins its input's axis to its output's; never a size-1 axis a squeeze removes
    # (x[:1] of a row-shaped x, squeezed: the slice reads row `start` for every row)
    resizes = [e for e in exprs if isinstance(e, RESIZE_OPS)]
    for e in resizes:
        if isinstance(e, SliceOp) and any(
                concrete_extent(i) is not None and concrete_extent(o) is None
                for i, o in zip(e.inp.domain.no_reductions(), e.out.domain.no_reductions())):
            # an expanded axis sliced to one element is a size-1 broadcast, constant along the
            # loop axis of the input's (which still varies along it): ATen takes the view
            return None, "a slice of an expanded axis to one element"
    for out_id, in_id in (link for e in resizes for link in _resize_links(e)):
        if uf.find(id(out_id)) in unit and uf.find(id(in_id)) not in unit:
            # the kernel would read the input at a fixed index along an axis it does not
            # iterate; ATen takes the view (x[:, :, 3], a select, is a slice squeezed)
            return None, "a slice to one element of an axis a squeeze then removes"
        if uf.find(id(in_id)) not in unit:
            uf.union(out_id, in_id)
    classes: dict[int, list[IterDomain]] = {}
    for k in uf.parent:
        classes.setdefault(uf.find(k), []).append(uf.ids[k])
    concrete = {root: next((concrete_extent(d) for d in ms if concrete_extent(d) is not None), None)
                for root, ms in classes.items()}
    # (a padded or concatenated size-1 broadcast links nothing, but its output axis is indexed
    # to choose the fill: it is resized too)
    resized_roots = {uf.find(id(e.out.domain.no_reductions()[k])) for e in resizes for k in resized_dims(e)} - unit
    # the tensors iterated over the loop space: the outputs, and what reductions read
    level = [o for o in outputs if isinstance(o, TensorView)] + [
        e.inp for e in exprs if isinstance(e, (ReductionOp, VarMeanOp))]
    fusion = tensors[0].fusion if resized_roots else None
    same = fusion.equal_extents() if fusion is not None else (lambda e: e)
    for root in resized_roots:
        found = {concrete_extent(d) for o in level for d in o.domain.no_reductions()
                 if uf.find(id(d)) == root and concrete_extent(d) is not None}
        if not found:
            return None, "no output spans an axis a slice, pad or cat resizes"
        if len({same(e) for e in found}) != 1:
            return None, RESIZED_OUTPUTS
        concrete[root] = sorted(found, key=str)[0]
    reduction_roots = {root for root, ms in classes.items() if any(d.is_reduction for d in ms)}

    def is_loop_axis(d: IterDomain) -> bool:
        return concrete_extent(d) is not None and uf.find(id(d)) not in unit

    def roots_of(tv: TensorView) -> list[Optional[int]]:
        # a size-1 broadcast axis does not vary along the loop axis it meets
        return [uf.find(id(d)) if is_loop_axis(d) else None for d in tv.domain.no_reductions()]

    def coverage(tv: TensorView) -> set[int]:
        return {uf.find(id(d)) for d in ids_of(tv) if is_loop_axis(d)}

    # the tensor covering the most axes; the first such (max keeps the first of equal keys)
    reference = max(tensors, key=lambda t: len(coverage(t)))
    order = [uf.find(id(d)) for d in ids_of(reference) if is_loop_axis(d)]
    if len(set(order)) != len(order):
        return None, f"T{reference.name} maps two of its axes to one loop axis"
    # axes no single tensor spans with the reference (an outer product, an iota's axis) go
    # outermost, in the order the group's tensors list them; the reference keeps the inner ones
    missing = [r for t in tensors for r in (uf.find(id(d)) for d in ids_of(t) if is_loop_axis(d))
               if r not in order]
    order = list(dict.fromkeys(missing)) + order
    index = {root: k for k, root in enumerate(order)}
    axes = [LoopAxis(k, concrete[root], root in reduction_roots, classes[root]) for k, root in enumerate(order)]
    tensor_axes = {}
    for tv in tensors:
        mapped = [None if r is None else index[r] for r in roots_of(tv)]
        real = [m for m in mapped if m is not None]
        if len(set(real)) != len(real):
            return None, f"T{tv.name} maps two of its axes to one loop axis"
        tensor_axes[id(tv)] = mapped
    resized = frozenset(index[r] for r in resized_roots if r in index)
    return KernelAxes(axes, tensor_axes, tensors, reference, resized, align_outputs, (uf, same_extent)), ""


class PointwiseAxes:
    """The loop axis of each axis of a group's tensors (`KernelAxes.tensor_axes`, by axis), and
    the classes of its broadcast axes with the loop axis each met per extent, for a group
    without reductions or resizes (slice, pad, cat), kept up to date as single elementwise,
    broadcast or permute exprs join it (not a squeeze: the axis it removes is no loop axis).
    `joined` answers where `analyze_axes` of the grown group would provably keep the group's
    loop axes (each axis of the expr's new tensors joins one of them, or a broadcast class),
    and so succeed as it did: a chain of n pointwise ops, merged one op at a time, then needs
    no analysis of the whole chain per op (that made segmentation quadratic in the chain's
    length). Anything it cannot tell is no."""

    def __init__(self, axes: KernelAxes):
        uf, met = axes.links
        # id(IterDomain) -> loop axis; None: not a loop axis (a broadcast, or squeezed)
        self.axis_of: dict[int, Optional[int]] = {}
        self.broadcast_of: dict[int, int] = {}  # id(broadcast IterDomain) -> its class
        for tv in axes.tensors:
            for d, a in zip(tv.domain.no_reductions(), axes.of(tv)):
                self.axis_of[id(d)] = a
                if concrete_extent(d) is None:
                    self.broadcast_of[id(d)] = uf.find(id(d))
        # (broadcast class, extent) -> the loop axis of the concrete axes it met of that extent
        # (None: squeezed); a broadcast class's root is final before any concrete axes join (a
        # reduced axis that a keepdim broadcast met first, which no tensor's iterated axes hold:
        # the loop axis of its class)
        axis_of_class = {uf.find(id(a.members[0])): a.index for a in axes.axes}
        self.met: dict[tuple, Optional[int]] = {
            key: self.axis_of.get(id(d), axis_of_class.get(uf.find(id(d)))) for key, d in met.items()}
        self.tensors: set[int] = {id(tv) for tv in axes.tensors}

    def joined(self, e: Expr) -> Optional[tuple[dict, dict, dict]]:
        """What `e` brings into the group where it keeps the group's loop axes (mirroring
        `analyze_axes`: pairs of concrete or of broadcast axes are unions, a broadcast class
        meeting concrete axes joins those of one extent), for `join`; else None."""
        if not isinstance(e, (*_ELEMENTWISE, BroadcastOp, PermuteOp)):
            return None
        parent: dict = {}  # a union-find: ("axis", k), ("class", c) of the group; new axes by id

        def find(k):
            while parent[k] != k:
                k = parent[k]
            return k

        def union(a, b) -> None:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[rb] = ra

        def node(d: IterDomain):
            if id(d) not in self.axis_of:
                return id(d)
            if self.axis_of[id(d)] is not None:
                return "axis", self.axis_of[id(d)]
            return ("class", self.broadcast_of[id(d)]) if id(d) in self.broadcast_of else None

        met = []
        for a, b in axis_pairs(e):
            na, nb = node(a), node(b)
            if na is None or nb is None:
                return None  # a squeezed axis
            parent.setdefault(na, na)
            parent.setdefault(nb, nb)
            if (concrete_extent(a) is None) == (concrete_extent(b) is None):
                union(na, nb)
            else:
                met.append((na, b) if concrete_extent(a) is None else (nb, a))
        group_class: dict = {}  # root -> the group's broadcast class in it
        for k in parent:
            if isinstance(k, tuple) and k[0] == "class" and group_class.setdefault(find(k), k[1]) != k[1]:
                return None  # two broadcast classes of the group would become one
        first: dict[tuple, object] = {}
        for b, d in met:
            key = (find(b), concrete_extent(d))
            if key not in first:
                c = group_class.get(key[0])
                if c is not None and (c, key[1]) in self.met:
                    if self.met[(c, key[1])] is None:
                        return None  # the class met a squeezed axis of this extent
                    first[key] = ("axis", self.met[(c, key[1])])
                    parent.setdefault(first[key], first[key])
                else:
                    first[key] = node(d)
            union(first[key], node(d))
        axis_at: dict = {}  # root -> the group's loop axis in it
        for k in parent:
            if isinstance(k, tuple) and k[0] == "axis" and axis_at.setdefault(find(k), k[1]) != k[1]:
                return None  # two loop axes of the group would become one
        axis_of: dict[int, Optional[int]] = {}
        broadcast_of: dict[int, int] = {}
        for tv in self._new_tensors(e):
            mapped = []
            for d in tv.domain.no_reductions():
                if id(d) in self.axis_of:
                    return None  # (an axis object shared with a tensor of the group)
                root = find(parent.setdefault(id(d), id(d)))
                a = axis_at.get(root)
                if concrete_extent(d) is None:
                    broadcast_of[id(d)] = group_class.get(root, root)
                elif a is None:
                    return None  # a loop axis of its own
                mapped.append(a)
                axis_of[id(d)] = a
            real = [a for a in mapped if a is not None]
            if len(set(real)) != len(real):
                return None  # the tensor maps two of its axes to one loop axis
        met_axes = {(group_class.get(root, root), extent): axis_at[find(n)] for (root, extent), n in first.items()}
        return axis_of, broadcast_of, met_axes

    def join(self, e: Expr, found: tuple[dict, dict, dict]) -> None:
        """Take `e` into the group, with what `joined` found."""
        axis_of, broadcast_of, met = found
        self.tensors.update(id(tv) for tv in self._new_tensors(e))
        self.axis_of.update(axis_of)
        self.broadcast_of.update(broadcast_of)
        self.met.update(met)

    def _new_tensors(self, e: Expr) -> list[TensorView]:
        return list({id(v): v for v in (*e.inputs, *e.outputs)
                     if isinstance(v, TensorView) and id(v) not in self.tensors}.values())
