"""Calls prepared for one exact argument layout: the hot path of a repeat call.

A call's layout (each tensor's shape, strides, dtype and device, each scalar's value: the
ready key, `cache.compile_ready_key`) fixes everything a runtime decides on the way to its
launches: the binding table's values, every intermediate tensor's layout, each kernel's
prepared launch, each ATen op's sizes and scalars. A first call with a layout runs the runtime
and checks it (binding, the ATen outputs' sizes); later calls with that layout replay what it
decided:

- `ReadyCall`: a single-kernel runtime, one prepared launch;
- `ReadyProgram`: a runtime of several segments, its steps (the prepared launch of each kernel,
  the ATen rule of each evaluated op with its scalars resolved and the sizes it asks fixed) as
  one generated straight-line function, with no environment of values, binding or launch
  lookup on the way. Like a prepared launch it keeps values, never a binding table;
- `BoundCall`: anything else (a host program, a segment no step is made for): binds its own
  table and runs the runtime, skipping only the runtime's lookup.
"""
from __future__ import annotations

import collections
import itertools
import operator
from typing import TYPE_CHECKING, Any, Optional, Sequence

import torch

from ..codegen.inline import Disjoint
from ..codegen.launch import into_destinations
from ..dump import dump_flags
from ..errors import InternalError
from ..evaluate.aten import method_form
from ..evaluate.rules import RULES, function_form
from ..evaluate.binding import InputBinder
from ..evaluate.evaluator import EvalContext, Environment
from ..ir import Expr, Scalar, TensorView
from ..segment import Segment
from .batching import BatchStep, batch_steps
from .in_place import fitting, offered

if TYPE_CHECKING:
    from ..codegen import KernelLauncher
    from ..hostir import HostRuntime
    from .cache import FusionRuntime


def note_source(seg: Segment, source: Optional[str]) -> None:
    """A segment shows the source of the kernel it launched last (printed once per change
    with FUSER_DUMP=triton)."""
    if seg.source is not source:
        seg.source = source
        if "triton" in dump_flags():
            print(source)


def _follow(launcher: "KernelLauncher", seg: Segment, source: str) -> None:
    """As `run` keeps them: the launcher's and segment's source are the last launch's."""
    if launcher.last_source is not source:
        launcher.last_source = source
        note_source(seg, source)


class ReadyCall:
    """One prepared kernel launch of a single-kernel runtime, for one exact argument layout.
    On a GPU the call is one generated function that allocates and launches inline
    (`codegen/inline.py`); elsewhere, or where the launch has no such form, it calls the
    prepared launch."""

    __slots__ = ("runtime", "launch", "take", "give", "seg", "launcher", "into", "lengths", "run")

    def __init__(self, runtime: "FusionRuntime", launch: Any, take: list[int], give: list[tuple[bool, int]],
                 seg: Segment, launcher: "KernelLauncher", into: Sequence[tuple[int, int]] = (),
                 lengths: Optional[tuple] = None):
        """`into`: (output position, argument position) of outputs written into the inputs
        they alias where the launch can (runtime/in_place.py: those whose layout it writes);
        `lengths`: the arguments' `span_lengths`."""
        self.runtime, self.launch, self.take, self.give = runtime, launch, take, give
        self.seg, self.launcher, self.into, self.lengths = seg, launcher, list(into), lengths
        self.run = self._direct() or self._call

    def __call__(self, args: Sequence[Any]) -> list[torch.Tensor]:
        return self.run(args)

    def _call(self, args: Sequence[Any]) -> list[torch.Tensor]:
        launch = self.launch
        ins = [args[k] for k in self.take]
        dests = into_destinations(launch, offered(self.into, args)) if self.into else None
        outs = launch(ins, self.runtime.device, dests)
        _follow(self.launcher, self.seg, launch.source)
        return [outs[k] if made else args[k] for made, k in self.give]

    def _direct(self) -> Optional[Any]:
        launch = self.launch
        ins = [f"i{j}" for j in range(len(self.take))]
        outs = [f"o{k}" for k in range(len(self.seg.outputs))]
        env: dict[str, Any] = {"K": launch, "device": self.runtime.device, "LR": self.launcher, "SG": self.seg,
                               "SRC": launch.source, "follow": _follow}
        into = {k: (f"args[{j}]", f"free and args[{j}].data_ptr() % 16 == 0") for k, j in self.into}
        body = launch.direct_lines(ins, outs, f"K([{', '.join(ins)}], device)", env, "", self.runtime.device,
                                   into)
        if body is None:
            return None
        lines = ["def run(args):"] + [f"    {name} = args[{k}]" for name, k in zip(ins, self.take)]
        if into:
            env["disjoint"] = Disjoint(self.lengths)
            lines.append("    free = disjoint(args)")
        lines += ["    " + line for line in body]
        lines += ["    if LR.last_source is not SRC:", "        follow(LR, SG, SRC)",
                  f"    return [{', '.join(outs[k] if made else f'args[{k}]' for made, k in self.give)}]"]
        exec(compile("\n".join(lines), "<fuser ready launch>", "exec"), env)
        return env["run"]


class _KernelStep:
    """A kernel segment's prepared launch, reading slots `ins`, writing slots `outs`; `into`:
    (output position, slot of the input it is written into where the launch can)."""

    __slots__ = ("launch", "ins", "outs", "seg", "launcher", "into")

    def __init__(self, launch, ins: list[int], outs: list[int], seg: Segment, launcher: "KernelLauncher",
                 into: Sequence[tuple[int, int]] = ()):
        self.launch, self.ins, self.outs, self.seg, self.launcher = launch, ins, outs, seg, launcher
        self.into = list(into)


class _AtenStep:
    """One op through its ATen rule: argument `pos` is slot `k` for each (pos, k) of `fill`,
    the `template`'s value elsewhere (scalars, fixed by the layout, resolved when the step is
    made)."""

    __slots__ = ("rule", "expr", "template", "fill", "outs")

    def __init__(self, expr: Expr, template: list, fill: list[tuple[int, int]], outs: list[int]):
        self.rule, self.expr, self.template, self.fill, self.outs = RULES[type(expr)], expr, template, fill, outs


# CPython 3.11 takes a function's frame (its locals and operand stack, 8 bytes a slot) from
# 16 KiB chunks, and maps a fresh chunk for a call that does not fit in the current one,
# unmapping it on return: a frame of 1,150 slots (a 48-layer MLP's backward) left its calls
# so little room that each mapped one, 90,000 mmap/munmap pairs a call, 3-4x its host time.
# A program whose one function would pass _FRAME_SLOTS (2 KiB, an eighth of a chunk: no call
# made from it starts much deeper than from an ordinary function) runs as parts of about
# _PART_SLOTS slots each; smaller programs stay one function, their source as before. (The
# parts' own cost, a call a part and a list move a value crossing them: 0.5-1.3 us a 100
# steps on the development CPU, against 7-8 us for the one function's own lines with every
# call stubbed, and its launches' host time above that.)
_FRAME_SLOTS = 256
_PART_SLOTS = 128


def _straight_line(steps: list, n_inputs: int, outputs: list[int], device, sizes, lengths=None) -> Any:
    """The steps as one generated function of the arguments (a local a slot), as the ready
    key and the binder are: no loop over step objects, no list of slots. A large program is
    split in parts (`_part_starts`, `_parted`), each a function of its own."""
    env: dict[str, Any] = {"EvalContext": EvalContext, "device": device, "sizes": sizes, "follow": _follow}
    frees = any(isinstance(step, (_KernelStep, BatchStep)) and step.into for step in steps)
    if frees:  # (once: the arguments' overlap)
        env["disjoint"] = Disjoint(lengths)
    part_starts = _part_starts(steps, n_inputs)
    # the arguments as one value: in parts, `args` (its slots are not locals there)
    arguments = "args" if part_starts else f"({''.join(f's{m}, ' for m in range(n_inputs))})"
    readers: dict[int, list] = collections.defaultdict(list)
    for step in steps:
        for k in _reads(step):
            readers[k].append(step)
    read_once = {k for k, found in readers.items() if len(found) == 1 and k not in outputs}
    # slots whose readers all make new tensors of them (a kernel, a matmul, a linear): an
    # identity permute there can be its source (other ops may hand their input back, as an
    # empty squeeze does, and an output is a new view)
    aliasable = {k for k, found in readers.items() if k not in outputs and all(
        isinstance(r, (_KernelStep, BatchStep)) or function_form(r.expr) is not None for r in found)}
    permuted: dict[int, tuple] = {}  # slot -> (its source slot, dims, its line, its dims' name)
    uses_rules = False
    lines: list[Optional[str]] = []  # the steps' lines, step i's from starts[i]
    starts: list[int] = []
    for i, step in enumerate(steps):
        starts.append(len(lines))
        if i in part_starts:  # (a permute is composed with one of its own part only)
            permuted.clear()
        if isinstance(step, BatchStep):  # (its members read the arguments only)
            env[f"B{i}"] = step
            lines.append(f"    r = B{i}({'free' if frees else 'True'}, args)")
            for n, member in enumerate(step.members):
                lines.append(f"    {''.join(f's{k}, ' for k in member.outs)}= r[{n}]")
            continue
        if isinstance(step, _KernelStep):
            env[f"K{i}"], env[f"L{i}"], env[f"G{i}"] = step.launch, step.launcher, step.seg
            ins = f"[{', '.join(f's{k}' for k in step.ins)}]"
            call = f"K{i}({ins}, device)"
            inline = step.launch.direct_lines([f"s{k}" for k in step.ins], [f"s{k}" for k in step.outs], call, env,
                                              f"_{i}", device, {k: (f"s{j}", f"free and s{j}.data_ptr() % 16 == 0")
                                                                for k, j in step.into})
            if inline is None and step.into:
                env[f"D{i}"], env[f"E{i}"], env["into_destinations"], env["offered"] = \
                    step.launch, step.into, into_destinations, offered
                call = f"K{i}({ins}, device, into_destinations(D{i}, offered(E{i}, {arguments})))"
            lines += [f"    {line}" for line in inline] if inline is not None else [f"    r = {call}"]
            lines.append(f"    if L{i}.last_source is not K{i}.source:")
            lines.append(f"        follow(L{i}, G{i}, K{i}.source)")
            if inline is not None:
                continue
        else:
            form = method_form(step.expr, lambda tv: sizes.known.get(id(tv)))
            if form is not None and step.fill and step.fill[0][0] == 0 and len(step.outs) == 1:
                # a view op as its Tensor method: no rule, no size lookup
                if form[0] == "permute":
                    _permute_line(lines, env, i, step.fill[0][1], form[1], step.outs[0], read_once, permuted, aliasable)
                else:
                    env[f"A{i}"] = form[1]
                    lines.append(f"    s{step.outs[0]} = s{step.fill[0][1]}.{form[0]}(A{i})")
                continue
            args = [f"C{i}_{pos}" for pos in range(len(step.template))]
            for pos, value in enumerate(step.template):
                env[f"C{i}_{pos}"] = value
            for pos, k in step.fill:
                args[pos] = f"s{k}"
            function = function_form(step.expr)
            if function is not None and len(step.outs) == 1:  # the torch function the rule calls
                env[f"F{i}"] = function
                lines.append(f"    s{step.outs[0]} = F{i}({', '.join(args)})")
                continue
            env[f"R{i}"], env[f"E{i}"] = step.rule, step.expr
            lines.append(f"    r = R{i}(E{i}, [{', '.join(args)}], ctx)")
            uses_rules = True
        lines += [f"    s{k} = r[{j}]" for j, k in enumerate(step.outs)]
    # (a context a call: it caches per-execution views, a weight's transpose)
    context = ["    ctx = EvalContext(None, device, sizes=sizes)"] if uses_rules else []
    if part_starts:
        source = "\n".join(_parted(steps, lines, starts, part_starts, n_inputs, outputs, env, context, frees))
    else:
        head = ["def run(args):"]
        if n_inputs:
            head.append(f"    {''.join(f's{k}, ' for k in range(n_inputs))}= args")
        head += context
        if frees:
            head.append(f"    free = disjoint({arguments})")
        lines.append(f"    return [{', '.join(f's{k}' for k in outputs)}]")
        source = "\n".join(line for line in head + lines if line is not None)
    exec(compile(source, f"<fuser ready program of {len(steps)} steps>", "exec"), env)
    return env["run"]


def _reads(step) -> list[int]:
    """The slots a step reads."""
    return step.ins if isinstance(step, (_KernelStep, BatchStep)) else [k for _, k in step.fill]


def _named(step) -> list[int]:
    """The slots a step's lines name: what it reads, and for a kernel the arguments it may
    write into (a batched launch reads `args` itself)."""
    if isinstance(step, BatchStep):
        return []
    return _reads(step) + [j for _, j in step.into] if isinstance(step, _KernelStep) else _reads(step)


def _part_starts(steps: list, n_inputs: int) -> list[int]:
    """The steps at which the program's parts start, or none where one function's frame
    stays within `_FRAME_SLOTS`: a local a slot, an operand stack as deep as the arguments
    it unpacks (CPython builds a list of more than 30 an element at a time: the outputs', a
    step's inputs'). A part ends before the step that would take its slots past
    `_PART_SLOTS`, counting the names a kernel's inline launch adds (on a GPU: its stream,
    its inputs' addresses)."""
    made = sum(len(step.outs) for step in steps)
    if not steps or n_inputs + made + max(n_inputs, 32) <= _FRAME_SLOTS:  # (no calls made from it: one)
        return []
    starts, held, extra = [0], set(), 0
    for i, step in enumerate(steps):
        slots = set(_named(step)) | set(step.outs)
        more = len(slots) + 4 if isinstance(step, (_KernelStep, BatchStep)) else 0
        if held and len(held | slots) + extra + more > _PART_SLOTS:
            starts.append(i)
            held, extra = set(), 0
        held |= slots
        extra += more
    return starts


def _parted(steps: list, lines: list, starts: list[int], part_starts: list[int], n_inputs: int,
            outputs: list[int], env: dict, context: list[str], frees: bool) -> list[str]:
    """The source of a program in parts: `run` keeps the slots in a list `s` (the arguments,
    then what each part made that a later part reads or the program returns) and calls part
    P<n> for each part, a function with a local a slot it reads or makes (`lines[starts[i]:]`
    for its steps i), its values taken from `s` at its start and put there at its end."""
    params = "s, args" + (", free" if frees else "") + (", ctx" if context else "")
    later_reads = collections.Counter(outputs)  # (reads at or after the part being written)
    for step in steps:
        later_reads.update(_reads(step))
    made = n_inputs + sum(len(step.outs) for step in steps)
    env["FILL"] = [None] * (made - n_inputs)
    head = ["def run(args):", "    s = list(args)", "    s += FILL"] + context
    if frees:
        head.append("    free = disjoint(args)")
    parts: list[str] = []
    bounds, ends = part_starts + [len(steps)], starts + [len(lines)]
    for n, (first, after) in enumerate(zip(bounds, bounds[1:])):
        taken: dict[int, None] = {}  # (in the order read)
        own: set[int] = set()
        for step in steps[first:after]:
            taken.update((k, None) for k in _named(step) if k not in own)
            own.update(step.outs)
            later_reads.subtract(_reads(step))
        parts.append(f"def P{n}({params}):")
        parts += [f"    s{k} = s[{k}]" for k in taken]
        parts += [line for line in lines[ends[first]:ends[after]] if line is not None]
        parts += [f"    s[{k}] = s{k}" for k in sorted(own) if later_reads[k] > 0]
        head.append(f"    P{n}({params})")
    if len(outputs) > 1:  # (their list from one C call, none of them on the operand stack)
        env["OUT"] = operator.itemgetter(*outputs)
        head.append("    return [*OUT(s)]")
    else:
        head.append(f"    return [{''.join(f's[{k}]' for k in outputs)}]")
    return parts + head


def _permute_line(lines: list, env: dict, i: int, source: int, dims: tuple, out: int, read_once: set,
                  permuted: dict, aliasable: set) -> None:
    """Step i, `s<out> = s<source>.permute(dims)`, as a line of the program. A permute of a
    permute that nothing else reads is one permute of the first one's source (a linear
    layer's backward reads its weight through two transposes), and one that leaves the axes
    in place is its source itself where `out` is aliasable (see `_straight_line`)."""
    earlier = permuted.get(source)
    if earlier is not None and source in read_once:
        source, first, at, name = earlier
        lines[at] = None
        env.pop(name, None)
        dims = tuple(first[d] for d in dims)
    if dims == tuple(range(len(dims))) and out in aliasable:
        lines.append(f"    s{out} = s{source}")
    else:
        env[f"A{i}"] = dims
        lines.append(f"    s{out} = s{source}.permute(A{i})")
    permuted[out] = (source, dims, len(lines) - 1, f"A{i}")


class _FixedSizes:
    """The local sizes the first call's ATen ops asked for, by tensor: a ready program's
    sizes, fixed by its layout (it keeps no binding table: every size it needs is known)."""

    __slots__ = ("known",)

    def __init__(self, known: dict):
        self.known = known

    def __call__(self, tv, table, with_streams: bool = False, stream_index=None) -> tuple[int, ...]:
        found = None if with_streams or stream_index is not None else self.known.get(id(tv))
        if found is None:
            raise InternalError(f"a ready program asked for T{tv.name}'s size, which its first call did not")
        return found


class ReadyProgram:
    """Every segment of a runtime of several segments, for one exact argument layout."""

    __slots__ = ("runtime", "steps", "device_type", "_run")

    def __init__(self, runtime: "FusionRuntime", sizes: _FixedSizes, steps: list, outputs: list[int],
                 lengths: Optional[tuple] = None):
        n_inputs = len(runtime.fusion.inputs())
        # (one launch for the kernel steps that launch one kernel side by side: batching.py)
        steps = batch_steps(steps, n_inputs, runtime.device, lambda s: isinstance(s, _KernelStep), _follow)
        runtime.batches.update(step for step in steps if isinstance(step, BatchStep))
        self.runtime, self.steps = runtime, steps
        self.device_type = runtime.device.type
        self._run = _straight_line(steps, n_inputs, outputs, runtime.device, sizes, lengths)

    def __call__(self, args: Sequence[Any]) -> list[torch.Tensor]:
        if torch.is_autocast_enabled(self.device_type):
            # the IR fixes every dtype: ATen ops run as written, not recast by autocast
            with torch.autocast(self.device_type, enabled=False):
                return self._run(args)
        return self._run(args)


_NOT_RUN = object()


def ready_program(runtime: "FusionRuntime", env: Environment, sizes: dict,
                  launches: dict, kept: Optional[dict] = None) -> Optional[ReadyProgram]:
    """The steps of the run that left `env` (every value it made, a call with this layout),
    `sizes` (the local sizes its ATen ops asked, by tensor) and `launches` (the launch each
    kernel segment made: None for an empty loop space, run through ATen), or None where a step
    cannot be made. `kept`: the rest of what the run kept (its arguments' layouts and lengths,
    for in-place writes)."""
    # a Val's slot: its input position (the last one for a Val listed twice, which is the
    # value a run binds), then a fresh slot for each value made
    inputs = runtime.fusion.inputs()
    index: dict[int, int] = {id(v): k for k, v in enumerate(inputs)}
    fresh = itertools.count(len(inputs))

    def slot(v) -> int:
        k = index.get(id(v))
        if k is None:
            k = index[id(v)] = next(fresh)
        return k

    def aten_steps(exprs) -> list:
        steps = []
        for e in exprs:
            if type(e) not in RULES:
                return None
            template, fill = [], []
            for pos, v in enumerate(e.inputs):
                if isinstance(v, Scalar):
                    # a constant, or a value of the table, a scalar input's too (what binding
                    # made of its argument: the ready key fixes the argument's type and value)
                    template.append(env[v])
                elif id(v) in index:
                    fill.append((pos, index[id(v)]))
                    template.append(None)
                else:
                    return None
            steps.append(_AtenStep(e, template, fill, [slot(o) for o in e.outputs]))
        return steps

    steps: list = []
    for seg in runtime.segments:
        launcher = runtime.launchers.get(id(seg))
        launch = None
        if launcher is not None:
            launch = launches.get(id(seg), _NOT_RUN)
            if launch is _NOT_RUN or any(not isinstance(v, TensorView) or id(v) not in index for v in seg.inputs):
                return None
        if launch is not None:
            into = fitting(runtime.in_place.get(id(seg), []), kept["layouts"], launch) \
                if runtime.in_place and kept and "layouts" in kept else []
            steps.append(_KernelStep(launch, [index[id(v)] for v in seg.inputs],
                                     [slot(o) for o in seg.outputs], seg, launcher, into))
            continue
        made = aten_steps(seg.exprs)  # an ATen segment, or a kernel's empty loop space
        if made is None:
            return None
        steps += made
    if any(id(o) not in index for o in runtime.fusion.outputs()):
        return None
    return ReadyProgram(runtime, _FixedSizes(dict(sizes)), steps, [index[id(o)] for o in runtime.fusion.outputs()],
                        (kept or {}).get("lengths"))


class BoundCall:
    """A runtime for one exact argument layout (same shapes, strides, dtypes, devices and
    scalar values): a repeat call with that layout binds its own table, as every execution
    does, and runs the runtime without finding it again (the call key and layout lookup, a few
    microseconds a call). `options` go to the runtime's run: a host program's plan for these
    values (`values_key`), fixed by the layout."""

    __slots__ = ("runtime", "binder", "options")

    def __init__(self, runtime: "FusionRuntime | HostRuntime", binder: InputBinder, **options: Any):
        self.runtime, self.binder, self.options = runtime, binder, options

    def __call__(self, args: Sequence[Any]) -> list[torch.Tensor]:
        return self.runtime.run(args, self.binder.bind(args), **self.options)
