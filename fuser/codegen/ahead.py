"""What a compile-ahead pass (`runtime/ahead.py`) collects: the compile jobs of the kernels a
runtime's launches will need, with stand-ins for their tensors (`steps.StandIn`)."""
from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Callable, Sequence

import torch

from .steps import StandIn, _DirectStep, step_args

if TYPE_CHECKING:  # (launch imports this module)
    from .launches import Launch


class CompileJobs:
    """The compile jobs a compile-ahead pass collects (`FusionRuntime.compile_ahead`), each
    kernel specialization once: a model's layers share their kernels (canonical forms), and
    Triton would compile a kernel asked for twice at once twice."""

    def __init__(self, load: bool = True) -> None:
        self.jobs: list[Callable[[], None]] = []
        self.seen: set[tuple] = set()
        self.load = load  # (False: compiled into Triton's caches, loaded at the first launch)

    def add(self, launch: "Launch", inputs: Sequence, device) -> None:
        if not launch.steps:
            return  # two launches (inner_outer._TwoLaunches): each added its jobs when prepared
        tensors = stand_ins(launch, inputs, device)
        for step, template, slots in launch.steps:
            if not isinstance(step, _DirectStep) or step.compiled is not None:
                continue
            args = step_args(template, slots, tensors)
            key = (id(step.fn), tuple(step.kwargs.items()),
                   tuple((a.dtype, a.data_ptr() % 16) if isinstance(a, StandIn) else (type(a), a) for a in args))
            if key not in self.seen:
                self.seen.add(key)
                self.jobs.append(lambda step=step, args=args, key=key: _once_at_a_time(key, step, args, self.load))


# compiles under way in this process, by CompileJobs' key (the kernel's JITFunction, options and
# argument specialization): passes of several fusions run side by side (frontend/ahead.py) and
# fusions alike (a model's layers) share their kernels, which Triton would compile once per ask
_in_flight: dict[tuple, threading.Event] = {}
_flight_lock = threading.Lock()
WAIT_S = 600.0  # a compile elsewhere that takes longer: this one goes ahead


def _once_at_a_time(key: tuple, step, args: list, load: bool = True) -> None:
    """`step.precompile(args, load)`, after a compile of the same kernel under way in another
    thread (which this one then finds in Triton's cache)."""
    with _flight_lock:
        running = _in_flight.get(key)
        mine = running is None
        if mine:
            running = _in_flight[key] = threading.Event()
    if not mine:
        running.wait(WAIT_S)
        step.precompile(args, load)
        return
    try:
        step.precompile(args, load)
    finally:
        with _flight_lock:
            _in_flight.pop(key, None)
        running.set()


def _after_fork_in_child() -> None:
    """The threads compiling in the parent are not in the child: nothing is under way there."""
    global _flight_lock
    _flight_lock = threading.Lock()
    for event in _in_flight.values():
        event.set()
    _in_flight.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def stand_ins(launch, inputs: Sequence, device) -> list:
    """What a launch's compile jobs need of its tensors, without them, in `Launch.tensors_for`'s
    order: `inputs` real or meta tensors; outputs, workspaces and semaphores are fresh
    allocations, so aligned."""
    tensors = [StandIn.of(t, device) for t in inputs]
    tensors += [StandIn(dtype, device) for _, dtype in launch.out_specs]
    if launch.workspaces is not None:
        tensors += [StandIn(dtype, device) for _, dtype in launch.workspaces.specs]
    if launch.semaphores is not None:
        tensors.append(StandIn(torch.int32, device))
    return tensors
