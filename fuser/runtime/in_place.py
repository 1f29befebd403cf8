"""Outputs a kernel writes into the inputs they alias (nvFuser's in-place update:
`fd.add_output(out, alias_input=x)`; a jitted graph's write-back into its input).

Without this an aliased output is a new tensor, copied into its input after the run. A
kernel can write it there itself where no read of the input can see the write too early:
- the kernel is pointwise with no resize (slice, pad, cat), and the input, where the kernel
  reads it, maps its axes onto the loop as the output does: each loop point writes the
  address it alone reads;
- the kernel reads the input through elementwise ops only (a gather would read elsewhere),
  and the output is computed from it (each value is loaded where first needed and each
  output stored once computed: an output that does not read the input could be stored
  before another output's load of it);
- no later segment reads the input, nor a value an ATen segment made of it (a view), and the
  kernel reads no such value; and no other aliased output is the input or such a value (it is
  copied into its own input as it came).
And at each call (`codegen/launches.py`, `Launch.destinations`): the input has the layout the
launch writes (shape, strides, dtype), a 16-byte aligned address (the kernels assume their
outputs so), and no other argument of the fusion overlaps its memory at all (the same tensor
passed twice may be read elsewhere, transposed, or by a later kernel).
"""
from __future__ import annotations

from typing import Any

import torch

from ..codegen.inline import address_span, apart, disjoint, overlap, span_lengths
from ..evaluate.rules import function_form
from ..ir import BinaryOp, CastOp, Fusion, TensorView, TernaryOp, UnaryOp
from ..schedulers.plan import Template
from ..segment import Segment, SegmentKind

_ELEMENTWISE = (UnaryOp, BinaryOp, TernaryOp, CastOp)


def plan_in_place(fusion: Fusion, segments: list[Segment], aliases: dict[int, int]) -> dict[int, list[tuple[int, int]]]:
    """{id(segment): [(its output position, the fusion input position it is written into)]}
    for the aliased outputs (`aliases`: fusion output position -> input position) a kernel
    may write in place (see the module docstring)."""
    outputs, inputs = fusion.outputs(), fusion.inputs()
    found: dict[int, list[tuple[int, int]]] = {}
    for out_pos, in_pos in aliases.items():
        out, source = outputs[out_pos], inputs[in_pos]
        at = next((k for k, seg in enumerate(segments) if any(o is out for o in seg.outputs)), None)
        if at is None or not isinstance(source, TensorView):
            continue
        seg = segments[at]
        views = _views_of(source, segments)  # (values an ATen segment may make of its memory)
        if not _writable(seg, out, source) or any(id(v) in views for v in seg.inputs if v is not source) \
                or any(id(v) in views for s in segments[at + 1:] for v in s.inputs) \
                or any(id(outputs[k]) in views for k in aliases if outputs[k] is not out):
            # (the input itself or a view of it, copied into another input after the run, is
            # copied as it came: a swap; an output handed back as a view shows the new values
            # either way, as nvFuser's do)
            continue
        entry = (next(k for k, o in enumerate(seg.outputs) if o is out), in_pos)
        if entry not in found.setdefault(id(seg), []):
            found[id(seg)].append(entry)
    return found


def _views_of(source: TensorView, segments: list[Segment]) -> set[int]:
    """ids of `source` and of every value an ATen segment computes from it (any may be a view,
    but for a matmul's or a linear's: new tensors)."""
    found = {id(source)}
    for seg in segments:
        if seg.kind is SegmentKind.kernel:
            continue
        for e in seg.exprs:
            if function_form(e) is None and any(id(v) in found for v in e.inputs):
                found.update(id(o) for o in e.outputs)
    return found


def _writable(seg: Segment, out: TensorView, source: TensorView) -> bool:
    plan = seg.params
    if seg.kind is not SegmentKind.kernel or plan is None or plan.template is not Template.pointwise \
            or plan.axes.resized or not plan.axes.spans_all(out):
        return False
    readers = [e for e in seg.exprs if any(v is source for v in e.inputs)]
    if not readers:
        return True
    # (a kernel loads a value where it is first needed and stores each output once computed:
    # only an output computed from the input is stored after the input's load)
    return all(isinstance(e, _ELEMENTWISE) for e in readers) and plan.axes.of(source) == plan.axes.of(out) \
        and _depends_on(out, source, seg.exprs)


def _depends_on(out: TensorView, source: TensorView, exprs) -> bool:
    producer = {id(o): e for e in exprs for o in e.outputs}
    pending, seen = [out], set()
    while pending:
        v = pending.pop()
        if v is source:
            return True
        e = producer.get(id(v))
        if e is None or id(v) in seen:
            continue
        seen.add(id(v))
        pending.extend(w for w in e.inputs if isinstance(w, TensorView))
    return False


def offered(entries: list[tuple[int, int]], args) -> list:
    """A call's offer for a segment's `entries` (runtime's `in_place`): (output position, the
    input written into, the other arguments it must not overlap: none where no two arguments
    share memory, found by one sort)."""
    free = disjoint(args, span_lengths(args))
    return [(k, args[j], () if free else [a for m, a in enumerate(args) if m != j]) for k, j in entries]


def fitting(entries: list[tuple[int, int]], layouts: list, launch: Any) -> list[tuple[int, int]]:
    """The `entries` a ready call of this layout may write in place: the input's layout (fixed
    by the ready key; `layouts`, each argument's) is the one `launch` writes."""
    out_layouts = getattr(launch, "out_layouts", None)
    if out_layouts is None:
        return []
    return [(k, j) for k, j in entries if layouts[j] is not None and layouts[j] == out_layouts[k]]


def argument_layouts(args) -> list:
    """(shape, strides, dtype) of each tensor argument (None for a number), as launches list
    their outputs'."""
    return [(tuple(a.shape), a.stride(), a.dtype) if isinstance(a, torch.Tensor) else None for a in args]


def write_back(written: list, dsts: list, values: list) -> None:
    """Ends a call's aliased outputs: bumps the version of each input its kernel wrote in
    place (`written`), and copies each other value into its input (`dsts`), each value as the
    inputs came: one `_foreach_copy_` launch where no value or input shares memory with
    another (an optimizer's step writes back a counter per parameter: 18 `copy_` calls, the
    host about 10 us each, became one; open lead 15), else one `copy_` at a time, in order
    (inputs that overlap: the last write wins), each value that shares memory with an input
    written here copied first."""
    if written:
        torch._C._increment_version(written)
    if len(dsts) > 1:
        separate = _apart(dsts + values)
        if not separate:
            # a value that shares memory with an input written here (another input handed
            # over, a swap, a view) is read before any write: outputs are computed from the
            # inputs' old values, and a copy in order would hand on the new one
            values = [v.clone() if any(overlap(v, d) for d in dsts) else v for v in values]
            separate = _apart(dsts + values)
        if separate:
            torch._foreach_copy_(dsts, values)
            return
    for dst, value in zip(dsts, values):
        dst.copy_(value)


def _apart(tensors: list) -> bool:
    """Whether no two of `tensors` share a byte, each taken as the addresses it spans (a
    column slice's rows meet the rows below, past its `nbytes`)."""
    spans = [address_span(t) for t in tensors]
    return apart([(start, end - start) for start, end in filter(None, spans)])
