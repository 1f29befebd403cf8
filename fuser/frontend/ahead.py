"""Compiling a jitted graph's kernels before its first call, in threads of their own.

A graph's fusions compile their kernels at their first execute (several kernels of one fusion
side by side, `runtime/ahead.py`). For a training graph that puts the backward's compiles after
the forward's first call, one after the other: at 4096x32768 the jitted RMSNorm's forward
fusion took 0.35 s and its backward's 1.1 s, on top of Dynamo and AOTAutograd's 0.5 s. Yet the
backward graph is known as soon as AOTAutograd has partitioned the joint graph, with the
sizes, strides and dtypes it traced for every value (its example inputs' sizes, the symbols'
hints). So when the forward is compiled, fuser plans the backward graph too and starts
threads that compile its kernels for those layouts (`FusionDefinition.compile_ahead`), while
Dynamo finishes and the forward compiles and runs. A forward (or inference graph) of several
fusions has its fusions compiled the same way, side by side, rather than each at its first
execute, one after the other. A fusion's first execute waits for its compile if it is still
under way; a layout guessed wrong (a value the traced strides do not describe) costs that
execute its own compile, never a wrong kernel.

Only where kernels compile before they run (`runtime.ahead.COMPILE_AHEAD_TARGETS`: the GPU, not
Triton's interpreter), and not under `FUSER_COMPILE_AHEAD=0`.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Optional

import torch
from torch.fx import Node

from ..codegen import target_for
from ..codegen.parallel_compile import enabled as parallel_compile_enabled
from ..runtime import ahead as runtime_ahead
from .meta import meta_val
from .program import FusionStep, GraphProgram


def wanted(graph: torch.fx.GraphModule) -> Optional[torch.device]:
    """The device whose kernels a graph's programs would compile ahead, or None: the device of
    its first tensor input where kernels compile ahead there."""
    if os.environ.get("FUSER_COMPILE_AHEAD", "1") == "0" or not parallel_compile_enabled():
        return None
    for node in graph.graph.nodes:
        val = meta_val(node) if node.op == "placeholder" else None
        if isinstance(val, torch.Tensor):
            device = val.device
            return device if target_for(device) in runtime_ahead.COMPILE_AHEAD_TARGETS else None
    return None


class _NoHint(Exception):
    """A size without a known value (an unbacked symbol): its fusion is not compiled ahead."""


def _hint(x: Any) -> Any:
    if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        hint = x.node.hint
        if hint is None:
            raise _NoHint
        return hint
    return x


def _layout(val: Any) -> Any:
    """What a fusion input's traced value says of it, with its sizes' hints: a tensor as
    (sizes, strides, storage offset, dtype), a number as itself."""
    if isinstance(val, torch.Tensor):
        return (tuple(_hint(s) for s in val.shape), tuple(_hint(s) for s in val.stride()),
                _hint(val.storage_offset()), val.dtype)
    if isinstance(val, (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)):
        return _hint(val)
    raise _NoHint


def _input_layouts(step: FusionStep) -> Optional[list]:
    """Each input of a fusion step as `_layout` gives it, or None where one is not known."""
    out = []
    try:
        for src in step.region.inputs:
            if isinstance(src, Node):
                out.append(_layout(meta_val(src)))
            else:  # a size computed from sizes of graph inputs
                args = [_hint(meta_val(n)) if axis is None else _hint(meta_val(n).shape[axis])
                        for n, axis in src.reads]
                out.append(src.fn(*args))
    except Exception:  # noqa: BLE001 - no hint, or a value that is no strided tensor: compiled at its call
        return None
    return out


def _meta(layout: Any) -> Any:
    if not isinstance(layout, tuple):
        return layout
    sizes, strides, offset, dtype = layout
    span = 1 + sum((n - 1) * s for n, s in zip(sizes, strides)) if all(sizes) else 0
    return torch.empty(offset + span, dtype=dtype, device="meta").as_strided(sizes, strides, offset)


# fusion steps compiled at once: each compiles its kernels side by side already (through the
# compile workers), so a few steps at a time keep the workers busy
STEPS_AT_ONCE = 4


def start(programs: list[GraphProgram], device: torch.device) -> list[threading.Thread]:
    """Start compiling the kernels of the programs' fusion steps, up to STEPS_AT_ONCE at once,
    in daemon threads (a process may exit with a compile under way), taking the steps in order;
    the threads (none where no step's input layouts are known). The layouts are read here,
    from the traced values: the threads touch no fake tensor."""
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    work = [(step, layouts) for program in programs for step in program.fusion_steps
            if (layouts := _input_layouts(step)) is not None]
    work.reverse()  # (popped from the end)
    threads = [threading.Thread(target=_compile, args=(work, device), name="fuser-compile-ahead", daemon=True)
               for _ in range(min(len(work), STEPS_AT_ONCE))]
    for thread in threads:
        thread.start()
    return threads


def _compile(work: list, device: torch.device) -> None:
    if device.type == "cuda":  # (Triton compiles for the thread's current device)
        torch.cuda.set_device(device)
    while True:
        try:
            step, layouts = work.pop()  # (atomic: threads share the list)
        except IndexError:
            return
        try:
            step.fd.compile_ahead([_meta(x) for x in layouts], device)
        except Exception:  # noqa: BLE001 - the step's first execute meets (and reports) it
            pass
