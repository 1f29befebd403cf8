"""A ready program's launches of one pointwise kernel, batched into one launch
(codegen/batched.py): an optimizer's step launched its kernel once per parameter.

Kernel steps join a batch where they launch the same compiled kernel with the same constants,
read only the call's arguments, and moving each to the batch's place (the first member's) and
running them side by side changes nothing any step reads:
- no step between the first member and a later one writes an argument that member reads, or
  reads an argument the member writes in place (runtime/in_place.py);
- no member writes in place an argument another member reads or writes.
The first call of a layout runs its launches one by one; its ready program (ready.py) batches.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import torch

from ..codegen.batched import BatchedLaunch, batchable
from ..codegen.inline import FAST_EMPTY
from ..codegen.steps import _DirectStep, current_device
from ..schedulers.plan import Template


# a pointwise kernel's switches for tile dims its blocks divide (no masks): a batch of members
# that differ there takes the masks
_EVEN = ("EVEN0", "EVEN1")


class BatchStep:
    """Kernel steps (ready.py's `_KernelStep`) run as one batched launch; `ins`, `outs` and
    `into` are theirs together, as the program reads a step's."""

    __slots__ = ("members", "batched", "grids", "device", "follow", "ins", "outs", "into", "empty")

    def __init__(self, members: list, device: torch.device, follow: Callable):
        self.members, self.device, self.follow = members, device, follow
        parts = [batchable(m.launch) for m in members]
        kernel, kwargs = parts[0][0], dict(parts[0][1])
        for even in _EVEN:  # (masks where any member's blocks do not divide its tile)
            if even in kwargs:
                kwargs[even] = all(p[1][even] for p in parts)
        target = "cuda" if isinstance(members[0].launch.steps[0][0], _DirectStep) else "interpreter"
        self.batched = BatchedLaunch(kernel, kwargs, [p[2] for p in parts], [p[3] for p in parts], target)
        self.grids = [m.launch.steps[0][0].grid for m in members]
        self.ins = [k for m in members for k in m.ins]
        self.outs = [k for m in members for k in m.outs]
        self.into = [entry for m in members for entry in m.into]
        self.empty = FAST_EMPTY.get(device.type) or (
            lambda shape, strides, dtype: torch.empty_strided(shape, strides, dtype=dtype, device=device))

    def __call__(self, free: bool, args: Sequence[Any]) -> list[list[torch.Tensor]]:
        """Each member's outputs, for the call's arguments `args` (`free`: no two of them share
        memory, so an output may be written into the argument it aliases)."""
        device = self.device
        if device.type == "cuda" and device.index != current_device():  # (the allocator's device)
            return self._one_by_one(free, args, None)
        empty = self.empty
        members, outputs = [], []
        for m in self.members:
            dests = self._dests(m, free, args)
            outs = [empty(shape, strides, dtype) if d is None else d
                    for d, (shape, strides, dtype) in zip(dests, m.launch.out_layouts)]
            members.append([args[k] for k in m.ins] + outs)
            outputs.append(outs)
        if not self.batched(members, self.grids):
            return self._one_by_one(free, args, outputs)
        for m in self.members:
            if m.launcher.last_source is not m.launch.source:
                self.follow(m.launcher, m.seg, m.launch.source)
        return outputs

    @staticmethod
    def _dests(m, free: bool, args: Sequence[Any]) -> list:
        dests = [None] * len(m.launch.out_layouts)
        if free:
            for k, j in m.into:  # (the layout is the ready key's: runtime/in_place.py `fitting`)
                if args[j].data_ptr() % 16 == 0:
                    dests[k] = args[j]
        return dests

    def _one_by_one(self, free: bool, args: Sequence[Any], outputs: Optional[list]) -> list:
        made = []
        for n, m in enumerate(self.members):
            dests = outputs[n] if outputs is not None else self._dests(m, free, args)
            made.append(m.launch([args[k] for k in m.ins], self.device, dests))
            if m.launcher.last_source is not m.launch.source:
                self.follow(m.launcher, m.seg, m.launch.source)
        return made


def batch_steps(steps: list, n_inputs: int, device: torch.device, is_kernel: Callable[[Any], bool],
                follow: Callable) -> list:
    """`steps` with the kernel steps that may run as one launch (module docstring) replaced by
    a BatchStep at the first one's place."""
    groups: dict[tuple, list[int]] = {}  # the open group of each kernel and constants: step indices
    chosen: list[list[int]] = []
    for i, step in enumerate(steps):
        key = _key(step, n_inputs) if is_kernel(step) else None
        if key is None:
            continue
        group = groups.get(key)
        if group is not None and _joins(steps, group, i):
            group.append(i)
            continue
        group = groups[key] = [i]
        chosen.append(group)
    batches = {g[0]: g for g in chosen if len(g) > 1}
    if not batches:
        return steps
    moved = {i for g in batches.values() for i in g[1:]}
    out = []
    for i, step in enumerate(steps):
        if i in batches:
            out.append(BatchStep([steps[k] for k in batches[i]], device, follow))
        elif i not in moved:
            out.append(step)
    return out


def _key(step, n_inputs: int) -> Optional[tuple]:
    plan = step.seg.params
    parts = batchable(step.launch)
    if parts is None or plan is None or plan.template is not Template.pointwise \
            or any(k >= n_inputs for k in step.ins):
        return None
    kernel, kwargs, _, _ = parts
    return id(kernel), tuple(sorted((k, v) for k, v in kwargs.items() if k not in _EVEN))


def _reads(step) -> set:
    return set(step.ins) if hasattr(step, "ins") else {k for _, k in step.fill}


def _written(step) -> set:
    return {j for _, j in getattr(step, "into", ())}


def _joins(steps: list, group: list[int], i: int) -> bool:
    """Whether step i may run at the place of `group`'s first step, beside its members."""
    step = steps[i]
    reads, writes = set(step.ins), _written(step)
    members = set(group)
    for k in range(group[0], i):
        other = steps[k]
        if k in members:
            if writes & (set(other.ins) | _written(other)) or _written(other) & reads:
                return False
        elif _written(other) & reads or writes & _reads(other):
            return False
    return True
