"""What a compile-ahead pass (`runtime/ahead.py`) collects: the compile jobs of the kernels a
runtime's launches will need, with stand-ins for their tensors (`steps.StandIn`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

import torch

from .steps import StandIn, _DirectStep

if TYPE_CHECKING:  # (launch imports this module)
    from .launch import _Launch


class CompileJobs:
    """The compile jobs a compile-ahead pass collects (`FusionRuntime.compile_ahead`), each
    kernel specialization once: a model's layers share their kernels (canonical forms), and
    Triton would compile a kernel asked for twice at once twice."""

    def __init__(self) -> None:
        self.jobs: list[Callable[[], None]] = []
        self.seen: set[tuple] = set()

    def add(self, launch: "_Launch", inputs: Sequence, device) -> None:
        if not launch.steps:
            return  # two launches (inner_outer._TwoLaunches): each added its jobs when prepared
        tensors = _stand_ins(launch, inputs, device)
        for step, template, slots in launch.steps:
            if not isinstance(step, _DirectStep) or step.compiled is not None:
                continue
            args = list(template)
            for pos, k in slots:
                args[pos] = tensors[k]
            key = (id(step.fn), tuple(step.kwargs.items()),
                   tuple((a.dtype, a.data_ptr() % 16) if isinstance(a, StandIn) else (type(a), a) for a in args))
            if key not in self.seen:
                self.seen.add(key)
                self.jobs.append(lambda step=step, args=args: step.precompile(args))


def _stand_ins(launch, inputs: Sequence, device) -> list:
    """What a launch's compile jobs need of its tensors, without them, in `_Launch.tensors_for`'s
    order: `inputs` real or meta tensors; outputs, workspaces and semaphores are fresh
    allocations, so aligned."""
    tensors = [StandIn.of(t, device) for t in inputs]
    tensors += [StandIn(dtype, device) for _, dtype in launch.out_specs]
    if launch.workspaces is not None:
        tensors += [StandIn(dtype, device) for _, dtype in launch.workspaces.specs]
    if launch.semaphores is not None:
        tensors.append(StandIn(torch.int32, device))
    return tensors
