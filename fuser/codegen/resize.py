"""Slice, pad and cat inside generated kernels (pointwise, and beside row reductions).

A resize op maps its output's index along a resized loop axis to its input's index at an
offset (slice: start + step * i; pad: i - left; cat: i - the input's offset). The kernel
iterates the output's index space, so a value before a resize is computed at the shifted index:
a *view* is the map from resized loop axes to the index variables that hold the shifted index,
and every value is emitted once per view it is asked for (rope reads x as is, and shifted by
half a row in each direction). An index variable is keyed by the sum it holds (the output's
index times a step, plus literals and parameters), so shifts that come back to one index read
one view: a chain of rotates by half a row (`cat([x[:, 4:], x[:, :4]])`) reads x at n + 1
indices, where keying by the index code's text made one view per path through its cats, 2^n.
Where the sums do differ, the planner bounds them (schedulers/plan.py `shifted_values`).
Loads under a view are masked to the loaded tensor's own size (the same for equal sums);
pad and cat select with `tl.where`, so values computed outside an input's range are discarded.
A mixin of KernelWriter. Beside a row reduction, resizes move only along the reduced axes and
the row stays in registers (schedulers/plan.py): a value is emitted under the view restricted to
the axes it spans, so the row's reduction is the whole row's for every view that reads it.
"""
from __future__ import annotations

from typing import Callable

import sympy

from ..errors import InternalError
from ..ir import CatOp, Expr, PadOp, Scalar, SliceOp, TensorView
from ..schedulers.axes import pad_widths, resized_dims
from .scope import Scope

View = tuple  # ((loop axis, index variable), ...) sorted by axis; () is the identity


class ResizeEmitter:
    def init_views(self) -> None:
        self.view: View = ()
        self.view_ids: dict[View, int] = {(): 0}
        # an index variable's value as a sum of loop indices and parameters times integers, and
        # the variable holding each such sum: a shift that comes back to an index already held
        # (cat of a slice: `(4 + i) - 4`) reads the same view, whose values are emitted once
        self.index_forms: dict[str, sympy.Expr] = {}
        self.form_vars: dict[sympy.Expr, str] = {}
        self.opaque_vars: dict[str, str] = {}  # index code no sum describes (a pick's) -> variable
        self.value_params: dict[sympy.Expr, str] = {}  # a value of sizes and scalars -> a parameter holding it
        self.extent_params: dict[str, str] = {}  # str(extent) -> parameter name
        self.pick_indices: set[str] = set()  # index variables of picks, one a row (codegen/pick.py)

    # -- names and indices under the current view -------------------------------------------

    def key(self, v) -> object:
        """The scope key of `v` under the current view (its id alone for the identity)."""
        return id(v) if not self.view else (id(v), self.view)

    def tname(self, v) -> str:
        if not self.view:
            return f"T{v.name}"
        n = self.view_ids.setdefault(self.view, len(self.view_ids))
        return f"T{v.name}_v{n}"

    def index_code(self, j: int) -> str:
        """Super-axis j's index under the current view (a resized axis is alone in its run)."""
        run = self.layout.super_axes[j]
        for axis, var in self.view:
            if axis in run:
                if len(run) > 1:
                    raise InternalError(f"loop axis {axis}, shifted by a resize, was merged with {run}")
                return var
        return f"idx{j}"

    def axis_index(self, axis: int) -> str:
        j = next(j for j, run in enumerate(self.layout.super_axes) if axis in run)
        return self.index_code(j)

    def load_bounds(self, tv: TensorView) -> list[str]:
        """Masks keeping a load under the view inside the tensor's own size along each shifted
        axis (pad and cat ask for indices outside it, and discard what comes back)."""
        out = []
        for k, axis in enumerate(self.axes.of(tv)):
            var = dict(self.view).get(axis) if axis is not None else None
            if var is not None:
                size = f"T{tv.name}_size{k}"
                if size not in self.params:
                    self.add_param(size, self.size_spec(tv, k))
                out.append(f"({var} >= 0) & ({var} < {size})")
        return out

    def shifted(self, view: View, axis: int, code: str) -> View:
        """`view` with loop axis `axis` read at index `code`, kernel code that is no sum of
        indices (a pick's: codegen/pick.py), held by a variable of its own."""
        var = code if code.isidentifier() else self.opaque_vars.get(code)
        if var is None:
            var = self.opaque_vars[code] = self.index_var()
            self.program_scope.lines.append(f"{var} = {code}")
        return _with_index(view, axis, var)

    def moved(self, view: View, axis: int, i: str, scale: int, offset: sympy.Expr) -> View:
        """`view` with loop axis `axis` read at `scale * i + offset`: `i` an index variable,
        `offset` a sum of literals and parameters (`value_term`). Views that read the axis at
        equal sums share one variable, so they are one view."""
        form = sympy.expand(scale * self.index_form(i) + offset)
        var = form.name if isinstance(form, sympy.Symbol) else self.form_vars.get(form)
        if var is None:
            var = self.form_vars[form] = self.index_var()
            self.index_forms[var] = form
            self.program_scope.lines.append(f"{var} = {form}")
        return _with_index(view, axis, var)

    def index_form(self, var: str) -> sympy.Expr:
        return self.index_forms.get(var, sympy.Symbol(var))

    def index_var(self) -> str:
        return f"ix{len(self.form_vars) + len(self.opaque_vars)}"

    def under(self, view: View, fn: Callable[[], str]) -> str:
        saved, self.view = self.view, view
        try:
            return fn()
        finally:
            self.view = saved

    def extent_code(self, e: sympy.Expr) -> str:
        """An extent as kernel code: a literal, or a parameter the launcher evaluates."""
        if isinstance(e, sympy.Integer):
            return str(int(e))
        name = self.extent_params.get(str(e))
        if name is None:
            name = self.extent_params[str(e)] = self.add_param(f"E{len(self.extent_params)}", self.extent_spec(e))
        return name

    def int_code(self, s: Scalar) -> str:
        return str(int(s.value)) if s.is_constant else self.scalar_args[id(s)]

    def value_term(self, value: sympy.Expr, code: str) -> sympy.Expr:
        """`code`, a literal or a parameter (int_code, extent_code) holding `value` (sizes and
        scalars, as the launcher evaluates it), as a term of an index's sum: parameters of one
        value are one term (a slice's start and a cat's offset may be the same size)."""
        if code.lstrip("-").isdigit():
            return sympy.Integer(int(code))
        return sympy.Symbol(self.value_params.setdefault(value, code))

    def extent_term(self, e: sympy.Expr) -> sympy.Expr:
        return self.value_term(e, self.extent_code(e))

    def resized_axes(self, e: Expr, k: int, inp: TensorView):
        """(the output's index along dim k, the input's loop axis there or None: a size-1
        input that does not vary along it)."""
        out_axis = self.axes.of(e.out)[k]
        if out_axis is None:  # the planner refuses such groups (schedulers/axes.py)
            raise InternalError(f"T{e.out.name}'s dim {k}, resized, is no loop axis")
        return self.axis_index(out_axis), self.axes.of(inp)[k]

    # -- the ops ------------------------------------------------------------------------------

    def emit_resize(self, scope: Scope, e: Expr) -> None:
        if isinstance(e, SliceOp):
            code = self.emit_slice(scope, e)
        elif isinstance(e, PadOp):
            code = self.emit_pad(scope, e)
        else:
            code = self.emit_cat(scope, e)
        self.bind(scope, e.out, code)

    def emit_slice(self, scope: Scope, e: SliceOp) -> str:
        view = self.view
        for k in sorted(resized_dims(e)):
            i, axis = self.resized_axes(e, k, e.inp)
            if axis is None:
                continue
            lo, _, step = e.ranges[k]
            view = self.moved(view, axis, i, int(step.value), self.value_term(lo.expr, self.int_code(lo)))
        return self.under(view, lambda: self.operand(scope, e.inp, e.out.dtype))

    def emit_pad(self, scope: Scope, e: PadOp) -> str:
        view, valid = self.view, []
        sizes = e.inp.domain.no_reductions()
        for k, (left, _) in sorted(pad_widths(e).items()):
            if k not in resized_dims(e):
                continue
            i, axis = self.resized_axes(e, k, e.inp)
            valid.append(f"({i} >= {left}) & ({i} < {left} + {self.extent_code(sizes[k].size)})")
            if axis is not None:
                view = self.moved(view, axis, i, 1, sympy.Integer(-left))
        inner = self.under(view, lambda: self.operand(scope, e.inp, e.out.dtype))
        fill = self.block_literal(e.inputs[1], self.operand(scope, e.inputs[1], e.out.dtype), e.out.dtype)
        return f"tl.where({' & '.join(valid)}, {inner}, {fill})" if valid else inner

    def emit_cat(self, scope: Scope, e: CatOp) -> str:
        if len(e.inputs) == 1:
            return self.operand(scope, e.inputs[0], e.out.dtype)
        ends, total = [], sympy.Integer(0)
        for t in e.inputs:
            total = total + t.domain.no_reductions()[e.dim].size  # (an expanded one's expanded size)
            ends.append(total)
        values, start = [], sympy.Integer(0)
        for t, end in zip(e.inputs, ends):
            i, axis = self.resized_axes(e, e.dim, t)
            view = self.view if axis is None else self.moved(self.view, axis, i, 1, -self.extent_term(start))
            values.append(self.under(view, lambda t=t: self.operand(scope, t, e.out.dtype)))
            start = end
        i = self.resized_axes(e, e.dim, e.out)[0]
        code = values[-1]
        for value, end in zip(reversed(values[:-1]), reversed(ends[:-1])):
            code = f"tl.where({i} < {self.extent_code(end)}, {value}, {code})"
        return code


def _with_index(view: View, axis: int, var: str) -> View:
    return tuple(sorted([(a, v) for a, v in view if a != axis] + [(axis, var)]))


