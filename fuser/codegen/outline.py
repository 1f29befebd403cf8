"""Generated lines moved into a jit function of their own, called where they were.

A kernel that unrolls a pass over a row's chunks (codegen/shared_row.py) repeats the pass's lines
once a chunk, and Triton's front end (Python walking the AST) visits every copy: at 32768
columns in 16 chunks the Gluon front end took 0.39 of the kernel's 0.9 s compile (sm_90, the
development CPU). Written once as a function of the chunk's index and called once a chunk, the
lines are visited once; Triton inlines the calls before its first pass (`add_inliner`), and
constant propagation turns each call's index back into a constant, so the compiled kernel is the
same.

The function's parameters are the names its lines read before assigning them (the kernel's
parameters, the row's values, the accumulators it adds into); it returns the names it assigns
that the code after it reads (the accumulators, a chunk's column mask for a copy). Names of the
module (the language, helpers) and functions called by name are neither. Lines this analysis
cannot follow (a loop, a name the code after reads that only some paths assign) are not
outlined: `outline` raises NotOutlined and the caller writes them out as before.
"""
from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional


class NotOutlined(Exception):
    """Lines whose reads and writes `outline` cannot follow."""


@dataclass(frozen=True)
class Outlined:
    name: str
    params: tuple[str, ...]
    returns: tuple[str, ...]
    source: str  # the function's definition, decorated

    def call(self, args: Optional[Mapping[str, str]] = None, targets: Optional[Mapping[str, str]] = None) -> str:
        """The line that calls it: parameter p given `args.get(p, p)`, return r assigned to
        `targets.get(r, r)`."""
        args, targets = args or {}, targets or {}
        call = f"{self.name}({', '.join(args.get(p, p) for p in self.params)})"
        if not self.returns:
            return call
        return f"{', '.join(targets.get(r, r) for r in self.returns)} = {call}"


def outline(name: str, lines: list[str], read_after: Iterable[str], module_names: Iterable[str],
            decorator: str) -> Outlined:
    """`lines` (statements at one indentation, possibly compound) as function `name`. `read_after`:
    names the code after the lines may read; `module_names`: names the module defines."""
    tree = ast.parse("\n".join(lines))
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    outside = set(module_names) | called  # (a kernel's values are never called)
    free, on_every_path, on_some_path = _reads_and_writes(tree.body)
    # in order of first use: kernels alike but for their tensors' names get the same text
    # (codegen/canonical.py renumbers the names in order of first use)
    order = list(dict.fromkeys(re.findall(r"\b[A-Za-z_]\w*\b", "\n".join(lines))))
    params = tuple(n for n in order if n in free - outside)
    wanted = set(read_after) | set(params)
    partly = {n for n in on_some_path - on_every_path if n in wanted and n not in params}
    if partly:  # (returned, it would be undefined on the other paths)
        raise NotOutlined(f"{name}: {sorted(partly)} assigned on some paths only")
    returns = tuple(n for n in order if n in on_some_path and n in wanted)
    text = [decorator, f"def {name}({', '.join(params)}):"] + ["    " + line for line in lines]
    if returns:
        text.append(f"    return {', '.join(returns)}")
    return Outlined(name, params, returns, "\n".join(text))


def names_read(lines: list[str]) -> set[str]:
    """Every name the block `lines` reads."""
    return _loads(ast.parse(textwrap.dedent("\n".join(lines))))


def free_reads(lines: list[str]) -> set[str]:
    """The names the block `lines` reads before assigning them."""
    return _reads_and_writes(ast.parse(textwrap.dedent("\n".join(lines))).body)[0]


def _reads_and_writes(statements: list[ast.stmt], defined: frozenset = frozenset()) -> tuple[set, set, set]:
    """(the names `statements` read before assigning them, those assigned on every path through
    them, `defined` among them, and those assigned on some path)."""
    free, every, some = set(), set(defined), set()
    for s in statements:
        if isinstance(s, ast.If):
            free |= _loads(s.test) - every
            branches = [_reads_and_writes(b, frozenset(every)) for b in (s.body, s.orelse)]
            for branch_free, _, branch_some in branches:
                free |= branch_free
                some |= branch_some
            every = branches[0][1] & branches[1][1]  # (each includes `every`)
            continue
        if not isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)):
            raise NotOutlined(f"a {type(s).__name__} statement")  # (loops: not followed)
        reads = _loads(s)
        if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name):
            reads.add(s.target.id)
        free |= reads - every
        stores = _stores(s)
        every |= stores
        some |= stores
    return free, every, some


def _loads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _stores(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
