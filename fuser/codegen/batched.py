"""Several launches of one pointwise kernel as one launch (horizontal batching).

An optimizer's step over many parameters is one pointwise kernel per parameter, each compiled
once (canonical.py) and launched once per tensor: 18 launches for a llama layer's Adam step,
each with its own ramp-up and tail, where Inductor's combined kernel makes one (open lead 15 of
docs/performance.md). A batched launch runs them all in one grid: its programs are the members'
programs end to end, and each program finds its member by the grid's running starts, then reads
that member's arguments (addresses and sizes) from a table in device memory.

The batched kernel is the member kernel's own body under a prologue that loads those arguments,
specialized as Triton specializes a kernel's: a stride of 1 every member passes is the constant
1, a size every member passes a multiple of 16 is said to be, and the addresses are asserted
16-byte aligned (a call whose tensors are not runs the members one by one); other values are
read, so one batched kernel serves every size. The table is remade only when an
address or the stream changes: a training loop passes the same parameters every step.
"""
from __future__ import annotations

import ast
import hashlib
import linecache
import threading
import types
import warnings
from typing import Any, Optional, Sequence

import torch

from ..dump import dump_flags
from .compile import load_plain
from .launches import Launch
from .scratch import _capturing
from .steps import _DirectStep, _Step, raw_stream

_POINTEE = {torch.float32: "tl.float32", torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16",
            torch.float64: "tl.float64", torch.int64: "tl.int64", torch.int32: "tl.int32",
            torch.int16: "tl.int16", torch.int8: "tl.int8", torch.uint8: "tl.uint8", torch.bool: "tl.int1"}
_PROGRAM_LINE = "pid = tl.program_id(0)"
# per thread, the tensors an interpreted batched launch reaches through its table (beside its
# one argument, the table): what a bounds check of the interpreter's loads must allow
REACHED = threading.local()
_INT32 = 2 ** 31


def batchable(launch: Any) -> Optional[tuple]:
    """(kernel, its keyword arguments, argument template, tensor slots) of a launch that may join
    a batch: one kernel, no workspace or semaphore, every argument a tensor or an int; else None."""
    if type(launch) is not Launch or len(launch.steps) != 1 or launch.workspaces is not None \
            or launch.semaphores is not None:
        return None
    step, template, slots = launch.steps[0]
    if type(step) not in (_Step, _DirectStep):
        return None
    filled = {pos for pos, _ in slots}
    if any(pos not in filled and type(a) is not int for pos, a in enumerate(template)):
        return None
    return step.fn, step.kwargs, template, slots


def _raw(kernel: Any) -> Optional[types.FunctionType]:
    """The Python function behind a Triton JIT (or interpreted) kernel."""
    for _ in range(4):
        if isinstance(kernel, types.FunctionType):
            return kernel
        kernel = getattr(kernel, "fn", None)
    return None


class BatchedLaunch:
    """One launch of `kernel` for every member: member m's arguments are `templates[m]` with
    the call's tensors at its `slots[m]` (position, index into the member's tensors)."""

    __slots__ = ("kernel", "kwargs", "templates", "slots", "target", "step", "rows", "starts", "last",
                 "declined", "launched", "source")

    def __init__(self, kernel: Any, kwargs: dict, templates: Sequence[list], slots: Sequence[list],
                 target: str):
        self.kernel, self.kwargs, self.target = kernel, dict(kwargs), target
        self.templates, self.slots = [list(t) for t in templates], [list(s) for s in slots]
        self.step = None
        self.last: tuple = ((), None)  # (addresses, table): one attribute, read and set whole
        self.declined = False  # the kernel has no batched form: the members run one by one
        self.launched = False  # a GPU launch has compiled the batched kernel
        self.source: Optional[str] = None

    def __call__(self, members: Sequence[Sequence[torch.Tensor]], grids: Sequence[int]) -> bool:
        """Launches every member (`members[m]`: its tensors, in the order its slots index them;
        `grids[m]`: its programs) at once; False, with nothing launched, where the kernel has
        no batched form, a tensor is not 16-byte aligned or the stream captures a CUDA graph."""
        if self.declined or (self.target == "cuda" and _capturing()):  # (see `launch`)
            return False
        addresses = [t.data_ptr() for tensors in members for t in tensors]
        if any(a % 16 for a in addresses):
            return False
        if self.step is None and not self._build(members, grids):
            return False
        if self.target == "cuda":
            return self.launch(tuple(addresses), members[0][0].device)
        REACHED.tensors = [t for tensors in members for t in tensors]
        try:
            self.step([self._table_for(tuple(addresses), members[0][0].device)])
        finally:
            REACHED.tensors = None
        return True

    def kernel_source(self) -> str:
        """The batched kernel as users read it: a line naming its members, then its function
        (its module also holds the member kernel and helpers, printed with the members)."""
        text = self.source or ""
        at = text.rfind("\ndef ")
        return (f"# one launch of {len(self.templates)} launches of {_raw(self.kernel).__name__} (codegen/batched.py)"
                + text[at:])

    def launch(self, addresses: tuple, device: torch.device) -> bool:
        """A GPU call's launch, its kernel built, its `addresses` (every member's tensors in
        order) 16-byte aligned; False, with nothing launched, while the stream captures a CUDA
        graph (it would keep the table's address, which a later call may free) and where the
        batched kernel failed to compile (a warning says so once)."""
        if self.declined or _capturing():
            return False
        try:  # (the first launch compiles the kernel)
            self.step([self._table_for(addresses, device, raw_stream(device.index))])
        except Exception as e:  # noqa: BLE001 - the members, compiled already, run one by one
            if self.launched:
                raise
            self.declined = True
            warnings.warn(f"fuser: the batched form of {_raw(self.kernel).__name__} failed to compile "
                          f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); its "
                          f"{len(self.templates)} launches run one by one", stacklevel=2)
            return False
        self.launched = True
        return True

    def _table_for(self, addresses: tuple, device: torch.device, stream: int = 0) -> torch.Tensor:
        """The table for these addresses: the last one where they and the stream are the last
        call's (a table copied on another stream may not have arrived yet)."""
        key, last = (stream, addresses), self.last
        if last[0] == key:
            return last[1]
        table = self._table(addresses, device)
        self.last = (key, table)
        return table

    def _table(self, addresses: Sequence[int], device: torch.device) -> torch.Tensor:
        """The starts of the members' programs, then each member's row of arguments."""
        values = list(self.starts)
        at = 0
        for row, n in self.rows:
            for kind, value in row:
                values.append(addresses[at + value] if kind else value)
            at += n
        table = torch.tensor(values, dtype=torch.int64)
        # (from pageable memory the values are staged before the call returns)
        return table if device.type == "cpu" else table.to(device, non_blocking=True)

    def _build(self, members: Sequence[Sequence[torch.Tensor]], grids: Sequence[int]) -> bool:
        raw = _raw(self.kernel)
        lines = linecache.getlines(raw.__code__.co_filename) if raw is not None else []
        made = batched_source("".join(lines), raw.__name__, members, self.templates, self.slots,
                              _unspecialized(self.kernel)) if lines else None
        if made is None:
            self.declined = True
            return False
        name, source = made
        if sum(grids) >= 2 ** 31:  # (a grid's first dimension)
            self.declined = True
            return False
        self.source = source
        if "triton" in dump_flags():
            print(source)
        kernel = load_plain(name, source, self.target)
        starts = [0]
        for g in grids:
            starts.append(starts[-1] + g)
        self.starts = starts
        # per member: (is a tensor, its index among the member's tensors or the int) of each
        # argument the table holds, and its tensor count
        self.rows = []
        for template, slots, tensors in zip(self.templates, self.slots, members):
            at = dict(slots)
            self.rows.append(([(True, at[pos]) if pos in at else (False, a) for pos, a in enumerate(template)],
                              len(tensors)))
        kwargs = {**self.kwargs, "COUNT": len(grids), "COUNT_BLOCK": 1 << max(0, (len(grids) - 1).bit_length())}
        step_type = _DirectStep if self.target == "cuda" else _Step
        self.step = step_type(kernel, starts[-1], kwargs)
        return True


def _unspecialized(kernel: Any) -> set:
    """The parameters Triton does not specialize on their value (a kernel's scalar inputs)."""
    names = getattr(kernel, "do_not_specialize", None) or ()
    params = [p.name for p in getattr(kernel, "params", ())]
    return {params[n] if isinstance(n, int) and n < len(params) else n for n in names}


def batched_source(module: str, name: str, members: Sequence[Sequence[torch.Tensor]],
                   templates: Sequence[list], slots: Sequence[list],
                   unspecialized: Sequence[str] = ()) -> Optional[tuple[str, str]]:
    """(name, module source) of the batched form of kernel `name` defined in `module` (its
    generated module: helpers included) for these members, or None where the kernel has no
    such form (not one program index read once). An int argument is specialized as Triton
    specializes it (a 1 every member passes is the constant 1; one every member passes a
    multiple of 16 is said to be), not on other values: one batched kernel serves every size,
    and `unspecialized` parameters (scalar inputs) are never specialized."""
    try:
        tree = ast.parse(module)
    except SyntaxError:
        return None
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if fn is None or fn.args.vararg or fn.args.kwarg or fn.args.kwonlyargs:
        return None
    params = [(a.arg, a.annotation is not None and "constexpr" in ast.unparse(a.annotation)) for a in fn.args.args]
    runtime = [p for p, constexpr in params if not constexpr]
    constexprs = [p for p, constexpr in params if constexpr]
    if any(len(t) != len(runtime) for t in templates):
        return None
    lines = module.splitlines()
    body = lines[fn.body[0].lineno - 1:fn.end_lineno]
    indent = body[0][:len(body[0]) - len(body[0].lstrip())]
    found = [k for k, line in enumerate(body) if line.strip() == _PROGRAM_LINE]
    if len(found) != 1 or sum("program_id" in line for line in body) != 1:
        return None
    prologue = ["batch_program = tl.program_id(0)",
                "batch_which = tl.arange(0, COUNT_BLOCK)",
                "batch_ends = tl.load(TABLE + 1 + batch_which, mask=batch_which < COUNT, other=2147483647)",
                "batch_member = tl.sum((batch_ends <= batch_program).to(tl.int32), axis=0)",
                f"batch_row = TABLE + (COUNT + 1) + batch_member * {len(runtime)}"]
    for pos, param in enumerate(runtime):
        tensors = []
        for template, slot, mine in zip(templates, slots, members):
            at = dict(slot)
            tensors.append(mine[at[pos]] if pos in at else None)
        if any(t is not None for t in tensors):
            if any(t is None for t in tensors) or len({t.dtype for t in tensors}) != 1 \
                    or tensors[0].dtype not in _POINTEE:
                return None
            pointee = _POINTEE[tensors[0].dtype]
            prologue.append(f"{param} = tl.multiple_of(tl.load(batch_row + {pos}).to(tl.pointer_type({pointee})), 16)")
            continue
        values = [t[pos] for t in templates]
        specialized = param not in unspecialized
        if specialized and all(v == 1 for v in values):
            prologue.append(f"{param} = 1")  # (as Triton makes a 1 a constant)
            continue
        loaded = f"tl.load(batch_row + {pos})"
        if all(-_INT32 <= v < _INT32 for v in values):  # (as Triton passes such an int: int32)
            loaded += ".to(tl.int32)"
        if specialized and all(v % 16 == 0 for v in values):  # (as Triton's specialization tells it)
            loaded = f"tl.multiple_of({loaded}, 16)"
        prologue.append(f"{param} = {loaded}")
    program = found[0]
    body[program] = body[program].replace(_PROGRAM_LINE, "pid = (batch_program - tl.load(TABLE + batch_member)).to(tl.int32)")
    digest = hashlib.sha256("\n".join(prologue + body).encode()).hexdigest()[:10]
    batched = f"{name}_batched_{digest}"
    signature = ", ".join(["TABLE"] + [f"{c}: tl.constexpr" for c in constexprs + ["COUNT", "COUNT_BLOCK"]])
    text = "\n".join([module.rstrip("\n"), "", "", f"def {batched}({signature}):"]
                     + [indent + line for line in prologue] + body) + "\n"
    return batched, text
