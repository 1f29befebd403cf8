"""The host program: what the CPU does to run one fusion, as a list of small ops.

    %HostIrContainer { (T0, T1) -> (T2) :
      T2 = ALLOCATE(...)
      GetCurrentStream into Stream 0
      FOR i9 from 0 to 3:
        SetCurrentStream to Stream ( i9 % numberOfStreams )
        Synchronize Stream 0
        T5 = ShardByStream(T0, stream_index = i9)
        ...
    } // %HostIrContainer

Ops allocate, loop over stream chunks (one CUDA stream per iteration, synchronised with the
main stream before and after), take chunk views (ShardByStream), run segments (generated
kernels or ATen), post collectives and wait for them. `hostir/run.py` executes them; on the CPU
the loop runs in order with the same views.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ..ir import Expr, TensorView
from ..ir.printer import format_expr, format_tv
from ..ir.symbolic import Extent, format_extent
from ..multidevice.sharding import local_extents
from ..segment import Segment


@dataclass(eq=False)
class Allocate:
    """The whole local tensor, before a loop that writes it chunk by chunk."""

    tv: TensorView


@dataclass(eq=False)
class ForLoop:
    index: str  # the loop variable's name, as an extent symbol (`i12`)
    extent: Extent
    body: list = field(default_factory=list)


@dataclass(eq=False)
class GetCurrentStream:
    """Remember the caller's stream as Stream 0."""


@dataclass(eq=False)
class SetCurrentStream:
    index: Optional[str]  # None: Stream 0; else the stream of this loop iteration


@dataclass(eq=False)
class Synchronize:
    """The current stream waits for the work queued so far on another stream."""

    index: Optional[str]  # None: Stream 0; else the stream of this loop iteration


@dataclass(eq=False)
class ShardByStream:
    """`dst` (a chunk tensor: stream-parallel allocation) = chunk `index` of `src`. With
    `aliases`, those tensors are written straight into the chunk too."""

    src: TensorView
    dst: TensorView
    index: str
    aliases: tuple[TensorView, ...] = ()


@dataclass(eq=False)
class Evaluate:
    """A segment's exprs through ATen (`in_loop`: on chunks, writing into chunk views)."""

    segment: Segment
    in_loop: bool = False


@dataclass(eq=False)
class LaunchKernel:
    """A generated Triton kernel. With `local`, it runs on local tensors (a rank's shards, and
    with `in_loop` one stream chunk of them): per loop axis of the kernel, a tensor of the
    segment and its logical axis whose local size (sharding math) is the extent to iterate;
    outputs that a ShardByStream made chunk views of are written into those views. Without it,
    the kernel iterates the logical extents (every tensor whole)."""

    segment: Segment
    launcher: Any
    scalars: list
    in_loop: bool = False
    local: Optional[tuple[tuple[TensorView, int], ...]] = None


@dataclass(eq=False)
class Communicate:
    number: int
    comm: Expr  # a multidevice Communication
    in_loop: bool = False
    loop_index: Optional[str] = None  # the stream index a chunked collective reads
    loop_extent: Optional[Extent] = None
    in_place: bool = False  # an allreduce in the buffer of its input


@dataclass(eq=False)
class Wait:
    communicate: Communicate


@dataclass(eq=False)
class HostProgram:
    inputs: list
    outputs: list
    body: list
    segments: list[Segment]

    def __str__(self) -> str:
        return format_program(self)


# ---------------------------------------------------------------------------------------------
# Printing, in nvFuser's host IR style.


def _name(tv: TensorView) -> str:
    return format_tv(tv)


def _stream(index: Optional[str]) -> str:
    return "Stream 0" if index is None else f"Stream ( {index} % numberOfStreams )"


def _format_op(op, indent: str) -> list[str]:
    if isinstance(op, Allocate):
        return [f"{indent}{_name(op.tv)} = ALLOCATE(buffer=T{op.tv.name}, mem_type=global, "
                f"zero_init=false)"]
    if isinstance(op, ForLoop):
        lines = [f"{indent}FOR {op.index} from 0 to {format_extent(op.extent)}:"]
        for inner in op.body:
            lines += _format_op(inner, indent + "  ")
        return lines
    if isinstance(op, GetCurrentStream):
        return [f"{indent}GetCurrentStream into Stream 0"]
    if isinstance(op, SetCurrentStream):
        return [f"{indent}SetCurrentStream to {_stream(op.index)}"]
    if isinstance(op, Synchronize):
        return [f"{indent}Synchronize {_stream(op.index)}"]
    if isinstance(op, ShardByStream):
        lines = [f"{indent}{_name(op.dst)} = ShardByStream({_name(op.src)}, stream_index = {op.index})"]
        for a in op.aliases:
            lines.append(f"{indent}T{a.name} aliases T{op.dst.name}  // written in place into the chunk")
        return lines
    if isinstance(op, (Evaluate, LaunchKernel)):
        kind = "Evaluate (ATen)" if isinstance(op, Evaluate) else "LaunchKernel (Triton)"
        if isinstance(op, LaunchKernel) and op.local is not None:
            extents = ", ".join(format_extent(local_extents(tv, op.in_loop)[k]) for tv, k in op.local)
            kind += f" over local extents [{extents}]"
        lines = [f"{indent}{kind}:"]
        for e in op.segment.exprs:
            lines += [indent + "  " + line for line in format_expr(e).splitlines()]
        return lines
    if isinstance(op, Communicate):
        c = op.comm
        extra = f", root = chunk {op.loop_index}" if op.loop_index else ""
        extra += ", in place" if op.in_place else ""
        return [f"{indent}Communication {op.number} ({c.describe()}{extra}, "
                f"input=T{c.inputs[0].name}, output=T{c.outputs[0].name})"]
    if isinstance(op, Wait):
        return [f"{indent}Wait Communication {op.communicate.number}"]
    return [f"{indent}{op!r}"]


def format_program(p: HostProgram) -> str:
    ins = ", ".join(_name(v) if isinstance(v, TensorView) else repr(v) for v in p.inputs)
    outs = ", ".join(_name(v) for v in p.outputs)
    lines = [f"%HostIrContainer {{ ({ins}) -> ({outs}) :"]
    for op in p.body:
        lines += _format_op(op, "  ")
    lines.append("} // %HostIrContainer")
    return "\n".join(lines) + "\n"
