"""Triton source for one kernel segment.

The kernel computes a 2-D tile [BLOCK0, BLOCK1] of the plan's loop space (see
schedulers/plan.py). Values are emitted on demand: asking for a value emits its load or its
producing op into the right scope, once. Scopes: the program scope (indices a program owns)
and, for looped reductions, one loop scope per pass over the reduced dim. Every value has a
tile shape [BLOCK0 or 1, BLOCK1 or 1], so broadcasting is Triton's own.

Floating values compute in fp32 (fp64 stays fp64); a cast to half or bf16 rounds as eager does.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from ..errors import InternalError
from ..ir import (BinaryOp, BinaryOpType, CastOp, DataType, Expr, FullOp, IotaOp, ReductionOp, RNGOp,
                  Scalar, TensorView, TernaryOp, TernaryOpType, UnaryOp, UnaryOpType, Val, VarMeanOp)
from ..schedulers.axes import RESIZE_OPS
from ..ir.printer import format_expr, format_scalar, format_tv
from ..ir.symbolic import format_extent
from ..schedulers.plan import KernelPlan, Template
from .elementwise import ElementwiseEmitter
from .layout import Layout
from .math import binary_lowering, helpers_for, lowering_accepts, unary_lowering
from .random import RandomEmitter
from .pick import pick_parts
from .reductions import ReductionEmitter
from .resize import ResizeEmitter
from .scope import COUNT, INDEX, Scope
from .types import COMPUTE, FP8, compute_type

@dataclass
class ArgSpec:
    """What the launcher passes for each kernel parameter."""

    # "tensor", "stride", "extent", "scalar", "size" (of a tensor's dim), "extent_expr",
    # "workspace", "split_count", "split_chunk", "semaphore", "rng_stride" (codegen/random.py)
    kind: str
    val: Optional[Val] = None
    super_axis: int = -1
    dim: int = -1  # "size": the tensor's logical dim; "semaphore": words a (row, half) of the pair form
    expr: Any = None  # "extent_expr": a sympy extent under the binding table; "workspace": its reduction


@dataclass
class KernelSource:
    name: str
    source: str
    args: list[ArgSpec]
    params: list[str]
    persistent: bool
    # the launch's constexpr arguments, in the order of the kernel's parameters
    constexprs: tuple[str, ...] = ("BLOCK0", "BLOCK1", "INT64")

    @property
    def scalar_params(self) -> list[str]:
        return [p for p, a in zip(self.params, self.args) if a.kind == "scalar"]



# ops whose result is one of their half or bf16 operands (or its negation): exact, no rounding
_EXACT_UNARY = {UnaryOpType.neg, UnaryOpType.abs}
_EXACT_BINARY = {BinaryOpType.maximum, BinaryOpType.minimum}


def _rounds_to_half(e: Expr) -> bool:
    """Whether the fp32 value computed for `e` must be rounded to its half or bf16 output."""
    out = e.out
    if not isinstance(out, TensorView) or out.dtype not in (DataType.Half, DataType.BFloat16):
        return False
    if isinstance(e, UnaryOp):
        return e.kind not in _EXACT_UNARY
    # a select among values (max, min, where) is exact when each is a tensor of the output's
    # dtype; a scalar operand may not be representable (clamp to 0.1 in bf16)
    values = (e.inputs if isinstance(e, BinaryOp) and e.kind in _EXACT_BINARY else
              e.inputs[1:] if isinstance(e, TernaryOp) and e.kind is TernaryOpType.where else None)
    if values is not None:
        return not all(isinstance(v, TensorView) and v.dtype is out.dtype for v in values)
    return True

class KernelWriter(ElementwiseEmitter, ReductionEmitter, ResizeEmitter, RandomEmitter):
    # a one-hot sum over the reduced dim read as one load a row (codegen/pick.py); not in the
    # writers whose reductions are other kernels' parts
    PICKS_BY_LOAD = True

    def __init__(self, plan: KernelPlan, layout: Layout, persistent: bool, target: str, name: str,
                 split: Optional[str] = None, one_pass: bool = False, combine_in_line: bool = False,
                 static_loop: bool = False, aligned_rows: bool = False):
        self.plan, self.layout, self.target, self.name = plan, layout, target, name
        # a looped kernel whose loop runs to LOOP_EXTENT, a constexpr the launch sets to the
        # reduced extent rounded up to whole chunks: Triton then knows the trip count (one
        # compile per number of chunks)
        self.static_loop = static_loop and not persistent and not one_pass and split is None
        # a looped kernel whose chunk is the whole reduced extent (BLOCK of the reduced dim >= its
        # extent): each pass runs once, without a loop, reducing inline, and a pass after the
        # first reads its inputs again (from cache) instead of holding them in registers.
        # EVEN0 / EVEN1 (constexpr) say that a tile dim needs no mask.
        self.one_pass = one_pass
        self.bf16_outputs = all(o.dtype is DataType.BFloat16 for o in plan.outputs)
        # split reductions run in two parts: "partial" reduces one chunk of the reduced dim (rows
        # of an outer reduction, columns of an inner one) into a workspace row per chunk,
        # "combine" reduces the workspace rows and finishes the group
        self.split = split
        # a combine step run inside the split kernel (codegen/split_kernel.py) by the last program
        # of a column block: the block comes in as PID, the workspace is read past L1
        self.combine_in_line = combine_in_line
        self.workspaces: list[tuple[Expr, str]] = [
            (e, part) for e in plan.exprs if isinstance(e, (ReductionOp, VarMeanOp))
            for part in (("mean", "m2", "n") if isinstance(e, VarMeanOp) else ("acc",))] if split else []
        self.persistent = persistent or plan.template is Template.pointwise
        self.looped = not self.persistent
        # a looped kernel over rows whose starts or ends are not 16-byte aligned (a vocabulary of
        # 50257): its chunks start at aligned addresses instead, so that the chunks inside the
        # row load and store whole vectors in a loop without masks, and only the first and last
        # chunk of a row go lane by lane, in a loop of their own (Triton proves alignment from
        # integer arguments only when they are multiples of 16). The launch takes it where every
        # tensor along the row has the same strides, the columns contiguous, one program a row
        # (layout.row_alignment).
        # A pointwise kernel over such rows takes one chunk of a row a program the same way, the
        # chunks inside the row unmasked, a row's first and last masked (one branch a program).
        self.aligned_rows = aligned_rows
        if aligned_rows and not (split is None and not one_pass and not static_loop and (
                plan.template is Template.pointwise
                or (self.looped and plan.template is Template.inner_reduction and plan.red_dim == 1))):
            raise InternalError("aligned rows asked of a kernel that is neither looped over rows nor pointwise")
        # EVEN0 / EVEN1 in kernels whose tile dims are the launch's rows and columns (a split's
        # tile dim 0 runs over workspace rows in its combine step); a looped kernel's chunks
        # need no masks where the chunk divides the reduced extent
        self.even_masks = split is None
        self.red = plan.red_dim
        self.axes = plan.axes
        self.super_dim = [0] * len(layout.dim0) + [1] * len(layout.dim1)
        self.producer = {id(o): e for e in plan.exprs for o in e.outputs}
        self.kernel_inputs = {id(v) for v in plan.inputs}
        self.stored: set[int] = set()  # outputs whose store is emitted (some in a reduction's pass)
        self.args: list[ArgSpec] = []
        self.params: list[str] = []
        self.scalar_args: dict[int, str] = {}
        self.init_views()

    # -- spans ------------------------------------------------------------------------------

    def super_axes_of(self, tv: TensorView) -> list[int]:
        spans = self.axes.spans(tv)
        return [j for j, run in enumerate(self.layout.super_axes) if any(a in spans for a in run)]

    def dims_of(self, tv: TensorView) -> set[int]:
        return {self.super_dim[j] for j in self.super_axes_of(tv)}

    def tile_level(self, v: Val) -> bool:
        """In a looped kernel: does the value vary along the reduced dim?"""
        return isinstance(v, TensorView) and self.red in self.dims_of(v)

    # -- parameters -------------------------------------------------------------------------

    def add_param(self, name: str, spec: ArgSpec) -> str:
        self.params.append(name)
        self.args.append(spec)
        return name

    @staticmethod
    def size_spec(tv: TensorView, dim: int) -> ArgSpec:
        return ArgSpec("size", tv, dim=dim)

    @staticmethod
    def extent_spec(expr) -> ArgSpec:
        return ArgSpec("extent_expr", expr=expr)

    def declare_params(self) -> None:
        for v in list(self.plan.inputs) + list(self.plan.outputs):
            if isinstance(v, TensorView):
                self.add_param(f"T{v.name}_ptr", ArgSpec("tensor", v))
                for j in self.super_axes_of(v):
                    self.add_param(f"T{v.name}_stride{j}", ArgSpec("stride", v, j))
        for j in range(len(self.layout.super_axes)):
            self.add_param(f"X{j}", ArgSpec("extent", super_axis=j))
        for k in range(len(self.workspaces)):
            # (expr: the reduction whose partials it keeps, for its dtype)
            self.add_param(f"W{k}_ptr", ArgSpec("workspace", super_axis=k, expr=self.workspaces[k][0]))
        if self.split:
            self.add_param("S", ArgSpec("split_count"))
            self.add_param("CHUNK", ArgSpec("split_chunk"))
        self.declare_rng_params()
        for e in self.plan.exprs:
            for v in e.inputs:
                if isinstance(v, Scalar) and not v.is_constant and id(v) not in self.scalar_args:
                    name = f"s{len(self.scalar_args)}"
                    self.scalar_args[id(v)] = name
                    self.add_param(name, ArgSpec("scalar", v))

    # -- index vectors (a Gluon kernel gives them its layout: codegen/shared_row.py) ------------

    def arange(self, block: str, dim: int) -> str:
        """0 .. block - 1 along tile dim `dim`, as a [block, 1] or [1, block] tile."""
        return f"tl.arange(0, {block})" + ("[:, None]" if dim == 0 else "[None, :]")

    # -- indices and offsets ----------------------------------------------------------------

    def emit_dim_index(self, scope: Scope, dim: int, start: str) -> None:
        """Index vector of tile dim `dim` from `start`, its mask, and per-super-axis indices."""
        block = f"BLOCK{dim}"
        n = self.limit(dim)
        var = INDEX[dim]
        scope.lines.append(f"{var} = {start} + {self.arange(block, dim)}")
        if self.even_masks:  # Triton drops a mask that is a constant True
            full = f"[{block}, 1]" if dim == 0 else f"[1, {block}]"
            scope.lines += [f"if EVEN{dim}:", f"    {var}_mask = {self.block(full, '1', 'tl.int1')}",
                            "else:", f"    {var}_mask = {var} < {n}"]
        else:
            scope.lines.append(f"{var}_mask = {var} < {n}")
        runs = [j for j, d in enumerate(self.super_dim) if d == dim]
        rest = var
        for k, j in enumerate(reversed(runs)):
            if k == len(runs) - 1:
                scope.lines.append(f"idx{j} = {rest}")
            else:
                scope.lines.append(f"idx{j} = {rest} % X{j}")
                scope.lines.append(f"{var}_rest{j} = {rest} // X{j}")
                rest = f"{var}_rest{j}"
        scope.dims = scope.dims + (dim,)

    def offset(self, scope: Scope, tv: TensorView, dim: int) -> Optional[str]:
        js = [j for j in self.super_axes_of(tv) if self.super_dim[j] == dim]
        if not js:
            return None
        # (a dim that a view reads at a row's index, a pick's, has it in the program scope)
        owner = self.program_scope if self.picked_dim(tv, dim) else scope.owner_of_dim(dim)
        name = owner.offsets.get((id(tv), dim, self.view))
        if name is None:
            name = f"{self.tname(tv)}_off{dim}"
            owner.lines.append(f"{name} = " + " + ".join(
                f"{self.index_code(j)} * T{tv.name}_stride{j}" for j in js))
            owner.offsets[(id(tv), dim, self.view)] = name
        return name

    def picked_dim(self, tv: TensorView, dim: int) -> bool:
        """Whether the current view reads `tv` along tile dim `dim` at an index of the program
        scope (a pick's: codegen/pick.py), not at the dim's lanes."""
        if not self.view or dim != self.red:
            return False
        shifted = dict(self.view)
        runs = [self.layout.super_axes[j] for j in self.super_axes_of(tv) if self.super_dim[j] == dim]
        return bool(runs) and all(len(run) == 1 and run[0] in shifted
                                  and shifted[run[0]] in self.pick_indices for run in runs)

    def mask(self, tv: TensorView) -> Optional[str]:
        dims = sorted(self.dims_of(tv))
        parts = [("r_mask" if d == 0 else "c_mask") for d in dims if not self.picked_dim(tv, d)]
        if self.view:
            parts += self.load_bounds(tv)
        return " & ".join(parts) if parts else None

    # -- values -----------------------------------------------------------------------------

    def operand(self, scope: Scope, v: Val, dtype: DataType) -> str:
        """Value `v` converted to the compute type of `dtype`."""
        if isinstance(v, Scalar):
            if v.is_constant:
                return self.literal(v, dtype)
            # a [1, 1] block of the compute type: Python floats and Triton scalars alike
            return self.block("[1, 1]", self.scalar_args[id(v)], compute_type(dtype))
        code = self.value(scope, v)
        if compute_type(v.dtype) != compute_type(dtype):
            if dtype.is_boolean:
                return f"({code} != 0)"
            return f"{code}.to({compute_type(dtype)})"
        return code

    def value(self, scope: Scope, v: TensorView) -> str:
        if self.view:
            # a value depends on its own indices only: under a view restricted to the axes it
            # spans (a row's reduction, read by a slice of the row, is the whole row's)
            spans = self.axes.spans(v)
            kept = tuple(entry for entry in self.view if entry[0] in spans)
            if kept != self.view:
                return self.under(kept, lambda: self.value(scope, v))
        name = scope.lookup(self.key(v))
        if name is not None:
            return name
        self.emit_producers(scope, v)
        name = scope.lookup(self.key(v))  # emitted with its producers (a factored sum's finish)
        if name is not None:
            return name
        target = scope
        if self.looped and not self.tile_level(v):
            target = self.program_scope
        if id(v) in self.kernel_inputs:
            self.emit_load(target, v)
        else:
            e = self.producer.get(id(v))
            if e is None:
                raise InternalError(f"T{v.name} is neither a kernel input nor computed in the kernel")
            if self.reduces_in_loop(e):
                self.emit_reduction_loop(e)
            else:
                self.emit_expr(target, e)
        name = scope.lookup(self.key(v))
        if name is None:
            raise InternalError(f"T{v.name} was not emitted")
        return name

    def emit_producers(self, scope: Scope, v: TensorView) -> None:
        """Emit what `v` is computed from, deepest first, so that emitting `v` finds its operands
        ready: values are emitted on demand, and demand-driven recursion would go one Python
        frame per op deep (a chain of a few hundred ops overflowed the stack). The order is the
        recursion's: inputs left to right, each after its own inputs."""
        order, expanded, stack = [], set(), [(v, False)]
        while stack:
            u, ready = stack.pop()
            if ready:
                order.append(u)
                continue
            if id(u) in expanded:
                continue
            expanded.add(id(u))
            e = self.producer.get(id(u))
            if e is None or id(u) in self.kernel_inputs or self.reduces_in_loop(e) or isinstance(e, RESIZE_OPS) \
                    or pick_parts(self, e) is not None:
                continue  # loads, loop reductions, resizes and picks emit their own inputs, where they belong
            stack.append((u, True))
            for w in reversed(e.inputs):
                if isinstance(w, TensorView) and id(w) not in expanded and scope.lookup(self.key(w)) is None:
                    stack.append((w, False))
        for u in order[:-1]:  # all but v itself
            self.value(scope, u)

    def reduces_in_loop(self, e: Expr) -> bool:
        """Whether `e` is a reduction computed by its own loop over the reduced dim."""
        return self.looped and isinstance(e, (ReductionOp, VarMeanOp))

    def row_aligned(self, tv: TensorView) -> bool:
        """Whether `tv` is read or written at the aligned chunk offsets (it spans rows and columns)."""
        return self.aligned_rows and self.dims_of(tv) == {0, 1}

    def emit_load(self, scope: Scope, tv: TensorView) -> None:
        # (at the chunk's aligned offsets, its mask a marker: _MASKED; not a pick's one element)
        aligned = self.row_aligned(tv) and not self.picked_dim(tv, self.red)
        offs = ["c_aligned"] if aligned else [o for o in (self.offset(scope, tv, 0), self.offset(scope, tv, 1)) if o]
        # a one-element tensor still loads as a [1, 1] block, like every other value
        ptr = f"T{tv.name}_ptr" + "".join(f" + {o}" for o in offs or [self.block("[1, 1]", "0", "tl.int32")])
        m = self.mask(tv)
        # (masked lanes read a float zero for fp8, which Triton converts to fp8 where it cannot an int)
        fp8 = tv.dtype in FP8
        mask = (f"@{'f' if fp8 else 'l'}mask:{m}@" if aligned else
                f", mask={m}, other={'0.0' if fp8 else '0'}" if m else "")
        name = self.tname(tv)
        scope.lines.append(f"{name} = {self.widen(f'tl.load({ptr}{mask}{self.load_hint(tv)})', tv.dtype)}")
        scope.names[self.key(tv)] = name

    def load_hint(self, tv: TensorView) -> str:
        """The eviction hint of a load of `tv` (an argument of tl.load, or a marker that
        `_eviction_hints` resolves once the kernel is whole)."""
        if not self.persistent and self.red == 1 and 0 not in self.dims_of(tv) and 0 in self.super_dim:
            # a value per column (a norm's weight): every program reads it in every pass; keep
            # it in L2 (not where there are no rows: a reduction over a whole tensor reads it once)
            return ', eviction_policy="evict_last"'
        return _EVICT.format(tv.name) if self.looped and self.tile_level(tv) else ""

    @staticmethod
    def unhinted(lines: list[str]) -> list[str]:
        """`lines` with their loads counted as no pass for the eviction hints (a branch rarely
        taken: the passes every call makes decide which of them keeps its lines in L2)."""
        return [re.sub(_ANY_EVICT, "", line) for line in lines]

    # -- aligned rows (self.aligned_rows) -------------------------------------------------------

    def begin_aligned_rows(self, ps: Scope, loops: bool = True) -> None:
        """This program's row start in elements (every tensor along the row has its strides), the
        aligned address at or before it (`c_base`, a multiple of ALIGN elements: 16 bytes of the
        narrowest dtype), the columns between them (`c_head`), and, for a looped kernel (`loops`),
        counted from `c_base`, the chunks wholly inside the row, [c_lo, c_hi), and whether a head
        chunk (at 0) and a tail chunk (at c_hi) are left over."""
        anchor = next(v for v in list(self.plan.inputs) + list(self.plan.outputs) if self.row_aligned(v))
        (row_axis,) = [j for j in self.super_axes_of(anchor) if self.super_dim[j] == 0]
        ps.lines += ["tl.static_assert(BLOCK0 == 1)",  # (the row is the program's)
                     "tl.static_assert(ALIGN <= BLOCK1)",  # (a head fits in the first chunk)
                     f"c_row = pid0 * T{anchor.name}_stride{row_axis}",
                     "c_base = (c_row // ALIGN) * ALIGN",
                     "c_head = c_row - c_base"]
        if loops:  # (a looped kernel's)
            ps.lines += ["c_lo = (c_head > 0).to(tl.int32) * BLOCK1",
                         "c_hi = ((C + c_head) // BLOCK1) * BLOCK1",
                         "c_head_live = (c_lo > 0) | (c_hi == 0)",
                         "c_tail_live = (c_hi > 0) & (c_hi < C + c_head)"]

    def aligned_chunk(self, start: str, mask: Optional[str] = None) -> list[str]:
        """The indices of a chunk `start` columns past `c_base`: its columns `c` (counted from
        the row's start, where c_lo and c_hi count from c_base), their mask (`mask`, or all set:
        a chunk inside the row, whose lane-by-lane loads, a weight's, still name one), and
        `c_aligned`, the offset from a tensor's base (a multiple of ALIGN plus the lanes)."""
        lanes = self.arange("BLOCK1", 1)
        (axis,) = [j for j, d in enumerate(self.super_dim) if d == 1]
        mask = mask or self.block("[1, BLOCK1]", "1", "tl.int1")
        return [f"c = {start} - c_head + {lanes}", f"c_mask = {mask}",
                f"c_aligned = c_base + {start} + {lanes}", f"idx{axis} = c"]

    @staticmethod
    def with_masks(lines: list[str], masked: bool) -> list[str]:
        """`lines` with their aligned loads' and stores' mask markers (`_MASKED`) resolved: the
        masks themselves, or none (a chunk wholly inside the row)."""
        def resolve(m: re.Match) -> str:
            other = {"l": ", other=0", "f": ", other=0.0", "s": ""}[m.group(1)]
            return f", mask={m.group(2)}{other}" if masked else ""
        return [_MASKED.sub(resolve, line) for line in lines]

    def aligned_loops(self, body: list[str], unroll: bool = False) -> list[str]:
        """A pass over an aligned row: a loop over the inner chunks, whose loads and stores take
        no mask (whole 16-byte vectors), then one over the head and tail chunks, masked (a slot
        with no chunk left masks everything); the second loop's eviction markers follow the
        first's (`@evict+:`). `unroll`: the inner loop is unrolled (chunk_range)."""
        inner = self.aligned_chunk("c_start")
        inner += self.with_masks(body, masked=False)
        edges = ["c_edge_start = c_edge * c_hi",
                 "c_live = ((c_edge == 0) & c_head_live) | ((c_edge == 1) & c_tail_live)"]
        edges += self.aligned_chunk("c_edge_start", "(c >= 0) & (c < C) & c_live")
        edges += [_STEP_RECIPROCAL.sub(r"\1_inv = 1.0 / tl.maximum(\1_n, 1.0)", line.replace("@evict:", "@evict+:"))
                  for line in self.with_masks(body, masked=True)]
        # (an unrolled loop's bound kept at or past its start: Triton's unrolled loop runs its
        # remainder steps on an empty range whose end precedes its start, a row within a chunk)
        end = "tl.maximum(c_hi, c_lo)" if unroll else "c_hi"
        return ([f"for c_start in {self.chunk_range('c_lo', end, 'BLOCK1', unroll)}:"]
                + ["    " + line for line in inner]
                + ["for c_edge in range(0, 2):"] + ["    " + line for line in edges])

    def write_aligned_pointwise(self, ps: Scope) -> KernelSource:
        """A pointwise kernel over aligned rows: program pid computes chunk `pid1` of row `pid0`,
        its columns counted from the row's `c_base` (enough chunks a row for any `c_head`; one
        past the row masks everything). A chunk wholly inside the row loads and stores
        unmasked, others lane by lane: one branch, the same for the whole program."""
        ps.lines.append("blocks1 = tl.cdiv(C + ALIGN - 1, BLOCK1)")
        ps.lines += ["pid0 = pid // blocks1", "pid1 = pid % blocks1"]
        self.emit_dim_index(ps, 0, "pid0 * BLOCK0")
        self.begin_aligned_rows(ps, loops=False)
        ps.lines += ["c_start = pid1 * BLOCK1"] + self.aligned_chunk("c_start")
        body = Scope(parent=ps, dims=(1,))
        for o in self.plan.outputs:
            if isinstance(o, TensorView):
                self.emit_store(body, o)
        ps.lines.append("if (c_start >= c_head) & (c_start + BLOCK1 <= C + c_head):")
        ps.lines += ["    " + line for line in self.with_masks(body.lines, masked=False)]
        ps.lines += ["else:", "    c_mask = (c >= 0) & (c < C)"]
        ps.lines += ["    " + line for line in self.with_masks(body.lines, masked=True)]
        return KernelSource(self.name, self.assemble(), self.args, list(self.params), True, self.constexprs())

    def bind(self, scope: Scope, tv: Val, code: str) -> None:
        name = self.tname(tv)
        scope.lines.append(f"{name} = {code}")
        scope.names[self.key(tv)] = name

    # -- ops --------------------------------------------------------------------------------

    def emit_expr(self, scope: Scope, e: Expr) -> None:
        self.emit_computed(scope, e)
        if isinstance(e, (UnaryOp, BinaryOp, TernaryOp)):  # (reductions round where they bind)
            self.round_to_storage(scope, e)

    def round_to_storage(self, scope: Scope, e: Expr) -> None:
        """A half or bf16 result is computed in fp32: held rounded, as its storage holds it, so
        that reading it back in the kernel (a cast, a comparison, isinf) sees what eager and
        the stored output see."""
        if _rounds_to_half(e):
            name = scope.names[self.key(e.out)]
            scope.lines.append(f"{name} = {self.narrow(name, e.out.dtype)}.to(tl.float32)")

    def emit_computed(self, scope: Scope, e: Expr) -> None:
        out = e.out
        if isinstance(e, UnaryOp):
            self.emit_unary(scope, e)
        elif isinstance(e, BinaryOp):
            self.emit_binary(scope, e)
        elif isinstance(e, TernaryOp):
            self.emit_ternary(scope, e)
        elif isinstance(e, CastOp) and e.dtype in FP8:
            self.emit_fp8_cast(scope, e)
        elif isinstance(e, CastOp):
            self.bind(scope, out, self.cast_code(scope, e.inp, e.dtype))
        elif isinstance(e, (ReductionOp, VarMeanOp)):
            self.emit_inline_reduction(scope, e)
        elif isinstance(e, IotaOp):
            self.emit_iota(scope, e)
        elif isinstance(e, FullOp):
            value = self.operand(scope, e.inp, out.dtype)  # a [1, 1] block, or a literal
            self.bind(scope, out, self.block_literal(e.inp, value, out.dtype))
        elif isinstance(e, RNGOp):
            self.emit_rng(scope, e)
        elif isinstance(e, RESIZE_OPS):
            self.emit_resize(scope, e)
        else:  # broadcast, expand, squeeze, permute, set: the tile value is unchanged
            self.bind(scope, out, self.value(scope, e.inp))

    # -- stores and assembly ----------------------------------------------------------------

    def emit_store(self, scope: Scope, tv: TensorView) -> None:
        code = self.value(scope, tv)
        aligned = self.row_aligned(tv)  # (as in emit_load)
        offs = ["c_aligned"] if aligned else [o for o in (self.offset(scope, tv, 0), self.offset(scope, tv, 1)) if o]
        # a tensor spanning no loop axis (one element) still stores through a [1, 1] block
        ptr = f"T{tv.name}_ptr" + "".join(f" + {o}" for o in offs or [self.block("[1, 1]", "0", "tl.int32")])
        masks = [m for m in [self.mask(tv)] if m]
        # a tensor that does not vary along a program dim is stored by the first program only
        missing = [d for d in self.program_dims() if d not in self.dims_of(tv) and d in self.super_dim]
        masks += [f"(({self.block('[1, 1]', '0', 'tl.int32')} + pid{d}) == 0)" for d in missing]
        mask = f"@smask:{' & '.join(masks)}@" if aligned else f", mask={' & '.join(masks)}" if masks else ""
        value = scope.lookup(("fp8", self.key(tv))) or self.narrow(code, tv.dtype)  # (emit_fp8_cast)
        scope.lines.append(f"tl.store({ptr}, {value}{mask})")
        self.stored.add(id(tv))

    def program_dims(self) -> list[int]:
        if self.plan.template is Template.pointwise:
            return [0, 1]
        return [1 - self.red]

    def begin_program(self) -> Scope:
        """The kernel's parameters and its program scope, opened with the row and column counts
        R and C (products of the super-axis extents of each tile dim) and the program id."""
        self.declare_params()
        ps = self.program_scope = Scope(parent=None)
        for name, dim in (("R", 0), ("C", 1)):
            extents = [f"X{j}" for j, d in enumerate(self.super_dim) if d == dim]
            ps.lines.append(f"{name} = " + (" * ".join(extents) or "1"))
        if self.combine_in_line:
            ps.lines.append("pid = PID")
        else:
            ps.lines += ["pid = tl.program_id(0)", "if INT64:", "    pid = pid.to(tl.int64)"]
        return ps

    def write(self) -> KernelSource:
        ps = self.begin_program()
        if self.plan.template is Template.pointwise and self.aligned_rows:
            return self.write_aligned_pointwise(ps)
        if self.plan.template is Template.pointwise:
            ps.lines.append("blocks1 = tl.cdiv(C, BLOCK1)")
            ps.lines += ["pid0 = pid // blocks1", "pid1 = pid % blocks1"]
            self.emit_dim_index(ps, 0, "pid0 * BLOCK0")
            self.emit_dim_index(ps, 1, "pid1 * BLOCK1")
        elif self.split == "partial":
            # program pid: block `pid{keep}` of the kept dim, chunk `chunk` of the reduced one
            keep, v = 1 - self.red, INDEX[self.red]
            ps.lines += [f"blocks{keep} = tl.cdiv({COUNT[keep]}, BLOCK{keep})", f"pid{keep} = pid % blocks{keep}",
                         f"chunk = pid // blocks{keep}", f"{v}_lo = chunk * CHUNK",
                         f"{v}_hi = tl.minimum({v}_lo + CHUNK, {self.reduced_count()})"]
            self.emit_dim_index(ps, keep, f"pid{keep} * BLOCK{keep}")
            for e in self.plan.exprs:  # (a pass takes every reduction ready with it)
                if isinstance(e, (ReductionOp, VarMeanOp)) and ps.lookup(id(e.outputs[0])) is None:
                    self.emit_reduction_loop(e)
            return KernelSource(self.name, self.assemble(), self.args, list(self.params), False)
        else:
            keep = 1 - self.red
            ps.lines.append(f"pid{keep} = pid")
            self.emit_dim_index(ps, keep, f"pid * BLOCK{keep}")
            if self.aligned_rows:
                self.begin_aligned_rows(ps)
            if self.persistent:
                self.emit_dim_index(ps, self.red, "0")
        outputs = [o for o in self.plan.outputs if isinstance(o, TensorView)]
        if self.persistent:
            for o in outputs:
                self.emit_store(ps, o)
        else:
            for o in outputs:
                if not self.tile_level(o):
                    self.emit_store(ps, o)
            # (a split's combine step stores none: its partial step stored them in its pass)
            tile_outputs = [o for o in outputs if self.tile_level(o) and self.split != "combine"]
            # those that wait for a reduction first: its pass stores the others as it goes
            tile_outputs.sort(key=lambda o: not self._pending_reductions([o]))
            if any(id(o) not in self.stored for o in tile_outputs):
                body = self.loop_scope()
                for o in tile_outputs:
                    if id(o) not in self.stored:
                        self.emit_store(body, o)
                self.close_loop(body)
        return KernelSource(self.name, self.assemble(), self.args, list(self.params), self.persistent,
                            self.constexprs())

    def constexprs(self) -> tuple[str, ...]:
        return (("BLOCK0", "BLOCK1", "INT64") + (("EVEN0", "EVEN1") if self.even_masks else ())
                + (("LOOP_EXTENT",) if self.static_loop else ()) + (("ALIGN",) if self.aligned_rows else ()))

    def variant_name(self) -> str:
        if self.split:
            return f"split ({self.split})"
        return "persistent" if self.persistent else "one pass, reloading" if self.one_pass else "looped"

    def header(self) -> list[str]:
        """Comment lines heading the source: the segment's IR, plan, extents and tensors."""
        header = ["# Generated by fuser. Segment IR:"]
        for e in self.plan.exprs:
            header += ["#   " + line for line in format_expr(e).splitlines()]
        header.append(f"# Plan: {self.plan.describe()}, {self.variant_name()}")
        for j, run in enumerate(self.layout.super_axes):
            ext = " * ".join(format_extent(self.axes.axes[a].extent) for a in run)  # (the IR's notation)
            header.append(f"# X{j} = {ext}")
        scalars = {id(v): v for e in self.plan.exprs for v in e.inputs if isinstance(v, Scalar)}
        for key, name in self.scalar_args.items():  # (parameters named by position: s0, s1)
            header.append(f"# {name} = {format_scalar(scalars[key])}")
        for v in self.plan.inputs:
            if isinstance(v, TensorView):
                header.append(f"# input  {format_tv(v)}")
        for v in self.plan.outputs:
            header.append(f"# output {format_tv(v)}")
        return header

    def imports(self) -> list[str]:
        imports = ["import triton", "import triton.language as tl"]
        if self.target == "cuda":
            imports.append("from triton.language.extra import libdevice")
        return imports

    def function(self, name: str, extra_params: tuple[str, ...] = ()) -> str:
        """The kernel's function, named `name`, with `extra_params` after its own parameters."""
        params = ", ".join(self.params + list(extra_params) + [f"{c}: tl.constexpr" for c in self.constexprs()])
        body = _eviction_hints("\n".join("    " + line for line in self.program_scope.lines))
        return f"def {name}({params}):\n{body}\n"

    def assemble(self) -> str:
        fn = self.function(self.name)
        helpers = helpers_for(fn)  # only those the body names: triton.jit reads each at load
        return "\n".join(self.header() + [""] + self.imports() + ["", helpers, "", "", fn])


# A looped kernel reads a tensor once per pass over the reduced dim; all passes but the last
# ask L2 to keep the lines (the next pass finds them there, as Inductor's looped reductions
# do), the last one, or the only one, to drop them first: a stream read once, as a column sum
# reads its input, gains by it (a hand-written split column sum at 16384x4096 on the H200 read
# 0.82 of copy with the hint, 0.74 at best without). The loads carry this marker until the
# kernel is whole.
# A marker with a plus (`@evict+:T0@`) is a second load of the same pass (an aligned row's edge
# chunks) and takes the hint of the marker before it.
_EVICT = "@evict:{}@"
# an aligned row's load (l) or store (s) and its mask: unmasked in the inner chunks' loop
_MASKED = re.compile(r"@([lfs])mask:([^@]*)@")  # l: a load (f: of fp8), s: a store
_ANY_EVICT = r"@evict\+?:\w+@"
# a looped row var_mean's reciprocal of its step count (reductions.py `_accumulate`), which an
# aligned row's edge chunks take from each lane's count instead: their masks cut lanes anywhere
_STEP_RECIPROCAL = re.compile(r"\b(acc\w+)_inv = 1\.0 / \1_k$")


def _eviction_hints(body: str) -> str:
    passes = {}
    for name in re.findall(r"@evict:(\w+)@", body):
        passes[name] = passes.get(name, 0) + 1
    seen: dict[str, int] = {}

    def hint(m: re.Match) -> str:
        name = m.group(2)
        if not m.group(1):
            seen[name] = seen.get(name, 0) + 1
        last = seen.get(name, 0) >= passes.get(name, 0)
        return ', eviction_policy="evict_first"' if last else ', eviction_policy="evict_last"'
    return re.sub(r"@evict(\+?):(\w+)@", hint, body)


def workspace_dtype(e: Expr) -> DataType:
    """What a split reduction's partials are kept in: its accumulator's type (a Welford's parts
    in fp64 for fp64 inputs, else fp32; half-precision sums in fp32; double, int64, int32 and
    bool in their own)."""
    if isinstance(e, VarMeanOp):
        return DataType.Double if e.inp.dtype is DataType.Double else DataType.Float
    return {DataType.Half: DataType.Float, DataType.BFloat16: DataType.Float}.get(e.out.dtype, e.out.dtype)


def generate(plan: KernelPlan, layout: Layout, persistent: bool, target: str, name: str,
             split: Optional[str] = None, one_pass: bool = False, static_loop: bool = False,
             aligned_rows: bool = False) -> KernelSource:
    return KernelWriter(plan, layout, persistent, target, name, split, one_pass, static_loop=static_loop,
                        aligned_rows=aligned_rows).write()


def can_emit(e: Expr, target: str) -> bool:
    """Whether generated code can compute `e` on `target` (the fusibility rule per op)."""
    from ..schedulers.plan import KERNEL_OPS

    if not isinstance(e, KERNEL_OPS):
        return False
    for v in list(e.inputs) + list(e.outputs):
        if v.dtype not in COMPUTE:
            return False
    if isinstance(e, (FullOp, IotaOp)) and e.out.dtype in FP8:
        return False  # (a constant would need rounding to fp8 where the kernel reads it back)
    if isinstance(e, UnaryOp):
        return unary_lowering(e.kind, target) is not None and lowering_accepts(e.kind, target, e.out.dtype)
    if isinstance(e, BinaryOp):
        if e.kind is BinaryOpType.pow and e.out.dtype.category < 2:
            return False  # integer powers stay exact through ATen
        return binary_lowering(e.kind, target) is not None and lowering_accepts(e.kind, target, e.out.dtype)
    if isinstance(e, RNGOp):
        return e.seeded  # (an unseeded one draws its seed where ATen runs it)
    return True
