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
module (the language, helpers) and Python's builtins are neither.
"""
from __future__ import annotations

import ast
import builtins
import re
import textwrap
from dataclasses import dataclass
from typing import Iterable, Mapping

_BUILTINS = frozenset(dir(builtins))


@dataclass(frozen=True)
class Outlined:
    name: str
    params: tuple[str, ...]
    returns: tuple[str, ...]
    source: str  # the function's definition, decorated

    def call(self, args: Mapping[str, str] = {}, targets: Mapping[str, str] = {}) -> str:
        """The line that calls it: parameter p given `args.get(p, p)`, return r assigned to
        `targets.get(r, r)`."""
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
    outside = set(module_names) | _BUILTINS | called  # (a kernel's values are never called: helpers)
    free, assigned = _free_reads(tree.body, set())
    # in order of first use: kernels alike but for their tensors' names get the same text
    # (codegen/canonical.py renumbers the names in order of first use)
    order = list(dict.fromkeys(re.findall(r"\b[A-Za-z_]\w*\b", "\n".join(lines))))
    params = tuple(n for n in order if n in free - outside)
    wanted = set(read_after) | set(params)
    returns = tuple(n for n in order if n in assigned and n in wanted)
    text = [decorator, f"def {name}({', '.join(params)}):"] + ["    " + line for line in lines]
    if returns:
        text.append(f"    return {', '.join(returns)}")
    return Outlined(name, params, returns, "\n".join(text))


def names_read(lines: list[str]) -> set[str]:
    """Every name the block `lines` reads."""
    return _loads(ast.parse(textwrap.dedent("\n".join(lines))))


def free_reads(lines: list[str]) -> set[str]:
    """The names the block `lines` reads before assigning them."""
    return _free_reads(ast.parse(textwrap.dedent("\n".join(lines))).body, set())[0]


def _free_reads(statements: list[ast.stmt], defined: set[str]) -> tuple[set[str], set[str]]:
    """(the names `statements` read before assigning them, the names assigned on every path
    through them, `defined` among them)."""
    free, defined = set(), set(defined)
    for s in statements:
        if isinstance(s, ast.If):
            free |= _loads(s.test) - defined
            free_body, in_body = _free_reads(s.body, defined)
            free_else, in_else = _free_reads(s.orelse, defined)
            free |= free_body | free_else
            defined = in_body & in_else  # (each includes `defined`)
            continue
        if isinstance(s, (ast.For, ast.While, ast.With, ast.Try)):
            # (not in the lines outlined today) everything read is a parameter, nothing
            # assigned counts as defined on every path
            free |= {n for n in _loads(s)} - defined
            continue
        reads = _loads(s)
        if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name):
            reads.add(s.target.id)
        free |= reads - defined
        defined |= _stores(s)
    return free, defined


def _loads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _stores(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
