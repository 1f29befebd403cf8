"""Write-backs into graph inputs made by the fusion that computes the value.

A graph that updates its inputs in place (an optimizer step: parameters, moments, step
counters) ends, once functionalized, with `copy_(input, new)` for each. As an ATen call after
the fusion, each reads the new value and writes it again: an Adam step's seven passes over
its tensors became thirteen. Folded into the fusion instead, the value is an output aliased
to the input (`fd.add_output(new, alias_input=input)`, nvFuser's in-place update), and the
runtime has the kernel write it into the input's memory where that is safe
(`runtime/in_place.py`), else copies it there after the fusion, as the ATen call did.

A write-back is folded where the fusion computes the value, the value has the input's dtype
and shape, and nothing outside the fusion reads the input after the fusion's phase (the
partition orders every eager write-back after the input's last reader) but the graph's
return, which hands on the input as the write left it (`return x.add_(y)` returns the
`copy_`, which is the input; a training forward, an updated buffer's input itself). The value
may reach the `copy_` through views that change nothing, run by ATen after the fusion
(InstanceNorm's running statistics: `copy_(buffer, alias(copy(alias(buffer), mean)))`); an
input the fusion does not read (spectral norm's `v`, only written) becomes one, to be written.
"""
from __future__ import annotations

import operator

import torch
from torch.fx import Node

from ..errors import FuserError
from .lowering import define_input_like
from .meta import meta_val, size_expr

aten = torch.ops.aten

_UNCHANGING_VIEWS = {aten.alias.default, aten.view.default, aten._unsafe_view.default}


def fold_write_backs(regions: dict, eager: dict, phase: dict, output: Node) -> None:
    """Moves each eager `copy_` into a graph input that a region can write (see the module
    docstring) into that region: removed from `eager`, added to the region's `write_backs`."""
    region_of = {n: (key, r) for key, r in regions.items() for n in r.nodes}
    for node in [n for n in eager if n.target is aten.copy_.default]:
        dst, src = node.args[0], node.args[1]
        if not isinstance(dst, Node) or not isinstance(src, Node) or dst.op != "placeholder" \
                or any(u is not output for u in node.users) or node.kwargs.get("non_blocking"):
            continue  # (a `copy_` returned is the input, written: `return x.add_(y)`)
        views = _unchanging_views(src, eager)
        value = views[-1].args[0] if views else src
        if value not in region_of:
            continue
        key, region = region_of[value]
        index = region.outputs.get(value)
        if type(index) is not int or any(dst is w for _, w in region.write_backs) \
                or not _same_layout_kind(meta_val(dst), meta_val(value)):
            continue
        inside = set(region.nodes)
        if any(u is not node and u is not output and u not in inside and phase.get(u, key[0]) >= key[0]
               for u in readers_of_memory(dst)):
            continue  # (read outside the fusion after it, itself or through a view: the write must
            # wait; the graph's return reads it after every step, as it is when the call ends)
        fusion = region.fd.fusion
        alias = _fusion_input(region, dst)  # (not undone by all_or_nothing: an input stays listed)
        written = fusion.outputs()[index]
        try:
            with fusion.all_or_nothing():
                if _read_besides_write_back(value, node, views, inside):
                    written = region.fd.ops.set(written)
                region.fd.add_output(written, alias_input=alias)
        except FuserError:
            continue
        region.write_backs.append((len(fusion.outputs()) - 1, dst))
        if node.users:
            region.outputs[node] = dst  # (the step hands on the input itself, which it wrote)
        del eager[node]
        for view in views:  # (read by the write-back alone: nothing left to take them for)
            if all(u is node or u in views and u not in eager for u in view.users):
                del eager[view]


def _read_besides_write_back(value: Node, write_back: Node, views: list[Node], inside: set) -> bool:
    """Whether `value` is read outside its fusion by more than the write-back, itself or
    through `views`: a training forward saves the value it writes into a buffer for the
    backward (`self.n += 1; y * self.n.clone()`). Such a reader needs a tensor of its own: an
    output that is the aliased one itself is handed back as the input (`fd.add_output`'s rule,
    at a definition's first call), whose version a later write moves (a second forward before
    the backward: autograd's in-place error, where eager saved a clone and runs)."""
    chain = set(views)
    return any(u is not write_back and u not in inside and u not in chain
               for v in (value, *views) for u in v.users)


def _unchanging_views(src: Node, eager: dict) -> list[Node]:
    """The eager views from `src` back to the value they show, outermost first, where each
    leaves its input as it is (`alias`, a `view` to the same shape): the partition sinks a
    view at the end of a fusion out of it, so `copy_(dst, alias(value))` reads ATen's view of
    the fusion's output."""
    chain = []
    while src in eager and src.target in _UNCHANGING_VIEWS and isinstance(src.args[0], Node) \
            and _same_shape(meta_val(src), meta_val(src.args[0])):
        chain.append(src)
        src = src.args[0]
    return chain


def _fusion_input(region, dst: Node):
    """The fusion input that holds graph input `dst`; one defined for it where the fusion does
    not read it (its value only written). It stays an input should the write-back be refused,
    as region.inputs lists it: unread, it changes nothing."""
    inputs = region.fd.fusion.inputs()
    if dst in region.inputs:
        return inputs[region.inputs.index(dst)]
    tv, _ = define_input_like(region.fd, meta_val(dst))
    region.inputs.append(dst)
    return tv


def readers_of_memory(node: Node) -> list[Node]:
    """Every node that reads `node`'s memory: its users, and the users of every view of it
    (ATen ops whose result aliases their input, `diagonal`, `t`, `as_strided`; the pieces of a
    split), views of views included."""
    found: dict[Node, None] = {}
    pending = [node]
    while pending:
        for user in pending.pop().users:
            if user not in found:
                found[user] = None
                if _is_view(user):
                    pending.append(user)
    return list(found)


def _is_view(node: Node) -> bool:
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:  # (a piece of a split: the split's schema says it aliases)
        return True
    schema = getattr(node.target, "_schema", None)
    return schema is not None and any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)


def _same_layout_kind(dst, src) -> bool:
    return isinstance(dst, torch.Tensor) and isinstance(src, torch.Tensor) and dst.dtype == src.dtype \
        and dst.device == src.device and _same_shape(dst, src)


def _same_shape(a, b) -> bool:
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() == b.dim() \
        and all(size_expr(x) == size_expr(y) for x, y in zip(a.shape, b.shape))
