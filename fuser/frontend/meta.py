"""Reading the traced metadata of FX nodes: the fake tensor or SymInt each node produced."""
from __future__ import annotations

import weakref
from typing import Any, Optional, Union

import sympy
import torch
from torch.fx import Node


def meta_val(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, Node) else None


def is_tensor_node(node: Node) -> bool:
    return isinstance(meta_val(node), torch.Tensor)


def is_size_node(node: Node) -> bool:
    """A node computing a Python number from sizes (SymInt arithmetic, `sym_size`)."""
    return isinstance(meta_val(node), (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool))


def size_expr(s: Union[int, torch.SymInt, torch.SymFloat]) -> sympy.Expr:
    """A traced size as a sympy expression over Dynamo's symbols (`s0`, `2*s1`, `8`), sizes
    that the trace's guards say are equal written alike (`equal_sizes`)."""
    if isinstance(s, (torch.SymInt, torch.SymFloat)):
        e = sympy.sympify(s.node.expr)
        same = equal_sizes(s.node.shape_env)
        if not same or e.is_Number or e.is_Symbol:  # (Dynamo replaces a symbol itself)
            return e
        written = same.written.get(e)
        if written is None:
            written = e.subs(same)
            if any(not p.exp.is_Integer for p in written.atoms(sympy.Pow)):
                written = e  # (sympy wrote it through a root: s0**3 under Eq(s0**2, s1*s2))
            same.written[e] = written
        return written
    if isinstance(s, float):
        return sympy.Float(s)
    return sympy.Integer(int(s))


def node_device(node: Node) -> Optional[torch.device]:
    val = meta_val(node)
    if isinstance(val, torch.Tensor):
        return val.device
    if isinstance(val, (list, tuple)):
        for v in val:
            if isinstance(v, torch.Tensor):
                return v.device
    return None


class EqualSizes(dict):
    """{expression: the one written for it}; `written` caches whole sizes rewritten, and
    `members` gives each written expression the others it stands for (one of which the lowering
    computes where it cannot compute that one)."""

    def __init__(self) -> None:
        super().__init__()
        self.written: dict = {}
        self.members: dict = {}


def equal_sizes(shape_env: Any) -> EqualSizes:
    """{expression: the one written for it} for the size expressions that the trace's guards
    say are equal, where Dynamo kept them apart: a size that changed since an earlier trace
    gets a symbol of its own (automatic dynamic shapes), so a cross entropy's targets [s48, s24]
    and logits [s88, s3, V], flattened, have s24*s48 and s3*s88 rows, and a guard Eq(s3*s88,
    s24*s48) that Dynamo checks before every call. Written alike, they are one extent of the
    fusion (and the binding table would reject the two values differing). The guards' equal
    sizes are joined in classes (a chain of equalities is one class), each written as its
    number where a guard fixes one (a chunk's last piece of one row, Eq(s0 - (s0 + 1)//2, 1):
    a size of 1 broadcasts as the trace did), else as the member of fewest symbols."""
    guards = getattr(shape_env, "guards", None)
    if not guards:
        return _NONE
    # (kept per ShapeEnv object, not its id: a freed one's address may serve another trace,
    # whose symbols Dynamo names alike, with as many guards)
    known = _EQUAL_SIZES.get(shape_env)
    if known is not None and known[0] == len(guards):
        return known[1]
    found = _classes(guards)
    _EQUAL_SIZES[shape_env] = (len(guards), found)
    return found


def _classes(guards) -> EqualSizes:
    parent: dict = {}

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x

    for guard in guards:
        e = guard.expr
        if not isinstance(e, sympy.Eq):
            continue
        a, b = e.lhs, e.rhs
        if a.is_Symbol or b.is_Symbol or (a.is_Number and b.is_Number) \
                or any(x.is_Number and not x.is_Integer for x in (a, b)):
            continue  # (Dynamo replaces a symbol equal to anything by that already)
        parent.setdefault(a, a)
        parent.setdefault(b, b)
        parent[find(a)] = find(b)
    classes: dict = {}
    for x in parent:
        classes.setdefault(find(x), []).append(x)
    found = EqualSizes()
    for members in classes.values():
        numbers = [x for x in members if x.is_Number]
        written = numbers[0] if numbers else min(
            members, key=lambda x: (len(x.free_symbols), sorted(str(v) for v in x.free_symbols), str(x)))
        for x in members:
            if x != written:
                found[x] = written
        if not numbers:  # (a number is computed as it is)
            found.members[written] = [x for x in members if x != written]
    return found


_EQUAL_SIZES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # ShapeEnv -> (guards, classes)
_NONE = EqualSizes()
