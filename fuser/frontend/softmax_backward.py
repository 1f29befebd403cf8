"""Softmax's backward without a division: exp((x - max) - log(sum)), not exp(x - max) / sum.

The decomposed softmax (backend.decompositions) computes p = exp(x - max) / sum, and its
backward reads p. The partitioner recomputes p in the backward from x and the saved max and sum
rather than save fp32 probabilities, and that recomputation divides by the sum: a division could
magnify an exp result flushed below 2^-126 (codegen/elementwise.py `flush_suffices`), so the
backward's exp keeps subnormal results, a compare and two predicated multiplies an element (0.84
to 0.88 of copy against 0.98 with the flush, bf16 at 4096x32768 on the H200, eighteenth session).

Before partitioning, the joint graph's backward reads of p are pointed at exp(d - log(sum)),
with d = x - max the forward's own difference: the backward divides by nothing, and the
forward's p (and any output that is p) is unchanged. The two forms differ by the rounding of
d - log(sum), about |d - log(sum)| * 2^-24 relative, where the probability is far below the
fp32 one's use in a gradient. (exp(x - lse) with lse = max + log(sum) would save one value a row
instead of two, but loses log(sum) to the rounding of a large max: a row masked with -1e9 would
read probabilities of 1 instead of 1/N.) A row of -inf or NaN gives NaN either way.

A softmax inside an activation-checkpointed region (its nodes carry a checkpoint policy,
`recompute`) is left alone: its backward recomputes the whole softmax, exp included, and the
rewrite would add a second exp an element; and a policy that saves p is the user's choice.
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


def backward_softmax_without_division(graph: Graph, num_fwd_outputs: int) -> int:
    """Point the backward's reads of each fp32 softmax at exp((x - max) - log(sum)) (see the
    module's doc), in place; returns the softmaxes rewritten. A read is the backward's when no
    forward output is computed from it and it is not the graph's output itself (a forward that
    returns p keeps p)."""
    needed = _forward_needs(graph, num_fwd_outputs)
    made: dict[Node, Node] = {}  # sum -> its exp(d - log(sum)): softmaxes alike share one
    rewritten = 0
    for div in list(graph.nodes):
        parts = softmax_parts(div)
        if parts is None or div.meta.get("recompute") is not None:
            continue
        backward_users = [u for u in div.users if u not in needed and u.op != "output"]
        if not backward_users:
            continue
        _, _, total = parts
        probs = made.get(total)
        if probs is None:
            mode = getattr(meta_val(div), "fake_mode", None)
            if mode is None:  # (no fake values to compute the new nodes' from)
                continue
            shifted = div.args[0].args[0]  # x - max, the forward's
            with mode:
                values = [aten.log.default(meta_val(total))]
                values.append(aten.sub.Tensor(meta_val(shifted), values[0]))
                values.append(aten.exp.default(values[1]))
            log = _append(graph, total, aten.log.default, (total,), values[0])
            less = _append(graph, log, aten.sub.Tensor, (shifted, log), values[1])
            probs = made[total] = _append(graph, less, aten.exp.default, (less,), values[2])
        for user in backward_users:
            user.replace_input_with(div, probs)
        if not div.users:
            graph.erase_node(div)
        rewritten += 1
    return rewritten
