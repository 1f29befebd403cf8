"""Softmax's backward from the log-sum-exp: exp(x - lse) where it read exp(x - max) / sum.

The decomposed softmax (backend.decompositions) computes p = exp(x - max) / sum, and its
backward reads p. The partitioner recomputes p in the backward from x and the saved max and sum
rather than save fp32 probabilities, and that recomputation divides by the sum: a division could
magnify an exp result flushed below 2^-126 (codegen/elementwise.py `flush_suffices`), so the
backward's exp keeps subnormal results, a compare and two predicated multiplies an element (0.84
to 0.88 of copy against 0.98 with the flush, bf16 at 4096x32768 on the H200, eighteenth session).

Before partitioning, the joint graph's backward reads of p are pointed at exp(x - lse), with
lse = max + log(sum) computed beside p in the forward: the partitioner then saves one value a
row instead of two, the backward divides by nothing, and the forward's p is unchanged. The two
forms differ by the rounding of x - lse (about |x - lse| * 2^-24 relative), far below the fp32
probabilities' use in a 16-bit gradient; a row of -inf or NaN gives NaN either way.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch.fx import Graph, Node

from .meta import meta_val

aten = torch.ops.aten


def _dims(node: Node, rank: int) -> Optional[tuple]:
    """The reduced dims of an amax or sum node (args: input, dims, keepdim), normalized; None
    unless keepdim is set and the dims are plain ints."""
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    dims = [dims] if isinstance(dims, int) else dims
    if keepdim is not True or not isinstance(dims, (list, tuple)) or not dims \
            or not all(isinstance(d, int) for d in dims):
        return None
    return tuple(sorted({d % rank for d in dims}))


def softmax_parts(div: Node) -> Optional[tuple[Node, Node, Node]]:
    """(x, max, sum) when `div` is exp(x - max) / sum in fp32, max = amax(x, dims, keepdim) and
    sum = sum(that exp, the same dims, keepdim), as softmax decomposes; else None."""
    if div.target is not aten.div.Tensor or len(div.args) != 2 or div.kwargs:
        return None
    exp, total = div.args
    if not (isinstance(exp, Node) and exp.target is aten.exp.default and isinstance(total, Node)):
        return None
    sub = exp.args[0]
    if not (isinstance(sub, Node) and sub.target is aten.sub.Tensor and len(sub.args) == 2 and not sub.kwargs):
        return None
    x, top = sub.args
    if not (isinstance(x, Node) and isinstance(top, Node) and top.target is aten.amax.default
            and top.args[0] is x and total.target is aten.sum.dim_IntList and total.args[0] is exp
            and not set(total.kwargs) - {"dtype"} and total.kwargs.get("dtype") in (None, torch.float32)):
        return None
    fake = meta_val(div)
    if not isinstance(fake, torch.Tensor) or fake.dtype != torch.float32:
        return None
    rank = fake.dim()
    if rank == 0 or _dims(top, rank) is None or _dims(top, rank) != _dims(total, rank):
        return None
    return x, top, total


def _forward_needs(graph: Graph, num_fwd_outputs: int) -> set[Node]:
    """The nodes the joint graph's forward outputs are computed from (themselves included)."""
    out = next(n for n in reversed(graph.nodes) if n.op == "output")
    outputs = out.args[0] if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    pending = [o for o in outputs[:num_fwd_outputs] if isinstance(o, Node)]
    needed: set[Node] = set()
    while pending:
        n = pending.pop()
        if n not in needed:
            needed.add(n)
            pending.extend(n.all_input_nodes)
    return needed


def _append(graph: Graph, after: Node, op, args: tuple, val: torch.Tensor) -> Node:
    with graph.inserting_after(after):
        node = graph.call_function(op, args)
    node.meta["val"] = val
    return node


def backward_softmax_from_lse(graph: Graph, num_fwd_outputs: int) -> int:
    """Point the backward's reads of each fp32 softmax at exp(x - lse) (see the module's doc), in
    place; returns the softmaxes rewritten. A read is the backward's when no forward output is
    computed from it."""
    needed = _forward_needs(graph, num_fwd_outputs)
    rewritten = 0
    for div in list(graph.nodes):
        parts = softmax_parts(div)
        if parts is None:
            continue
        backward_users = [u for u in div.users if u not in needed]
        if not backward_users:
            continue
        x, top, total = parts
        mode = getattr(meta_val(div), "fake_mode", None)
        if mode is None:  # (no fake values to compute the new nodes' from)
            continue
        with mode:
            values = [aten.log.default(meta_val(total))]
            values.append(aten.add.Tensor(meta_val(top), values[0]))
            values.append(aten.sub.Tensor(meta_val(x), values[1]))
            values.append(aten.exp.default(values[2]))
        log = _append(graph, total, aten.log.default, (total,), values[0])
        lse = _append(graph, log, aten.add.Tensor, (top, log), values[1])
        shifted = _append(graph, lse, aten.sub.Tensor, (x, lse), values[2])
        probs = _append(graph, shifted, aten.exp.default, (shifted,), values[3])
        for user in backward_users:
            user.replace_input_with(div, probs)
        if not div.users:
            graph.erase_node(div)
        rewritten += 1
    return rewritten
