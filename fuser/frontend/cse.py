"""Common-subexpression elimination on an ATen graph, for the joint graph before partitioning.

AOTAutograd runs its own CSE on the joint graph before the min-cut partitioner, but that pass
imports Inductor's pattern matcher, and with it Inductor's lowerings and kernel templates: 0.3-0.5 s
of the first training call in a new process on the development CPU, for a pass that takes
milliseconds. fuser turns it off (`torch._functorch.config.cse`) and runs this one instead, to
the same rules but one (a float argument is keyed by its repr: `x * 0.0` and `x * -0.0` differ):

- a node is replaced by an earlier node with the same target and the same arguments (after
  earlier replacements), where nothing between them could have changed what it reads: a
  mutating op, or a call that is neither an ATen op nor pure Python arithmetic, starts a new
  region, and nodes of different regions are never merged;
- random ops (their results differ call to call; they start no region), `empty` (its contents
  are undefined), values that alias a graph output (the runtime wrappers rebuild those from
  their recorded aliasing) and reads of data-dependent scalars (their symbols would go stale
  downstream) stay as they are.
"""
from __future__ import annotations

import operator
from typing import Any, Optional

import torch
from torch.fx import Graph, Node

from .meta import meta_val

aten = torch.ops.aten

_NOT_MERGED = frozenset({aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default,
                         aten._local_scalar_dense.default, aten.item.default})
_PURE_PYTHON = frozenset({operator.getitem, operator.add, operator.sub, operator.mul, operator.floordiv,
                          operator.truediv, operator.mod, operator.neg, operator.pow, operator.eq,
                          operator.ne, operator.lt, operator.le, operator.gt, operator.ge,
                          torch.sym_float, torch.sym_int, torch.sym_max, torch.sym_min, torch.sym_not})


class _Unhashable(Exception):
    pass


def _key_of(value: Any) -> Any:
    """A hashable key for an argument; equal keys mean equal arguments (a value's type is part
    of its key: 1, 1.0 and True are one dict key otherwise). A replaced node's users already
    read its replacement (`replace_all_uses_with`)."""
    if isinstance(value, Node):
        return ("node", value)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_key_of(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _key_of(v)) for k, v in sorted(value.items())))
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ("sym", id(value.node))
    if isinstance(value, (float, complex)):
        return (type(value).__name__, repr(value))  # 0.0 == -0.0, yet x * -0.0 is not x * 0.0
    if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format, str, bool, int,
                          type(None))):
        return (type(value).__name__, value)
    raise _Unhashable


def _may_write(node: Node) -> bool:
    """Whether `node` may change what later nodes read: a mutating op, or a call that is not a
    known ATen op or pure Python arithmetic."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.is_mutable
    return target not in _PURE_PYTHON


def _random(node: Node) -> bool:
    return isinstance(node.target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in node.target.tags


def _output_storages(graph: Graph) -> set:
    from torch.multiprocessing.reductions import StorageWeakRef

    def storage(node: Any) -> Optional[Any]:
        value = meta_val(node) if isinstance(node, Node) else None
        if not isinstance(value, torch.Tensor):
            return None
        try:
            return StorageWeakRef(value.untyped_storage())
        except (NotImplementedError, RuntimeError):
            return None

    out = next(n for n in reversed(graph.nodes) if n.op == "output")
    found = {storage(n) for n in out.all_input_nodes} - {None}
    return {n for n in graph.nodes if n.op == "call_function" and storage(n) in found}


def eliminate_common_subexpressions(graph: Graph) -> int:
    """Merge repeated computations of `graph` in place (see the module docstring); returns how
    many nodes were removed."""
    aliases_output = _output_storages(graph)
    region = 0
    seen: dict[tuple, Node] = {}
    replaced: list[Node] = []
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if _may_write(node):
            region += 1  # nothing merges across it
            continue
        if _random(node) or node.target in _NOT_MERGED or node in aliases_output:
            continue
        try:
            key = (region, node.target, _key_of(node.args), _key_of(dict(node.kwargs)))
        except _Unhashable:
            continue
        first = seen.setdefault(key, node)
        if first is not node:
            node.replace_all_uses_with(first)
            replaced.append(node)
    for node in replaced:
        graph.erase_node(node)
    return len(replaced)
