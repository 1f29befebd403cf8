"""Kernel plans: which template a group runs as, and how its loop axes map onto a 2-D tile.

A kernel works on a tile [BLOCK0, BLOCK1]. Pointwise: dim 1 is the innermost loop axis, dim 0
the rest, both spread over programs. Inner reduction (rows reduced along their innermost axes,
softmax and norms): dim 0 holds the rows a program owns, dim 1 the reduced axes, whole
(persistent) or in chunks (looped). Outer reduction (column sums): dim 1 holds the columns a
program owns and dim 0 the reduced rows, always looped.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from ..ir import (BinaryOp, BroadcastOp, CastOp, ExpandOp, Expr, FullOp, IotaOp, LoadStoreOp, LoadStoreOpType,
                  PermuteOp, ReductionOp, SqueezeOp, TensorView, TernaryOp, UnaryOp, Val,
                  VarMeanOp)
from .axes import KernelAxes, analyze_axes

KERNEL_OPS = (UnaryOp, BinaryOp, TernaryOp, CastOp, ReductionOp, VarMeanOp, BroadcastOp,
              ExpandOp, SqueezeOp, PermuteOp, LoadStoreOp, IotaOp, FullOp)
_COMPUTE_OPS = (UnaryOp, BinaryOp, TernaryOp, CastOp, ReductionOp, VarMeanOp, LoadStoreOp, IotaOp, FullOp)


class Template(enum.Enum):
    pointwise = "pointwise"
    inner_reduction = "inner reduction"
    outer_reduction = "outer reduction"


@dataclass(eq=False)
class KernelPlan:
    template: Template
    axes: KernelAxes
    exprs: list[Expr]
    inputs: list[Val]
    outputs: list[TensorView]
    dim0: list[int]  # loop axes on tile dim 0, outer to inner
    dim1: list[int]  # loop axes on tile dim 1

    @property
    def red_dim(self) -> Optional[int]:
        return {Template.pointwise: None, Template.inner_reduction: 1,
                Template.outer_reduction: 0}[self.template]

    def describe(self) -> str:
        ext = lambda axes: "[" + ", ".join(str(self.axes.axes[a].extent) for a in axes) + "]"  # noqa: E731
        return f"{self.template.value}: tile dim0 {ext(self.dim0)} x dim1 {ext(self.dim1)}"


def reduced_axes_of(e: Expr, axes: KernelAxes) -> set[int]:
    mapped = axes.of(e.inp)
    return {mapped[k] for k in e.axes if mapped[k] is not None}


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
        return None, "only views (broadcast, expand, squeeze, permute): ATen makes them free"
    axes, why = analyze_axes(exprs)
    if axes is None:
        return None, why
    reductions = [e for e in exprs if isinstance(e, (ReductionOp, VarMeanOp))]
    sets = {frozenset(reduced_axes_of(e, axes)) for e in reductions}
    sets.discard(frozenset())
    if len(sets) > 1:
        return None, "reductions over different axes cannot share one kernel"
    if not axes.axes:
        return None, "no loop axes (a 0-dim computation)"
    all_axes = [a.index for a in axes.axes]
    if not sets:
        if any(a.is_reduction for a in axes.axes):
            return None, "a reduction axis is iterated without a reduction"
        plan = KernelPlan(Template.pointwise, axes, list(exprs), inputs, outputs, all_axes[:-1], all_axes[-1:])
        return plan, ""
    reduced = sorted(next(iter(sets)))
    if {a.index for a in axes.axes if a.is_reduction} != set(reduced):
        return None, "an axis is reduced in one op and iterated after the reduction in another"
    kept = [a for a in all_axes if a not in reduced]
    if all_axes[-1] in reduced:
        plan = KernelPlan(Template.inner_reduction, axes, list(exprs), inputs, outputs, kept, reduced)
    else:
        plan = KernelPlan(Template.outer_reduction, axes, list(exprs), inputs, outputs, reduced, kept)
    return plan, ""
