"""Scatters into a graph input written back, turned back into in-place writes.

A write of a few rows into a preallocated tensor (a KV cache: `kc.index_copy_(2, pos, k)`,
`kc[:, :, pos] = k`, `kc[:, :, s:s+1] = k`, `kc[:, :, s] = k`) is, once AOTAutograd has
functionalized it, an out-of-place scatter making a new tensor of the input's size
(`index_copy`, `index_put`, `slice_scatter`, `select_scatter`, nested through the views the
indexing took), then the epilogue `copy_(input, scatter)` writing it all back: two passes over
the whole cache for one row, where eager writes the row alone (a decode step's cost grew with
the cache's length).

Where nothing can observe the difference, the scatters become the in-place writes they came
from, at the first scatter's place, and the epilogue goes: `index_copy_` / `index_put_` on the
input itself, or a copy of the source into the view (slices and selects) the scatter wrote
(`write_into_view`).
Readers of the written value read the last write's result (the input, written), so the
partition orders them after it. It is done only where

- the graph is an inference graph (no input needs a gradient: AOTAutograd's forward of a
  training graph saves values for the backward, which must not become the input);
- the scatters form one chain from the input to its epilogue, each reading the state the one
  before it left (the views a nested scatter reads are those it writes back into);
- nothing else reads the input, itself or through a view, nor any state but the last: such a
  read wants a value the in-place write would overwrite, and the partition runs a fusion in a
  later phase than graph order says (a pointwise value joins the fusion that reads it), so
  graph order alone does not keep a read before the write. Those graphs stay as they are.
  But for a read of the region the first write copies into, whose every use goes into the
  value copied there (an in-place op on a slice: `x[:4].mul_(2)`, `x[a:b] += y`, read, updated
  and scattered back): that value is a new tensor, made whole before the copy, which reads it.
  A read of another region (`x[1:5] = x[0:4] * 2`) still keeps the graph as it is.
  (A read of sizes or strides alone, `sym_size`, reads no value: a broadcast source's expand
  is sized by the view it is written into.)

`select_scatter` reaches this pass whole because backend.py keeps it out of the decompositions
(the core one made it a `where` over the whole cache, no scatter any more); where it stays, its
lowering is that `where` (rules/shape.py).

ATen's in-place ops and views check the positions as eager's do (an IndexError for a row past
the end).
(Inductor's reinplace pass, `torch/_inductor/fx_passes/reinplace.py`, does this for its own
graphs, with the same conditions on graph inputs.)
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch.fx import GraphModule, Node

from .meta import meta_val

aten = torch.ops.aten

# the in-place op of each scatter that writes through indices, by the name write_into_view takes
_INDEX_WRITES = {aten.index_copy.default: "index_copy_", aten.index_put.default: "index_put_"}
_IN_PLACE = {"index_copy_": aten.index_copy_.default, "index_put_": aten.index_put_.default}
# ops reading a tensor's metadata alone, not its elements: no read of a value a write overwrites
# (`c[:, ::2] = k` with k broadcast: k's expand is sized by `sym_size` of the cache's view)
_METADATA_READS = {aten.sym_size.int, aten.sym_stride.int, aten.sym_numel.default,
                   aten.sym_storage_offset.default}


@dataclass(eq=False)
class _Write:
    """One in-place write: `op` ("copy_", "index_copy_", "index_put_") with `args` into the view
    `views` of the input (write_into_view's); made where the scatter `at` stood."""

    views: tuple
    op: str
    args: tuple
    at: Node


@dataclass(frozen=True)
class _State:
    """A node's value as the view `views` of the input after `writes`, in order."""

    views: tuple
    writes: tuple


def reinplace_scatters(gm: GraphModule) -> bool:
    """Rewrites each scatter chain written back into an input (see the module docstring) as
    in-place writes; whether any was."""
    out = next(n for n in gm.graph.nodes if n.op == "output")
    changed = False
    for node in list(gm.graph.nodes):
        if node.target is aten.copy_.default and _is_write_back(node, out):
            changed = _reinplace(gm, node) or changed
    if changed:
        gm.graph.lint()
        gm.recompile()
    return changed


def write_into_view(base: torch.Tensor, views: tuple, op: str, *args: Any) -> torch.Tensor:
    """Writes into the view `views` of `base` in place (`op`: "copy_" of a value, "index_copy_"
    or "index_put_" with its arguments); returns `base`. `views`: slices (dim, start, end, step)
    and selects (dim, index), outermost first."""
    target = base
    for view in views:
        target = aten.select.int(target, *view) if len(view) == 2 else aten.slice.Tensor(target, *view)
    if op == "copy_":
        target.copy_(*args)
    else:
        _IN_PLACE[op](target, *args)
    return base


def _is_write_back(node: Node, out: Node) -> bool:
    dst, src = node.args[0], node.args[1]
    return isinstance(dst, Node) and dst.op == "placeholder" and isinstance(src, Node) \
        and isinstance(meta_val(dst), torch.Tensor) and not node.kwargs.get("non_blocking") \
        and all(u is out for u in node.users)


def _reinplace(gm: GraphModule, write_back: Node) -> bool:
    dst, last = write_back.args[0], write_back.args[1]
    chain: dict[Node, _State] = {}
    state = _state_of(last, dst, chain)
    if state is None or state.views or not state.writes:
        return False
    if _read_besides_chain(dst, chain, last, write_back, state.writes[0]):
        return False
    written = dst
    for write in state.writes:
        written = _emit(gm, dst, written, write)
    last.replace_all_uses_with(written)
    write_back.replace_all_uses_with(written)
    gm.graph.erase_node(write_back)
    for node in reversed(list(gm.graph.nodes)):  # (users before the nodes they read)
        if node in chain and not node.users:
            gm.graph.erase_node(node)
    return True


def _read_besides_chain(dst: Node, chain: dict, last: Node, write_back: Node, first: _Write) -> bool:
    """Whether a node outside the chain reads the input's old value, itself or through a view,
    for more than the first write's value (see _reads_what_it_overwrites): the write would
    overwrite what it reads; or reads a state before the last one: a later write would."""
    for node in (dst, *(n for n in chain if n is not last)):
        viewed = chain.get(node, _State((), ()))
        for user in node.users:
            if user is write_back or user in chain or not _reads(user):
                continue
            if viewed.writes or not _reads_what_it_overwrites(user, viewed.views, first, chain):
                return True
    return False


def _reads_what_it_overwrites(reader: Node, views: tuple, first: _Write, chain: dict) -> bool:
    """Whether `reader`, reading the view `views` of the input's old value, reads the region
    the first write copies into and only to compute the value copied there (`x[:4].mul_(2)`,
    `x[a:b] += y`): that value is a new tensor, made whole before the copy, so each element is
    read before it is written, and nothing that might run after the write reads the old value.
    A read of another region (`x[1:5] = x[0:4] * 2`) keeps the out-of-place write."""
    if reader.target in (aten.slice.Tensor, aten.select.int):
        key = _slice_key if reader.target is aten.slice.Tensor else _select_key
        inside = views + key(reader.args[0], reader.args[1:])
        return all(not _reads(u) or _reads_what_it_overwrites(u, inside, first, chain) for u in reader.users)
    return first.op == "copy_" and views == first.views and _feeds_only(reader, first.args[0], chain)


def _feeds_only(reader: Node, value: Any, chain: dict) -> bool:
    """Whether all that is computed from `reader` goes into `value` alone, `value` a new tensor
    (or a view of one: not of the input, which the copy would read while writing it) read by
    the scatter chain alone."""
    if not isinstance(value, Node) or not _is_new(value) or any(u not in chain for u in value.users):
        return False
    into = _computed_from(value)
    pending, seen = [reader], set()
    while pending:
        node = pending.pop()
        if node is value or node in seen:
            continue
        if node not in into:
            return False  # (read besides the value: by a node that may run after the write)
        seen.add(node)
        pending.extend(u for u in node.users if _reads(u))
    return True


def _computed_from(value: Node) -> set:
    """The nodes `value` is computed from, itself included."""
    found, pending = set(), [value]
    while pending:
        node = pending.pop()
        if node not in found:
            found.add(node)
            pending.extend(node.all_input_nodes)
    return found


def _is_new(node: Node) -> bool:
    """Whether `node` is a tensor an op made (`mul`), or a view of one (`permute` of it), not
    a view of a graph input."""
    while node.op == "call_function":
        schema = getattr(node.target, "_schema", None)
        if schema is None:
            return False
        if all(r.alias_info is None for r in schema.returns):
            return True
        if not isinstance(node.args[0], Node):
            return False
        node = node.args[0]  # (a view, or an in-place op: of its first argument)
    return False


def _reads(user: Node) -> bool:
    """Whether `user` reads its tensor's elements; one reading its sizes or strides alone
    stays, measuring the node it did (the writes change no metadata)."""
    return user.target not in _METADATA_READS


def _emit(gm: GraphModule, dst: Node, written: Node, write: _Write) -> Node:
    """The node making `write` into `dst` (`written`: the input as the writes before left it,
    read so that this one runs after them)."""
    with gm.graph.inserting_before(write.at):
        if not write.views and write.op in _IN_PLACE:
            node = gm.graph.call_function(_IN_PLACE[write.op], (written, *write.args))
        else:
            node = gm.graph.call_function(write_into_view, (written, write.views, write.op, *write.args))
    node.meta["val"] = meta_val(dst)
    return node


def _state_of(node: Any, dst: Node, chain: dict) -> Optional[_State]:
    """`node`'s value as a view of `dst` after in-place writes; None where it is not one.
    `chain` maps the nodes taken so far to theirs, in graph order (a state met again is the
    same: its writes compare by identity)."""
    if node is dst:
        return _State((), ())
    if node in chain:
        return chain[node]
    if not isinstance(node, Node) or node.op != "call_function" or not isinstance(node.args[0], Node):
        return None
    base = _state_of(node.args[0], dst, chain)
    if base is None:
        return None
    target = node.target
    if target is aten.slice.Tensor:
        found = _State(base.views + _slice_key(node.args[0], node.args[1:]), base.writes)
    elif target is aten.select.int:
        found = _State(base.views + _select_key(node.args[0], node.args[1:]), base.writes)
    elif target in _INDEX_WRITES:
        write = _Write(base.views, _INDEX_WRITES[target], tuple(node.args[1:]), node)
        found = _State(base.views, base.writes + (write,))
    elif target is aten.slice_scatter.default:
        found = _scattered(node, base, base.views + _slice_key(node.args[0], node.args[2:]), dst, chain)
    elif target is aten.select_scatter.default:
        found = _scattered(node, base, base.views + _select_key(node.args[0], node.args[2:]), dst, chain)
    else:
        return None
    if found is not None:
        chain[node] = found
    return found


def _scattered(node: Node, base: _State, views: tuple, dst: Node, chain: dict) -> Optional[_State]:
    """The state a slice or select scatter leaves: its source written into `views` of the
    input; or, where the source is that view itself, written already (a nested scatter's inner
    one wrote it), the source's own writes."""
    src = node.args[1]
    if isinstance(src, Node) and src.target is aten.copy.default and len(src.users) == 1:
        # `view[...] = value` functionalized: copy(view, value) scattered back into the view
        into = _state_of(src.args[0], dst, chain)
        if into is not None:
            if into != _State(views, base.writes):
                return None
            chain[src] = into  # (taken: read by this scatter alone, the one way to it)
            if _state_of(src.args[1], dst, chain) == into:
                return base  # (the view copied into itself, writing nothing: `x[a:b] += y`'s setitem)
            return _State(base.views, base.writes + (_Write(views, "copy_", (src.args[1],), node),))
    inner = _state_of(src, dst, chain)
    if inner is None:  # a value of its own
        return _State(base.views, base.writes + (_Write(views, "copy_", (src,), node),))
    if inner.views != views or inner.writes[:len(base.writes)] != base.writes:
        return None
    return _State(base.views, inner.writes)


def _slice_key(base: Node, args: tuple) -> tuple:
    """The slice of `base` with `args` (`aten.slice.Tensor`'s after the tensor) as
    write_into_view takes it, its dim counted from the front, defaults filled in; () for a
    slice of the whole extent, which changes nothing."""
    dim, start, end, step = (tuple(args) + (0, None, None, 1)[len(args):])[:4]
    dim %= meta_val(base).dim()
    start = 0 if start is None else start
    end = sys.maxsize if end is None else end
    size = meta_val(base).shape[dim]
    whole_end = isinstance(end, int) and (end >= sys.maxsize or (isinstance(size, int) and end >= size))
    if isinstance(start, int) and start == 0 and whole_end and step == 1:
        return ()
    return ((dim, start, end, step),)


def _select_key(base: Node, args: tuple) -> tuple:
    """The select of `base` with `args` (`aten.select.int`'s after the tensor: dim, index) as
    write_into_view takes it, its dim counted from the front."""
    dim, index = args
    return ((dim % meta_val(base).dim(), index),)
