"""Compiling a jitted graph's kernels before their first call, in background threads.

A graph's fusions compile their kernels at their first execute (several kernels of one fusion
side by side, `runtime/ahead.py`). For a training graph that puts the backward's compiles after
the forward's first call, one after the other: at 4096x32768 the jitted RMSNorm's forward
fusion took 0.35 s and its backward's 1.1 s, on top of Dynamo and AOTAutograd's 0.5 s. Yet the
backward graph is known as soon as AOTAutograd has partitioned the joint graph, with the
sizes, strides and dtypes it traced for every value (its example inputs' sizes, the symbols'
hints). So when the forward is compiled, fuser plans the backward graph too and queues its
fusions for compiling for those layouts (`FusionDefinition.compile_ahead`), while Dynamo
finishes and the forward compiles and runs. A forward (or inference graph) of several fusions
has its fusions queued the same way, so they compile side by side rather than each at its first
execute, one after the other. A fusion's first execute waits for its compile if it is under
way; a layout guessed wrong (a value the traced strides do not describe) costs that execute
its own compile, never a wrong kernel.

The queue is the process's: a few daemon threads (STEPS_AT_ONCE) take its steps in order and
end when it is empty. Their compiles go to the compile worker (codegen/compile_pool.py), waiting
for its start or a free slot rather than compiling in this process, where Triton's front end
would compete with Dynamo's Python for the GIL; their phases are not timed (fuser/timing.py). A
forked child starts with an empty queue, and no runtime there waits for the parent's threads
(runtime/cache.py).

Only where kernels compile before they run (`runtime.ahead.COMPILE_AHEAD_TARGETS`: the GPU, not
Triton's interpreter), and not under `FUSER_COMPILE_AHEAD=0`.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, Optional

import torch
from torch.fx import Node

from ..codegen import compile_pool, parallel_compile, target_for
from ..codegen.background import DaemonQueue
from ..dump import env_switch
from ..runtime import ahead as runtime_ahead
from .host_scalars import is_host_scalar
from .meta import meta_val
from .program import FusionStep, GraphProgram


def wanted(graph: torch.fx.GraphModule) -> Optional[torch.device]:
    """The device whose kernels a graph's programs would compile ahead, or None: the device of
    its first tensor input where kernels compile ahead there."""
    if not env_switch("FUSER_COMPILE_AHEAD", True) or not parallel_compile.enabled():
        return None
    for node in graph.graph.nodes:
        val = meta_val(node) if node.op == "placeholder" else None
        if isinstance(val, torch.Tensor) and not is_host_scalar(node):  # (a step counter: host_scalars.py)
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
    return runtime_ahead.meta_tensor(*layout) if isinstance(layout, tuple) else layout


# fusion steps compiled at once, in the whole process: each compiles its kernels side by side
# already (through the compile workers), so a few at a time keep the workers busy
STEPS_AT_ONCE = 4


# the fusion steps to compile, in the order given (a process can exit with steps queued;
# compile jobs already handed to the compile threads, codegen/parallel_compile.py, finish first)
_queue = DaemonQueue("fuser-compile-ahead", lambda item: _compile(*item), lambda: STEPS_AT_ONCE)

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_queue.forget_in_child)  # (the parent's threads are not in the child)


def start(programs: list[GraphProgram], device: torch.device) -> int:
    """Queue the programs' fusion steps, in order, for compiling in the background; the number
    queued (steps whose input layouts are not known compile at their first execute). The
    layouts are read here, from the traced values: the threads touch no fake tensor."""
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    work = [(step, layouts, device) for program in programs for step in program.fusion_steps
            if (step.region.device is None or step.region.device.type == device.type)
            and (layouts := _input_layouts(step)) is not None]
    if work:
        parallel_compile.start_triton_driver()  # here: its lazy start is not for two threads at once
        _queue.put(work)
    return len(work)


def wait(timeout: Optional[float] = None) -> bool:
    """Until the steps queued so far are compiled (or `timeout`); whether they were."""
    return _queue.wait(timeout)


def _compile(step: FusionStep, layouts: list, device: torch.device) -> None:
    try:
        with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext(), \
                compile_pool.side_by_side(patient=True):
            step.fd.compile_ahead([_meta(x) for x in layouts], device)
    except Exception:  # noqa: BLE001 - the step's first execute meets (and reports) it
        pass
