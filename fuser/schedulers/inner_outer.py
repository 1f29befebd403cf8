"""The inner-outer template: row reductions and column reductions of the same rows in one pass
(the backward of RMSNorm and LayerNorm: dx needs sums over each row, dw and db sums over rows).

A group qualifies when its reductions are over two sets of loop axes that partition them: the
row set holds the innermost axis (each row reduced, rows kept; tile dim 1) and the column set
the others (the rows summed, columns kept; tile dim 0). The persistent kernel
(codegen/inner_outer.py) runs about one program per multiprocessor; each loops over its rows
with the whole row in registers, writes what varies along rows, and adds the column terms of its
rows into an fp32 accumulator that it stores as partial row `pid` of a workspace [programs,
columns]. The split outer reduction's combine kernel then reduces the workspace and computes
what follows the column reductions (a cast to the output dtype). No atomics.

Column results may only flow into column outputs: a value of a column reduction used along rows
(x - mean over rows) needs the whole column sum before any row, so such a group is refused and
the segmenter cuts it. Rows too long for registers run as one Gluon kernel holding the row in
shared memory where it fits (codegen/shared_row.py), else as two kernels, the cut the segmenter
would make: a row kernel (an inner reduction) that also writes the row statistics the column
terms read (rstd), and a column kernel (an outer reduction). This module finds both divisions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from ..ir import DataType, Expr, ReductionOp, TensorView, VarMeanOp
from ..segment.segments import LASTING
from .axes import KernelAxes, PointwiseAxes

# the IR types whose values compute in fp32 in generated kernels (codegen/types.py COMPUTE);
# the column workspace and accumulators here are fp32: column reductions of these dtypes only
FP32_COMPUTED = (DataType.Float, DataType.Half, DataType.BFloat16)


@dataclass(eq=False)
class InnerOuterSplit:
    row_axes: list[int]  # loop axes the column reductions sum over: tile dim 0
    column_axes: list[int]  # loop axes each row reduction sums over: tile dim 1, whole in registers
    column_reductions: list[ReductionOp]
    row_outputs: list[TensorView]  # vary along rows: written by the persistent kernel
    column_outputs: list[TensorView]  # follow a column reduction: written by the combine kernel
    combine_exprs: list[Expr]  # the column reductions and what the combine kernel computes after them
    combine_inputs: list[TensorView]
    # the two-kernel form, for rows too long for registers
    statistics: list[TensorView]  # per-row values the column kernel reads from the row kernel
    row_exprs: list[Expr]
    row_inputs: list[TensorView]
    column_exprs: list[Expr]
    column_inputs: list[TensorView]


def reduced_axes_of(e: Expr, axes: KernelAxes) -> set[int]:
    mapped = axes.of(e.inp)
    return {mapped[k] for k in e.axes if mapped[k] is not None}


class GroupGraph:
    """Producers and closures over the exprs of one group."""

    def __init__(self, exprs: Sequence[Expr], inputs: Sequence[TensorView]):
        self.exprs = list(exprs)
        self.inputs = list(inputs)
        self.producer = {id(o): e for e in exprs for o in e.outputs}

    def closure(self, roots: Sequence[TensorView], stop) -> tuple[list[Expr], list[TensorView]]:
        """Exprs computing `roots` from kernel inputs, in group order, not looking past values
        for which stop(v) holds; and the values read but not computed (inputs, stopped values)."""
        needed, read, stack = set(), {}, list(roots)
        while stack:
            v = stack.pop()
            e = self.producer.get(id(v))
            if e is None or stop(v):
                read[id(v)] = v
                continue
            if id(e) not in needed:
                needed.add(id(e))
                stack += [i for i in e.inputs if isinstance(i, TensorView)]
        exprs = [e for e in self.exprs if id(e) in needed]
        order = {id(v): k for k, v in enumerate(self.inputs)}
        read_list = sorted(read.values(), key=lambda v: order.get(id(v), len(order)))
        return exprs, read_list

    def downstream(self, seeds: Sequence[Expr]) -> set[int]:
        """ids of the values computed from the outputs of `seeds` (theirs included)."""
        found = {id(o) for e in seeds for o in e.outputs}
        for e in self.exprs:
            if any(id(v) in found for v in e.inputs):
                found |= {id(o) for o in e.outputs}
        return found


def split_inner_outer(exprs: Sequence[Expr], axes: KernelAxes, inputs: Sequence[TensorView],
                      outputs: Sequence[TensorView], sets: set[frozenset[int]]
                      ) -> tuple[Optional[InnerOuterSplit], str]:
    """How a group with reductions over two sets of axes divides into row and column work, or
    why it is not an inner-outer group."""
    all_axes = [a.index for a in axes.axes]
    if len(sets) != 2:
        return None, "reductions over more than two sets of axes cannot share one kernel"
    row_set = next((s for s in sets if all_axes[-1] in s), None)
    if row_set is None:
        return None, "reductions over different axes, none of them over the innermost axis"
    column_set = next(s for s in sets if s is not row_set)
    if row_set & column_set or row_set | column_set != set(all_axes):
        return None, "reductions over different axes that do not divide the loop axes into rows and columns"
    reductions = [e for e in exprs if isinstance(e, (ReductionOp, VarMeanOp))]  # each over loop axes (plan.py)
    column_reductions = [e for e in reductions if reduced_axes_of(e, axes) == column_set]
    row_reductions = [e for e in reductions if reduced_axes_of(e, axes) == row_set]
    for e in column_reductions:
        if not isinstance(e, ReductionOp):
            return None, "var_mean over rows next to a row reduction (no inner-outer form)"
        if e.out.dtype not in FP32_COMPUTED:
            return None, f"a column {e.kind.value} in {e.out.dtype}: the inner-outer workspace is fp32"
        if axes.spans(e.out) != row_set:
            return None, f"T{e.out.name} sums over rows but does not keep the row's axes"
    graph = GroupGraph(exprs, inputs)
    spans_rows = lambda v: bool(axes.spans(v) & column_set)  # noqa: E731
    after_columns, after_rows = graph.downstream(column_reductions), graph.downstream(row_reductions)
    met = _met_by_results(exprs, column_reductions, after_columns, spans_rows)
    if met is not None:
        # lasting where a row reduction's result also meets a value along the row: a larger
        # union holds the same ops, and whichever way its loop axes are laid out (its first
        # tensor may be transposed) one set's result meets a value along the other's axes
        swapped = _met_by_results(exprs, row_reductions, after_rows, lambda v: bool(axes.spans(v) & row_set))
        return None, (f"a column reduction's result meets T{met.name}, which varies along rows"
                      + (LASTING if swapped is not None else ""))
    row_outputs = [o for o in outputs if spans_rows(o) and id(o) not in after_columns]
    column_outputs = [o for o in outputs if id(o) in after_columns]
    for o in outputs:
        if not spans_rows(o) and id(o) not in after_columns:
            return None, f"T{o.name} neither varies along rows nor follows a column reduction"
        if id(o) in after_columns and axes.spans(o) != row_set:
            return None, f"T{o.name} follows a column reduction but does not keep the row's axes"
    combine_exprs, combine_inputs = _combine_part(graph, column_outputs, column_reductions)
    if any(isinstance(e, (ReductionOp, VarMeanOp)) and all(e is not c for c in column_reductions)
           for e in combine_exprs):
        return None, "the column outputs need a reduction of a value that does not vary along rows"

    # the two-kernel form: the column kernel stops at row statistics (computed from a row
    # reduction, varying along rows but not along the row), which the row kernel writes
    is_statistic = lambda v: id(v) in after_rows and spans_rows(v) and not (axes.spans(v) & row_set)  # noqa: E731
    column_exprs, column_inputs = graph.closure(column_outputs, is_statistic)
    statistics = [v for v in column_inputs if id(v) in graph.producer]
    # a row reduction of a value constant along rows (sum(w * w)) is no statistic, so the
    # column kernel would compute it: two sets of reductions again, planned again forever
    if any(isinstance(e, (ReductionOp, VarMeanOp)) and all(e is not c for c in column_reductions)
           for e in column_exprs):
        return None, "the column reductions read a row reduction of a value that does not vary along rows"
    row_exprs, row_inputs = graph.closure(row_outputs + statistics, lambda v: False)
    rows = [a for a in all_axes if a in column_set]
    columns = [a for a in all_axes if a in row_set]
    return InnerOuterSplit(rows, columns, column_reductions, row_outputs, column_outputs, combine_exprs,
                           combine_inputs, statistics, row_exprs, row_inputs, column_exprs, column_inputs), ""


def apart_output(split: InnerOuterSplit, exprs: Sequence[Expr], axes: KernelAxes,
                 inputs: Sequence[TensorView]) -> Optional[TensorView]:
    """A column output that a kernel of its own could compute from kernel inputs alone, so
    that the others fit one pass: the LayerNorm backward's db = sum(dy) beside dw = sum(dy * xhat),
    whose two register accumulators do not fit the shared-row kernel at 32768 columns. It
    reads no row reduction and shares no column reduction with the other outputs, and the
    other outputs keep a column reduction; of those, the one reading the fewest inputs that
    vary along rows (its kernel reads them again). None where there is none."""
    if len(split.column_reductions) < 2:
        return None
    graph = GroupGraph(exprs, inputs)
    is_column = lambda e: any(e is c for c in split.column_reductions)  # noqa: E731
    rows = set(split.row_axes)
    best, best_cost = None, None
    for o in split.column_outputs:
        o_exprs, o_inputs = graph.closure([o], lambda v: False)
        if any(isinstance(e, (ReductionOp, VarMeanOp)) and not is_column(e) for e in o_exprs):
            continue  # reads a row statistic: only the pass over rows has it
        others = [p for p in split.column_outputs if p is not o]
        other_exprs = graph.closure(others, lambda v: False)[0] if others else []
        mine = {id(e) for e in o_exprs if is_column(e)}
        if any(id(e) in mine for e in other_exprs) or not any(is_column(e) for e in other_exprs):
            continue
        cost = sum(1 for v in o_inputs if axes.spans(v) & rows)
        if best_cost is None or cost < best_cost:
            best, best_cost = o, cost
    return best


def _met_by_results(exprs: Sequence[Expr], reductions: list, after: set[int], along) -> Optional[TensorView]:
    """A value for which `along(v)` holds that an op reading the results of `reductions` (or
    values computed from them: `after`, by id) reads or writes; None where there is none."""
    for e in exprs:
        if any(e is r for r in reductions) or not any(id(v) in after for v in e.inputs):
            continue
        for v in list(e.inputs) + list(e.outputs):
            if isinstance(v, TensorView) and along(v):
                return v
    return None


def _combine_part(graph: GroupGraph, column_outputs: list[TensorView], column_reductions: list[ReductionOp]):
    """What the combine kernel computes: the column outputs from the column reductions (read
    from the workspace, so their inputs are not computed) and from kernel inputs."""
    ends = {id(o) for e in column_reductions for o in e.outputs}
    exprs, read = graph.closure(column_outputs, lambda v: id(v) in ends)
    keep = {id(e) for e in exprs} | {id(e) for e in column_reductions}
    exprs = [e for e in graph.exprs if id(e) in keep]
    return exprs, [v for v in read if id(v) not in ends]


class InnerOuterAxes:
    """The growable axes (segmenter's `GrowableAxes`) of an inner-outer group: one more
    pointwise expr joins with no new plan of the group where `split_inner_outer` and the
    two-kernel form's plans provably take the union as they took the group. Planning the whole
    group at each op made a 100-op tail segment in seconds. Two sides grow:

    - the row side (a LayerNorm backward's dx followed by a chain of pointwise ops): the expr
      keeps the loop axes of the group (`whole`) and of the row kernel (`rows`: it reads only
      the row kernel's values and kernel inputs), reads nothing computed from a column
      reduction (which would need the combine's proof), and its output varies along rows (a
      row output). The column side, the combine and the statistics are then unchanged.
    - the combine side (an update of dw after the reduction that made it): the expr keeps the
      loop axes of the group and of the column kernel (`columns`), reads values computed from a
      column reduction and kernel inputs that vary along no row, and its output keeps the
      row's axes exactly (a column output). The row side and the statistics are then
      unchanged."""

    def __init__(self, whole: PointwiseAxes, rows: Optional[PointwiseAxes], columns: Optional[PointwiseAxes],
                 split: InnerOuterSplit, exprs: Sequence[Expr]):
        self.whole, self.rows, self.columns = whole, rows, columns
        self.row_axes = set(split.row_axes)  # (the loop axes that number the rows: column reductions sum over them)
        self.column_axes = set(split.column_axes)  # (those that number a row's elements: a column output keeps them)
        self.after_columns = GroupGraph(exprs, []).downstream(split.column_reductions)
        self.computed = {id(o) for e in exprs for o in e.outputs}

    def joined(self, e: Expr) -> Optional[tuple]:
        if any(id(o) in self.whole.tensors for o in e.outputs):
            # a producer of the group's values: its input may become the union's first tensor,
            # whose layout (transposed) would swap the row and column axes
            return None
        tensors = [v for v in e.inputs if isinstance(v, TensorView)]
        if any(id(v) in self.after_columns for v in tensors):
            return self._joined_after_columns(e, tensors)
        if self.rows is None or any(id(v) in self.computed and id(v) not in self.rows.tensors for v in tensors):
            return None
        whole = self.whole.joined(e)
        rows = self.rows.joined(e) if whole is not None else None
        if rows is None:
            return None
        for o in e.outputs:
            if not isinstance(o, TensorView) or not self._axes(o, whole[0]) & self.row_axes:
                return None  # (an output neither along rows nor after a column reduction)
        return "rows", whole, rows

    def _joined_after_columns(self, e: Expr, tensors: list[TensorView]) -> Optional[tuple]:
        if self.columns is None or any(id(v) in self.computed and id(v) not in self.after_columns for v in tensors):
            return None  # (a value of the row side: the column kernel would compute it)
        whole = self.whole.joined(e)
        columns = self.columns.joined(e) if whole is not None else None
        if columns is None or any(self._axes(v, whole[0]) & self.row_axes for v in tensors):
            return None  # (a column result meeting a value along rows: split_inner_outer refuses it)
        if any(not isinstance(o, TensorView) or self._axes(o, whole[0]) != self.column_axes for o in e.outputs):
            return None
        return "columns", whole, columns

    def _axes(self, v: TensorView, new: dict) -> set[int]:
        """The loop axes `v` varies along, where `new` holds the join's new axes."""
        found = (new.get(id(d), self.whole.axis_of.get(id(d))) for d in v.domain.no_reductions())
        return {a for a in found if a is not None}

    def join(self, e: Expr, found: tuple) -> None:
        side, whole, part = found
        self.whole.join(e, whole)
        (self.rows if side == "rows" else self.columns).join(e, part)
        self.computed.update(id(o) for o in e.outputs)
        if side == "columns":
            self.after_columns.update(id(o) for o in e.outputs)
