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

`torch._foreach_lerp_` (Adam's and AdamW's first moment) never reaches these: Dynamo traces it
through a polyfill (`polyfills.foreach_lerp_inplace`), `d = _foreach_sub(ys, xs)` then a
`_foreach_addcmul_` of x with `full_like(d, w)` (|w| < 0.5), of y copied into x with
`-(1 - tensor(w, dtype=x.dtype))` (|w| >= 0.5), or of `where(|w| >= 0.5, y, x)` with
`where(|w| >= 0.5, -(1 - w), w)` (w a 0-dim tensor). In a half or bf16 type the difference and the
weight are rounded to it before the fma, where eager's lerp computes in fp32 from w as given and
rounds once: a bf16 Adam's exp_avg came out a unit off in a third of its elements.
`whole_foreach_lerps` rewrites each such expansion in Dynamo's graph back as the lerp, before
AOTAutograd (whose graph has a weight >= 0.5 only as a constant already rounded to the type).
"""
from __future__ import annotations

import operator
from typing import Any, Callable, Optional

import torch
from torch._prims_common import get_computation_dtype
from torch.fx import Graph, GraphModule, Node

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


def whole_foreach_lerps(gm: GraphModule) -> int:
    """Rewrites each `_foreach_lerp_(xs, ys, w)` that Dynamo's polyfill expanded in its graph `gm`
    (see the module's note) as the lerp itself; the number rewritten. `_foreach_lerp_` with a
    number w (decomposed above into ATen's lerp per tensor, which rounds as eager); with a 0-dim
    tensor w, which eager reads as a number (`.item()`), `x.copy_(lerp(x, y, w))` computed in
    x's computation type (fp32 for half and bf16), where ATen's lerp of a bf16 x would round w
    to bf16 first."""
    count = 0
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is torch._foreach_addcmul_:
            expansion = _expanded_lerp(node)
            if expansion is not None:
                _replace_expansion(gm.graph, *expansion)
                count += 1
    if count:
        gm.recompile()
    return count


def _expanded_lerp(addcmul: Node) -> Optional[tuple[list, list, Any, list]]:
    """(xs, ys, w, the polyfill's nodes in graph order) where `addcmul` is the `_foreach_addcmul_`
    of the polyfill's expansion of `_foreach_lerp_(xs, ys, w)`: its nodes, from the sub to the
    last write, are consecutive, read by none but each other and made for one source position
    (a user's own sub and addcmul_ keep the rounding written); else None."""
    if len(addcmul.args) != 3 or addcmul.kwargs or addcmul.users:
        return None
    bases, factors, diffs = (list(a) if isinstance(a, (list, tuple)) else None for a in addcmul.args)
    sub = _foreach_difference(diffs)
    if sub is None or len(bases or ()) != len(diffs) or len(factors or ()) != len(diffs):
        return None
    ys, xs = (list(a) for a in sub.args)
    if len(xs) != len(diffs) or len(ys) != len(diffs):
        return None
    form = (_low_weight(xs, bases, factors, diffs) or _high_weight(xs, ys, bases, factors, addcmul)
            or _tensor_weight(xs, ys, bases, factors, addcmul))
    if form is None:
        return None
    weight, made = form
    nodes = _consecutive(sub, {sub, addcmul, *diffs, *made})
    return None if nodes is None else (xs, ys, weight, nodes)


def _foreach_difference(diffs: Optional[list]) -> Optional[Node]:
    """The `_foreach_sub(ys, xs)` whose k-th result is `diffs[k]` for every k; else None."""
    if not diffs or not all(_calls(d, operator.getitem) and d.args[1] == k for k, d in enumerate(diffs)):
        return None
    sub = diffs[0].args[0]
    if not (_calls(sub, torch._foreach_sub) and len(sub.args) == 2 and not sub.kwargs
            and all(isinstance(a, (list, tuple)) for a in sub.args)):
        return None
    return sub if all(d.args[0] is sub for d in diffs) else None


def _low_weight(xs: list, bases: list, factors: list, diffs: list) -> Optional[tuple[Any, list]]:
    """(w, the weights' nodes) for `_foreach_addcmul_(xs, [full_like(d, w)...], ds)`."""
    weights = [f.args[1] if _calls(f, torch.full_like) and len(f.args) == 2 and not f.kwargs and f.args[0] is d
               else None for f, d in zip(factors, diffs)]
    w = weights[0]
    if not _is_number(w) or any(v != w for v in weights) or not _same(bases, xs):
        return None
    return w, factors


def _high_weight(xs: list, ys: list, bases: list, factors: list, addcmul: Node) -> Optional[tuple[Any, list]]:
    """(w, its nodes and the copies) for `x.copy_(y)` of each x, then `_foreach_addcmul_(xs,
    [-(1.0 - tensor(w, dtype=...))...], ds)`."""
    neg = factors[0]
    if not (_same(bases, xs) and all(f is neg for f in factors) and _calls(neg, operator.neg)):
        return None
    one_minus = neg.args[0]
    if not (_calls(one_minus, operator.sub) and one_minus.args[0] == 1.0 and _calls(one_minus.args[1], torch.tensor)):
        return None
    made = one_minus.args[1]
    w = made.args[0] if len(made.args) == 1 else None
    copies = _nodes_between(neg, addcmul)
    if not _is_number(w) or not _copies_of(copies, xs, ys):
        return None
    return w, [made, one_minus, neg, *copies]


def _tensor_weight(xs: list, ys: list, bases: list, factors: list, addcmul: Node) -> Optional[tuple[Any, list]]:
    """(w's node, the nodes made from it and the copies) for `_foreach_addcmul_([where(high, y, x)...],
    [where(high, -(1.0 - w), w)...], ds)` with `high = w.abs() >= 0.5`, then `x.copy_` of each
    result, of floating (not complex) tensors and a 0-dim floating w."""
    chosen = factors[0]
    if not (all(f is chosen for f in factors) and _calls(chosen, torch.where) and len(chosen.args) == 3):
        return None
    high, neg, w = chosen.args
    if not (_calls(high, operator.ge) and high.args[1] == 0.5 and _calls(high.args[0], "abs")
            and high.args[0].args[0] is w and _calls(neg, operator.neg) and _calls(neg.args[0], operator.sub)
            and neg.args[0].args == (1.0, w)):
        return None
    if not all(_calls(b, torch.where) and b.args == (high, y, x) for b, x, y in zip(bases, xs, ys)):
        return None
    copies = _nodes_between(addcmul, None, len(xs))
    values = [_example(n) for n in (w, *xs)]
    if not (_copies_of(copies, xs, bases) and all(v is not None and v.is_floating_point() for v in values)
            and values[0].dim() == 0):
        return None
    return w, [high.args[0], high, neg.args[0], neg, chosen, *bases, *copies]


def _replace_expansion(graph: Graph, xs: list, ys: list, weight: Any, nodes: list) -> None:
    """The lerp where the expansion's nodes were (nothing else runs between them), and those
    nodes erased."""
    with graph.inserting_before(nodes[0]):
        if isinstance(weight, Node):
            lerped = []
            for x, y in zip(xs, ys):
                opmath = get_computation_dtype(_example(x).dtype)
                operands = tuple(graph.call_method("to", (v, opmath)) for v in (x, y, weight))
                lerped.append(graph.call_function(torch.lerp, operands))
            for x, value in zip(xs, lerped):  # (copy_ rounds to x's type once)
                graph.call_method("copy_", (x, value))
        else:
            graph.call_function(torch._foreach_lerp_, (xs, ys, weight))
    for dead in reversed(nodes):
        graph.erase_node(dead)


def _consecutive(first: Node, made: set) -> Optional[list]:
    """`made` in graph order where its nodes follow one another from `first`, read by none but
    each other and share `first`'s source position; else None."""
    trace = first.meta.get("stack_trace")
    nodes, node = [], first
    while node in made and len(nodes) < len(made):
        nodes.append(node)
        node = node.next
    if len(nodes) != len(made) or trace is None:
        return None
    if any(n.meta.get("stack_trace") != trace or not set(n.users) <= made for n in nodes):
        return None
    return nodes


def _nodes_between(after: Node, before: Optional[Node], count: Optional[int] = None) -> list:
    """The nodes after `after`, up to `before` (excluded) or `count` of them."""
    nodes, node = [], after.next
    while node is not before and node.op != "output" and (count is None or len(nodes) < count):
        nodes.append(node)
        node = node.next
    return nodes


def _copies_of(copies: list, dsts: list, srcs: list) -> bool:
    """Whether `copies` are `dst.copy_(src)` of each pair in order, their results unread."""
    return len(copies) == len(dsts) and all(
        _calls(c, "copy_") and c.args == (d, s) and not c.kwargs and not c.users
        for c, d, s in zip(copies, dsts, srcs))


def _calls(node: Any, fn: Any) -> bool:
    """Whether `node` calls `fn` (a function, or a method by its name)."""
    if not isinstance(node, Node):
        return False
    return node.target is fn if node.op == "call_function" else (node.op == "call_method" and node.target == fn)


def _same(nodes: list, others: list) -> bool:
    return len(nodes) == len(others) and all(a is b for a, b in zip(nodes, others))


def _is_number(w: Any) -> bool:
    return isinstance(w, (int, float)) and not isinstance(w, bool)


def _example(node: Any) -> Optional[torch.Tensor]:
    value = node.meta.get("example_value") if isinstance(node, Node) else None
    return value if isinstance(value, torch.Tensor) else None
