"""A ready program's launches of one pointwise kernel, batched into one launch
(codegen/batched.py): an optimizer's step launched its kernel once per parameter.

Kernel steps join a batch where they launch the same compiled kernel with the same constants,
read only the call's arguments, and moving each to the batch's place (the first member's) and
running them side by side changes nothing any step reads:
- no step between the first member and a later one writes an argument that member reads, or
  reads an argument the member writes in place (runtime/in_place.py), itself or through a view
  an ATen step made of it;
- no member writes in place an argument another member reads or writes.
The first call of a layout runs its launches one by one; its ready program (ready.py) batches.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import torch

from ..codegen.batched import BatchedLaunch, batchable
from ..codegen.inline import FAST_EMPTY
from ..codegen.steps import _DirectStep, current_device
from ..evaluate.rules import function_form
from ..schedulers.plan import Template


# a pointwise kernel's switches for tile dims its blocks divide (no masks): a batch of members
# that differ there takes the masks
_EVEN = ("EVEN0", "EVEN1")


class BatchStep:
    """Kernel steps (ready.py's `_KernelStep`) run as one batched launch; `ins`, `outs` and
    `into` are theirs together, as the program reads a step's."""

    __slots__ = ("members", "batched", "grids", "device", "follow", "ins", "outs", "into", "empty", "run",
                 "__weakref__")

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
        self.run = self._first

    def __call__(self, free: bool, args: Sequence[Any]) -> list[list[torch.Tensor]]:
        """Each member's outputs, for the call's arguments `args` (`free`: no two of them share
        memory, so an output may be written into the argument it aliases)."""
        return self.run(free, args)

    def _first(self, free: bool, args: Sequence[Any]) -> list[list[torch.Tensor]]:
        """A call through lists (the interpreter's, and the GPU's until its kernel is built)."""
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
        if device.type == "cuda" and FAST_EMPTY.get("cuda") is not None:
            self.run = self._straight()
        return outputs

    def _straight(self) -> Callable:
        """The call as one generated function of the arguments (a GPU's, its kernel built): each
        address read once, the members' outputs allocated by name, no list a member; the
        arguments' alignment checked before anything is made."""
        env: dict[str, Any] = {"B": self.batched, "DEV": self.device, "DEVI": self.device.index, "S": self,
                               "EMPTY": self.empty, "follow": self.follow, "current_device": current_device}
        reads = sorted({k for m in self.members for k in m.ins} | {j for m in self.members for _, j in m.into})
        lines = ["def run(free, args):", "    if DEVI != current_device():  # (the allocator's device)",
                 "        return S._one_by_one(free, args, None)"]
        lines += [f"    p{k} = (a{k} := args[{k}]).data_ptr()" for k in reads]
        lines += [f"    if ({' | '.join(f'p{k}' for k in reads)}) & 15:  # (the allocators align what they make)",
                  "        return S._one_by_one(free, args, None)"]
        in_place, not_in_place, fresh, key, returned = [], [], [], [], []
        for n, m in enumerate(self.members):
            into = dict(m.into)
            names = []
            for k, (shape, strides, dtype) in enumerate(m.launch.out_layouts):
                o, r = f"o{n}_{k}", f"r{n}_{k}"
                env[f"S{n}_{k}"], env[f"T{n}_{k}"], env[f"D{n}_{k}"] = shape, strides, dtype
                allocate = [f"{o} = EMPTY(S{n}_{k}, T{n}_{k}, D{n}_{k})", f"{r} = {o}.data_ptr()"]
                if k in into:
                    in_place.append(f"{o}, {r} = a{into[k]}, p{into[k]}")
                    not_in_place += allocate
                else:
                    fresh += allocate
                names.append(o)
            key += [f"p{k}" for k in m.ins] + [f"r{n}_{k}" for k in range(len(names))]
            returned.append(f"[{', '.join(names)}]")
            env[f"K{n}"], env[f"L{n}"], env[f"G{n}"] = m.launch, m.launcher, m.seg
        if in_place:
            lines += ["    if free:"] + [f"        {line}" for line in in_place]
            lines += ["    else:"] + [f"        {line}" for line in not_in_place]
        lines += [f"    {line}" for line in fresh]
        lines += [f"    if not B.launch(({''.join(f'{name}, ' for name in key)}), DEV):",
                  "        return S._one_by_one(free, args, None)"]
        for n in range(len(self.members)):
            lines += [f"    if L{n}.last_source is not K{n}.source:", f"        follow(L{n}, G{n}, K{n}.source)"]
        lines.append(f"    return [{', '.join(returned)}]")
        exec(compile("\n".join(lines), f"<fuser batched launch of {len(self.members)} kernels>", "exec"), env)
        return env["run"]

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
    reached = _arguments_reached(steps, n_inputs, is_kernel)
    for i, step in enumerate(steps):
        key = _key(step, n_inputs) if is_kernel(step) else None
        if key is None:
            continue
        group = groups.get(key)
        if group is not None and _joins(steps, group, i, reached):
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


def _arguments_reached(steps: list, n_inputs: int, is_kernel: Callable[[Any], bool]) -> list[set]:
    """Per step, the arguments whose memory it reads: those it reads, and those behind the
    values it reads that may share their memory (an ATen op's output other than a matmul's or
    a linear's may be a view; a kernel's output written into an argument is that argument)."""
    behind: dict[int, set] = {k: {k} for k in range(n_inputs)}
    reached = []
    for step in steps:
        reads = _reads(step)
        reached.append(set().union(*(behind.get(k, ()) for k in reads)))
        if is_kernel(step):
            for k, j in step.into:
                behind[step.outs[k]] = {j}
        elif function_form(step.expr) is None:
            for k in step.outs:
                behind[k] = reached[-1]
    return reached


def _written(step) -> set:
    return {j for _, j in getattr(step, "into", ())}


def _joins(steps: list, group: list[int], i: int, reached: list[set]) -> bool:
    """Whether step i may run at the place of `group`'s first step, beside its members
    (`reached`: the arguments each step reads, `_arguments_reached`)."""
    step = steps[i]
    reads, writes = set(step.ins), _written(step)
    members = set(group)
    for k in range(group[0], i):
        other = steps[k]
        if k in members:
            if writes & (set(other.ins) | _written(other)) or _written(other) & reads:
                return False
        elif _written(other) & reads or writes & reached[k]:
            return False
    return True
