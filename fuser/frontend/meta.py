"""Reading the traced metadata of FX nodes: the fake tensor or SymInt each node produced."""
from __future__ import annotations

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
    """A traced size as a sympy expression over Dynamo's symbols (`s0`, `2*s1`, `8`)."""
    if isinstance(s, (torch.SymInt, torch.SymFloat)):
        return sympy.sympify(s.node.expr)
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
