"""Reductions in generated kernels: inline (the whole reduced dim in one tile), looped (one
pass over chunks of the reduced dim for the reductions ready together, Welford for var_mean)
and split (a partial part per chunk of the reduced dim into a workspace, then a combine part). A mixin
of KernelWriter: it uses the writer's scopes, operands and bindings."""
from __future__ import annotations

from typing import Callable, Optional

from ..ir import BinaryOp, BinaryOpType, DataType, Expr, ReductionOp, ReductionOpType, TensorView, VarMeanOp
from ..schedulers import heuristics
from .online_arg import arg_pair_of, emit_inline_arg, emit_online_arg
from .online_softmax import emit_online_softmax, online_pair
from .pick import emit_pick, pick_parts
from .scope import COUNT, INDEX, Scope
from .types import compute_type

# the inline variance from sums of x and x^2 where mean^2 <= this many variances (relative error
# of the variance about 1e-6 there, as the two-pass form's), from the deviations beyond it
VAR_SUMS_MAX_MEAN_RATIO = 4
# the most rows a program reduces at once for which the sums of x and x^2 are taken (the check
# is one branch for them all: where one row needs the deviations, they all take them); a one-pass
# form has two rows a program from 16384 columns, whose sums then fit the registers of 32 warps
VAR_SUMS_MAX_ROWS = 2


class ReductionEmitter:
    def reduced_count(self) -> str:
        return COUNT[self.red]

    def reduce_dims(self, e: Expr) -> list[int]:
        """Tile dims a reduction's lanes span: the reduced dim and those its input varies
        along (a value constant along rows stays [1, BLOCK1], so its result is [1, 1])."""
        if self.split == "combine":
            # the workspace varies along chunks, and along the kept dim where the reduced value
            # does (a value constant along it is read from its block's first lane, so its
            # result is [1, 1])
            return sorted({self.red} | (self.dims_of(e.inp) & {1 - self.red}))
        return sorted(self.dims_of(e.inp) | {self.red})

    def reduce_mask(self, e: Expr) -> str:
        return " & ".join("r_mask" if d == 0 else "c_mask" for d in self.reduce_dims(e))

    def reduce_shape(self, e: Expr) -> str:
        dims = self.reduce_dims(e)
        return f"[{'BLOCK0' if 0 in dims else 1}, {'BLOCK1' if 1 in dims else 1}]"

    def identity(self, kind: ReductionOpType, dt: DataType) -> str:
        floating = dt.category >= 2
        if kind is ReductionOpType.sum:
            return "0.0" if floating else "0"
        if kind is ReductionOpType.prod:
            return "1.0" if floating else "1"
        # a Bool max/min (any, all) keeps int1: tl.where(mask, b, 0) would be an int32, which a
        # later tl.where takes as a non-boolean condition (deprecated, an error in Triton to
        # come) and which changes a loop-carried int1 accumulator's type
        lo, hi = {DataType.Int: ("-9223372036854775808", "9223372036854775807"),
                  DataType.Int32: ("-2147483648", "2147483647"), DataType.Bool: ("False", "True")}.get(
                      dt, ("float('-inf')", "float('inf')"))
        return lo if kind is ReductionOpType.max else hi

    def combine(self, kind: ReductionOpType) -> str:
        return {ReductionOpType.max: "_max_nan", ReductionOpType.min: "_min_nan",
                ReductionOpType.prod: "_mul"}[kind]

    def emit_inline_reduction(self, scope: Scope, e: Expr) -> None:
        if emit_pick(self, e):
            return
        arg = arg_pair_of(self, e, scope) if self.split is None else None
        if arg is not None:
            emit_inline_arg(self, scope, arg)
            return
        rd = self.red
        m = self.reduce_mask(e)
        if isinstance(e, VarMeanOp):
            self.emit_inline_var_mean(scope, e, m)
            return
        dt = e.out.dtype
        x = self.operand(scope, e.inp, dt)
        masked = f"tl.where({m}, {x}, {self.identity(e.kind, dt)})"
        if e.kind is ReductionOpType.sum:
            code = f"tl.sum({masked}, axis={rd}, keep_dims=True)"
        else:
            code = f"tl.reduce({masked}, {rd}, {self.combine(e.kind)}, keep_dims=True)"
        self.bind(scope, e.out, code)
        self.round_to_storage(scope, e)

    def emit_inline_var_mean(self, scope: Scope, e: VarMeanOp, m: str) -> None:
        """Mean and variance of a tile's lanes. The sums of x and x^2 reduce together (one
        tl.reduce of the pair), one cross-warp step where the two-pass form takes two dependent
        ones (on the H200 a row of 32768 columns, one program a processor: 0.74 -> 0.82 of
        copy, benchmarks/sweep_layernorm_forms.py). They cancel where the mean is large against the spread, so
        a row whose squared mean exceeds VAR_SUMS_MAX_MEAN_RATIO variances (or whose sums
        overflow) takes the squared deviations from the mean, as the two-pass form does; the
        check is one scalar branch, so it is done only where few rows are reduced at a time
        (VAR_SUMS_MAX_ROWS)."""
        rd = self.red
        x = self.operand(scope, e.inp, e.inp.dtype)
        var, mean = e.outputs
        n = self.reduced_count()
        s1, avg, m2, dev = f"T{mean.name}_s1", f"T{mean.name}_avg", f"T{var.name}_m2", f"T{var.name}_dev"
        two_pass = [f"{dev} = tl.where({m}, {x} - {avg}, 0.0)",
                    f"{m2} = tl.sum({dev} * {dev}, axis={rd}, keep_dims=True)"]
        other = 1 - rd
        few_rows = f"BLOCK{other} <= {VAR_SUMS_MAX_ROWS}" if other in self.reduce_dims(e) else "True"
        s2, xm = f"T{var.name}_s2", f"T{mean.name}_x"
        fallback = two_pass
        if self.one_pass:
            # the deviations from x read again (from L2), as every later pass of this form reads
            # its inputs: x held in registers across the reduction for a branch rarely taken
            # spilled with two rows of 32768 columns a program (H200, 2026-12-01)
            again = self.loop_scope()
            x_again = self.operand(again, e.inp, e.inp.dtype)
            fallback = self.unhinted(again.lines) + [f"{dev} = tl.where({m}, {x_again} - {avg}, 0.0)",
                                                     two_pass[1]]
        # a row's sum may overflow where its mean does not (values near the type's largest):
        # such a tile sums x / n instead (inf or NaN in x still gives eager's inf or NaN)
        rescaled = [f"if tl.max(tl.where(tl.abs({s1}) < float('inf'), 0, 1)) != 0:",
                    f"    {avg} = tl.sum({xm} / {n}, axis={rd}, keep_dims=True)"]
        scope.lines += [
            f"{xm} = tl.where({m}, {x}, 0.0)",
            f"if {few_rows}:",
            f"    {s1}, {s2} = tl.reduce(({xm}, {xm} * {xm}), {rd}, _sum_pair, keep_dims=True)",
            f"    {avg} = {s1} / {n}",
            *["    " + line for line in rescaled],
            f"    {m2} = {s2} - {s1} * {avg}",
            f"    if tl.max(tl.where(({m2} * {VAR_SUMS_MAX_MEAN_RATIO} >= {s1} * {avg}) & ({m2} < float('inf')), 0, 1)) != 0:",
            *["        " + line for line in fallback],
            "else:",
            f"    {s1} = tl.sum({xm}, axis={rd}, keep_dims=True)",
            f"    {avg} = {s1} / {n}",
            *["    " + line for line in rescaled],
            *["    " + line for line in two_pass],
            f"T{var.name} = {m2} / tl.maximum({n} - {e.correction}, 0).to(tl.float32)",
            f"T{mean.name} = _welford_mean({avg}, {m2}, {n})"]
        scope.names[id(mean)] = f"T{mean.name}"
        scope.names[id(var)] = f"T{var.name}"

    def limit(self, dim: int) -> str:
        if dim == self.red and self.split == "partial":
            return f"{INDEX[dim]}_hi"
        if dim == self.red and self.split == "combine":
            return "S"
        return COUNT[dim]

    def loop_scope(self) -> Scope:
        scope = Scope(parent=self.program_scope)
        start = f"{INDEX[self.red]}_start"
        if self.aligned_rows:  # (the loops open with their chunk's indices: aligned_loops)
            scope.dims = scope.dims + (self.red,)
        else:
            self.emit_dim_index(scope, self.red, start)
        return scope

    @staticmethod
    def chunk_range(lo: str, end: str, block: str, unroll: bool) -> str:
        """The iterator of a loop over a row's chunks: unrolled by heuristics.ROW_PASS_UNROLL
        where `unroll` (a row reduction's accumulating pass), else a plain range."""
        if unroll:
            return f"tl.range({lo}, {end}, {block}, loop_unroll_factor={heuristics.ROW_PASS_UNROLL})"
        return f"range({lo}, {end}, {block})"

    def close_loop(self, scope: Scope, accumulating: bool = False) -> None:
        """Close a pass over the reduced dim. `accumulating`: a reduction's pass, whose loop over
        a row's chunks is unrolled (heuristics.ROW_PASS_UNROLL), so that the loads of several
        chunks are in flight before the first chunk's update waits on its load."""
        v = INDEX[self.red]
        lo = f"{v}_lo" if self.split == "partial" else "0"
        block = f"BLOCK{self.red}"
        var = f"{v}_start"
        if self.one_pass:  # one chunk covers the reduced dim: the pass runs once, in line
            self.program_scope.lines += [f"{var} = {lo}"] + scope.lines
            return
        unroll = accumulating and self.red == 1 and self.split is None and heuristics.ROW_PASS_UNROLL > 1
        if self.aligned_rows:
            self.program_scope.lines += self.aligned_loops(scope.lines, unroll)
            return
        end = "LOOP_EXTENT" if self.static_loop else self.limit(self.red)
        loop = self.chunk_range(lo, end, block, unroll)
        self.program_scope.lines.append(f"for {var} in {loop}:")
        self.program_scope.lines += ["    " + line for line in scope.lines]

    def emit_reduction_loop(self, e: Expr) -> None:
        """One pass over the reduced dim accumulating `e` per lane, then across lanes. The
        pass also takes every other reduction of the kernel that is ready (all reductions its
        input depends on are done), so that reductions of the same values (a norm backward's
        dw and db) load them once instead of once a reduction."""
        if emit_pick(self, e):
            return  # (no pass: one load a row)
        arg = None if self.one_pass else arg_pair_of(self, e)
        if arg is None and not self.one_pass and self.split is None:
            # an arg pass ready now takes `e` too (emit_online_arg): one pass, not two
            arg = next((p for p in self.plan.arg_pairs if not self.program_scope.lookup(id(p.index.out))
                        and not self._waits_on(p.extreme)), None)
        if arg is not None:  # (its positions wait on its extreme, yet both take one pass)
            while waits := self._waits_on(arg.extreme):
                self.emit_reduction_loop(waits[0])
            emit_online_arg(self, arg)
            if self.program_scope.lookup(id(e.outputs[0])) is not None:
                return
        # the reductions `e` reads finish their passes first: were they left to `e`'s operand,
        # they would run nested, and again in this pass, which counts them as ready
        while waits := self._waits_on(e):
            self.emit_reduction_loop(waits[0])
        if self.program_scope.lookup(id(e.outputs[0])) is not None:
            return  # done in the pass of one it waited for (an online softmax's sum)
        pair = None if self.one_pass else online_pair(self, e)
        if pair is None and not self.one_pass and self.split is None:
            # an online pass ready now takes `e` too (emit_online_softmax): one pass, not two
            pair = next((p for p in self.plan.online_pairs if not self.program_scope.lookup(id(p.max.out))
                         and not self._waits_on(p.max)), None)
        if pair is not None:
            emit_online_softmax(self, pair)
            if self.program_scope.lookup(id(e.outputs[0])) is not None:
                return
            self.emit_reduction_loop(e)  # (not ready beside the pair: a pass of its own)
            return
        body = self.loop_scope()
        group = [e] + [f for f in self.plan.exprs if f is not e and self._ready_reduction(f)]
        # chosen before the group's results are bound: an output fed by them is not ready
        outputs = self.outputs_ready_in_pass()
        if self.one_pass:  # the pass holds the whole reduced extent: reduce in line
            for f in group:
                self.emit_inline_reduction(body, f)
            for o in outputs:
                self.emit_store(body, o)
            self.close_loop(body)  # its lines join the program scope, and so do its results
            for f in group:
                for out in f.outputs:
                    self.program_scope.names[id(out)] = body.names[id(out)]
            return
        finish = self.accumulate_together(group, body)
        for o in outputs:
            self.emit_store(body, o)
        self.close_loop(body, accumulating=True)
        finish()

    def accumulate_together(self, group: list, body: Scope) -> Callable[[], None]:
        """The accumulators and updates of `group`'s reductions in the pass `body`; returns
        what finishes them all after the pass. Which sums are factored is decided before any of
        the group is bound (a factor's reduction then no longer waits), and a factored sum
        finishes last: its factors read the others' results."""
        factored = {id(f): self._factored(f) for f in group}
        finals = [self._accumulate(f, body, factored[id(f)]) for f in group]

        def finish_all() -> None:
            for f, finish in sorted(zip(group, finals), key=lambda pair: factored[id(pair[0])] is not None):
                finish()
        return finish_all

    def _ready_reduction(self, f: Expr) -> bool:
        if not isinstance(f, (ReductionOp, VarMeanOp)) or self.program_scope.lookup(id(f.outputs[0])) \
                or pick_parts(self, f) is not None:
            return False  # (done, or a pick: a load a row, in no pass)
        if not self.one_pass and (any(pair.max is f for pair in self.plan.online_pairs)
                                  or any(f is pair.extreme or f is pair.index for pair in self.plan.arg_pairs)):
            return False  # a softmax pair's max, an arg pair's: its own online pass
        return not self._waits_on(f)

    def outputs_ready_in_pass(self) -> list:
        """The outputs varying along the reduced dim that a pass over it can store as it goes:
        not stored yet and fed by no reduction still to come. Stored in the pass, they cost no
        pass of their own over the inputs (an activation's gradient beside its bias gradient:
        one read of x and dy instead of two). None in a split's combine step, whose pass runs
        over workspace rows (the partial step stores them), nor under a resize's view."""
        if self.split == "combine" or self.view:
            return []
        return [o for o in self.plan.outputs if isinstance(o, TensorView) and id(o) not in self.stored
                and self.tile_level(o) and not self._pending_reductions([o])]

    def _waits_on(self, f: Expr) -> list[Expr]:
        """The reductions not yet emitted that `f`'s input depends on (the nearest ones); of a
        sum that `_factored` splits, those its varying factors depend on."""
        parts = self._factored(f)
        return self._pending_reductions(parts[0] if parts else list(f.inputs))

    def _factored(self, f: Expr) -> Optional[tuple[list, list]]:
        """(the factors that vary along the reduced dim, the others) of a sum of a product whose
        constant factors wait on a reduction not yet emitted and whose varying ones do not, as
        sum(g * x * rstd) with rstd from sum(x * x): the pass sums g * x beside x * x and the
        result is multiplied by rstd after it, one pass over the row instead of two. Only fp32
        and fp64 products (reassociated: rounding moves, and a product that overflows where
        its factors in the other order did not gives inf or NaN), and not where the reductions
        run in line (one pass), split, or under a resize's view."""
        if (not isinstance(f, ReductionOp) or f.kind is not ReductionOpType.sum or self.one_pass or self.split
                or self.view or f.out.dtype not in (DataType.Float, DataType.Double)):
            return None
        factors = self._mul_factors(f.inp, f.out.dtype)
        along = [v for v in factors if self.tile_level(v)]
        other = [v for v in factors if not self.tile_level(v)]
        if not along or not other or self._pending_reductions(along):
            return None
        # only where what the constant factors wait on is computed in this same pass: each of
        # those reductions ready as it is (not itself waiting, factored or not; no online
        # softmax pair's, which take a pass of their own)
        waits = self._pending_reductions(other)
        if not waits or any(self._pending_reductions(list(g.inputs)) or any(g is p.max or g is p.sum
                                                                            for p in self.plan.online_pairs)
                            for g in waits):
            return None
        return along, other

    def _mul_factors(self, v, dtype: DataType) -> list:
        """The factors of `v` through the products of `dtype` computed in this kernel."""
        e = self.producer.get(id(v))
        if isinstance(e, BinaryOp) and e.kind is BinaryOpType.mul and e.out.dtype is dtype \
                and id(v) not in self.kernel_inputs:
            return [w for u in e.inputs for w in self._mul_factors(u, dtype)]
        return [v]

    def _pending_reductions(self, values: list) -> list[Expr]:
        """The reductions not yet emitted that `values` depend on (the nearest ones)."""
        waits, seen, stack = [], set(), list(values)
        while stack:
            v = stack.pop()
            g = self.producer.get(id(v))
            if g is None or id(g) in seen or self.program_scope.lookup(id(v)) is not None:
                continue
            seen.add(id(g))
            if isinstance(g, (ReductionOp, VarMeanOp)):
                waits.append(g)
                continue
            stack += list(g.inputs)
        return waits

    def _accumulate(self, e: Expr, body: Scope, factors: Optional[tuple[list, list]] = None):
        """Emit `e`'s accumulator (program scope) and its update (loop body); returns what
        finishes it after the loop. `factors` (of a sum, `_factored`): the pass sums the
        product of the first and the finish multiplies by the second."""
        ps = self.program_scope
        shape = self.reduce_shape(e)
        m = self.reduce_mask(e)
        ws = {part: k for k, (w, part) in enumerate(self.workspaces) if w is e}
        if isinstance(e, VarMeanOp):
            var, mean = e.outputs
            acc = f"acc{var.name}"
            # the input's compute type: fp64 keeps fp64 (an fp32 accumulator would lose its
            # precision, and on the GPU a loop-carried fp32 re-assigned fp64 does not compile)
            acc_type = compute_type(e.inp.dtype)
            for part in ("mean", "m2"):
                ps.lines.append(f"{acc}_{part} = {self.block(shape, '0.0', acc_type)}")
            if self.split == "combine":
                ps.lines.append(f"{acc}_n = {self.block(shape, '0.0', acc_type)}")
                loads = [self.partial_load(e, ws[p], m, "0.0") for p in ("mean", "m2", "n")]
                body.lines.append(f"{acc}_mean, {acc}_m2, {acc}_n = _welford_combine("
                                  f"{acc}_mean, {acc}_m2, {acc}_n, {', '.join(loads)})")
            else:
                # A lane takes at most one element a step, and whether it does depends on the
                # reduced dim's mask alone (a lane masked along the kept dim is never stored), so
                # the count and its reciprocal are kept along the reduced dim: a division a step
                # for each of a thread's positions along it, not one an element (a division an
                # element made a column var_mean's split kernel 1.1-2.1x slower on the H200)
                counted = f"{INDEX[self.red]}_mask"  # (the reduced dim's index mask, emit_dim_index)
                count_shape = "[BLOCK0, 1]" if self.red == 0 else "[1, BLOCK1]"
                ps.lines.append(f"{acc}_n = {self.block(count_shape, '0.0', acc_type)}")
                x = self.operand(body, e.inp, e.inp.dtype)
                inv = f"1.0 / tl.maximum({acc}_n, 1.0)"
                if self.red == 1:
                    # Along a row that is one lane an element (one row a program), so a division
                    # an element. But a row's masks cut only its last chunk (or, in the aligned
                    # form, its head and tail chunks, whose loop runs last and keeps the lane's
                    # count: aligned_loops): every lane that takes an element has taken one at
                    # each step before, so its count is the step's number, one reciprocal a step
                    # (a bare 0.0 is an fp32 scalar: its reciprocal would round an fp64 update)
                    zero = "0.0" if acc_type == "tl.float32" else f"tl.full([], 0.0, {acc_type})"
                    ps.lines.append(f"{acc}_k = {zero}")
                    body.lines.append(f"{acc}_k = {acc}_k + 1.0")
                    inv = f"1.0 / {acc}_k"
                body.lines += [
                    f"{acc}_n = {acc}_n + tl.where({counted}, 1.0, 0.0)",
                    f"{acc}_inv = {inv}",
                    f"{acc}_delta = {x} - {acc}_mean",
                    f"{acc}_mean = tl.where({m}, {acc}_mean + {acc}_delta * {acc}_inv, {acc}_mean)",
                    f"{acc}_m2 = tl.where({m}, {acc}_m2 + {acc}_delta * ({x} - {acc}_mean), {acc}_m2)",
                ]
            # bound now, so that no later reduction of this pass counts as waiting for it
            ps.names[id(mean)] = f"T{mean.name}"
            ps.names[id(var)] = f"T{var.name}"
            return lambda: self.finish_var_mean(e, acc, shape, acc_type)
        dt = e.out.dtype
        acc = f"acc{e.out.name}"
        ident = self.identity(e.kind, dt)
        ps.lines.append(f"{acc} = {self.block(shape, ident, compute_type(dt))}")
        if self.split == "combine":
            x = self.partial_load(e, ws["acc"], m, ident)
        elif factors is not None:
            x = " * ".join(f"{self.operand(body, v, dt)}" for v in factors[0])
        else:
            x = self.operand(body, e.inp, dt)
        masked = f"tl.where({m}, {x}, {ident})"
        if e.kind is ReductionOpType.sum:
            body.lines.append(f"{acc} = {acc} + {masked}")
            final = f"tl.sum({acc}, axis={self.red}, keep_dims=True)"
        else:
            fn = self.combine(e.kind)
            body.lines.append(f"{acc} = {fn}({acc}, {masked})")
            final = f"tl.reduce({acc}, {self.red}, {fn}, keep_dims=True)"
        ps.names[id(e.out)] = f"T{e.out.name}"

        def finish() -> None:
            if self.split == "partial":
                self.store_partial(ws["acc"], final)
            elif factors is not None:
                self.bind(ps, e.out, " * ".join([f"({final})"] + [self.operand(ps, v, dt) for v in factors[1]]))
                self.round_to_storage(ps, e)
            else:
                self.bind(ps, e.out, final)
                self.round_to_storage(ps, e)
        return finish

    def finish_var_mean(self, e: VarMeanOp, acc: str, shape: str, acc_type: str) -> None:
        ps, var, mean = self.program_scope, *e.outputs
        # (the count, kept along the reduced dim, broadcast to the lanes: a tuple reduces alike)
        count = f"{acc}_n" if self.split == "combine" else f"{acc}_n + {self.block(shape, '0.0', acc_type)}"
        ps.lines.append(f"{acc}_meanr, {acc}_m2r, {acc}_nr = tl.reduce(({acc}_mean, {acc}_m2, {count}), "
                        f"{self.red}, _welford_combine, keep_dims=True)")
        if self.split == "partial":
            ws = {part: k for k, (w, part) in enumerate(self.workspaces) if w is e}
            for part in ("mean", "m2", "n"):
                self.store_partial(ws[part], f"{acc}_{part}r")
            return
        ps.lines.append(f"T{mean.name} = _welford_mean({acc}_meanr, {acc}_m2r, {acc}_nr)")
        ps.lines.append(f"T{var.name} = {acc}_m2r / tl.maximum({acc}_nr - {e.correction}, 0.0)")
        ps.names[id(mean)] = f"T{mean.name}"
        ps.names[id(var)] = f"T{var.name}"

    def partial_load(self, e: Expr, k: int, mask: str, other) -> str:
        """The load of `e`'s partials from workspace `k` in a combine step's pass (its lanes
        over chunks), masked lanes reading `other`."""
        # workspace row: a chunk (the reduced dim's index), column: the kept dim's index; a
        # value the same all along the kept dim is read from this block's first lane, which
        # this block's own partial programs wrote (in one kernel, another block's programs may
        # not have stored theirs yet)
        keep = 1 - self.red
        column = INDEX[keep] if keep in self.reduce_dims(e) else f"pid{keep} * BLOCK{keep}"
        # written by other programs of this kernel: read from L2, past this processor's L1
        cg = ', cache_modifier=".cg"' if self.combine_in_line else ""
        return f"tl.load(W{k}_ptr + {INDEX[self.red]} * {COUNT[keep]} + {column}, mask={mask}, other={other}{cg})"

    def store_partial(self, k: int, value: str) -> None:
        """This chunk's partial result into workspace row `chunk`, along the kept dim."""
        v = INDEX[1 - self.red]
        self.program_scope.lines.append(
            f"tl.store(W{k}_ptr + chunk * {COUNT[1 - self.red]} + {v}, {value}, mask={v}_mask)")

