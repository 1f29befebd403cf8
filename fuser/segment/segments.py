"""Segments: the groups a Fusion is cut into, each run by one executor."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Optional

from ..ir import Expr, TensorView, Val
from ..ir.printer import format_expr, format_val

# a kernel group refused for this reason may be taken once its other consumers join it (the
# segmenter retries); the schedulers give it (`schedulers/axes.py`)
RESIZED_OUTPUTS = "outputs of several extents along an axis a slice, pad or cat resizes"
# how the reason a group with reductions is refused ends where no tensor spans its loop space
# (schedulers/plan.py): ops that join later may link its axes, so the merge is tried again
NO_SPANNING_TENSOR = "(no tensor spans every loop axis)"
# how a refusal ends whose cause stays in any union holding both groups (an op of one meeting a
# value of the other): the segmenter does not plan the two again as they grow
# (schedulers/inner_outer.py)
LASTING = " (in any larger union too)"


class SegmentKind(enum.Enum):
    kernel = "kernel"
    evaluator = "evaluator"
    communication = "communication"


@dataclass(eq=False)
class Segment:
    kind: SegmentKind
    exprs: list[Expr]
    inputs: list[Val]
    outputs: list[Val]
    why: str = ""  # why this group was cut here / which scheduler took it
    params: Any = None  # the scheduler's heuristic parameters, for kernel segments
    source: Optional[str] = field(default=None, repr=False)  # generated code, for kernels

    def describe(self) -> str:
        head = f"{self.kind.value} segment: {len(self.exprs)} exprs"
        if self.why:
            head += f" ({self.why})"
        ins = ", ".join(format_val(v) if isinstance(v, TensorView) else repr(v) for v in self.inputs)
        outs = ", ".join(format_val(v) for v in self.outputs)
        body = "\n".join("  " + format_expr(e).replace("\n", "\n  ") for e in self.exprs)
        return f"{head}\n inputs: {ins}\n outputs: {outs}\n{body}"

    def __str__(self) -> str:
        return self.describe()

    def __repr__(self) -> str:
        """One line for a list of segments in a notebook (`fd.last_segments()`): the dataclass's
        own repr dumps every expr and the scheduler's parameters."""
        short = lambda v: f"T{v.name}" if isinstance(v, TensorView) else repr(v)  # noqa: E731
        ios = f"{', '.join(map(short, self.inputs))} -> {', '.join(map(short, self.outputs))}"
        why = f" ({self.why})" if self.why else ""
        return f"<{self.kind.value} segment: {len(self.exprs)} exprs, {ios}{why}>"


def segment_inputs(exprs: list[Expr]) -> list[Val]:
    """The tensors `exprs` read but do not produce, in first-read order."""
    produced = {id(o) for e in exprs for o in e.outputs}
    inputs, seen = [], set()
    for e in exprs:
        for v in e.inputs:
            if id(v) not in produced and id(v) not in seen and isinstance(v, TensorView):
                seen.add(id(v))
                inputs.append(v)
    return inputs


def segment_io(exprs: list[Expr], fusion_outputs: list[Val], later_exprs: list[Expr]) -> tuple[list[Val], list[Val]]:
    """Inputs: values read but not produced inside; outputs: produced values read later or
    returned by the fusion."""
    needed = {id(v) for e in later_exprs for v in e.inputs} | {id(v) for v in fusion_outputs}
    outputs = [o for e in exprs for o in e.outputs if id(o) in needed]
    return segment_inputs(exprs), outputs
