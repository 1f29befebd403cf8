"""torch's `_foreach_*` ops (a foreach optimizer's step, `clip_grad_norm_`) as one op per tensor.

ATen's foreach ops apply one op to each tensor of a list (or of several lists in step). torch has
no decomposition of them, so a jitted `opt.step()` of `Adam(foreach=True)` (torch's default on
CUDA) ran as ATen calls alone, no kernel. Decomposed per tensor, a step's ops on one parameter
(its update, its moments) meet in one fusion, each tensor read and written once.

Each functional overload becomes, for tensor k, the pointwise op of its name on the k-th entry of
each list argument (`Tensor[]`, `Scalar[]`) and on the other arguments as they are (`add.List`'s
`alpha`, `add.Tensor`'s one tensor). Not decomposed: the `out=` overloads (never in a
functionalized graph), the in-place ones (functionalized into these), and `addcdiv`'s and
`addcmul`'s `.Tensor` overloads, whose per-tensor values sit in one tensor.
"""
from __future__ import annotations

from typing import Callable

import torch

aten = torch.ops.aten

_PREFIX = "_foreach_"


def _norm(x: torch.Tensor, ord=2, dtype=None) -> torch.Tensor:
    return aten.linalg_vector_norm(x, ord, dtype=dtype)


def _maximum(x: torch.Tensor, other) -> torch.Tensor:
    return aten.maximum(x, other) if isinstance(other, torch.Tensor) else aten.clamp_min(x, other)


def _minimum(x: torch.Tensor, other) -> torch.Tensor:
    return aten.minimum(x, other) if isinstance(other, torch.Tensor) else aten.clamp_max(x, other)


# ops whose per-tensor form has another name or other parameters (maximum takes no number)
_PER_TENSOR: dict[str, Callable] = {"norm": _norm, "maximum": _maximum, "minimum": _minimum}
# a foreach parameter's name in the per-tensor op, where it differs and is passed by keyword
_RENAMED = {"addcdiv": {"scalars": "value"}, "addcmul": {"scalars": "value"}}


def foreach_decompositions() -> dict:
    """{foreach overload: its per-tensor decomposition} for every functional `_foreach_*`
    overload whose per-tensor op exists."""
    table = {}
    # (every registered name: dir(aten) lists only the ops looked up so far)
    names = {n.split("::", 1)[1].split(".", 1)[0] for n in torch._C._dispatch_get_all_op_names()
             if n.startswith("aten::" + _PREFIX)}
    for name in sorted(names):
        if name.endswith("_"):
            continue
        base = name[len(_PREFIX):]
        target = _PER_TENSOR.get(base) or getattr(aten, base, None)
        if target is None:
            continue
        packet = getattr(aten, name)
        for overload in packet.overloads():
            op = getattr(packet, overload)
            schema = op._schema
            if overload.endswith("out") or [str(r.type) for r in schema.returns] != ["List[Tensor]"]:
                continue
            kinds = [str(a.type) for a in schema.arguments]
            if base in ("addcdiv", "addcmul") and "Tensor" in kinds:
                continue
            table[op] = _per_tensor(target, schema, _RENAMED.get(base, {}))
    return table


def _keyword_only(target: Callable) -> set:
    """The keyword-only parameter names of `target`'s overloads (addcmul's `value`, which the
    foreach op takes by position)."""
    if not isinstance(target, torch._ops.OpOverloadPacket):
        return set()
    return {a.name for ov in target.overloads() for a in getattr(target, ov)._schema.arguments
            if a.kwarg_only and a.name != "out"}


def _per_tensor(target: Callable, schema, renamed: dict) -> Callable:
    by_keyword = _keyword_only(target)
    positional = [a for a in schema.arguments
                  if not a.kwarg_only and renamed.get(a.name, a.name) not in by_keyword]
    keywords = [a for a in schema.arguments if a not in positional]
    per_tensor = {a.name for a in schema.arguments if str(a.type) in ("List[Tensor]", "List[number]")}

    def decompose(*args, **kwargs):
        named = dict(zip((a.name for a in schema.arguments), args))
        named.update(kwargs)
        count = next(len(named[a.name]) for a in schema.arguments if a.name in per_tensor and a.name in named)

        def pick(name: str, k: int):
            return named[name][k] if name in per_tensor else named[name]

        out = []
        for k in range(count):
            args_k = [pick(a.name, k) for a in positional if a.name in named]
            kwargs_k = {renamed.get(a.name, a.name): pick(a.name, k) for a in keywords if a.name in named}
            out.append(target(*args_k, **kwargs_k))
        return out
    return decompose
