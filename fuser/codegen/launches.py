"""A prepared launch: what a kernel segment's call runs once everything but its tensors is fixed
(launch.py prepares one per layout and bucket). `Launch` allocates the outputs, takes the
stream's workspaces, fills the pointers and runs each step (one kernel, or a norm backward's
pass and combine); `SharedRowLaunch` wraps the shared-row form's, with its two-kernel fallback
for misaligned inputs or a refused cooperative launch and its stand-in while the Gluon kernel
compiles in the background."""
from __future__ import annotations

import threading
from typing import Any, Callable, Optional, Sequence

import torch

from . import compile_pool, inline, parallel_compile, tuning
from .ahead import CompileJobs, stand_ins
from .inline import inline_lines, writable_into
from .scratch import Semaphores, Workspaces, stream_key
from .shared_row import misaligned
from .steps import _DirectStep, current_device, step_args
from .wrapper import Wrapper


def dense_strides(shape, order=None) -> tuple:
    """Strides of a dense tensor of `shape` laid out in `order` (logical axes outer to inner;
    None: row-major)."""
    order = range(len(shape)) if order is None else order
    strides, step = [0] * len(shape), 1
    for k in reversed(list(order)):
        strides[k] = step
        step *= max(shape[k], 1)
    return tuple(strides)


class Launch:
    """Launches with everything fixed but the tensors: allocate outputs (and workspaces), fill
    the pointers, run each step (one kernel, or two: a norm backward's pass and combine)."""

    __slots__ = ("steps", "out_specs", "out_layouts", "workspaces", "source", "compiles", "cold", "semaphores")

    def __init__(self, steps, out_specs, work_specs, source, semaphores: "Optional[Semaphores]" = None,
                 out_strides=None):
        self.steps, self.out_specs, self.source = steps, out_specs, source
        # (shape, strides, dtype) of each output, as the allocators take them: the strides the
        # launch was prepared for (its stride arguments are fixed)
        out_strides = out_strides or [dense_strides(shape) for shape, _ in out_specs]
        self.out_layouts = [(tuple(int(n) for n in shape), tuple(st), dtype)
                            for (shape, dtype), st in zip(out_specs, out_strides)]
        self.workspaces = Workspaces(work_specs) if work_specs else None
        self.semaphores = semaphores
        self.compiles = sum(isinstance(step, _DirectStep) for step, _, _ in steps)  # kernels Triton compiles
        self.cold = self.compiles > 1  # kernels to compile together before the first launch

    def __call__(self, inputs: Sequence[torch.Tensor], device, dests=None) -> list[torch.Tensor]:
        if device.type == "cuda" and device.index is not None and device.index != current_device():
            # Triton launches on the current device's stream: tensors of another GPU (a model
            # placed on cuda:1) run on theirs, ordered with that device's stream, as ATen does
            with torch.cuda.device(device.index):
                return self._run(inputs, device, dests)
        return self._run(inputs, device, dests)

    def _run(self, inputs: Sequence[torch.Tensor], device, dests=None) -> list[torch.Tensor]:
        tensors, outputs = self.tensors_for(inputs, device, dests)
        if self.cold:
            parallel_compile.compile_together(self.compile_jobs(tensors))
        for step, template, slots in self.steps:
            args = list(template)
            for pos, k in slots:
                args[pos] = tensors[k]
            step(args)
        return outputs

    def destinations(self, into: Sequence[tuple]) -> Optional[list]:
        """`dests` for outputs offered `into` the inputs they alias, (output position, input
        tensor, the fusion's other arguments): each taken where this launch can write it there
        (`writable_into`), else None (allocated; the caller copies)."""
        out: Optional[list] = None
        for k, t, others in into:
            if writable_into(t, self.out_layouts[k], others):
                if out is None:
                    out = [None] * len(self.out_layouts)
                out[k] = t
        return out

    def direct_lines(self, ins: list[str], outs: list[str], fallback: str, env: dict, tag: str,
                     device: torch.device, into: Optional[dict] = None) -> Optional[list[str]]:
        """This launch inline in a ready call's generated code (`codegen/inline.py`); `into`:
        {output position: (the name of the input it is written into, the condition under which
        it is)}."""
        return inline_lines(self, ins, outs, fallback, env, tag, device, into)

    def tensors_for(self, inputs: Sequence[torch.Tensor], device, dests=None) -> tuple[list, list]:
        """(every tensor the steps read: inputs, outputs, workspaces; the outputs), the outputs
        allocated or, where given, written into `dests` (views of the shapes and strides this
        launch was made for)."""
        empty = inline.FAST_EMPTY.get(device.type)
        if empty is None or (device.index is not None and device.index != current_device()):
            # (the fast allocators allocate on the current device)
            def empty(shape: tuple, strides: tuple, dtype: torch.dtype) -> torch.Tensor:
                return torch.empty_strided(shape, strides, dtype=dtype, device=device)
        if dests is None:
            outputs = [empty(shape, strides, dtype) for shape, strides, dtype in self.out_layouts]
        else:
            outputs = [empty(shape, strides, dtype) if d is None else d
                       for d, (shape, strides, dtype) in zip(dests, self.out_layouts)]
        tensors = list(inputs) + outputs
        if self.workspaces is not None or self.semaphores is not None:
            key = stream_key(device)
            if self.workspaces is not None:
                tensors += self.workspaces.get(device, key)
            if self.semaphores is not None:
                tensors.append(self.semaphores.get(device, key))
        return tensors, outputs

    def jobs_for(self, inputs: Sequence[torch.Tensor], device) -> list[Callable[[], None]]:
        """The compile jobs of this launch's kernels on `inputs` (see `compile_jobs`)."""
        return self.compile_jobs(self.tensors_for(inputs, device)[0])

    def compile_jobs(self, tensors: list) -> list[Callable[[], None]]:
        """Compiling this launch's kernels not compiled yet, one job each (parallel_compile);
        the launch is no longer cold after."""
        self.cold = False
        jobs = []
        for step, template, slots in self.steps:
            if isinstance(step, _DirectStep) and step.compiled is None:
                args = step_args(template, slots, tensors)
                jobs.append(lambda step=step, args=args: step.precompile(args))
        return jobs


class SharedRowLaunch(Wrapper):
    """The shared-row form's launch (codegen/shared_row.py), whose copies need the staged
    inputs 16-byte aligned: a call with one that is not (a view at an odd offset) runs the
    two-kernel form instead, prepared by `prepare_fallback(inputs)` when first needed. So do
    all calls once the driver refused a `cooperative` launch (the pair form's: under MPS or a
    green context fewer processors may be free than the device has). On the GPU, while its
    kernel compiles in the background (`compile_in_background`: the shared-row kernel takes
    0.5-1 s to compile, the two-kernel form less), calls run a stand-in: the two-kernel form
    in its default forms, nothing timed (codegen/tuning.py); one a CUDA graph captured is kept
    after the switch."""

    __slots__ = ("launch", "prepare_fallback", "fallback", "stand_in", "staged", "compiles", "cooperative",
                 "refused", "compiling", "captured")

    def __init__(self, launch: Launch, prepare_fallback: Callable, staged: tuple[int, ...], cooperative: bool = False):
        self.launch, self.prepare_fallback, self.staged = launch, prepare_fallback, staged
        self.fallback = self.stand_in = None
        self.compiles = launch.compiles
        self.cooperative, self.refused = cooperative, False
        # set once the kernels compiled in the background; None once a call has left the stand-in
        self.compiling: Optional[threading.Event] = None
        self.captured = False  # whether a CUDA graph captured the stand-in (its workspaces must stay)

    @property
    def source(self) -> str:
        """The code calls run: the stand-in's while it runs, the two-kernel form's once the
        driver refused the launch, else the shared-row kernel's (a misaligned call's two kernels
        are not shown)."""
        if self.compiling is not None and self.stand_in is not None:
            return self.stand_in.source
        if self.refused and self.fallback is not None:
            return self.fallback.source
        return self.launch.source

    def ready(self, inputs: Sequence[torch.Tensor], device) -> bool:
        """Whether Triton has the shared-row kernel in memory or in its disk cache."""
        tensors = stand_ins(self.launch, inputs, device)
        step, template, slots = self.launch.steps[0]
        return compile_pool.compiled_already(step.fn, step_args(template, slots, tensors), step.kwargs, (step.grid,))

    def compile_in_background(self, inputs: Sequence[torch.Tensor], device) -> None:
        """Unless Triton has the shared-row kernel in memory or on disk: compile this launch's
        kernels in the background, the stand-in running meanwhile."""
        if self.ready(inputs, device):
            return
        jobs = CompileJobs(load=False)  # (loaded at its first launch, on the caller's thread)
        jobs.add(self.launch, inputs, device)
        self.compiling = tuning.compile_in_background(jobs.jobs, device)

    @property
    def settled(self) -> bool:
        """Whether calls run the shared-row kernel (not the stand-in while it compiles)."""
        return self.compiling is None

    def _standing_in(self, device) -> bool:
        """Whether this call runs the stand-in: every call until the first one after the
        compile that is not made while its stream captures a CUDA graph (a capture keeps the
        stand-in: the kernel's first launch would load it during the capture)."""
        compiling = self.compiling
        if compiling is None:
            return False
        if tuning.capturing(device):
            self.captured = True
            return True
        if not compiling.is_set():
            return True
        self.compiling = None
        if not self.captured:  # (a graph's stand-in stays, with its workspaces)
            self.stand_in = None
        return False

    def _stand_in(self, inputs) -> Any:
        if self.stand_in is None:
            with tuning.untimed():  # (a few calls: its default forms)
                self.stand_in = self.prepare_fallback(inputs)
        return self.stand_in

    def _fallback(self, inputs) -> Any:
        if self.fallback is None:
            self.fallback = self.prepare_fallback(inputs)
        return self.fallback

    def __call__(self, inputs: Sequence[torch.Tensor], device, dests=None) -> list[torch.Tensor]:
        if self.refused or misaligned(inputs, self.staged):
            return self._fallback(inputs)(inputs, device, dests)
        if self._standing_in(device):
            return self._stand_in(inputs)(inputs, device, dests)
        if not self.cooperative:
            return self.launch(inputs, device, dests)
        try:  # (a refused launch enqueued nothing: its kernel is the launch's first)
            return self.launch(inputs, device, dests)
        except RuntimeError as e:
            if "cooperative" not in str(e).lower():
                raise
            self.refused = True
            return self(inputs, device, dests)

    def direct_lines(self, *args, **kwargs) -> None:
        """No inline form: each call checks the alignment."""
        return None

    @property
    def inner(self) -> Launch:
        """What a compile-ahead pass reads and the autotuner compiles (wrapper.py): the
        shared-row launch's."""
        return self.launch

    def jobs_for(self, inputs, device) -> list[Callable[[], None]]:
        """The compile jobs of what its next call will run: the stand-in's while the shared-row
        kernel compiles in the background."""
        if self.compiling is not None:
            return self._stand_in(inputs).jobs_for(inputs, device)
        return self.launch.jobs_for(inputs, device)
