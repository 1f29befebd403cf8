"""The inner-outer template's rows too long for registers, as one Gluon kernel that keeps the row
in shared memory (`triton.experimental.gluon`: Triton's `tl` language cannot allocate it).

One program a multiprocessor loops over the rows pid, pid + P, ... The inputs that vary along
the row (x, dy) are copied into shared memory as CHUNKS slots of BLOCK1 columns, one
asynchronous copy group a chunk; those along columns only (the weight) once, before the loop.
Each pass over the row (one per set of row reductions ready together, then the pass that stores
the row outputs and adds the column terms) reads the chunks from shared memory: the first pass,
unrolled, waits for each chunk's copy as it reaches it; the last, unrolled, starts the copy of
the next row's chunk j into slot j as soon as it is done with it; a pass between them loops.
An unrolled pass is written once, as a function of the chunk called once a chunk
(codegen/outline.py), so that Triton's front end reads it once.
The first AHEAD chunks may have two slots, taken by the rows' parity: the first pass then starts
copying the next row's into the other slots, so that a row starts with them in; and a wait or a
round of copies may cover BATCH chunks (each puts a barrier of all warps). On the H200 neither
paid more than 1% (the launch times those heuristics.SHARED_ROW_SCHEDULES names: by default the
plain one alone). A value a row (a saved mean or rstd) is loaded a row ahead. Each column reduction
keeps one fp32 accumulator a chunk in registers, stored after the loop as partial row `pid` of
its workspace, which the inner-outer combine kernel reduces. x and dy are read from HBM once;
the two-kernel form reads them twice. Where one program's column accumulators would not fit
registers (the LayerNorm backward's dw and db at 32768 columns), each row is split over a pair
of programs instead (SharedRowConfig.pair, codegen/shared_row_pair.py).

The copies and the loads of a slot share one layout; Triton's barrier analysis still puts a
barrier after each wait and before each copy into a slot that was read. The kernel is written
by KernelWriter's emitters, whose blocks and index vectors take the layout here, with `tl`
naming Gluon's language in the module.
"""
from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, replace
from typing import Optional, Sequence

import torch

from ..dump import env_switch
from ..ir import DataType, Expr, ReductionOp, ReductionOpType, TensorView, VarMeanOp
from ..schedulers.heuristics import (SHARED_ROW_PAIR_BUFFERS, SHARED_ROW_PAIR_VECTOR_BYTES, SHARED_ROW_PAIR_WARPS,
                                     SHARED_ROW_MAX_CHUNKS, SHARED_ROW_RESERVED_BYTES, SHARED_ROW_VECTOR_BYTES,
                                     SHARED_ROW_WARPS, shared_row_accumulators)
from ..schedulers.plan import KernelPlan
from .kernel import KernelSource, KernelWriter
from .layout import Layout, run_stride
from .math import HELPER_NAMES, helpers_for
from .outline import NotOutlined, Outlined, free_reads, names_read, outline
from .scope import Scope
from .types import STORAGE, compute_type

_CHUNK = "@chunk@"  # a pass's chunk number, until the pass is unrolled
_PASS = re.compile(r"(\s*)@pass:(\d+)@")  # where a pass goes among the row's lines
_ROW = re.compile(r"@row:(\w+)@")  # a staged row input's slot of the chunk, until unrolled
STAGED_DTYPES = (DataType.Float, DataType.Half, DataType.BFloat16)
ALIGNMENT = 16  # bytes: asynchronous copies move 4 to 16 bytes, from addresses so aligned


@functools.cache
def gluon_names() -> frozenset:
    """The names of Gluon's language; empty where this Triton has no Gluon or no asynchronous
    copies (Gluon is experimental: its API moves between releases)."""
    try:
        from triton.experimental.gluon import language as gl
        from triton.experimental.gluon.language.nvidia.ampere import async_copy
    except ImportError:
        return frozenset()
    copy = getattr(async_copy, "async_load", None) or getattr(async_copy, "async_copy_global_to_shared", None)
    if copy is None or not all(hasattr(async_copy, f) for f in ("commit_group", "wait_group")):
        return frozenset()
    return frozenset(n for n in dir(gl) if not n.startswith("_"))


@dataclass(frozen=True)
class SharedRowConfig:
    per_thread: int  # contiguous elements of a chunk a thread copies and computes
    warps: int
    chunks: int  # slots of the row in shared memory
    staged: tuple[int, ...]  # the inputs (of the plan's tensor inputs) copied into shared memory
    # column reductions (by position) whose accumulators live in shared memory, not registers:
    # none in the launches fuser makes (benchmarks/sweep_shared_row.py measures them)
    shared_accumulators: tuple[int, ...] = ()
    # the staged row inputs' first chunks held twice (0: none): the next row's are copied into
    # the other slot while this row is read, so it starts with them in
    ahead: int = 0
    # chunks a wait of the first pass and a round of copies of the last cover: each puts a
    # barrier of all the block's warps (1: a chunk each; benchmarks/sweep_shared_row.py times more)
    batch: int = 1
    # each row split over a pair of programs, each holding half of it and its half of the
    # column accumulators (codegen/shared_row_pair.py): where one program's would not fit
    pair: bool = False

    @property
    def block1(self) -> int:
        return self.per_thread * 32 * self.warps

    @property
    def plain(self) -> "SharedRowConfig":
        """This config in the plain copy schedule: no chunk held twice, one chunk a barrier."""
        return replace(self, ahead=0, batch=1)


def shared_row_possible(device: torch.device) -> bool:
    """Whether the form may run on `device`: a Hopper GPU (measured on the H200 only) and a
    Triton whose Gluon has asynchronous copies (FUSER_SHARED_ROW=0: never)."""
    return (env_switch("FUSER_SHARED_ROW", True) and device.type == "cuda" and bool(gluon_names())
            and torch.cuda.get_device_capability(device)[0] == 9)


def shared_row_config(plan: KernelPlan, layout: Layout, cols: int, tensors: Sequence[torch.Tensor],
                      strides: list[list[int]], extents: list[int], device: torch.device) -> Optional[SharedRowConfig]:
    """The shared-row form of an inner-outer plan for this call, or None where it has none:
    not a Hopper GPU, no Gluon, a row of a staged input (one that varies along the row at this
    call) not contiguous or its row stride not aligned for the copies, a row that does not fit shared memory or accumulators that would not fit registers
    (FUSER_SHARED_ROW=0 turns the form off)."""
    if not shared_row_possible(device) or plan.axes.resized or len(layout.dim0) != 1 or len(layout.dim1) != 1:
        return None
    (row_axes,), (col_axes,) = layout.dim0, layout.dim1
    views = [v for v in plan.parts.persistent.inputs if isinstance(v, TensorView)]
    sizes, staged = [], []
    for k, v in enumerate(views):  # (the order of the launch's tensors and strides)
        if not any(strides[k][a] for a in col_axes):
            continue  # not staged: read with plain loads
        t = tensors[k]
        # (an address not aligned for the copies is checked at each call: see `misaligned`)
        if v.dtype not in STAGED_DTYPES or run_stride(col_axes, strides[k], extents) != 1 or cols % ALIGNMENT:
            return None
        # (Triton proves a row aligned from a row stride divisible by 16)
        if run_stride(row_axes, strides[k], extents) % ALIGNMENT:
            return None
        sizes.append(t.element_size())
        staged.append(k)
    if not sizes:
        return None
    per_thread = max(1, SHARED_ROW_VECTOR_BYTES // max(sizes))
    # (copied a row at a time: those spanning the row axes, as the writer's staged_rows)
    spans = plan.parts.persistent.axes.spans
    row_bytes = sum(sizes[i] for i, k in enumerate(staged) if any(a in spans(views[k]) for a in row_axes))
    fitting = [config for config in (SharedRowConfig(per_thread, warps, -(-cols // (per_thread * 32 * warps)),
                                                     tuple(staged)) for warps in SHARED_ROW_WARPS)
               if fits(config, plan, sum(sizes), device, row_bytes)]
    if not fitting:
        return pair_config(plan, cols, tuple(staged), sizes, row_bytes, device)
    # (the warps whose passes unroll few enough chunks: see heuristics.SHARED_ROW_WARPS), but
    # for a kernel with a pass between the first and the last, which ran slower on more warps
    config = next((c for c in fitting if c.chunks <= SHARED_ROW_MAX_CHUNKS), fitting[0])
    if config is not fitting[0] and row_passes(plan, layout, config) > 2:
        config = fitting[0]
    ahead = config.chunks
    while ahead and not fits(replace(config, ahead=ahead), plan, sum(sizes), device, row_bytes):
        ahead -= 1
    return replace(config, ahead=ahead)


def row_passes(plan: KernelPlan, layout: Layout, config: SharedRowConfig) -> int:
    """The passes over each row the kernel of `config` makes (its row's lines written, not the
    kernel): two, or three where a row sum waits on another (a recomputed LayerNorm's mean and
    rstd)."""
    writer = SharedRowWriter(plan, layout, "passes", config)
    writer.row_program()
    return len(writer.passes)


# whether the gate may split rows over pairs of programs (tests turn it off to reach the forms
# those rows took before)
PAIRS = True

# whether the unrolled passes are written once as functions of the chunk (codegen/outline.py);
# tests turn it off to compare the kernel with the passes written out
OUTLINE_PASSES = True


def pair_config(plan: KernelPlan, cols: int, staged: tuple[int, ...], sizes: list[int], row_bytes: int,
                device: torch.device) -> Optional[SharedRowConfig]:
    """The pair form (each row split over two programs) where one program's column accumulators
    would not fit: each half whole chunks of SHARED_ROW_PAIR_VECTOR_BYTES a thread (or half as
    many, where those do not divide the half: 20480 columns), three rows' halves of the row
    inputs and a half of the column inputs in shared memory, the half's accumulators in
    registers; None where these do not hold."""
    if not PAIRS:
        return None
    half = cols // 2
    shared = (SHARED_ROW_PAIR_BUFFERS * row_bytes + sum(sizes) - row_bytes) * half
    if cols % 2 or shared > max_shared_memory(device) - SHARED_ROW_RESERVED_BYTES:
        return None
    in_registers = len(plan.parts.split.column_reductions)
    for vector_bytes in (SHARED_ROW_PAIR_VECTOR_BYTES, SHARED_ROW_PAIR_VECTOR_BYTES // 2):
        per_thread = max(1, vector_bytes // max(sizes))
        block1 = per_thread * 32 * SHARED_ROW_PAIR_WARPS
        if half % block1 == 0 and in_registers * (half // block1) * per_thread <= shared_row_accumulators(
                SHARED_ROW_PAIR_WARPS):
            return SharedRowConfig(per_thread, SHARED_ROW_PAIR_WARPS, half // block1, staged, pair=True)
    return None


def fits(config: SharedRowConfig, plan: KernelPlan, staged_bytes: int, device: torch.device,
         row_bytes: int = 0) -> bool:
    """Whether the kernel of `config` fits a block: the staged inputs (`staged_bytes` a column,
    `row_bytes` of them the row inputs', whose first chunks may be held twice) and the accumulators
    kept there within its shared memory, the others within the registers a thread of its warps may
    give them (heuristics.shared_row_accumulators; fp32 accumulators)."""
    columns = config.chunks * config.block1
    in_shared = len(config.shared_accumulators)
    in_registers = len(plan.parts.split.column_reductions) - in_shared
    shared = (staged_bytes + 4 * in_shared) * columns + row_bytes * config.ahead * config.block1
    return (shared <= max_shared_memory(device) - SHARED_ROW_RESERVED_BYTES
            and in_registers * config.chunks * config.per_thread <= shared_row_accumulators(config.warps))


def max_shared_memory(device: torch.device) -> int:
    """The most shared memory a block may opt in to on `device`, in bytes."""
    from triton.runtime import driver

    return driver.active.utils.get_device_properties(device.index or 0)["max_shared_mem"]


def misaligned(inputs: Sequence[torch.Tensor], staged: Sequence[int]) -> bool:
    """Whether a staged input of this call is not aligned for the copies."""
    return any(inputs[k].data_ptr() % ALIGNMENT for k in staged)


class SharedRowWriter(KernelWriter):
    """The Gluon kernel of an inner-outer plan (see the module's doc). A looped writer over
    the row's columns (tile dim 1) whose passes run over the chunks (see `_unrolled`) and whose
    row inputs load from shared memory; tile dim 0 is the row (BLOCK0 = 1) of the loop over rows."""
    PICKS_BY_LOAD = False  # (its row reductions are in line with its own layout)

    def __init__(self, plan: KernelPlan, layout: Layout, name: str, config: SharedRowConfig):
        super().__init__(plan.parts.persistent, layout, False, "cuda", name)
        # EVEN0 (a row a block) and EVEN1 (whole chunks): without masks fuser.jit's RMSNorm
        # backward at 32768 columns compiled to 108 registers a thread; with them, to 128 and a
        # 200-byte stack of spills (sm_90)
        self.even_masks = True
        self.config = config
        self.column_reductions = list(plan.parts.split.column_reductions)
        self.in_shared = {id(self.column_reductions[k]) for k in config.shared_accumulators}
        self.workspaces = [(e, "acc") for e in self.column_reductions]
        # those the call's strides let the copies take (an input expanded along the row is not
        # staged: its plain loads read one value a column)
        views = [v for v in self.plan.inputs if isinstance(v, TensorView)]
        self.staged = [views[k] for k in config.staged]
        self.staged_ids = {id(v) for v in self.staged}
        self.staged_rows = [v for v in self.staged if 0 in self.dims_of(v)]  # copied a row at a time
        self.staged_columns = [v for v in self.staged if 0 not in self.dims_of(v)]  # copied once
        self.row_ids = {id(v) for v in self.staged_rows}
        self.passes: list[list[str]] = []
        self.first_row_loads: list[str] = []  # loads of the row values for the program's first row, before the loop
        # the unrolled passes' functions of a chunk, by (pass, held twice); None: written out
        self.outlined: dict[tuple[int, bool], Optional[Outlined]] = {}

    # -- the layout every block takes -------------------------------------------------------

    def block(self, shape: str, value: str, dtype: str) -> str:
        return f"tl.full({shape}, {value}, {dtype}, LAYOUT)"

    def arange(self, block: str, dim: int) -> str:
        # a slice of the layout along the other dim, expanded back to it
        return f"tl.arange(0, {block}, layout=tl.SliceLayout({1 - dim}, LAYOUT))" + \
            ("[:, None]" if dim == 0 else "[None, :]")

    # -- passes -----------------------------------------------------------------------------

    def _is_column_reduction(self, e: Expr) -> bool:
        return any(e is c for c in self.column_reductions)

    def reduces_in_loop(self, e: Expr) -> bool:
        return isinstance(e, (ReductionOp, VarMeanOp)) and not self._is_column_reduction(e)

    def _ready_reduction(self, f: Expr) -> bool:
        return not self._is_column_reduction(f) and super()._ready_reduction(f)

    def emit_load(self, scope: Scope, tv: TensorView) -> None:
        if id(tv) not in self.staged_ids:
            # (a value along the row axis alone goes to the program scope; the check is defensive)
            if scope is self.program_scope and self.dims_of(tv) == {0} and not self.view:
                return self._emit_row_value(scope, tv)
            return super().emit_load(scope, tv)
        name = self.tname(tv)
        slot = f"@row:{tv.name}@" if id(tv) in self.row_ids else f"T{tv.name}_smem.index({_CHUNK})"
        scope.lines.append(f"{name} = {slot}.load(LAYOUT).to({compute_type(tv.dtype)})")
        scope.names[self.key(tv)] = name

    def load_hint(self, tv: TensorView) -> str:
        # an input the gate leaves unstaged has column stride 0 at this call: every chunk of
        # every pass reads its line again, so each hinted load asks L2 to keep it
        return ', eviction_policy="evict_last"' if super().load_hint(tv) else ""

    def _emit_row_value(self, scope: Scope, tv: TensorView) -> None:
        """A value a row (a saved mean or rstd), loaded a row ahead: loaded at the row's start,
        its latency from HBM stalled the first pass's first chunk of every row."""
        name = self.tname(tv)
        # loaded twice, the second `T = T_next` would read the next row's value
        assert not any(line.startswith(f"{name}_next = ") for line in self.first_row_loads), name
        (j,) = [j for j in self.super_axes_of(tv) if self.super_dim[j] == 0]  # (one row axis: the gate)

        def load(row: str) -> str:
            r = f"({row} + {self.arange('BLOCK0', 0)})"
            return f"tl.load(T{tv.name}_ptr + {r} * T{tv.name}_stride{j}, mask={r} < R, other=0)"
        # (converted where used: a conversion right after the load would wait for it there)
        self.first_row_loads.append(f"{name}_next = {load(self.first_row)}")
        scope.lines += [f"{name} = {name}_next.to({compute_type(tv.dtype)})", f"{name}_next = {load('nxt')}"]
        scope.names[self.key(tv)] = name

    def _slot(self, name: str, j, parity: str = "par", twice: Optional[bool] = None) -> str:
        """Where chunk j of a staged row input T`name` is held: a chunk held twice takes the
        slot of the row's `parity` (this row's; "(1 - par)" the next's, "0" the first's). `j`:
        a number, or a loop variable's name with `twice` saying which chunks it runs over."""
        ahead = self.config.ahead
        if twice if twice is not None else j < ahead:
            return f"T{name}_ahead.index({parity} * {ahead} + {j})"
        if isinstance(j, int):
            return f"T{name}_smem.index({j - ahead})"
        return f"T{name}_smem.index({j} - {ahead})" if ahead else f"T{name}_smem.index({j})"

    def _pass_of_chunk(self, k: int, j, twice: Optional[bool] = None) -> list[str]:
        """Pass k's lines for chunk j (a number, or a loop variable's name: see `_slot`)."""
        return [f"c_start = {j} * BLOCK1"] + [_ROW.sub(lambda m: self._slot(m.group(1), j, twice=twice), t)
                                             .replace(_CHUNK, str(j)) for t in self.passes[k]]

    def close_loop(self, scope: Scope, accumulating: bool = False) -> None:
        self.program_scope.lines.append(f"@pass:{len(self.passes)}@")
        self.passes.append(scope.lines)

    def variant_name(self) -> str:
        return (f"one Gluon program a processor, the row in shared memory ({self.config.chunks} chunks of "
                f"{self.config.block1} columns)")

    # -- the kernel -------------------------------------------------------------------------

    # the program's first row and the step between its rows (the pair form: codegen/shared_row_pair.py)
    first_row, row_step = "pid", "tl.num_programs(0)"

    def write(self) -> Optional[KernelSource]:
        """The kernel, or None where its code names what this Gluon lacks (an extern function)
        or, for a subclass, where it has no such form (`program_lines`)."""
        head, row_lines = self.row_program()
        lines = self.program_lines(head, row_lines)
        if lines is None:
            return None
        self.program_scope.lines = lines
        source = self.assemble()
        code = source[source.index("\nimport "):]
        if "libdevice." in code or set(re.findall(r"\btl\.(\w+)", code)) - gluon_names():
            return None
        return KernelSource(self.name, source, self.args, list(self.params), False, self.constexprs())

    def row_program(self) -> tuple[list[str], list[str]]:
        """(the program's lines before the row loop, a row's lines with a `@pass:k@` marker
        where each pass over the chunks goes)."""
        ps = self.begin_program()
        head, ps.lines = ps.lines, [f"nxt = row + {self.row_step}"]
        if self.config.ahead:  # which of its two slots this row's first chunks take
            # (int32 for the slots' index: pid, and so row, is int64 where offsets need it)
            ps.lines.append("par = ((row - pid) // tl.num_programs(0) % 2).to(tl.int32)")
        self.emit_dim_index(ps, 0, "row")
        outputs = [o for o in self.plan.outputs if isinstance(o, TensorView)]
        for o in outputs:
            if not self.tile_level(o):
                self.emit_store(ps, o)
        body = self.loop_scope()
        for o in sorted((o for o in outputs if self.tile_level(o)), key=lambda o: not self._pending_reductions([o])):
            if id(o) not in self.stored:
                self.emit_store(body, o)
        for e in self.column_reductions:  # terms added in the last pass
            dt = e.out.dtype
            acc, ident = f"acc{e.out.name}", self.identity(e.kind, dt)
            masked = f"tl.where(r_mask & c_mask, {self.operand(body, e.inp, dt)}, {ident})"
            now = f"{acc}_smem.index({_CHUNK}).load(LAYOUT)" if id(e) in self.in_shared else acc
            new = f"{now} + {masked}" if e.kind is ReductionOpType.sum else f"{self.combine(e.kind)}({now}, {masked})"
            body.lines.append(f"{acc}_smem.index({_CHUNK}).store({new})" if id(e) in self.in_shared else f"{acc} = {new}")
        self.close_loop(body)
        return head, ps.lines

    def program_lines(self, head: list[str], row_lines: list[str]) -> Optional[list[str]]:
        """The kernel's body: the prologue, the loop over the program's rows, the epilogue."""
        return self._prologue(head) + ["for row in range(pid, R, tl.num_programs(0)):"] + [
            "    " + line for line in self._unrolled(row_lines)] + self._epilogue()

    def _prologue(self, head: list[str]) -> list[str]:
        cfg, lines = self.config, ["LAYOUT: tl.constexpr = tl.BlockedLayout([1, SPT], [1, 32], [1, WARPS], [1, 0])"]
        lines += head + self.first_row_loads + [f"cols = {self.arange('BLOCK1', 1)}"]
        for v in self.staged:
            rows = id(v) in self.row_ids and cfg.ahead
            for buffer, slots in (("smem", cfg.chunks - cfg.ahead if rows else cfg.chunks),
                                  ("ahead", 2 * cfg.ahead if rows else 0)):
                if slots:
                    lines.append(f"T{v.name}_{buffer} = tl.allocate_shared_memory({STORAGE[v.dtype]}, "
                                 f"[{slots}, 1, BLOCK1], tl.SwizzledSharedLayout(1, 1, 1, [1, 0]))")
        lines += self._column_copies()
        for j in range(cfg.chunks):  # the first row's (parity 0)
            lines += self._copies(j, "pid", f"({j} * BLOCK1 + cols)", parity="0")
        return lines + self._accumulators()

    def _accumulators(self) -> list[str]:
        """Each column reduction's accumulators, one a chunk, at their identity: in registers,
        or in shared memory for those `config.shared_accumulators` names."""
        lines, chunks = [], self.config.chunks
        for e in self.column_reductions:
            acc, init = f"acc{e.out.name}", self.block("[1, BLOCK1]", self.identity(e.kind, e.out.dtype),
                                                       compute_type(e.out.dtype))
            if id(e) in self.in_shared:
                lines.append(f"{acc}_smem = tl.allocate_shared_memory({compute_type(e.out.dtype)}, "
                             f"[{chunks}, 1, BLOCK1], tl.SwizzledSharedLayout(1, 1, 1, [1, 0]))")
                lines += [f"{acc}_smem.index({j}).store({init})" for j in range(chunks)]
            else:
                lines += [f"{acc}_{j} = {init}" for j in range(chunks)]
        return lines

    def _column_copies(self, start: str = "") -> list[str]:
        """Copy the staged column inputs (a weight) into their chunks once, one copy group for
        them all; `start`: the program's first column (a term of each chunk's index)."""
        lines = []
        for v in self.staged_columns:
            for j in range(self.config.chunks):
                index = f"({start}{j} * BLOCK1 + cols)"
                lines.append(f"COPY(T{v.name}_smem.index({j}), T{v.name}_ptr + {index} * T{v.name}_stride1, "
                             f"mask={index} < C)")
        return lines + (["async_copy.commit_group()"] if self.staged_columns else [])

    def _copies(self, j: int, row: str, index: str, in_row: str = "", parity: str = "(1 - par)") -> list[str]:
        """Start copying chunk j (columns `index`) of row `row` of the staged row inputs (none
        past the last row) into its slot of `parity` (see `_slot`; the next row's unless told),
        as one copy group; `in_row`: the mask of those columns, if known."""
        in_row = in_row or f"({index} < C)"
        lines = [f"COPY({self._slot(v.name, j, parity)}, T{v.name}_ptr + {row} * T{v.name}_stride0 + {index} * "
                 f"T{v.name}_stride1, mask={in_row} & ({row} < R))" for v in self.staged_rows]
        return lines + ["async_copy.commit_group()"]

    def _unrolled(self, lines: list[str]) -> list[str]:
        """The row's lines with each pass over the chunks: the first starts copying the next
        row's first chunks into the spare slots, then waits for each of this row's chunks as it
        reaches it; the last adds into each chunk's accumulators and then copies the next row's
        following chunk into the slot it is done with. Those two are unrolled (constant waits,
        an accumulator a chunk); a pass between them loops."""
        out, last, cfg = [], len(self.passes) - 1, self.config
        accs = [f"acc{e.out.name}" for e in self.column_reductions if id(e) not in self.in_shared]
        # the copy groups not yet waited for, in commit order: at a row's start, its chunks
        # (copies complete in order, so chunk j is in once no more than the groups after it are out)
        groups = [("row", j) for j in range(cfg.chunks)]
        read_after = self._read_after_passes(lines)
        for line in lines:
            m = _PASS.fullmatch(line)
            if m is None:
                out.append(line)
                continue
            indent, k = m.group(1), int(m.group(2))
            if k == 0:  # the next row's first chunks, into their other slots
                for j in range(cfg.ahead):
                    out += [indent + t for t in self._copies(j, "nxt", f"({j} * BLOCK1 + cols)")]
                    groups.append(("next", j))
            if 0 < k < last:
                # no waits, copies or column terms: a loop over the chunks (over those held
                # twice, then the others). Unrolled, the LayerNorm backward's three passes
                # (mean and rstd recomputed) spilled a 128-byte stack at 32768 columns (sm_90)
                for lo, hi, twice in ((0, cfg.ahead, True), (cfg.ahead, cfg.chunks, False)):
                    if lo < hi:
                        out += [f"{indent}for chunk in range({lo}, {hi}):"] + [
                            f"{indent}    {t}" for t in self._pass_of_chunk(k, "chunk", twice)]
                continue
            for j in range(cfg.chunks):
                accs_j = {acc: f"{acc}_{j}" for acc in accs} if k == last else {}
                chunk = self._chunk_lines(k, j, accs_j, read_after | ({"c", "c_mask"} if k == last else set()))
                if k == 0 and j % cfg.batch == 0:  # this chunk and the rest of its batch
                    in_by = ("row", min(j + cfg.batch, cfg.chunks) - 1)
                    chunk.insert(0, f"async_copy.wait_group({len(groups) - 1 - groups.index(in_by)})")
                if k == last:
                    if (j + 1) % cfg.batch == 0 or j == cfg.chunks - 1:
                        # the next row's chunks of this batch, into the slots this row's leave
                        for i in range(max(j // cfg.batch * cfg.batch, cfg.ahead), j + 1):
                            index = ("c", "c_mask") if i == j else (f"({i} * BLOCK1 + cols)", "")
                            chunk += self._copies(i, "nxt", *index)
                            groups.append(("next", i))
                out += [indent + t for t in chunk]
        return out

    def _read_after_passes(self, lines: list[str]) -> set[str]:
        """What the code after an unrolled pass may read of what the pass assigns: the names the
        row's `lines` read and those every pass reads before assigning them."""
        # (a pass's marker is no Python: an empty statement in its place)
        row = [m.group(1) + "pass" if (m := _PASS.fullmatch(t)) else t for t in lines]
        names = names_read(row)
        for k in range(len(self.passes)):
            names |= free_reads(self._pass_of_chunk(k, "chunk", twice=False))
        return names

    def _chunk_lines(self, k: int, j: int, accs_j: dict[str, str], read_after: set[str]) -> list[str]:
        """Pass k's lines for chunk j, its accumulators renamed by `accs_j`: a call of the pass's
        function of a chunk (codegen/outline.py), or, where the pass cannot be outlined (or
        OUTLINE_PASSES is off), the pass written out."""
        twice = j < self.config.ahead
        key = (k, twice)
        if OUTLINE_PASSES and key not in self.outlined:
            name = f"{self.name}_pass{k}" + ("_twice" if twice else "")
            try:
                self.outlined[key] = outline(name, self._pass_of_chunk(k, "chunk", twice), read_after,
                                             self._module_names(), "@gluon.jit")
            except NotOutlined:
                self.outlined[key] = None
        function = self.outlined.get(key)
        if function is not None:
            return [function.call({"chunk": f"tl.to_tensor({j})", **accs_j}, accs_j)]
        return renamed(self._pass_of_chunk(k, j), accs_j)

    def _module_names(self) -> set[str]:
        """The names the kernel's module defines: its imports' and the math helpers'."""
        tree = ast.parse("\n".join(self.imports()))
        imported = {(a.asname or a.name).split(".")[0]
                    for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
        assigned = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        return imported | assigned | HELPER_NAMES

    def _epilogue(self) -> list[str]:
        return ["async_copy.wait_group(0)"] + self._workspace_stores()  # (the copies past the last row copy nothing)

    def _workspace_stores(self, row: str = "pid", start: str = "") -> list[str]:
        """The accumulators stored as workspace row `row` (the program's), from column `start`
        (a term of each chunk's index: the program's first column)."""
        lines = []
        for k, e in enumerate(self.column_reductions):
            for j in range(self.config.chunks):
                index = f"({start}{j} * BLOCK1 + cols)"
                acc = (f"acc{e.out.name}_smem.index({j}).load(LAYOUT)" if id(e) in self.in_shared
                       else f"acc{e.out.name}_{j}")
                lines.append(f"tl.store(W{k}_ptr + {row} * C + {index}, {acc}, mask={index} < C)")
        return lines

    def constexprs(self) -> tuple[str, ...]:
        return ("BLOCK0", "BLOCK1", "INT64", "SPT", "WARPS", "EVEN0", "EVEN1")

    def imports(self) -> list[str]:
        return ["import triton", "from triton.experimental import gluon",
                "from triton.experimental.gluon import language as tl",
                "from triton.experimental.gluon.language.nvidia.ampere import async_copy", "",
                "KERNEL_LANGUAGE = 'gluon'  # compiled with gluon.jit (codegen/compile.py)",
                "# Triton 3.9 renamed the copy",
                "COPY = getattr(async_copy, 'async_load', None) or async_copy.async_copy_global_to_shared"]

    def assemble(self) -> str:
        fn = self.function(self.name)
        outlined = [f.source for f in self.outlined.values() if f is not None]
        helpers = helpers_for("\n".join([fn] + outlined)).replace("@triton.jit", "@gluon.jit")
        return "\n".join(self.header() + [""] + self.imports() + ["", helpers, ""] +
                         [line for f in outlined for line in ("", f, "")] + ["", fn])


def renamed(lines: list[str], names: dict[str, str]) -> list[str]:
    """`lines` with each whole-word name of `names` replaced (a pass's accumulators by a chunk's)."""
    for name, to in names.items():
        lines = [re.sub(rf"\b{name}\b", to, t) for t in lines]
    return lines


def generate_shared_row(plan: KernelPlan, layout: Layout, name: str, config: SharedRowConfig) -> Optional[KernelSource]:
    if config.pair:
        from .shared_row_pair import PairedRowWriter  # (it builds on this module's writer)

        return PairedRowWriter(plan, layout, name, config).write()
    return SharedRowWriter(plan, layout, name, config).write()

