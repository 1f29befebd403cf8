"""Order the exprs so that each stream loop is one run of consecutive exprs.

An expr belongs to a stream loop when its output has a stream axis. Consecutive loop exprs
share one loop when their stream axes have the same extent and each one consumes what an
earlier member produced chunk for chunk (the producer's stream axis maps to its own, split the
same way). This pass moves the exprs a loop does not depend on (a bias broadcast, say) ahead
of it, so that the loop is not cut in two. `stream_loops` is the grouping itself; the
allocation pass and the host program use it, so all three agree on what a loop is.
"""
from __future__ import annotations

from typing import Optional, Union

from ..ir import Expr, Fusion, TensorView
from ..multidevice.axis_map import mapped_output_axis
from ..multidevice.sharding import stream_leaf


def loop_axis(e: Expr):
    """(stream leaf, split) of the expr's output, or None when the expr is outside loops."""
    for o in e.outputs:
        if isinstance(o, TensorView):
            found = stream_leaf(o)
            if found is not None:
                return found
    return None


def _same_split(a, b) -> bool:
    (la, sa), (lb, sb) = a, b
    return (sa.factor == sb.factor and sa.inner_split == sb.inner_split
            and (la is sa.outer) == (lb is sb.outer))


def joins(group: list[Expr], e: Expr) -> bool:
    """Can `e` run in the same loop as `group` (and after it, chunk by chunk)?"""
    mine = loop_axis(e)
    first = loop_axis(group[0])
    if mine is None or first is None or mine[0].extent != first[0].extent:
        return False
    out = next(o for o in e.outputs if isinstance(o, TensorView))
    produced = {id(o): o for g in group for o in g.outputs if isinstance(o, TensorView)}
    for p in e.inputs:
        if id(p) not in produced:
            continue
        theirs = stream_leaf(p)
        if theirs is None or not _same_split(theirs, mine):
            return False
        if mapped_output_axis(e, p, out, theirs[1].input) is not mine[1].input:
            return False
    return True


def stream_loops(exprs: list[Expr]) -> list[Union[Expr, list[Expr]]]:
    """The exprs in order, each run of one stream loop gathered into a list."""
    out: list[Union[Expr, list[Expr]]] = []
    current: Optional[list[Expr]] = None
    for e in exprs:
        if loop_axis(e) is None:
            current = None
            out.append(e)
        elif current is not None and joins(current, e):
            current.append(e)
        else:
            current = [e]
            out.append(current)
    return out


def schedule_stream_loops(fusion: Fusion) -> Fusion:
    exprs = list(fusion.exprs)
    if not any(loop_axis(e) is not None for e in exprs):
        return fusion
    producer = {id(o): e for e in exprs for o in e.outputs}
    deps = {id(e): {id(producer[id(v)]) for v in e.inputs if id(v) in producer} for e in exprs}
    done: set[int] = set()
    order: list[Expr] = []
    remaining = exprs

    def take(e: Expr) -> None:
        order.append(e)
        done.add(id(e))

    while remaining:
        ready_plain = [e for e in remaining if loop_axis(e) is None and deps[id(e)] <= done]
        while ready_plain:
            for e in ready_plain:
                if deps[id(e)] <= done:
                    take(e)
            remaining = [e for e in remaining if id(e) not in done]
            ready_plain = [e for e in remaining if loop_axis(e) is None and deps[id(e)] <= done]
        if not remaining:
            break
        first = next(e for e in remaining if deps[id(e)] <= done)
        group = [first]
        take(first)
        grown = True
        while grown:
            grown = False
            for e in remaining:
                if id(e) not in done and deps[id(e)] <= done and joins(group, e):
                    group.append(e)
                    take(e)
                    grown = True
        remaining = [e for e in remaining if id(e) not in done]
    fusion.exprs = order
    return fusion
