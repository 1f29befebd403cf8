"""Kernel plans: which template a group runs as, and how its loop axes map onto a 2-D tile.

A kernel works on a tile [BLOCK0, BLOCK1]. Pointwise: dim 1 is the innermost loop axis, dim 0
the rest, both spread over programs. Inner reduction (rows reduced along their innermost axes,
softmax and norms): dim 0 holds the rows a program owns, dim 1 the reduced axes, whole
(persistent) or in chunks (looped). Outer reduction (column sums): dim 1 holds the columns a
program owns and dim 0 the reduced rows, always looped. Inner-outer (row and column reductions
of the same rows, a norm's backward): dim 0 the rows each program loops over, dim 1 the whole
row; see inner_outer.py.
"""
from __future__ import annotations

import enum
import functools
import math
from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional, Sequence

import sympy

from ..ir import (VIEW_OPS, BinaryOp, BinaryOpType, BroadcastOp, CastOp, CatOp, DataType, ExpandOp, Expr, FullOp,
                  IotaOp, LoadStoreOp, LoadStoreOpType, PadOp, PermuteOp, ReductionOp, ReductionOpType, RNGOp, SliceOp,
                  Scalar, SqueezeOp, TensorView, TernaryOp, TernaryOpType, UnaryOp, UnaryOpType, Val,
                  VarMeanOp)
from ..ir.symbolic import format_extent
from ..segment.segments import NO_SPANNING_TENSOR
from .axes import RESIZE_OPS, KernelAxes, PointwiseAxes, analyze_axes, pad_widths, resized_dims
from .inner_outer import (FP32_COMPUTED, GroupGraph, InnerOuterAxes, InnerOuterSplit, apart_output, reduced_axes_of,
                          split_inner_outer)

KERNEL_OPS = (UnaryOp, BinaryOp, TernaryOp, CastOp, ReductionOp, VarMeanOp, BroadcastOp,
              ExpandOp, SqueezeOp, PermuteOp, LoadStoreOp, IotaOp, FullOp, SliceOp, PadOp, CatOp, RNGOp)
# a slice alone is a view (ATen makes it free); pad and cat make new tensors
_COMPUTE_OPS = tuple(op for op in KERNEL_OPS if op not in VIEW_OPS)


class Template(enum.Enum):
    pointwise = "pointwise"
    inner_reduction = "inner reduction"
    outer_reduction = "outer reduction"
    inner_outer = "inner-outer"


@dataclass(eq=False)
class KernelPlan:
    template: Template
    axes: KernelAxes
    exprs: list[Expr]
    inputs: list[Val]
    outputs: list[TensorView]
    dim0: list[int]  # loop axes on tile dim 0, outer to inner
    dim1: list[int]  # loop axes on tile dim 1
    parts: Optional["InnerOuterParts"] = None  # inner-outer plans only
    # a reduction whose output along the reduced dim reads its results: the form of two kernels
    # it may run as instead (statistics split over the reduced dim, then the outputs)
    statistics: Optional["StatisticsParts"] = None
    # ids of inputs that are softmax sums of the kernel that computed them (`softmax_sums`: a
    # two-kernel form's readers, whose sum arrives as an input)
    input_softmax_sums: frozenset[int] = frozenset()

    @property
    def red_dim(self) -> Optional[int]:
        """The tile dim a reduction inside one program reduces (inner-outer: the row's)."""
        return {Template.pointwise: None, Template.inner_reduction: 1, Template.inner_outer: 1,
                Template.outer_reduction: 0}[self.template]

    @property
    def fuses_siblings(self) -> bool:
        """Whether groups that only share inputs gain from running as this one kernel (the
        segmenter asks): an inner-outer kernel reads the rows once for both reductions, and
        reductions over the same axes read what they share once, in one pass (and pointwise
        kernels over one loop space, one launch). Not an outer
        reduction with an output along the reduced rows computed from a column sum: that output
        would need a pass of its own and keep the column sums from splitting over chunks of rows
        (one along the rows that needs no column sum is stored in the sums' pass). Nor a union
        with an output that misses a kept axis: siblings over other rows (x [n, c] and y [m, c]
        sharing w [c]) would iterate n * m rows, each output computed again for every row of the
        other."""
        if self.template is Template.inner_outer:
            return True
        if self.template is Template.pointwise:
            # pointwise siblings (the two halves of a SwiGLU's backward) read what they share
            # once, when every output covers the whole loop space (no outer product of theirs)
            return all(self.axes.spans_all(o) for o in self.outputs)
        if self.template not in (Template.inner_reduction, Template.outer_reduction):
            return False
        outer = self.template is Template.outer_reduction
        kept = set(self.dim1 if outer else self.dim0)
        if any(not kept <= self.axes.spans(o) for o in self.outputs):
            return False
        if not outer:
            return True
        fed = self.fed_by_reduction()
        return not any(set(self.dim0) & self.axes.spans(o) and id(o) in fed for o in self.outputs)

    def splittable(self) -> bool:
        """Whether the reduction can split over chunks of its reduced dim (rows of an outer
        reduction, columns of an inner one): every reduction reads only values computed before
        any reduction (or is the sum of a softmax pair, computed with its max in one online
        pass: `softmax_pairs`), and so does every output varying along the reduced dim (each
        chunk's program stores its part of it in its pass). Not an inner reduction with shifted
        views (a cat's or pad's), which are emitted with the whole row in registers."""
        if self.template is Template.outer_reduction:
            reduced = set(self.dim0)
        elif self.template is Template.inner_reduction and not self.axes.resized:
            reduced = set(self.dim1)
        else:
            return False
        fed = self.fed_by_reduction()
        if any(reduced & self.axes.spans(o) and id(o) in fed for o in self.outputs):
            return False
        # a softmax's sum reads its max, an arg reduction's positions their extreme, yet the
        # chunks' pairs combine exactly
        online = {id(p.sum) for p in self.online_pairs} | {id(p.index) for p in self.arg_pairs}
        return not any(id(e.inp) in fed for e in self.exprs
                       if isinstance(e, (ReductionOp, VarMeanOp)) and id(e) not in online)

    def stores_rows_in_pass(self) -> bool:
        """Whether an outer reduction stores an output varying along the reduced rows in its
        reduction pass (one fed by no reduction: codegen's `outputs_ready_in_pass`)."""
        if self.template is not Template.outer_reduction:
            return False
        reduced, fed = set(self.dim0), self.fed_by_reduction()
        return any(isinstance(o, TensorView) and reduced & self.axes.spans(o) and id(o) not in fed
                   for o in self.outputs)

    @functools.cached_property
    def online_pairs(self) -> list["SoftmaxPair"]:
        """The plan's softmax pairs (`softmax_pairs`), each computed in one online pass."""
        return softmax_pairs(self.exprs, self.axes)

    @functools.cached_property
    def arg_pairs(self) -> list["ArgPair"]:
        """The plan's arg reductions (`arg_pairs`), each computed in one pass of running
        (value, position) pairs. Reductions only: an inner-outer kernel's rows keep the two
        reductions."""
        if self.template not in (Template.inner_reduction, Template.outer_reduction):
            return []
        return arg_pairs(self.exprs, self.axes, {id(p.max) for p in self.online_pairs})

    @functools.cached_property
    def softmax_sums(self) -> frozenset[int]:
        """ids of the values that are a softmax sum, sum(exp(x - max(x))) of an unguarded pair
        (computed here, or by the split kernel of a two-kernel form: `input_softmax_sums`), or a
        broadcast, expand or set of one. Such a sum is at least 1 (the max's own term is exp(0) = 1), at
        most the row's length, or NaN (a NaN or infinite max), or 0 for an empty row: dividing
        by it may multiply by its reciprocal, computed once a row (codegen's `emit_binary`),
        which only a subnormal or huge divisor would make differ beyond rounding."""
        sums = {id(p.sum.out) for p in self.online_pairs if not p.zero_if_infinite} | self.input_softmax_sums
        if not sums:
            return frozenset()
        producer = {id(o): e for e in self.exprs for o in e.outputs}
        return frozenset(id(o) for e in self.exprs for o in e.outputs
                         if id(viewed_source(producer, o)) in sums) | sums

    def fed_by_reduction(self) -> set[int]:
        """ids of the plan's values computed from a reduction's result."""
        fed: set[int] = set()
        for e in self.exprs:  # in group order: producers first
            if isinstance(e, (ReductionOp, VarMeanOp)) or any(id(v) in fed for v in e.inputs):
                fed |= {id(o) for o in e.outputs}
        return fed

    def growable_axes(self) -> "Optional[PointwiseAxes | InnerOuterAxes]":
        """The axes by which the group of a pointwise or single-reduction plan may grow one
        pointwise expr at a time with no new plan (`PointwiseAxes.join`). The union is then a
        plan of the same template, as long as the joining expr passes `plan_kernel`'s per-op
        checks alone (the segmenter asks): past `analyze_axes`, a single reduction's acceptance
        reads only the loop axes' classes (which axes are reduced, and by which op), and a
        join that keeps every class keeps them (a normalization's tail of pointwise ops, one
        op at a time, planned the whole group per op). An inner-outer plan grows on its row
        and combine sides (`InnerOuterAxes`). None for the rest: resizes, and outputs analysed
        aligned, which are not the plain analysis a join extends."""
        if self.template not in (Template.pointwise, Template.inner_reduction, Template.outer_reduction,
                                 Template.inner_outer) \
                or self.axes.aligned_outputs or any(isinstance(e, RESIZE_OPS) for e in self.exprs):
            return None
        if self.template is Template.inner_outer:
            if self.parts is None:
                return None
            rows = self.parts.rows.growable_axes() if self.parts.rows is not None else None
            columns = self.parts.columns.growable_axes()
            if rows is None and columns is None:
                return None
            return InnerOuterAxes(PointwiseAxes(self.axes), rows, columns, self.parts.split, self.exprs)
        return PointwiseAxes(self.axes)

    def describe(self) -> str:
        # (in nvFuser's notation, as the IR beside it prints extents, not sympy's `Max(..)`)
        ext = lambda axes: "[" + ", ".join(format_extent(self.axes.axes[a].extent) for a in axes) + "]"  # noqa: E731
        return f"{self.template.value}: tile dim0 {ext(self.dim0)} x dim1 {ext(self.dim1)}"


class SoftmaxPair(NamedTuple):
    """A max(x) and a sum(exp(x - shift)) of the same x, where the shift is the max, or
    `where(|max| == inf, 0, max)` (`zero_if_infinite`: logsumexp's decomposition; its sum is
    then 0 for a row of -inf and inf for a row holding inf, where the max's is NaN)."""

    max: ReductionOp
    sum: ReductionOp
    zero_if_infinite: bool


def viewed_source(producer: dict, v: Val) -> Val:
    """The value `v` views through broadcasts, expands and sets (`producer`: each value's
    expr, by id)."""
    e = producer.get(id(v))
    while isinstance(e, (BroadcastOp, ExpandOp, LoadStoreOp)):
        v = e.inputs[0]
        e = producer.get(id(v))
    return v


def softmax_pairs(exprs: Sequence[Expr], axes: KernelAxes) -> list[SoftmaxPair]:
    """The softmax pairs of `exprs` in fp32, both reductions over the same axes of the same
    values, a max in one pair at most: those of softmax, log-softmax, logsumexp and cross
    entropy. A pass over the reduced dim computes such a pair together, its max in no other
    pass (codegen/online_softmax.py), and chunks of it combine exactly (the maximum of their
    maxima, their sums rescaled to it), so a split reduction may hold one though the sum reads
    the max."""
    producer = {id(o): e for e in exprs for o in e.outputs}
    viewed = functools.partial(viewed_source, producer)

    def op(v: Val, kind) -> Optional[Expr]:  # the producer of `v` if it is an op of `kind`
        e = producer.get(id(v))
        return e if getattr(e, "kind", None) is kind else None

    def constant(v: Val, value: float) -> bool:
        return isinstance(v, Scalar) and v.is_constant and v.value == value

    def shifted(v: Val) -> tuple[Val, bool]:  # (what `v` shifts by: a max?, through its guard)
        guard = op(v, TernaryOpType.where)
        if guard is not None and constant(guard.inputs[1], 0):
            test = op(guard.inputs[0], BinaryOpType.eq)
            size = op(test.inputs[0], UnaryOpType.abs) if test is not None and constant(test.inputs[1], math.inf) \
                else None
            if size is not None and viewed(size.inputs[0]) is viewed(guard.inputs[2]):
                return viewed(guard.inputs[2]), True
        return v, False

    def fp32(e, kind: ReductionOpType) -> bool:
        return isinstance(e, ReductionOp) and e.kind is kind and e.out.dtype in FP32_COMPUTED \
            and e.inp.dtype in FP32_COMPUTED

    pairs, paired = [], set()
    for s in exprs:
        exp = op(s.inp, UnaryOpType.exp) if fp32(s, ReductionOpType.sum) else None
        sub = op(exp.inp, BinaryOpType.sub) if exp is not None else None
        if sub is None:
            continue
        top, guarded = shifted(viewed(sub.inputs[1]))
        m = producer.get(id(top))
        if fp32(m, ReductionOpType.max) and id(m) not in paired and sub.inputs[0] is m.inp and \
                reduced_axes_of(m, axes) == reduced_axes_of(s, axes) and axes.spans(m.inp) == axes.spans(s.inp):
            pairs.append(SoftmaxPair(m, s, guarded))
            paired.add(id(m))  # (a second sum of the same max reads it as any reduction would)
    return pairs


class ArgPair(NamedTuple):
    """An extreme `max(x)` (or min) and the first position reaching it,
    `min(where(x == extreme | isnan(x), positions, fill))` over the same axes: argmax, argmin
    and max / min along a dim (frontend/rules/argreduce.py). `largest`: a max."""

    extreme: ReductionOp
    index: ReductionOp
    positions: Val
    fill: Scalar
    largest: bool


def arg_pairs(exprs: Sequence[Expr], axes: KernelAxes, taken: frozenset[int] = frozenset()) -> list[ArgPair]:
    """The arg reductions of `exprs`: each a pass of running (value, position) pairs, a lane
    taking an element that beats its value (NaN beats every number, as the max's NaN
    propagates) or ties it at an earlier position. That is the first position reaching the
    extreme, as the two reductions give it, and chunks of the reduced dim combine alike, so a
    split reduction may hold one though the positions read the extreme
    (codegen/online_arg.py). Floating x needs the isnan term (without it a NaN row reaches
    no position: the fill); an extreme in `taken` (a softmax pair's) is left to its pair."""
    producer = {id(o): e for e in exprs for o in e.outputs}

    def op(v: Val, kind) -> Optional[Expr]:
        e = producer.get(id(v))
        return e if getattr(e, "kind", None) is kind else None

    def constant(v: Val, value: int) -> bool:
        return isinstance(v, Scalar) and v.is_constant and v.value == value

    def symbolic(v: Scalar) -> sympy.Expr:
        return v.expr if v.expr is not None else sympy.sympify(v.value)

    def reached(cond: Val) -> Optional[tuple[Val, ReductionOp]]:  # (x, extreme) of x == extreme
        eq = op(cond, BinaryOpType.eq)
        if eq is None:
            return None
        for x, other in (eq.inputs, eq.inputs[::-1]):
            m = producer.get(id(viewed_source(producer, other)))
            if isinstance(m, ReductionOp) and m.kind in (ReductionOpType.max, ReductionOpType.min) and m.inp is x:
                return x, m
        return None

    def below_fill(where: Expr) -> bool:
        """Whether the positions are an iota 0, 1, .. (which reads no reduction) and the fill
        is at least its length: a reached position then always beats the fill, so the min is
        the first reached position (the fill where none is), as the pairs give it."""
        iota, fill = producer.get(id(viewed_source(producer, where.inputs[1]))), where.inputs[2]
        if not isinstance(iota, IotaOp) or not isinstance(fill, Scalar):
            return False
        length, start, step = iota.inputs
        return constant(start, 0) and constant(step, 1) and (symbolic(fill) - symbolic(length)).is_nonnegative is True

    def reached_or_nan(cond: Val) -> Optional[tuple[Val, ReductionOp]]:  # of x == extreme | isnan(x)
        either = op(cond, BinaryOpType.logical_or)
        for a, b in (either.inputs, either.inputs[::-1]):
            nan, hit = op(b, UnaryOpType.isnan), reached(a)
            if nan is not None and hit is not None and nan.inputs[0] is hit[0]:
                return hit
        return None

    pairs, paired = [], set()
    for e in exprs:
        if not (isinstance(e, ReductionOp) and e.kind is ReductionOpType.min
                and e.out.dtype in (DataType.Int, DataType.Int32)):
            continue
        where = op(e.inp, TernaryOpType.where)
        if where is None or where.inputs[1].dtype is not e.out.dtype or not below_fill(where):
            continue
        cond = where.inputs[0]
        found = reached_or_nan(cond) if op(cond, BinaryOpType.logical_or) else reached(cond)
        if found is None or (found[0].dtype.category >= 2 and not op(cond, BinaryOpType.logical_or)):
            continue  # (a floating x needs its isnan term)
        x, m = found
        if x.dtype is DataType.Bool or id(m) in paired or id(m) in taken \
                or reduced_axes_of(m, axes) != reduced_axes_of(e, axes) or axes.spans(x) != axes.spans(e.inp):
            continue
        pairs.append(ArgPair(m, e, where.inputs[1], where.inputs[2], m.kind is ReductionOpType.max))
        paired.add(id(m))
    return pairs


@dataclass(eq=False)
class InnerOuterParts:
    """The kernels of an inner-outer plan. `persistent`: the one pass over rows (row outputs
    and partial column sums); `combine`: the split outer reduction's combine step over the
    partials. For rows too long for registers, `rows` (an inner reduction that also writes the
    row statistics) then `columns` (an outer reduction reading them); `rows` is None when the
    column outputs need no row values."""

    split: InnerOuterSplit
    persistent: KernelPlan
    combine: KernelPlan
    rows: Optional[KernelPlan]
    columns: KernelPlan
    apart: "Optional[ApartParts]" = None


@dataclass(eq=False)
class ApartParts:
    """An inner-outer plan with one column output computed apart (`inner_outer.apart_output`):
    `kept`, the inner-outer plan of the other outputs, and `apart`, the outer reduction of that
    one from kernel inputs. For rows too long for registers whose column sums would not all fit
    the shared-row kernel (codegen/shared_row.py), but the kept ones do."""

    kept: KernelPlan
    apart: KernelPlan


@dataclass(eq=False)
class StatisticsParts:
    """The two-kernel form of a reduction with an output along the reduced dim that reads a
    reduction's result (x - mean over rows, a softmax's exp(x - max) / sum). As one kernel it
    cannot split over chunks of the reduced dim, so it runs one program a kept block (a block of
    columns, or a row); with few of them the launch takes this form instead: `split`, a
    reduction that splits (the statistics the late outputs read, the reduction's other outputs,
    and the outputs that need no statistic), then `readers`, a pointwise kernel for the outputs
    that read the statistics. The same bytes: both forms read the input twice."""

    split: KernelPlan
    readers: KernelPlan


def plan_kernel(exprs: Sequence[Expr], inputs: list[Val], outputs: list[TensorView],
                lowerable: Callable[[Expr], bool]) -> tuple[Optional[KernelPlan], str]:
    """A plan for running `exprs` as one generated kernel, or the reason it cannot be one."""
    for e in exprs:
        if not isinstance(e, KERNEL_OPS):
            return None, f"{e.op_name} has no kernel lowering"
        if isinstance(e, LoadStoreOp) and e.kind is LoadStoreOpType.segment_set:
            return None, "segment_set marks a segment boundary"
        if not lowerable(e):
            return None, f"{e.op_name} has no lowering on this target"
    if not any(isinstance(e, _COMPUTE_OPS) for e in exprs):
        return None, "only views (broadcast, expand, squeeze, permute, slice): ATen makes them free"
    axes, why = analyze_axes(exprs, outputs)
    if axes is None:
        return None, why
    reductions = [e for e in exprs if isinstance(e, (ReductionOp, VarMeanOp))]
    # a reduction over size-1 axes only reduces no loop axis, though its input's axis may meet
    # one (x - m, m.sum(-1) of a keepdim mean): a kernel would reduce the copies along it
    if any(not reduced_axes_of(e, axes) for e in reductions):
        return None, "a reduction over size-1 axes only (ATen runs it)"
    sets = {frozenset(reduced_axes_of(e, axes)) for e in reductions}
    if axes.resized and reductions and (len(sets) > 1 or not axes.resized <= next(iter(sets))):
        # a reduction's output then never spans a shifted axis: it is computed once, at the
        # row's own indices (codegen/resize.py), for every view that reads it
        return None, "slice, pad and cat beside a reduction move only along the reduced axes"
    if axes.resized and shifted_values(exprs, axes, outputs) > SHIFTED_VALUES_PER_OP * len(exprs):
        return None, (f"slices, pads and cats read values at so many shifts that the kernel would compute "
                      f"more than {SHIFTED_VALUES_PER_OP} values an op")
    if not axes.axes:
        return None, "no loop axes (a 0-dim computation)"
    if sets and any(isinstance(e, RNGOp) for e in exprs):
        # (the reduction forms' other kernels, split, row loop, two kernels, are not written to
        # number random elements): the segmenter cuts before the reduction
        return None, "random numbers are drawn in pointwise kernels only"
    if len(sets) > 1:
        plan, why = _plan_inner_outer(exprs, axes, inputs, outputs, sets, lowerable)
        recomputed = plan and recomputed_reduction(axes, reductions)
        return (None, recomputed) if recomputed else (plan, why)
    all_axes = [a.index for a in axes.axes]
    if not sets:
        if any(a.is_reduction for a in axes.axes):
            return None, "a reduction axis is iterated without a reduction"
        if not all(axes.spans_all(o) for o in outputs):
            # independent parts of one shape (siblings joined by the segmenter): iterated
            # together where that makes every output span the loop space
            aligned, _ = analyze_axes(exprs, outputs, align_outputs=True)
            if aligned is not None and all(aligned.spans_all(o) for o in outputs):
                axes, all_axes = aligned, [a.index for a in aligned.axes]
        plan = KernelPlan(Template.pointwise, axes, list(exprs), inputs, outputs, all_axes[:-1], all_axes[-1:])
        return plan, ""
    reduced = sorted(next(iter(sets)))
    if {a.index for a in axes.axes if a.is_reduction} != set(reduced):
        return None, "an axis is reduced in one op and iterated after the reduction in another"
    why = recomputed_reduction(axes, reductions)
    if why:
        return None, why
    kept = [a for a in all_axes if a not in reduced]
    if all_axes[-1] in reduced:
        plan = KernelPlan(Template.inner_reduction, axes, list(exprs), inputs, outputs, kept, reduced)
    elif axes.resized:
        return None, "slice, pad and cat beside a column reduction"
    else:
        plan = KernelPlan(Template.outer_reduction, axes, list(exprs), inputs, outputs, reduced, kept)
    return plan, ""


# A kernel computes a value once for each view (codegen/resize.py: shifted loop axes, each
# read at its own index) that reads it. Views at sums of shifts that differ (a doubling scan's
# x + x shifted by 1, 2, 4, ...; rotates by amounts not provably equal, on rows of a symbolic
# length) double with each step, and the kernel's source with them (1024 loads of x at ten
# steps): past this many values per op of the group on average, the segmenter cuts the chain.
SHIFTED_VALUES_PER_OP = 16


def shifted_values(exprs: Sequence[Expr], axes: KernelAxes, outputs: Sequence[TensorView]) -> int:
    """How many values a kernel of `exprs` computes or loads: each tensor once per view it is
    read under (its outputs under the identity), a shifted axis keyed by the sum it is read at,
    as codegen/resize.py keys it; counted up to one past the bound."""
    bound = SHIFTED_VALUES_PER_OP * len(exprs)
    read: dict[int, set] = {id(o): {()} for o in outputs}
    count = len(read)
    for e in reversed(exprs):  # (in the fusion's order: a tensor's readers before it)
        wanted = set().union(*(read.get(id(o), ()) for o in e.outputs))
        for position, t in enumerate(e.inputs):
            if not isinstance(t, TensorView):
                continue
            found = wanted
            if isinstance(e, RESIZE_OPS):
                moves = list(_moves(e, position, axes))
                found = [_moved(view, moves) for view in wanted]
            if any(found):  # (a value depends on the indices of the axes it spans only)
                spans = axes.spans(t)
                found = {tuple(entry for entry in view if entry[0] in spans) for view in found}
            views = read.setdefault(id(t), set())
            count -= len(views)
            views.update(found)
            count += len(views)
            if count > bound:
                return count
    return count


# An index as the sum codegen/resize.py keys it by: frozenset of (term, coefficient), a term
# 1 (the integer part), a symbolic size or scalar (a parameter of the kernel), or ("index", axis),
# the output's index along a loop axis. Plain integers and dicts: sympy's arithmetic, at each
# of the planner's tries of a growing group, cost a second for a chain of 200 ops.


def _moved(view: tuple, moves: list) -> tuple:
    """`view` with each of `moves` (axis, output's axis, step, offset) applied: the input read
    at `step * i + offset`, i the output's index."""
    at = dict(view)
    for axis, out_axis, step, offset in moves:
        terms = dict(offset)
        for term, c in at.get(out_axis, ((("index", out_axis), 1),)):
            terms[term] = terms.get(term, 0) + step * c
        at[axis] = frozenset((term, c) for term, c in terms.items() if c)
    return tuple(sorted(at.items(), key=lambda entry: entry[0]))


def _moves(e: Expr, position: int, axes: KernelAxes):
    """(input's loop axis, output's loop axis, step, offset as {term: coefficient}) of each dim
    a resize moves its input at `position` along."""
    inp, out, dims = axes.of(e.inputs[position]), axes.of(e.out), resized_dims(e)
    if isinstance(e, SliceOp):
        steps = [(k, int(e.ranges[k][2].value), _term(e.ranges[k][0].expr)) for k in sorted(dims)]
    elif isinstance(e, PadOp):
        steps = [(k, 1, {1: -left}) for k, (left, _) in pad_widths(e).items() if k in dims]
    else:  # a cat: its input at `position` starts after those before it
        before = [t.domain.no_reductions()[e.dim] for t in e.inputs[:position]]
        start = sum((d.size for d in before), sympy.Integer(0))
        steps = [(e.dim, 1, {term: -c for term, c in _term(start).items()})] if dims else []
    for k, step, offset in steps:
        if inp[k] is not None and out[k] is not None:
            yield inp[k], out[k], step, offset


def _term(value: sympy.Expr) -> dict:
    return {1: int(value)} if value.is_Integer else {value: 1}


def recomputed_reduction(axes: KernelAxes, reductions: list) -> str:
    """Why a group's kernel would do more work than its tensors hold, else "": with reductions,
    where no tensor spans every loop axis (`y - x.sum(-1)` with x's reduced axis unlinked to
    y's columns: loop axes R x C x C, x's row summed again for each of y's columns). Where one
    tensor spans them all, a reduction redone along an axis its input lacks costs at most one
    pass over that tensor's elements (r [rows, 1] summed beside x [rows, cols])."""
    if not reductions or any(axes.spans_all(t) for t in axes.tensors):
        return ""
    e = next((e for e in reductions if not axes.spans_all(e.inp)), reductions[0])
    lacking = sorted({a.index for a in axes.axes} - axes.spans(e.inp))
    return (f"the reduction of T{e.inp.name} would be computed again along loop axis "
            f"{axes.axes[lacking[0]].extent if lacking else '?'}, which its input does not span "
            + NO_SPANNING_TENSOR)


def add_chosen_parts(plan: KernelPlan, lowerable: Callable[[Expr], bool]) -> None:
    """Give a chosen segment's plan the divisions its launches may take, where it has them
    (two more plans each: asked for the plans of the segments chosen, not for every group the
    segmenter tries): a reduction's two-kernel form (StatisticsParts: an output along the
    reduced dim that reads a reduction's result, and statistics that split, see
    `KernelPlan.splittable`: not a reduction of another's result, but for a softmax pair), and
    an inner-outer plan's column output apart (ApartParts)."""
    if plan.template in (Template.outer_reduction, Template.inner_reduction) and not plan.axes.resized \
            and plan.statistics is None:
        plan.statistics = _statistics_parts(plan, lowerable)
    if plan.template is Template.inner_outer and plan.parts is not None and plan.parts.apart is None:
        plan.parts.apart = _apart_parts(plan, lowerable)


def _statistics_parts(plan: KernelPlan, lowerable) -> Optional[StatisticsParts]:
    reduced = set(plan.dim0 if plan.template is Template.outer_reduction else plan.dim1)
    fed = plan.fed_by_reduction()
    along = lambda v: bool(reduced & plan.axes.spans(v))  # noqa: E731
    late = [o for o in plan.outputs if along(o) and id(o) in fed]
    if not late:
        return None
    graph = GroupGraph(plan.exprs, [v for v in plan.inputs if isinstance(v, TensorView)])
    # the reduced values the late outputs read: computed from a reduction, not along the
    # reduced dim
    reader_exprs, reader_inputs = graph.closure(late, lambda v: id(v) in fed and not along(v))
    statistics = [v for v in reader_inputs if id(v) in graph.producer]
    split_outputs = statistics + [o for o in plan.outputs if all(o is not v for v in late + statistics)]
    split_exprs, split_inputs = graph.closure(split_outputs, lambda v: False)
    split, _ = plan_kernel(split_exprs, split_inputs, split_outputs, lowerable)
    readers, _ = plan_kernel(reader_exprs, reader_inputs, late, lowerable)
    if split is None or split.template is not plan.template or not split.splittable() \
            or readers is None or readers.template is not Template.pointwise:
        return None
    # (set before anything reads the readers' softmax_sums, which caches them)
    readers.input_softmax_sums = frozenset(id(v) for v in reader_inputs if id(v) in plan.softmax_sums)
    return StatisticsParts(split, readers)


def _plan_inner_outer(exprs, axes: KernelAxes, inputs, outputs, sets, lowerable) -> tuple[Optional[KernelPlan], str]:
    split, why = split_inner_outer(exprs, axes, inputs, outputs, sets)
    if split is None:
        return None, why
    rows, columns = split.row_axes, split.column_axes
    persistent = KernelPlan(Template.inner_outer, axes, list(exprs), inputs, split.row_outputs, rows, columns)
    combine = KernelPlan(Template.outer_reduction, axes, split.combine_exprs, split.combine_inputs,
                         split.column_outputs, rows, columns)
    # the two-kernel form must be a valid pair of plans, or the group is not taken at all
    row_plan = None
    if split.row_exprs:
        row_plan, why = plan_kernel(split.row_exprs, split.row_inputs, split.row_outputs + [
            v for v in split.statistics if all(v is not o for o in split.row_outputs)], lowerable)
        if row_plan is None or row_plan.template is not Template.inner_reduction:
            return None, f"rows too long for registers have no two-kernel form: {why or 'not a row reduction'}"
    column_plan, why = plan_kernel(split.column_exprs, split.column_inputs, split.column_outputs, lowerable)
    if column_plan is None or column_plan.template is not Template.outer_reduction:
        return None, f"rows too long for registers have no two-kernel form: {why or 'not a column reduction'}"
    parts = InnerOuterParts(split, persistent, combine, row_plan, column_plan)
    return KernelPlan(Template.inner_outer, axes, list(exprs), inputs, outputs, rows, columns, parts), ""


def _apart_parts(plan: KernelPlan, lowerable) -> Optional[ApartParts]:
    inputs = [v for v in plan.inputs if isinstance(v, TensorView)]
    o = apart_output(plan.parts.split, plan.exprs, plan.axes, inputs)
    if o is None:
        return None
    graph = GroupGraph(plan.exprs, inputs)
    kept_outputs = [v for v in plan.outputs if v is not o]
    kept, _ = plan_kernel(*graph.closure(kept_outputs, lambda v: False), kept_outputs, lowerable)
    apart, _ = plan_kernel(*graph.closure([o], lambda v: False), [o], lowerable)
    if kept is None or kept.template is not Template.inner_outer or apart is None \
            or apart.template is not Template.outer_reduction:
        return None
    return ApartParts(kept, apart)
