"""Softmax's backward without a division: exp((x - max) - log(sum)), not exp(x - max) / sum.

The decomposed softmax (backend.decompositions) computes p = exp(x - max) / sum, and its
backward reads p. For the softmax of 16-bit values upcast to fp32 (x = y.float(), or pointwise
math over such casts and graph inputs: the suite's softmax, attention's scaled and masked
scores), the partitioner recomputes p in the backward from the 16-bit y and the
saved max and sum rather than save fp32 probabilities, and that recomputation divides by the
sum: a division could magnify an exp result flushed below 2^-126 (codegen/elementwise.py
`flush_suffices`), so the bf16 kernel's exp keeps subnormal results, a compare and two
predicated multiplies an element (0.84 to 0.88 of copy against 0.98 with the flush, bf16 at
4096x32768 on the H200, eighteenth session).

Before partitioning, the joint graph's backward reads of p are pointed at exp(d - log(sum)),
with d = x - max the forward's own difference: the backward divides by nothing, and the
forward's p is unchanged. The two forms differ by the rounding of d - log(sum), about
|d - log(sum)| * 2^-24 relative, where the probability is far below the fp32 one's use in a
16-bit gradient. (exp(x - lse) with lse = max + log(sum) would save one value a row instead of
two, but loses log(sum) to the rounding of a large max: a row masked with -1e9 would read
probabilities of 1 instead of 1/N.) A row of -inf or NaN gives NaN either way.

Left alone, where the rewrite could only cost (a review found these): a softmax of an fp32
tensor (its gradient is fp32, where exp does not flush, and the partitioner may save p or its
fp32 input alike); one whose p the backward keeps anyway (p or a view of it returned by the
forward, read by a matmul's gradient, or a view of it the forward computes read by the backward:
rewritten, the forward saved the scores and p both); one inside an activation-checkpointed
region (its nodes carry a checkpoint policy, `recompute`: the backward recomputes the whole
softmax, and would compute exp twice an element).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch.fx import Graph, Node

from .meta import meta_val
from .recompute import reduction_signature
from .rules import Kind, find_rule

aten = torch.ops.aten
_CONVERT = torch.ops.prims.convert_element_type.default


def _keeps_dims(node: Node) -> bool:
    """Whether an amax or sum node (args: input, dims, keepdim) keeps its reduced dims."""
    return (node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)) is True


def softmax_parts(div: Node) -> Optional[tuple[Node, Node, Node]]:
    """(x, max, sum) when `div` is exp(x - max) / sum in fp32, max = amax(x, dims, keepdim) and
    sum = sum(that exp, the same dims, keepdim), as softmax decomposes, and x computed from
    16-bit tensors cast to fp32 (`_from_16_bits`); else None."""
    if div.target is not aten.div.Tensor or len(div.args) != 2 or div.kwargs:
        return None
    exp, total = div.args
    if not (isinstance(exp, Node) and exp.target is aten.exp.default and isinstance(total, Node)):
        return None
    sub = exp.args[0]
    if not (isinstance(sub, Node) and sub.target is aten.sub.Tensor and len(sub.args) == 2 and not sub.kwargs):
        return None
    x, top = sub.args
    if not (isinstance(x, Node) and _from_16_bits(x)):
        return None
    if not (isinstance(top, Node) and top.target is aten.amax.default
            and top.args[0] is x and total.target is aten.sum.dim_IntList and total.args[0] is exp
            and not set(total.kwargs) - {"dtype"} and total.kwargs.get("dtype") in (None, torch.float32)):
        return None
    fake = meta_val(div)
    if not isinstance(fake, torch.Tensor) or fake.dtype != torch.float32:
        return None
    # (the same reduced dims of inputs of one shape: recompute.py's signature)
    if fake.dim() == 0 or not (_keeps_dims(top) and _keeps_dims(total)) \
            or reduction_signature(top) != reduction_signature(total):
        return None
    return x, top, total


def _from_16_bits(x, depth: int = 8) -> bool:
    """Whether fp32 `x` is pointwise math (at most `depth` ops deep) over 16-bit tensors cast to
    fp32 and graph inputs, at least one of them such a cast: what the partitioner recomputes in
    the backward rather than save (scores.float() * scale + mask)."""
    casts = 0
    pending, seen = [(x, 0)], set()
    while pending:
        n, level = pending.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "placeholder":
            continue
        if n.op != "call_function" or level > depth:
            return False
        if n.target in (aten._to_copy.default, _CONVERT) and n.args and isinstance(n.args[0], Node):
            source = meta_val(n.args[0])
            if isinstance(source, torch.Tensor) and source.dtype in (torch.bfloat16, torch.float16):
                casts += 1
                continue
        rule = find_rule(n.target)
        if rule is None or rule.kind is not Kind.pointwise:
            return False
        pending += [(a, level + 1) for a in n.all_input_nodes]
    return casts > 0


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


def _is_view(node: Node) -> bool:
    return getattr(node.target, "is_view", False) or node.target is aten._unsafe_view.default


def _fused(node: Node) -> bool:
    rule = find_rule(node.target) if node.op == "call_function" else None
    return rule is not None and rule.kind in (Kind.pointwise, Kind.reduction)


def _kept_anyway(div: Node, needed: set[Node]) -> bool:
    """Whether the backward keeps p whatever this pass does: p or a view of it is a forward
    output, the backward reads a view of p the forward computes (which this pass does not
    redirect), or an op other than a kernel's (a matmul's gradient) reads p in the backward."""
    pending = [(div, False)]  # (p or a view of it, whether the forward computes that view)
    while pending:
        v, forward_view = pending.pop()
        for u in v.users:
            backward = u not in needed
            if u.op == "output" or (backward and forward_view):
                return True
            if _is_view(u):
                pending.append((u, not backward))
            elif backward and not _fused(u):
                return True
    return False


def _append(graph: Graph, after: Node, op, args: tuple, val: torch.Tensor) -> Node:
    with graph.inserting_after(after):
        node = graph.call_function(op, args)
    node.meta["val"] = val
    return node


def backward_softmax_without_division(graph: Graph, num_fwd_outputs: int) -> int:
    """Point the backward's reads of each fp32 softmax at exp((x - max) - log(sum)) (see the
    module's doc), in place; returns the softmaxes rewritten. A read is the backward's when no
    forward output is computed from it."""
    needed = _forward_needs(graph, num_fwd_outputs)
    made: dict[Node, Node] = {}  # sum -> its exp(d - log(sum)): softmaxes alike share one
    rewritten = 0
    for div in list(graph.nodes):
        parts = softmax_parts(div)
        if parts is None or div.meta.get("recompute") is not None or _kept_anyway(div, needed):
            continue
        backward_users = [u for u in div.users if u not in needed]
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
