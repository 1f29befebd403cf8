"""Sizes at run time: where each of Dynamo's size symbols can be read when a graph runs, and
size expressions compiled to Python (`s0 // 2`, `2.0 / (s1 - 1)`) for the fusion scalar inputs
that carry sizes no input axis has."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import sympy
import torch
from torch.fx import Node

from .meta import meta_val, size_expr
from .rules import LoweringError


class RuntimeSymbols:
    """Where each of Dynamo's size symbols can be read when the graph runs: a graph input that
    is the symbol itself (a SymInt placeholder) or a tensor input whose size is the symbol."""

    def __init__(self, placeholders: list[Node], constants: Optional[dict] = None):
        # 0-dim tensor constants of the graph (get_attr nodes) and their values
        self.constants: dict[Node, Any] = dict(constants or {})
        self.sources: dict[sympy.Symbol, tuple[Node, Optional[int]]] = {}
        for ph in placeholders:
            val = meta_val(ph)
            if isinstance(val, torch.SymInt):
                e = size_expr(val)
                if e.is_Symbol:
                    self.sources.setdefault(e, (ph, None))
            elif isinstance(val, torch.Tensor):
                for axis, s in enumerate(val.shape):
                    e = size_expr(s)
                    if e.is_Symbol:
                        self.sources.setdefault(e, (ph, axis))

    def source(self, e: sympy.Expr, floating: bool = False) -> Optional["SizeInput"]:
        """How to compute size expression `e` (a float one: `2.0 / (s0 - 1)`) at run time, or
        None if it cannot be."""
        syms = sorted(e.free_symbols, key=lambda x: x.name)
        if any(x not in self.sources for x in syms):
            return None
        try:
            fn = compile_size_expr(e, syms, floating)
        except LoweringError:
            return None
        return SizeInput(e, [self.sources[x] for x in syms], fn)


@dataclass
class SizeInput:
    """An integer scalar input of a fusion: a size expression over sizes of graph inputs."""

    expr: sympy.Expr
    reads: list[tuple[Node, Optional[int]]]  # (tensor input, axis) or (SymInt input, None)
    fn: Any  # the values read -> the size


def compile_size_expr(e: sympy.Expr, syms: list, floating: bool = False) -> Any:
    """A Python function of the symbols' values computing Dynamo's expression `e`."""
    names = {x: f"a{k}" for k, x in enumerate(syms)}
    src = f"lambda {', '.join(names.values())}: {'float' if floating else 'int'}({_py(e, names)})"
    return eval(src, {"_math": math})  # noqa: S307 - source built from a sympy tree above


def _py(e: sympy.Expr, names: dict) -> str:
    if e.is_Integer:
        return str(int(e))
    if e.is_Symbol:
        return names[e]
    if e.is_Float:
        return repr(float(e))
    if e.is_Rational:
        return f"({int(e.p)} / {int(e.q)})"
    args = [_py(a, names) for a in e.args] if not e.is_Number else []
    name = type(e).__name__
    if isinstance(e, sympy.Add):
        return "(" + " + ".join(args) + ")"
    if isinstance(e, sympy.Mul):  # a non-integer coefficient only in float expressions
        return "(" + " * ".join(args) + ")"
    if name in ("FloatTrueDiv", "IntTrueDiv"):
        return f"({args[0]} / {args[1]})"
    if name == "ToFloat":
        return f"float({args[0]})"
    if name in ("TruncToInt", "TruncToFloat"):
        return f"_math.trunc({args[0]})"
    if name in ("FloatPow", "PowByNatural"):
        return f"({args[0]} ** {args[1]})"
    if isinstance(e, sympy.Pow) and e.exp.is_Integer and int(e.exp) > 0:
        return f"({args[0]} ** {args[1]})"
    if name == "FloorDiv":
        return f"({args[0]} // {args[1]})"
    if name == "CeilDiv":
        return f"(-(-{args[0]} // {args[1]}))"
    if name in ("Mod", "PythonMod"):
        return f"({args[0]} % {args[1]})"
    if isinstance(e, sympy.Max):
        return f"max({', '.join(args)})"
    if isinstance(e, sympy.Min):
        return f"min({', '.join(args)})"
    raise LoweringError(f"size expression {e} cannot be evaluated")


def size_exprs(v: Any) -> set:
    if isinstance(v, torch.Tensor):
        return {size_expr(s) for s in v.shape}
    if isinstance(v, torch.SymInt):
        return {size_expr(v)}
    if isinstance(v, (list, tuple)):
        out = set()
        for x in v:
            out |= size_exprs(x)
        return out
    return set()


def opaque_parts(e: sympy.Expr, known: set, out: set) -> None:
    """The parts of `e` a fusion takes as scalar inputs: symbols no input axis carries, and
    operations its scalar arithmetic (+, *, max, min) lacks, such as floor division."""
    if e.is_Integer or e in known:
        return
    if isinstance(e, (sympy.Add, sympy.Max, sympy.Min)) or (
            isinstance(e, sympy.Mul) and all(a.is_Integer or not a.is_Number for a in e.args)):
        for a in e.args:
            opaque_parts(a, known, out)
        return
    out.add(e)
