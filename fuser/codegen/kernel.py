"""Triton source for one kernel segment.

The kernel computes a 2-D tile [BLOCK0, BLOCK1] of the plan's loop space (see
schedulers/plan.py). Values are emitted on demand: asking for a value emits its load or its
producing op into the right scope, once. Scopes: the program scope (indices a program owns)
and, for looped reductions, one loop scope per pass over the reduced dim. Every value has a
tile shape [BLOCK0 or 1, BLOCK1 or 1], so broadcasting is Triton's own.

Floating values compute in fp32 (fp64 stays fp64); a cast to half or bf16 rounds as eager does.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..errors import InternalError
from ..ir import (BinaryOp, BinaryOpType, CastOp, DataType, Expr, ReductionOp, ReductionOpType,
                  Scalar, TensorView, TernaryOp, TernaryOpType, UnaryOp, UnaryOpType, Val,
                  VarMeanOp)
from ..ir.printer import format_expr, format_tv
from ..ops.pointwise import result_type
from ..schedulers.plan import KernelPlan, Template
from .layout import Layout
from .math import HELPERS, binary_lowering, unary_lowering

_COMPUTE = {DataType.Float: "tl.float32", DataType.Half: "tl.float32", DataType.BFloat16: "tl.float32",
            DataType.Double: "tl.float64", DataType.Int: "tl.int64", DataType.Int32: "tl.int32",
            DataType.Bool: "tl.int1"}
_STORAGE = {DataType.Float: "tl.float32", DataType.Half: "tl.float16", DataType.BFloat16: "tl.bfloat16",
            DataType.Double: "tl.float64", DataType.Int: "tl.int64", DataType.Int32: "tl.int32",
            DataType.Bool: "tl.int1"}


_ARITHMETIC = {BinaryOpType.add, BinaryOpType.sub, BinaryOpType.mul, BinaryOpType.maximum,
               BinaryOpType.minimum}


def compute_type(dt: DataType) -> str:
    if dt not in _COMPUTE:
        raise InternalError(f"no kernel compute type for {dt}")
    return _COMPUTE[dt]


@dataclass
class ArgSpec:
    """What the launcher passes for each kernel parameter."""

    kind: str  # "tensor", "stride", "extent", "scalar"
    val: Optional[Val] = None
    super_axis: int = -1


@dataclass
class KernelSource:
    name: str
    source: str
    args: list[ArgSpec]
    params: list[str]
    persistent: bool

    @property
    def scalar_params(self) -> list[str]:
        return [p for p, a in zip(self.params, self.args) if a.kind == "scalar"]


@dataclass
class _Scope:
    parent: Optional["_Scope"]
    lines: list[str] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)
    offsets: dict[tuple[int, int], str] = field(default_factory=dict)
    dims: tuple[int, ...] = ()  # tile dims whose indices live in this scope

    def lookup(self, key: int) -> Optional[str]:
        s = self
        while s is not None:
            if key in s.names:
                return s.names[key]
            s = s.parent
        return None

    def owner_of_dim(self, dim: int) -> "_Scope":
        s = self
        while s is not None:
            if dim in s.dims:
                return s
            s = s.parent
        raise InternalError(f"tile dim {dim} has no index in scope")


class KernelWriter:
    def __init__(self, plan: KernelPlan, layout: Layout, persistent: bool, target: str, name: str,
                 split: Optional[str] = None):
        self.plan, self.layout, self.target, self.name = plan, layout, target, name
        # split outer reductions run in two kernels: "partial" reduces one chunk of rows into a
        # workspace row per chunk, "combine" reduces the workspace rows and finishes the group
        self.split = split
        self.workspaces: list[tuple[Expr, str]] = [
            (e, part) for e in plan.exprs if isinstance(e, (ReductionOp, VarMeanOp))
            for part in (("mean", "m2", "n") if isinstance(e, VarMeanOp) else ("acc",))] if split else []
        self.persistent = persistent or plan.template is Template.pointwise
        self.looped = not self.persistent
        self.red = plan.red_dim
        self.axes = plan.axes
        self.super_dim = [0] * len(layout.dim0) + [1] * len(layout.dim1)
        self.producer = {id(o): e for e in plan.exprs for o in e.outputs}
        self.kernel_inputs = {id(v) for v in plan.inputs}
        self.args: list[ArgSpec] = []
        self.params: list[str] = []
        self.scalar_args: dict[int, str] = {}
        self.helpers_used = False

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

    def declare_params(self) -> None:
        for v in list(self.plan.inputs) + list(self.plan.outputs):
            if isinstance(v, TensorView):
                self.add_param(f"T{v.name}_ptr", ArgSpec("tensor", v))
                for j in self.super_axes_of(v):
                    self.add_param(f"T{v.name}_stride{j}", ArgSpec("stride", v, j))
        for j in range(len(self.layout.super_axes)):
            self.add_param(f"X{j}", ArgSpec("extent", super_axis=j))
        for k in range(len(self.workspaces)):
            self.add_param(f"W{k}_ptr", ArgSpec("workspace", super_axis=k))
        if self.split:
            self.add_param("S", ArgSpec("split_count"))
            self.add_param("CHUNK", ArgSpec("split_chunk"))
        for e in self.plan.exprs:
            for v in e.inputs:
                if isinstance(v, Scalar) and not v.is_constant and id(v) not in self.scalar_args:
                    name = f"s{len(self.scalar_args)}"
                    self.scalar_args[id(v)] = name
                    self.add_param(name, ArgSpec("scalar", v))

    # -- indices and offsets ----------------------------------------------------------------

    def emit_dim_index(self, scope: _Scope, dim: int, start: str) -> None:
        """Index vector of tile dim `dim` from `start`, its mask, and per-super-axis indices."""
        block = f"BLOCK{dim}"
        shape = "[:, None]" if dim == 0 else "[None, :]"
        n = self.limit(dim)
        var = "r" if dim == 0 else "c"
        scope.lines.append(f"{var} = {start} + tl.arange(0, {block}){shape}")
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

    def offset(self, scope: _Scope, tv: TensorView, dim: int) -> Optional[str]:
        js = [j for j in self.super_axes_of(tv) if self.super_dim[j] == dim]
        if not js:
            return None
        owner = scope.owner_of_dim(dim)
        name = owner.offsets.get((id(tv), dim))
        if name is None:
            name = f"T{tv.name}_off{dim}"
            owner.lines.append(f"{name} = " + " + ".join(f"idx{j} * T{tv.name}_stride{j}" for j in js))
            owner.offsets[(id(tv), dim)] = name
        return name

    def mask(self, tv: TensorView) -> Optional[str]:
        dims = sorted(self.dims_of(tv))
        parts = [("r_mask" if d == 0 else "c_mask") for d in dims]
        return " & ".join(parts) if parts else None

    # -- values -----------------------------------------------------------------------------

    def literal(self, s: Scalar, dtype: DataType) -> str:
        v = s.value
        if isinstance(v, bool):
            v = int(v)
        if dtype.category >= 2 or isinstance(v, float):
            f = float(v)
            if f != f:
                return "float('nan')"
            if f in (float("inf"), float("-inf")):
                return f"float('{'-' if f < 0 else ''}inf')"
            return repr(f)
        return repr(int(v))

    def operand(self, scope: _Scope, v: Val, dtype: DataType) -> str:
        """Value `v` converted to the compute type of `dtype`."""
        if isinstance(v, Scalar):
            if v.is_constant:
                return self.literal(v, dtype)
            # a [1, 1] block of the compute type: Python floats and Triton scalars alike
            return f"tl.full([1, 1], {self.scalar_args[id(v)]}, {compute_type(dtype)})"
        code = self.value(scope, v)
        if compute_type(v.dtype) != compute_type(dtype):
            if dtype.is_boolean:
                return f"({code} != 0)"
            return f"{code}.to({compute_type(dtype)})"
        return code

    def value(self, scope: _Scope, v: TensorView) -> str:
        name = scope.lookup(id(v))
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
            if self.looped and isinstance(e, (ReductionOp, VarMeanOp)):
                self.emit_reduction_loop(e)
            else:
                self.emit_expr(target, e)
        name = scope.lookup(id(v))
        if name is None:
            raise InternalError(f"T{v.name} was not emitted")
        return name

    def emit_load(self, scope: _Scope, tv: TensorView) -> None:
        offs = [o for o in (self.offset(scope, tv, 0), self.offset(scope, tv, 1)) if o]
        # a one-element tensor still loads as a [1, 1] block, like every other value
        ptr = f"T{tv.name}_ptr" + "".join(f" + {o}" for o in offs or ["tl.zeros([1, 1], tl.int32)"])
        m = self.mask(tv)
        mask = f", mask={m}, other=0" if m else ""
        scope.lines.append(f"T{tv.name} = tl.load({ptr}{mask}).to({compute_type(tv.dtype)})")
        scope.names[id(tv)] = f"T{tv.name}"

    def bind(self, scope: _Scope, tv: Val, code: str) -> None:
        scope.lines.append(f"T{tv.name} = {code}")
        scope.names[id(tv)] = f"T{tv.name}"

    # -- ops --------------------------------------------------------------------------------

    def emit_expr(self, scope: _Scope, e: Expr) -> None:
        out = e.out
        if isinstance(e, UnaryOp):
            self.emit_unary(scope, e)
        elif isinstance(e, BinaryOp):
            self.emit_binary(scope, e)
        elif isinstance(e, TernaryOp):
            self.emit_ternary(scope, e)
        elif isinstance(e, CastOp):
            self.bind(scope, out, self.cast_code(scope, e.inp, e.dtype))
        elif isinstance(e, (ReductionOp, VarMeanOp)):
            self.emit_inline_reduction(scope, e)
        else:  # broadcast, expand, squeeze, permute, set: the tile value is unchanged
            self.bind(scope, out, self.value(scope, e.inp))

    def cast_code(self, scope: _Scope, v: Val, dtype: DataType) -> str:
        src = self.operand(scope, v, v.dtype)
        if dtype.is_boolean:
            return f"({src} != 0)"
        if dtype in (DataType.Half, DataType.BFloat16):
            if v.dtype.is_boolean:
                return f"{src}.to(tl.float32)"  # 0 and 1 are exact
            if compute_type(v.dtype) != "tl.float32":  # integers and fp64 go through fp32
                src = f"{src}.to(tl.float32)"
            return f"{src}.to({_STORAGE[dtype]}).to(tl.float32)"
        return f"{src}.to({compute_type(dtype)})"

    def emit_unary(self, scope: _Scope, e: UnaryOp) -> None:
        out_dt = e.out.dtype
        in_dt = e.inp.dtype
        keep_int = e.kind in (UnaryOpType.floor, UnaryOpType.ceil, UnaryOpType.round,
                              UnaryOpType.trunc) and in_dt.category < 2
        if keep_int:
            self.bind(scope, e.out, self.operand(scope, e.inp, in_dt))
            return
        x = self.operand(scope, e.inp, out_dt if out_dt.category >= 2 else in_dt)
        fmt = unary_lowering(e.kind, self.target)
        if fmt is None:
            raise InternalError(f"{e.kind.value} has no lowering on {self.target}")
        self.helpers_used |= fmt.startswith("_")
        self.bind(scope, e.out, fmt.format(x=x))

    def emit_binary(self, scope: _Scope, e: BinaryOp) -> None:
        a, b = e.inputs
        compute = result_type(a, b) if e.out.dtype.is_boolean else e.out.dtype
        if e.kind in (BinaryOpType.logical_and, BinaryOpType.logical_or):
            compute = result_type(a, b)
        x, y = self.operand(scope, a, compute), self.operand(scope, b, compute)
        fmt = binary_lowering(e.kind, self.target)
        if fmt.startswith("_"):  # helper functions take blocks, not Python literals
            self.helpers_used = True
            x, y = (self.block_literal(v, code, compute) for v, code in ((a, x), (b, y)))
        if compute.is_boolean and e.kind in _ARITHMETIC:
            # bool arithmetic as PyTorch does it: in integers, then nonzero is True
            x, y = f"{x}.to(tl.int32)", f"{y}.to(tl.int32)"
            self.bind(scope, e.out, f"({fmt.format(x=x, y=y)} != 0)")
            return
        self.bind(scope, e.out, fmt.format(x=x, y=y))

    def block_literal(self, v: Val, code: str, dtype: DataType) -> str:
        if isinstance(v, Scalar) and v.is_constant:
            return f"tl.full([1, 1], {code}, {compute_type(dtype)})"
        return code

    def emit_ternary(self, scope: _Scope, e: TernaryOp) -> None:
        dt = e.out.dtype
        a, b, c = e.inputs
        if e.kind is TernaryOpType.where:
            cond = self.operand(scope, a, DataType.Bool)
            code = f"tl.where({cond}, {self.operand(scope, b, dt)}, {self.operand(scope, c, dt)})"
        elif e.kind is TernaryOpType.clamp:
            x, lo, hi = (self.operand(scope, v, dt) for v in (a, b, c))
            nan = ", propagate_nan=tl.PropagateNan.ALL" if dt.category >= 2 else ""
            code = f"tl.minimum(tl.maximum({x}, {lo}{nan}), {hi}{nan})"
        else:  # lerp, computed as ATen does for accuracy near both ends
            s, t, w = (self.operand(scope, v, dt) for v in (a, b, c))
            code = f"tl.where({w} < 0.5, {s} + {w} * ({t} - {s}), {t} - ({t} - {s}) * (1.0 - {w}))"
        self.bind(scope, e.out, code)

    # -- reductions -------------------------------------------------------------------------

    def reduced_count(self) -> str:
        return "R" if self.red == 0 else "C"

    def full_mask(self) -> str:
        return "r_mask & c_mask"

    def identity(self, kind: ReductionOpType, dt: DataType) -> str:
        floating = dt.category >= 2
        if kind is ReductionOpType.sum:
            return "0.0" if floating else "0"
        if kind is ReductionOpType.prod:
            return "1.0" if floating else "1"
        lo, hi = {DataType.Int: ("-9223372036854775808", "9223372036854775807"),
                  DataType.Int32: ("-2147483648", "2147483647"), DataType.Bool: ("0", "1")}.get(
                      dt, ("float('-inf')", "float('inf')"))
        return lo if kind is ReductionOpType.max else hi

    def combine(self, kind: ReductionOpType) -> str:
        self.helpers_used = True
        return {ReductionOpType.max: "_max_nan", ReductionOpType.min: "_min_nan",
                ReductionOpType.prod: "_mul"}[kind]

    def emit_inline_reduction(self, scope: _Scope, e: Expr) -> None:
        rd = self.red
        m = self.full_mask()
        if isinstance(e, VarMeanOp):
            x = self.operand(scope, e.inp, e.inp.dtype)
            var, mean = e.outputs
            n = self.reduced_count()
            scope.lines.append(f"T{mean.name} = tl.sum(tl.where({m}, {x}, 0.0), axis={rd}, keep_dims=True) / {n}")
            scope.names[id(mean)] = f"T{mean.name}"
            scope.lines.append(f"T{var.name}_dev = tl.where({m}, {x} - T{mean.name}, 0.0)")
            scope.lines.append(
                f"T{var.name} = tl.sum(T{var.name}_dev * T{var.name}_dev, axis={rd}, keep_dims=True)"
                f" / tl.maximum({n} - {e.correction}, 0).to(tl.float32)")
            scope.names[id(var)] = f"T{var.name}"
            return
        dt = e.out.dtype
        x = self.operand(scope, e.inp, dt)
        masked = f"tl.where({m}, {x}, {self.identity(e.kind, dt)})"
        if e.kind is ReductionOpType.sum:
            code = f"tl.sum({masked}, axis={rd}, keep_dims=True)"
        else:
            code = f"tl.reduce({masked}, {rd}, {self.combine(e.kind)}, keep_dims=True)"
        self.bind(scope, e.out, code)

    def limit(self, dim: int) -> str:
        if dim == self.red and self.split == "partial":
            return "r_hi"
        if dim == self.red and self.split == "combine":
            return "S"
        return "R" if dim == 0 else "C"

    def loop_scope(self) -> _Scope:
        scope = _Scope(parent=self.program_scope)
        start = f"{'r' if self.red == 0 else 'c'}_start"
        self.emit_dim_index(scope, self.red, start)
        return scope

    def close_loop(self, scope: _Scope) -> None:
        lo = "r_lo" if self.split == "partial" else "0"
        block = f"BLOCK{self.red}"
        var = f"{'r' if self.red == 0 else 'c'}_start"
        self.program_scope.lines.append(f"for {var} in range({lo}, {self.limit(self.red)}, {block}):")
        self.program_scope.lines += ["    " + line for line in scope.lines]

    def emit_reduction_loop(self, e: Expr) -> None:
        """One pass over the reduced dim accumulating `e` per lane, then across lanes."""
        rd, ps = self.red, self.program_scope
        shape = "[BLOCK0, BLOCK1]"
        body = self.loop_scope()
        m = self.full_mask()
        ws = {part: k for k, (w, part) in enumerate(self.workspaces) if w is e}
        partial = f"W{{}}_ptr + r * C + c"  # workspace row r (a chunk), column c
        if isinstance(e, VarMeanOp):
            var, mean = e.outputs
            acc = f"acc{var.name}"
            for part, init in (("mean", "0.0"), ("m2", "0.0"), ("n", "0.0")):
                ps.lines.append(f"{acc}_{part} = tl.full({shape}, {init}, tl.float32)")
            if self.split == "combine":
                loads = [f"tl.load({partial.format(ws[p])}, mask={m}, other=0.0)" for p in ("mean", "m2", "n")]
                body.lines.append(f"{acc}_mean, {acc}_m2, {acc}_n = _welford_combine("
                                  f"{acc}_mean, {acc}_m2, {acc}_n, {', '.join(loads)})")
                self.close_loop(body)
                self.helpers_used = True
                self.finish_var_mean(e, acc)
                return
            x = self.operand(body, e.inp, e.inp.dtype)
            body.lines += [
                f"{acc}_n_new = {acc}_n + tl.where({m}, 1.0, 0.0)",
                f"{acc}_delta = {x} - {acc}_mean",
                f"{acc}_mean = tl.where({m}, {acc}_mean + {acc}_delta / tl.maximum({acc}_n_new, 1.0), {acc}_mean)",
                f"{acc}_m2 = tl.where({m}, {acc}_m2 + {acc}_delta * ({x} - {acc}_mean), {acc}_m2)",
                f"{acc}_n = {acc}_n_new",
            ]
            self.close_loop(body)
            self.helpers_used = True
            self.finish_var_mean(e, acc)
            return
        dt = e.out.dtype
        acc = f"acc{e.out.name}"
        ident = self.identity(e.kind, dt)
        ps.lines.append(f"{acc} = tl.full({shape}, {ident}, {compute_type(dt)})")
        if self.split == "combine":
            x = f"tl.load({partial.format(ws['acc'])}, mask={m}, other={ident})"
        else:
            x = self.operand(body, e.inp, dt)
        masked = f"tl.where({m}, {x}, {ident})"
        if e.kind is ReductionOpType.sum:
            body.lines.append(f"{acc} = {acc} + {masked}")
            final = f"tl.sum({acc}, axis={rd}, keep_dims=True)"
        else:
            fn = self.combine(e.kind)
            body.lines.append(f"{acc} = {fn}({acc}, {masked})")
            final = f"tl.reduce({acc}, {rd}, {fn}, keep_dims=True)"
        self.close_loop(body)
        if self.split == "partial":
            self.store_partial(ws["acc"], final)
        else:
            self.bind(ps, e.out, final)

    def finish_var_mean(self, e: VarMeanOp, acc: str) -> None:
        ps, var, mean = self.program_scope, *e.outputs
        ps.lines.append(f"{acc}_meanr, {acc}_m2r, {acc}_nr = tl.reduce(({acc}_mean, {acc}_m2, {acc}_n), "
                        f"{self.red}, _welford_combine, keep_dims=True)")
        if self.split == "partial":
            ws = {part: k for k, (w, part) in enumerate(self.workspaces) if w is e}
            for part in ("mean", "m2", "n"):
                self.store_partial(ws[part], f"{acc}_{part}r")
            return
        ps.lines.append(f"T{mean.name} = {acc}_meanr")
        ps.lines.append(f"T{var.name} = {acc}_m2r / tl.maximum({acc}_nr - {e.correction}, 0.0)")
        ps.names[id(mean)] = f"T{mean.name}"
        ps.names[id(var)] = f"T{var.name}"

    def store_partial(self, k: int, value: str) -> None:
        self.program_scope.lines.append(f"tl.store(W{k}_ptr + chunk * C + c, {value}, mask=c_mask)")

    # -- stores and assembly ----------------------------------------------------------------

    def emit_store(self, scope: _Scope, tv: TensorView) -> None:
        code = self.value(scope, tv)
        offs = [o for o in (self.offset(scope, tv, 0), self.offset(scope, tv, 1)) if o]
        # a tensor spanning no loop axis (one element) still stores through a [1, 1] block
        ptr = f"T{tv.name}_ptr" + "".join(f" + {o}" for o in offs or ["tl.zeros([1, 1], tl.int32)"])
        masks = [m for m in [self.mask(tv)] if m]
        # a tensor that does not vary along a program dim is stored by the first program only
        missing = [d for d in self.program_dims() if d not in self.dims_of(tv) and d in self.super_dim]
        masks += [f"((tl.full([1, 1], 0, tl.int32) + pid{d}) == 0)" for d in missing]
        mask = f", mask={' & '.join(masks)}" if masks else ""
        scope.lines.append(f"tl.store({ptr}, {code}.to({_STORAGE[tv.dtype]}){mask})")

    def program_dims(self) -> list[int]:
        if self.plan.template is Template.pointwise:
            return [0, 1]
        return [1 - self.red]

    def write(self) -> KernelSource:
        self.declare_params()
        ps = self.program_scope = _Scope(parent=None)
        dim0 = [j for j, d in enumerate(self.super_dim) if d == 0]
        dim1 = [j for j, d in enumerate(self.super_dim) if d == 1]
        ps.lines.append("R = " + (" * ".join(f"X{j}" for j in dim0) or "1"))
        ps.lines.append("C = " + (" * ".join(f"X{j}" for j in dim1) or "1"))
        ps.lines.append("pid = tl.program_id(0)")
        ps.lines.append("if INT64:")
        ps.lines.append("    pid = pid.to(tl.int64)")
        if self.plan.template is Template.pointwise:
            ps.lines.append("blocks1 = tl.cdiv(C, BLOCK1)")
            ps.lines += ["pid0 = pid // blocks1", "pid1 = pid % blocks1"]
            self.emit_dim_index(ps, 0, "pid0 * BLOCK0")
            self.emit_dim_index(ps, 1, "pid1 * BLOCK1")
        elif self.split == "partial":
            ps.lines += ["blocks1 = tl.cdiv(C, BLOCK1)", "pid1 = pid % blocks1", "chunk = pid // blocks1",
                         "r_lo = chunk * CHUNK", "r_hi = tl.minimum(r_lo + CHUNK, R)"]
            self.emit_dim_index(ps, 1, "pid1 * BLOCK1")
            for e in self.plan.exprs:
                if isinstance(e, (ReductionOp, VarMeanOp)):
                    self.emit_reduction_loop(e)
            return KernelSource(self.name, self.assemble(), self.args, list(self.params), False)
        else:
            keep = 1 - self.red
            ps.lines.append(f"pid{keep} = pid")
            self.emit_dim_index(ps, keep, f"pid * BLOCK{keep}")
            if self.persistent:
                self.emit_dim_index(ps, self.red, "0")
        outputs = [o for o in self.plan.outputs if isinstance(o, TensorView)]
        if self.persistent:
            for o in outputs:
                self.emit_store(ps, o)
        else:
            tile_outputs = [o for o in outputs if self.tile_level(o)]
            for o in outputs:
                if not self.tile_level(o):
                    self.emit_store(ps, o)
            if tile_outputs:
                body = self.loop_scope()
                for o in tile_outputs:
                    self.emit_store(body, o)
                self.close_loop(body)
        return KernelSource(self.name, self.assemble(), self.args, list(self.params), self.persistent)

    def assemble(self) -> str:
        header = ["# Generated by fuser. Segment IR:"]
        for e in self.plan.exprs:
            header += ["#   " + line for line in format_expr(e).splitlines()]
        variant = f"split ({self.split})" if self.split else ("persistent" if self.persistent else "looped")
        header.append(f"# Plan: {self.plan.describe()}, {variant}")
        for j, run in enumerate(self.layout.super_axes):
            ext = " * ".join(str(self.axes.axes[a].extent) for a in run)
            header.append(f"# X{j} = {ext}")
        for v in self.plan.inputs:
            if isinstance(v, TensorView):
                header.append(f"# input  {format_tv(v)}")
        for v in self.plan.outputs:
            header.append(f"# output {format_tv(v)}")
        params = ", ".join(self.params + ["BLOCK0: tl.constexpr", "BLOCK1: tl.constexpr", "INT64: tl.constexpr"])
        body = "\n".join("    " + line for line in self.program_scope.lines)
        imports = ["import triton", "import triton.language as tl"]
        if self.target == "cuda":
            imports.append("from triton.language.extra import libdevice")
        helpers = HELPERS + _MUL_HELPER if self.helpers_used else ""
        return "\n".join(header + [""] + imports + [helpers, "", f"def {self.name}({params}):", body, ""])


_MUL_HELPER = '''

@triton.jit
def _mul(a, b):
    return a * b
'''


def generate(plan: KernelPlan, layout: Layout, persistent: bool, target: str, name: str,
             split: Optional[str] = None) -> KernelSource:
    return KernelWriter(plan, layout, persistent, target, name, split).write()


def splittable(plan: KernelPlan) -> bool:
    """An outer reduction can be split over chunks of rows when every reduction reads only
    values computed before any reduction, and no output varies along the reduced rows."""
    if plan.template is not Template.outer_reduction:
        return False
    reduced = set(plan.dim0)
    if any(reduced & plan.axes.spans(o) for o in plan.outputs):
        return False
    producer = {id(o): e for e in plan.exprs for o in e.outputs}
    reductions = [e for e in plan.exprs if isinstance(e, (ReductionOp, VarMeanOp))]

    def depends_on_reduction(v, seen) -> bool:
        e = producer.get(id(v))
        if e is None or id(e) in seen:
            return False
        seen.add(id(e))
        if isinstance(e, (ReductionOp, VarMeanOp)):
            return True
        return any(depends_on_reduction(i, seen) for i in e.inputs)

    return not any(depends_on_reduction(e.inp, set()) for e in reductions)


def can_emit(e: Expr, target: str) -> bool:
    """Whether generated code can compute `e` on `target` (the fusibility rule per op)."""
    from ..schedulers.plan import KERNEL_OPS

    if not isinstance(e, KERNEL_OPS):
        return False
    for v in list(e.inputs) + list(e.outputs):
        if v.dtype not in _COMPUTE:
            return False
    if isinstance(e, UnaryOp):
        return unary_lowering(e.kind, target) is not None
    if isinstance(e, BinaryOp):
        if e.kind is BinaryOpType.pow and e.out.dtype.category < 2:
            return False  # integer powers stay exact through ATen
        return binary_lowering(e.kind, target) is not None
    return True
