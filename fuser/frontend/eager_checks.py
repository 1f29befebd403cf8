"""Eager's checks that a traced graph lost, made again before fuser compiles it.

Dynamo and functionalization trace some ops as others: `x.mul_(2.5)` as `mul` then `copy_`
(torch's meta `mul_` does not check that an int x can hold a float result), and Dynamo
rewrites `addcmul_`/`addcdiv_` with a value, `add_` with a tensor alpha and
`torch.addcdiv(..., value=)` into `fma`, `mul` and `div` calls. The graph then computes what
eager refuses, or converts a value as eager does not. `writes_uncastable_result` finds an
in-place op eager would refuse (the graph then runs as traced, and the op raises eager's own
error); `check_dynamo_rewrites` runs eager's op on empty tensors of the traced types where an
operand is not floating, and takes an integer addcmul_'s value as eager takes it.
"""
from __future__ import annotations

import operator
from typing import Any, Optional

import torch


# in-place ops whose result is the type all their operands promote to: eager writes it only into
# a tensor of a type it casts to ("result type Float can't be cast to the desired output type
# Int"); torch's meta functions of mul_ and addcmul_ do not check, and the out-of-place op and
# copy_ that functionalization makes of them wrote `x.mul_(2.5)` truncated into an int x
_PROMOTING_IN_PLACE = frozenset({"add", "sub", "subtract", "mul", "multiply", "addcmul", "remainder", "fmod",
                                 "floor_divide", "pow", "bitwise_and", "bitwise_or", "bitwise_xor"})
# `x *= y` and the like, as Dynamo records them (a call of operator.imul, or of x.__imul__)
_IN_PLACE_OPERATORS = {operator.iadd: "add", operator.isub: "sub", operator.imul: "mul", operator.imod: "remainder",
                       operator.ifloordiv: "floor_divide", operator.ipow: "pow", operator.iand: "bitwise_and",
                       operator.ior: "bitwise_or", operator.ixor: "bitwise_xor"}
_IN_PLACE_DUNDERS = {f"__{fn.__name__}__": name for fn, name in _IN_PLACE_OPERATORS.items()}


def in_place_name(node: torch.fx.Node) -> Optional[str]:
    """The name, without its `_`, of the in-place op `node` calls (`x.mul_(y)`, `torch.relu_(x)`,
    `aten.mul_.Tensor(x, y)`, `x *= y`); None where it calls no in-place op."""
    target = node.target
    if node.op == "call_method":
        return _IN_PLACE_DUNDERS.get(target) or (target[:-1] if target.endswith("_") and not target.endswith("__")
                                                 else None)
    if target in _IN_PLACE_OPERATORS:
        return _IN_PLACE_OPERATORS[target]
    packet = getattr(target, "overloadpacket", None)  # (an OpOverload: `mul_.Tensor` by its packet, `mul_`)
    name = getattr(packet if packet is not None else target, "__name__", "")
    return name[:-1] if name.endswith("_") and not name.endswith("__") else None


def may_write_inputs(gm: torch.fx.GraphModule) -> bool:
    """Whether Dynamo's graph may write a tensor in place (an in-place op, `x[i] = v`, an `out=`
    argument): for a graph whose writes AOTAutograd's metadata does not tell."""
    return any(node.op in ("call_function", "call_method") and (
        node.target is operator.setitem or "out" in node.kwargs or in_place_name(node) is not None)
        for node in gm.graph.nodes)


def _example_operand(a: Any) -> Any:
    """An operand as it enters type promotion: a node's traced tensor, a traced number as a
    number of its kind (a SymFloat as 1.0), a constant as it is; None for anything else."""
    if isinstance(a, torch.fx.Node):
        a = a.meta.get("example_value")
    for symbolic, number in ((torch.SymBool, True), (torch.SymInt, 1), (torch.SymFloat, 1.0)):
        if isinstance(a, symbolic):
            return number
    return a if isinstance(a, (torch.Tensor, bool, int, float, complex)) else None


def writes_uncastable_result(node: torch.fx.Node) -> bool:
    """Whether `node` writes in place a result its tensor's type cannot hold (`x.mul_(2.5)` or
    `x *= 2.0` for an int x, `b.mul_(2)` for a bool b), which eager refuses."""
    if node.op not in ("call_function", "call_method") or in_place_name(node) not in _PROMOTING_IN_PLACE:
        return False
    operands = [_example_operand(a) for a in node.args]  # (alpha and value are keywords: no operands)
    if "other" in node.kwargs:
        operands.append(_example_operand(node.kwargs["other"]))
    if not operands or not isinstance(operands[0], torch.Tensor) or any(v is None for v in operands):
        return False
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    _, result = elementwise_dtypes(*operands, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    return not torch.can_cast(result, operands[0].dtype)


def check_dynamo_rewrites(gm: torch.fx.GraphModule) -> None:
    """Dynamo traces some ops as others: `x.addcmul_(t1, t2, value=v)` as
    `x.copy_(fma(mul(t1, t2), v, x))`, `x.addcdiv_(t1, t2, value=v)` alike with a div,
    `x.add_(y, alpha=a)` with a tensor `a` as `x.copy_(fma(y, a, x))`, and
    `torch.addcdiv(x, t1, t2, value=v)` as `add(x, mul(div(t1, t2), v))`. That loses eager's
    checks of those ops (a result type `x` cannot hold, an integer quotient, alpha's kind),
    and the fma computes with `v` as given where eager takes it in the operands' type (1.5 as
    1 for integer tensors). Where an operand is an integer, bool or complex tensor (of floating
    ones alone eager refuses none), eager's own op runs on empty tensors of the traced types,
    so that an op eager refuses raises eager's error here (fuser.jit then runs the function
    eagerly, which raises it for the user), and an integer addcmul_'s float value becomes the
    integer eager takes. Once per trace; an AdamW step's addcmul_ and addcdiv_ run no probe."""
    changed = False
    for node in list(gm.graph.nodes):
        call = _rewritten_call(node)
        if call is None:
            continue
        eager_op, operands, value = call
        values = [_example_operand(a) for a in operands]
        tensors = [v for v in values if isinstance(v, torch.Tensor)]
        if any(v is None for v in values):
            continue
        if all(t.is_floating_point() for t in tensors):
            changed |= _addcdiv_again(gm, node)
            continue
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():
            eager_op(*[_empty_of_type(v) for v in values])  # (eager's error, if it refuses them)
        if isinstance(value, float) and not any(t.is_floating_point() or t.is_complex() for t in tensors):
            node.args = (node.args[0], int(value), *node.args[2:])  # (toward zero, as eager converts it)
            changed = True
    if changed:
        gm.recompile()


def _addcdiv_again(gm: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Puts Dynamo's `add(x, mul(div(t1, t2), v))` of a floating `torch.addcdiv(x, t1, t2,
    value=v)` back as that call: eager's kernel rounds `x + v * (t1 / t2)` once, where the three
    traced ops of a half or bf16 type round thrice (a fifth of the elements a unit off). The
    call's lowering (torch's decomposition) computes in fp32 and rounds once. False where
    `node` is not that add, or `v` is not a number."""
    if node.target is not torch.add or _without_source(node):
        return False
    x, scaled = node.args
    quotient, value = scaled.args
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    with gm.graph.inserting_before(node):
        call = gm.graph.call_function(torch.addcdiv, (x, *quotient.args), {"value": value})
    call.meta.update(node.meta)
    node.replace_all_uses_with(call)
    for dead in (node, scaled, quotient):
        gm.graph.erase_node(dead)
    return True


def _without_source(node: torch.fx.Node) -> bool:
    """Whether `node` comes from code with no source file (exec, `python -c`): its position
    has no columns, so it tells Dynamo's rewrite from a user's own `add(x, mul(div(a, b), v))`
    on one line no better than by the line, and the rounding the user wrote is kept."""
    frames = [line.strip() for line in (node.meta.get("stack_trace") or "").splitlines()
              if line.strip().startswith('File "')]
    return not frames or frames[-1].startswith('File "<')


def _rewritten_call(node: torch.fx.Node) -> Optional[tuple]:
    """(eager's op, its operands, the fma's number factor or None) where `node` is the fma or
    the add of one of Dynamo's rewrites (`check_dynamo_rewrites`); None for any other node."""
    if node.op != "call_function":
        return None
    if _is_fma(node.target):
        made, factor, x = node.args
        if isinstance(factor, torch.fx.Node):  # add_'s tensor alpha, which eager reads as a number
            alpha = _example_operand(factor)
            if not isinstance(alpha, torch.Tensor):
                return None
            number = torch.ones((), dtype=alpha.dtype).item()
            return (lambda x, y: x.add_(y, alpha=number)), [x, made], None
        for fn, method in ((torch.mul, "addcmul_"), (torch.div, "addcdiv_")):
            if _made_beside(made, node, fn):
                return _addc(getattr(torch.Tensor, method), factor), [x, *made.args], factor
        return None
    if node.target is torch.add and len(node.args) == 2 and not node.kwargs:
        x, scaled = node.args
        if _made_beside(scaled, node, torch.mul) and _made_beside(scaled.args[0], node, torch.div):
            value = _example_operand(scaled.args[1])
            return _addc(torch.addcdiv, value), [x, *scaled.args[0].args], None
    return None


def _is_fma(target: Any) -> bool:
    # (by name: Inductor's prims exist only once it is imported)
    return isinstance(target, torch._ops.OpOverload) and target.name() == "prims::fma"


def _addc(op: Any, value: Any) -> Any:
    """`op(x, t1, t2, value=value)` of addcmul's family, as a function of the three tensors."""
    return lambda x, t1, t2: op(x, t1, t2, value=value)


def _made_beside(made: Any, node: torch.fx.Node, fn: Any) -> bool:
    """Whether `made` is a call of `fn` on two operands that Dynamo made for the same call of the
    user's code as `node` (the same source position, column span included), read by nothing else."""
    trace = node.meta.get("stack_trace")
    return (isinstance(made, torch.fx.Node) and made.target is fn and len(made.args) == 2 and not made.kwargs
            and len(made.users) == 1 and trace is not None and made.meta.get("stack_trace") == trace)


def _empty_of_type(v: Any) -> Any:
    """A tensor with `v`'s type, device and number of dims and no elements (one, for 0 dims),
    standing for it in a call of eager's op; a number as it is."""
    if not isinstance(v, torch.Tensor):
        return v
    return torch.ones((0,) * v.dim(), dtype=v.dtype, device=v.device)
