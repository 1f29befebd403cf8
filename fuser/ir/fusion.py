"""Fusion: the container of one program's values and exprs.

It owns the name counters (`T3`, `iS7`, `i2`), the topologically ordered exprs (definition
order), the inputs and outputs, and extent unification: when an op requires two extents to be
equal, they become literally one symbol, or a recorded constraint checked at every binding.
"""
from __future__ import annotations

import copy
import functools
import hashlib
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Optional, Sequence

import sympy

from ..errors import FusionDefinitionError
from .domain import IterDomain, TensorDomain
from .nodes import Expr, Scalar, TensorView, Val
from .symbolic import Extent, ExtentLike, as_extent, is_static, is_symbol, make_symbol
from .types import DataType, IterType, ParallelType


def _find(parent: dict, e: Any) -> Any:
    while parent.get(e, e) != e:
        e = parent[e]
    return e


def live_exprs(exprs: Sequence[Expr], outputs: Sequence[Val]) -> list[Expr]:
    """Those of `exprs` (in order) that `outputs` depend on. The others compute values nothing
    reads (a definition may leave such ops behind): they need no kernel and no ATen call."""
    needed = {id(o) for o in outputs}
    live = []
    for e in reversed(exprs):
        if any(id(o) in needed for o in e.outputs):
            live.append(e)
            needed.update(id(v) for v in e.inputs)
    live.reverse()
    return live


class Fusion:
    def __init__(self) -> None:
        self._inputs: list[Val] = []
        self._outputs: list[TensorView] = []
        self.exprs: list[Expr] = []
        self._tvs: list[TensorView] = []
        self._scalars: list[Scalar] = []
        self._ids: list[IterDomain] = []
        self._counters = {"tv": 0, "id": 0, "scalar": 0, "event": 0}
        # (a, b, why): extents that must be equal but could not be made one symbol
        self.constraints: list[tuple[Extent, Extent, str]] = []
        # (numerator, denominator, why): element counts one must divide (a reshape's -1)
        self.divisible: list[tuple[Extent, Extent, str]] = []
        # (extent, why): sizes given by scalars (full, expand, iota, ...), which each execution
        # checks are integers >= 0 (a kernel looping over a negative count runs no iteration)
        self.sizes: list[tuple[Extent, str]] = []
        # (value, why, rule): values of scalar inputs each execution checks are finite, and, by
        # `rule`, "nonzero" (an iota's step: a kernel would repeat one value) or "nonnegative"
        # (a random op's std, its range); "finite" alone (an iota's start)
        self.finite: list[tuple[Extent, str, str]] = []
        self._extent_scalars: dict[Extent, Scalar] = {}
        # scheduling calls made on tensors (event number, tensor, method, arguments), for printing
        # the definition in the order it was written
        self.schedule_log: list[tuple[int, TensorView, str, tuple]] = []
        # symbols of scalar inputs: bound to the value the caller passes, never rewritten
        self._input_symbols: set[sympy.Symbol] = set()
        # why the inputs, outputs and exprs can no longer change (a FusionDefinition that ran:
        # its compiled runtimes would go stale), or None
        self.final: Optional[str] = None
        # (object, attribute, old value) of each change made inside all_or_nothing, else None
        self._undo: Optional[list[tuple[Any, str, Any]]] = None
        # (the constraints list, its length, union-find parents) behind `equal_extents`
        self._equal_classes: Optional[tuple[list, int, dict]] = None

    def check_open(self, what: str) -> None:
        if self.final is not None:
            raise FusionDefinitionError(f"{what}: the fusion is final ({self.final}); define a new "
                                        f"FusionDefinition for another computation")

    # -- names and construction ------------------------------------------------------------

    def _next(self, kind: str) -> int:
        n = self._counters[kind]
        self._counters[kind] = n + 1
        return n

    def new_symbol(self, integer: bool = True, nonnegative: bool = True) -> sympy.Symbol:
        """A fresh extent (or scalar-input) symbol named after the next scalar number: `i3`."""
        n = self._next("scalar")
        return make_symbol(f"i{n}" if integer else f"d{n}", integer=integer, nonnegative=nonnegative)

    def new_id(self, extent: ExtentLike, iter_type: IterType = IterType.Iteration,
               parallel_type: ParallelType = ParallelType.serial,
               expanded_extent: Optional[ExtentLike] = None, is_rfactor: bool = False) -> IterDomain:
        d = IterDomain(self._next("id"), as_extent(extent), iter_type, parallel_type,
                       None if expanded_extent is None else as_extent(expanded_extent), is_rfactor)
        d.fusion = self
        self._ids.append(d)
        return d

    def new_tensor(self, domain: TensorDomain, dtype: DataType) -> TensorView:
        tv = TensorView(self._next("tv"), dtype, domain=domain, fusion=self)
        self._tvs.append(tv)
        return tv

    def new_scalar(self, dtype: DataType, value: Any = None, expr: Optional[Extent] = None) -> Scalar:
        """A constant (value given), an extent or derived scalar (expr given), else an input."""
        if value is not None:
            expr = sympy.sympify(value)
            name = -1
        elif expr is None:
            sym = self.new_symbol(integer=not (dtype.is_floating or dtype.is_complex), nonnegative=False)
            expr, name = sym, int(sym.name[1:])
            self._input_symbols.add(sym)
        else:
            name = -1
        s = Scalar(name, dtype, expr=expr, value=value, fusion=self)
        self._scalars.append(s)
        return s

    def extent_scalar(self, extent: Extent) -> Scalar:
        s = self._extent_scalars.get(extent)
        if s is None or s.expr != extent:
            # a static extent is a constant (its value known, as nvFuser's shape() of a broadcast gives 1)
            static = isinstance(extent, int) or is_static(extent)
            s = self.new_scalar(DataType.Int, value=int(extent)) if static else self.new_scalar(DataType.Int, expr=extent)
            self._extent_scalars[extent] = s
        return s

    def next_event(self) -> int:
        """A number that orders definition and scheduling calls as they were made."""
        return self._next("event")

    def add_size_check(self, e: Extent, why: str) -> None:
        """Each execution checks that `e` is an integer >= 0 within int64 (`sizes`); not where
        sympy proves it non-negative of tensors' extents alone (non-negative symbols), so a size
        read off a tensor costs the call path nothing. A scalar's square is non-negative but may
        pass int64 (`full([n * n])`), so it is checked."""
        of_extents = e.is_nonnegative and all(x.is_nonnegative for x in e.free_symbols)
        if not e.is_number and not of_extents and all(x != e for x, _ in self.sizes):
            self.sizes.append((e, why))

    def log_schedule(self, entry: tuple) -> None:
        self.schedule_log.append((self.next_event(), *entry))

    def add_input(self, val: Val) -> None:
        self.check_open("add_input")
        self._inputs.append(val)

    def add_output(self, tv: TensorView) -> None:
        if not isinstance(tv, TensorView):
            raise FusionDefinitionError(f"add_output expects a TensorView, got {tv!r}")
        if tv.fusion is not self:
            raise FusionDefinitionError(f"add_output: {tv!r} belongs to another fusion definition")
        self.check_open("add_output")
        self._outputs.append(tv)

    def replace_output(self, old: TensorView, new: TensorView) -> None:
        """Output `old` becomes `new`, at its place (a pass that rewrote what computes it)."""
        self._outputs = [new if o is old else o for o in self._outputs]

    def add_expr(self, expr: Expr) -> Expr:
        kind = getattr(expr, "kind", None)
        self.check_open(getattr(kind, "value", None) or type(expr).__name__)
        self.exprs.append(expr)
        return expr

    def inputs(self) -> list[Val]:
        return list(self._inputs)

    def outputs(self) -> list[TensorView]:
        return list(self._outputs)

    def tensors(self) -> list[TensorView]:
        return list(self._tvs)

    def definition_of(self, val: Val) -> Optional[Expr]:
        for e in self.exprs:
            if any(o is val for o in e.outputs):
                return e
        return None

    @contextmanager
    def all_or_nothing(self):
        """An op's changes to this fusion, undone if the op raises part-way: an op that made
        two extents one and then refused its operands' other axis must not leave them one,
        where later inputs would be refused for it."""
        if self._undo is not None:  # (an op inside another: the outer one undoes)
            yield
            return
        lists = ("exprs", "_tvs", "_scalars", "_ids", "constraints", "divisible", "sizes", "finite", "schedule_log")
        lengths = {name: len(getattr(self, name)) for name in lists}
        self._undo = []
        try:
            yield
        except BaseException:
            for obj, attr, old in reversed(self._undo):
                setattr(obj, attr, old)
            dropped = {id(s) for s in self._scalars[lengths["_scalars"]:]}
            for name, n in lengths.items():
                del getattr(self, name)[n:]
            self._extent_scalars = {e: s for e, s in self._extent_scalars.items() if id(s) not in dropped}
            self._equal_classes = None  # (the constraints cut back in place: the same list, maybe refilled)
            raise
        finally:
            self._undo = None

    def _set(self, obj: Any, attr: str, value: Any) -> None:
        """setattr, remembered for all_or_nothing."""
        if self._undo is not None:
            self._undo.append((obj, attr, getattr(obj, attr)))
        setattr(obj, attr, value)

    # -- extent unification ----------------------------------------------------------------

    def unify(self, a: Extent, b: Extent, why: str) -> Extent:
        """Make extents `a` and `b` one, and return it. Static values that differ are a
        definition error; a symbol is replaced by the other side everywhere in this fusion;
        two derived expressions become a constraint checked when inputs are bound."""
        if a == b:
            return a
        self.check_open(why)
        if is_static(a) and is_static(b):
            raise FusionDefinitionError(f"{why}: extents {a} and {b} must be equal")
        free = lambda e: is_symbol(e) and e not in self._input_symbols  # noqa: E731
        for sym, other in ((b, a), (a, b)):
            if free(sym) and not other.has(sym) and (not free(other) or _later(sym, other)):
                self.substitute({sym: other}, why)
                return other
        for sym, other in ((a, b), (b, a)):
            if free(sym) and not other.has(sym):
                self.substitute({sym: other}, why)
                return other
        self.constraints.append((a, b, why))
        return a

    def equal_extents(self) -> Callable[[Extent], Extent]:
        """extent -> a representative of the extents `unify` made equal by a constraint (two
        derived expressions, such as the length of a slice_scatter's pieces and the size it
        fills). Built once per state of the constraints: planning asks for every group."""
        cached = self._equal_classes
        if cached is None or cached[0] is not self.constraints or cached[1] != len(self.constraints):
            parent: dict = {}
            for a, b, _ in self.constraints:
                ra, rb = _find(parent, a), _find(parent, b)
                if ra != rb:
                    parent[rb] = ra
            cached = self._equal_classes = (self.constraints, len(self.constraints), parent)
        return functools.partial(_find, cached[2])

    def substitute(self, mapping: dict, why: Optional[str] = None) -> None:
        """Rewrite extents by `mapping` everywhere; `why` (the op that asked) becomes the
        origin of each IterDomain whose extent changes."""
        for d in self._ids:
            extent = d.extent.xreplace(mapping)
            if extent is d.extent:  # (xreplace: itself if unchanged)
                continue
            if why is not None and d.origin is None:
                self._set(d, "origin", why)
            self._set(d, "extent", extent)
        for d in self._ids:
            if d.expanded_extent is not None:
                expanded = d.expanded_extent.xreplace(mapping)
                if expanded is not d.expanded_extent:
                    self._set(d, "expanded_extent", expanded)
        for s in self._scalars:
            if s.expr is not None and not s.is_constant:
                expr = s.expr.xreplace(mapping)
                if expr is not s.expr:
                    self._set(s, "expr", expr)
        for tv in self._tvs:
            for t in tv.domain.root_transforms + tv.domain.transforms:
                if hasattr(t, "factor"):
                    self._set(t, "factor", t.factor.xreplace(mapping))
        self._set(self, "constraints", [(x.xreplace(mapping), y.xreplace(mapping), w) for x, y, w in self.constraints])
        self._set(self, "divisible", [(x.xreplace(mapping), y.xreplace(mapping), w) for x, y, w in self.divisible])
        self._set(self, "sizes", [(x.xreplace(mapping), w) for x, w in self.sizes])
        self._set(self, "finite", [(x.xreplace(mapping), w, z) for x, w, z in self.finite])
        self._set(self, "_extent_scalars", {})

    # -- whole-fusion operations -----------------------------------------------------------

    def clone(self) -> "Fusion":
        """A deep copy whose nodes are new objects (sympy expressions are shared: immutable)."""
        memo: dict[int, Any] = {}
        for v in self._all_sympy():
            memo[id(v)] = v
        clone = copy.deepcopy(self, memo)
        clone.final = None  # a copy is a new fusion: passes rewrite it
        return clone

    def _all_sympy(self) -> Iterable[sympy.Basic]:
        for d in self._ids:
            yield d.extent
            if d.expanded_extent is not None:
                yield d.expanded_extent
        for s in self._scalars:
            if s.expr is not None:
                yield s.expr
        for tv in self._tvs:
            for t in tv.domain.root_transforms + tv.domain.transforms:
                if hasattr(t, "factor"):
                    yield t.factor
        for x, y, _ in self.constraints + self.divisible:
            yield x
            yield y
        for x, _ in self.sizes:
            yield x
        for x, *_ in self.finite:
            yield x

    def structural_hash(self) -> str:
        """A digest of the printed IR with all transforms: equal for structurally equal fusions."""
        from .printer import format_fusion, format_transforms

        text = format_fusion(self) + format_transforms(self)
        # (the notation writes Int and Int32 scalars alike, i1; their inputs check other ranges)
        text += "".join(f"\n{v!r}: {v.dtype.name}" for v in self.inputs() if not isinstance(v, TensorView))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def print_math(self) -> str:
        """The IR as nvFuser's `print_math` writes it: inputs, outputs, then `%kernel_math`."""
        from .printer import format_fusion

        return format_fusion(self, "kernel_math")[:-1] + " \n\n"

    def print_transforms(self) -> str:
        from .printer import format_transforms

        return format_transforms(self)

    def __str__(self) -> str:
        from .printer import format_fusion

        return format_fusion(self)

    __repr__ = __str__


def _later(a: sympy.Symbol, b: sympy.Symbol) -> bool:
    """True if symbol `a` was created after `b` (so `a` is the one replaced)."""
    def num(s):
        try:
            return int(s.name[1:])
        except ValueError:
            return -1
    return num(a) > num(b)


def tensor_domain(ids: Sequence[IterDomain], contiguity=True) -> TensorDomain:
    from .domain import normalize_contiguity

    ids = list(ids)
    return TensorDomain(logical=ids, contiguity=normalize_contiguity(contiguity, ids))
