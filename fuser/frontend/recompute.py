"""Recompute shared pointwise values per reduction instead of storing them.

The segmenter puts a value used by several kernels into one of them, and the others read it
back from memory. When a pointwise value (`dy.float()`, `x * rstd`) feeds two reductions that
cannot share a kernel (RMSNorm's backward: a column sum for the weight gradient and a row sum
for the input gradient), that costs a write and two reads of a full-size tensor. Recomputing
the value from the fusion's inputs in each kernel moves fewer bytes. So, before partitioning,
each pointwise or view node whose users lead to different sets of reductions gets one copy per
set; users that only lead to values stored anyway (outputs, matmul operands, ATen calls) share
the first copy, whose kernel writes it, so nothing is stored twice.

Sinks of a node are the first non-pointwise nodes reached through its users. A node is copied
at most once per distinct set of reductions among its users' sinks, so the graph grows by at
most (pointwise nodes x reductions).
"""
from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule, Node

from .meta import is_tensor_node, meta_val, size_expr
from .rules import Kind, find_rule


def _kind(node: Node):
    if node.op != "call_function" or not is_tensor_node(node):
        return None
    if node.target is operator.getitem:  # an output of a multi-output op: its kind
        return _kind(node.args[0]) if isinstance(node.args[0], Node) else None
    rule = find_rule(node.target)
    return rule.kind if rule is not None else None


def _cheap(node: Node) -> bool:
    # (not a random op: a copy would draw other numbers)
    random = isinstance(node.target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in node.target.tags
    return node.target is not operator.getitem and not random and _kind(node) in (Kind.pointwise, Kind.view)


def reduction_signature(node: Node):
    """Reductions with equal signatures (input sizes, reduced dims) can share a kernel."""
    if node.target is operator.getitem:
        return reduction_signature(node.args[0])
    src = node.args[0] if node.args and isinstance(node.args[0], Node) else None
    fake = meta_val(src)
    if not isinstance(fake, torch.Tensor):
        return node
    n = fake.dim()
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if node.target is torch.ops.aten.native_layer_norm.default:
        dims = list(range(n - len(node.args[1]), n))
    elif node.target is torch.ops.aten.linalg_vector_norm.default:
        dims = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim")
    if dims is None or (isinstance(dims, (list, tuple)) and not dims) or not isinstance(
            dims, (int, list, tuple)):
        dims = list(range(n))
    dims = [dims] if isinstance(dims, int) else list(dims)
    if not all(isinstance(d, int) for d in dims):
        return node
    return (tuple(str(size_expr(s)) for s in fake.shape), tuple(sorted({d % max(n, 1) for d in dims})))


def recompute_shared_pointwise(gm: GraphModule) -> int:
    """Copy shared pointwise nodes per set of reductions (in place); returns the copies made."""
    graph = gm.graph
    up: dict[Node, frozenset] = {}
    for node in graph.nodes:  # reductions each node depends on through cheap nodes
        if _kind(node) is Kind.reduction:
            up[node] = frozenset([reduction_signature(node)])
        elif _cheap(node):
            up[node] = frozenset().union(*(up.get(p, frozenset()) for p in node.all_input_nodes))
    down: dict[Node, frozenset] = {}

    def attached(n: Node) -> frozenset:
        """Reductions whose kernel a cheap node may join: those below it (through cheap nodes)
        and those above anything below it."""
        if n not in down:
            if _cheap(n):
                found = up.get(n, frozenset())
                for u in n.users:
                    found = found | attached(u)
                down[n] = found
            elif _kind(n) is Kind.reduction:
                down[n] = frozenset([reduction_signature(n)])
            else:
                down[n] = frozenset()
        return down[n]

    copies = 0
    for node in reversed(list(graph.nodes)):
        if not _cheap(node) or len(node.users) < 2:
            continue
        classes: dict[frozenset, list[Node]] = {}
        for user in node.users:
            classes.setdefault(attached(user), []).append(user)
        stored = classes.pop(frozenset(), [])
        if len(classes) < 2:
            continue
        # users that only store the value go with one reduction's kernel, which writes it
        keep = next(iter(classes))
        classes[keep] += stored
        for key, users in classes.items():
            if key == keep:
                continue
            with graph.inserting_after(node):
                copy = graph.node_copy(node)
            for user in users:
                user.replace_input_with(node, copy)
            down[copy] = key | up.get(node, frozenset())
            up[copy] = up.get(node, frozenset())
            copies += 1
        down[node] = keep | up.get(node, frozenset())
    if copies:
        graph.lint()
        gm.recompile()
    return copies
