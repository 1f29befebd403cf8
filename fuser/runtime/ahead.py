"""Compile ahead: a runtime's first call compiles the kernels of all its launches side by side,
before the first of them runs.

Kernels otherwise compile at their first launch, one launch at a time, and a model's first call
waits for each in turn (0.4-0.5 s a kernel on the H200 host: train_block's first forward and
backward took 16.3 s that way, 7.4 s compiled ahead). `FUSER_COMPILE_AHEAD=0` turns it off,
as `FUSER_PARALLEL_COMPILE=0` does with the rest of parallel compiling.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..codegen import parallel_compile
from ..codegen.ahead import CompileJobs
from ..codegen.steps import META
from ..dump import env_switch
from ..evaluate.binding import BindingTable
from ..evaluate.evaluator import EvalContext, Environment, run_exprs
from ..ir import Scalar
from ..timing import phase

if TYPE_CHECKING:
    from .cache import FusionRuntime

# targets whose kernels compile before they run (not Triton's interpreter): where compiling
# ahead pays; tests add the interpreter to run the pass there
COMPILE_AHEAD_TARGETS = ("cuda",)


def wanted(target: str, launches: int) -> bool:
    """Whether a runtime of `launches` kernel launches on `target` compiles ahead (one launch
    compiles its own kernels together at its first call)."""
    return (target in COMPILE_AHEAD_TARGETS and launches > 1 and parallel_compile.enabled()
            and env_switch("FUSER_COMPILE_AHEAD", True))


def compile_ahead(runtime: "FusionRuntime", start: int, env: Environment, table: BindingTable) -> int:
    """Compile the kernels of the runtime's segments `start` on, side by side (`env` holds the
    values computed before `start`: real tensors, or meta tensors before any call, see
    `FusionExecutorCache.compile_ahead`). The segments run here on meta tensors: kernel segments
    through `KernelLauncher.compile_ahead` (the launch prepared, nothing launched), the others
    through ATen's meta kernels, for their outputs' layouts; nothing runs on the device. A
    segment whose outputs cannot be known without running it (a data-dependent shape) ends the
    pass, and the kernels found so far still compile. A layout guessed wrong here (an ATen op
    whose meta kernel gives other strides than its device kernel) costs a compile at the launch,
    not a wrong kernel: launches look their kernels up by their real arguments. Runs once per
    runtime, at its first call or before it (later calls with new sizes compile at their
    launches). Returns the number of compile jobs."""
    values = table.values
    metas = Environment(EvalContext(table, META, sizes=runtime.sizes, stands_for=runtime.device))
    jobs = CompileJobs()

    def layout_of(v):  # kernel inputs: the real tensor where there is one (its alignment)
        return env[v] if v in env or isinstance(v, Scalar) else metas[v]

    def meta_of(v):
        if v in metas:
            return metas[v]
        value = env[v]
        if isinstance(value, torch.Tensor) and value.device != META:
            value = meta_like(value)
        metas[v] = value
        return value
    try:
        for seg in runtime.segments[start:]:
            launcher = runtime.launchers.get(id(seg))
            outs = None
            if launcher is not None:
                scalars = runtime.scalars_of(seg, table)
                outs = launcher.compile_ahead([layout_of(v) for v in seg.inputs], scalars, values,
                                              runtime.device, jobs)
            if outs is None:  # through ATen: its meta kernels give the outputs' layouts
                for v in seg.inputs:
                    meta_of(v)
                run_exprs(seg.exprs, metas)
            else:
                for o, t in zip(seg.outputs, outs):
                    metas[o] = t
    except Exception:  # noqa: BLE001 - the real run meets (and reports) whatever failed here
        pass
    try:
        with phase("compile ahead"):
            parallel_compile.compile_together(jobs.jobs)  # (each job catches its own errors)
    except Exception:  # noqa: BLE001 - a pool that cannot start: the launches compile
        pass
    return len(jobs.jobs)


def meta_tensor(shape, strides, offset: int, dtype: torch.dtype) -> torch.Tensor:
    """A meta tensor of this shape, strides and dtype, `offset` elements into its storage (an
    address that many elements past an aligned one, as the kernels' stand-ins read it)."""
    span = 1 + sum((n - 1) * st for n, st in zip(shape, strides)) if all(shape) else 0
    return torch.empty(offset + span, dtype=dtype, device=META).as_strided(shape, strides, offset)


def meta_like(t: torch.Tensor) -> torch.Tensor:
    """A meta tensor of t's shape, strides and dtype whose storage offset keeps t's 16-byte
    alignment, so that views made of it on meta tell their kernels' stand-ins the truth."""
    return meta_tensor(t.shape, t.stride(), (t.data_ptr() % 16) // t.element_size(), t.dtype)
