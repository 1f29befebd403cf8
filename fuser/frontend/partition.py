"""Cutting a captured ATen graph into fusions and eager ATen calls.

0. Pointwise values shared by reductions that cannot share a kernel are copied, so each
   kernel recomputes them (recompute.py); an output that is a view of an input and also feeds
   computation gets its own chain of views, run by ATen (`_separate_input_views`).
1. Every node is tried alone (`RegionBuilder` on that node): if its rule refuses it, or the
   result disagrees with the traced metadata, it will run eagerly, and the reason is kept.
2. The rest are grouped by *phase*. Fusions run in even phases, eager nodes in odd ones, in
   graph order within a phase. A fusible node joins the earliest even phase after all its
   tensor inputs are available; an eager node the earliest odd phase. So a fusion never waits
   for itself: every value it reads comes from an earlier phase or from inside it, and fusible
   nodes are only split where an eager node really stands between them. A fusible node that
   only fusions of a later phase read (on its device) joins the first of them instead, so no
   intermediate is written between the two. A write-back (`copy_` into a graph input) runs
   after every read of the input, through its views too. Nodes of one phase on one device form
   one region (they may be unconnected; the segmenter cuts them apart).
3. Views at the end of a region whose results only leave it (a `permute` saved for backward)
   run as ATen views after the fusion instead of being written out a second time.
4. A region with no arithmetic (only views, matmuls, creation) or no tensor input runs eagerly:
   a fusion would only add its call overhead.
5. Each region is lowered to a FusionDefinition; a node that fails there runs eagerly and the
   grouping is redone.

Size arithmetic (SymInt nodes) runs eagerly in Python; fusions never wait for it, since they
see sizes as extent expressions.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Union

import torch
from torch.fx import GraphModule, Node

from ..errors import InternalError
from .host_scalars import has_gpu_tensors, lifted, scalars_only
from .lowering import NodeLoweringError, Region, RegionBuilder
from .sizes import RuntimeSymbols
from .meta import is_size_node, meta_val, node_device, size_expr
from .recompute import recompute_shared_pointwise
from .write_backs import fold_write_backs, readers_of_memory
from .rules import Kind, find_rule

aten = torch.ops.aten

_VIEWS = {aten.view.default, aten._unsafe_view.default, aten.permute.default,
          aten.transpose.int, aten.t.default, aten.expand.default, aten.unsqueeze.default,
          aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.slice.Tensor,
          aten.select.int, aten.alias.default}

# ops whose results are views of their input, taken by getitem
_SPLITS = {aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int}

# why a node runs eagerly: kinds, so statistics can tell fallbacks from Python size arithmetic
UNSUPPORTED = "unsupported"   # no lowering, or the lowering refused this call
SIZE = "size"                 # SymInt arithmetic
ELEMENT = "element"           # an element of an eager op's tuple result
VIEW = "view"                 # a view of a fusion output, taken by ATen
NOT_WORTH = "not worth"       # a region with nothing to fuse


@dataclass
class Eager:
    node: Node
    kind: str
    reason: str


@dataclass
class Plan:
    graph: GraphModule
    steps: list[Union[Region, Eager]]

    @property
    def regions(self) -> list[Region]:
        return [s for s in self.steps if isinstance(s, Region)]

    @property
    def eager(self) -> list[Eager]:
        return [s for s in self.steps if isinstance(s, Eager)]


def plan_graph(gm: GraphModule) -> Plan:
    recompute_shared_pointwise(gm)
    _separate_input_views(gm)
    nodes = list(gm.graph.nodes)
    symbols = RuntimeSymbols([n for n in nodes if n.op == "placeholder"], _scalar_constants(gm))
    if _sizes_from_inputs(gm, symbols):
        nodes = list(gm.graph.nodes)
    refused: dict[Node, Eager] = {}
    for node in nodes:
        if node.op == "call_function":
            why = _refusal(symbols, node, refused)
            if why is not None:
                refused[node] = why
    on_gpu = has_gpu_tensors(nodes)
    for _ in range(len(nodes) + 1):
        eager = dict(refused)
        phase, groups = _phases(nodes, eager, lifted(nodes, eager) if on_gpu else {})
        _sink_tail_views(groups, phase, eager)
        _drop_idle_regions(groups, phase, eager, on_gpu)
        try:
            regions = {key: _build(symbols, members, key[1]) for key, members in groups.items() if members}
        except NodeLoweringError as e:
            refused[e.node] = Eager(e.node, UNSUPPORTED, e.reason)
            for user in e.node.users:
                if user.target is operator.getitem:
                    refused[user] = Eager(user, ELEMENT, f"an element of {e.node.name}")
            continue
        fold_write_backs(regions, eager, phase, next(n for n in nodes if n.op == "output"))
        order = {n: k for k, n in enumerate(nodes)}
        steps: list = [(key[0], order[r.nodes[0]], r) for key, r in regions.items()]
        steps += [(phase[n], order[n], e) for n, e in eager.items()]
        steps.sort(key=lambda s: (s[0], s[1]))
        return Plan(gm, [s[2] for s in steps])
    raise InternalError("the graph partition did not settle")  # each pass refuses a node: unreachable


def _size_function(fn):
    def size_from_inputs(*values):
        return fn(*values)
    return size_from_inputs


def _sizes_from_inputs(gm: GraphModule, symbols: RuntimeSymbols) -> bool:
    """`sym_size` of a computed tensor (AOTAutograd saves a slice's length for backward) read
    from the graph inputs' sizes instead: read from the tensor, it made the tensor a fusion
    output, written to memory only to be measured (and a slice kept out of its kernel)."""
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.sym_size.int:
            continue
        tensor = node.args[0]
        if not isinstance(tensor, Node) or tensor.op == "placeholder":
            continue
        src = symbols.source(size_expr(meta_val(node)))
        if src is None:
            continue
        with gm.graph.inserting_before(node):
            args = []
            for read, axis in src.reads:
                if axis is not None:
                    read = gm.graph.call_function(aten.sym_size.int, (read, axis))
                    read.meta["val"] = meta_val(read.args[0]).shape[axis]
                args.append(read)
            new = gm.graph.call_function(_size_function(src.fn), tuple(args))
        new.meta["val"] = meta_val(node)
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        changed = True
    if changed:
        gm.recompile()
    return changed


def _separate_input_views(gm: GraphModule) -> None:
    """A graph output that is a view of a graph input must be that view: AOTAutograd rebuilds
    such an output from the input with the size and strides the graph returned for it. Where
    the view also feeds computation, a fusion would return it as a new dense tensor (wrong
    strides, the regenerated view reading out of bounds or the wrong elements), so the output
    gets its own copy of the chain of views from the input, which runs as ATen views."""
    graph = gm.graph
    out = next(n for n in graph.nodes if n.op == "output")
    outputs = out.args[0] if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    copies = {}
    for node in outputs:
        if not isinstance(node, Node) or node in copies:
            continue
        chain, src = [], node
        while isinstance(src, Node) and src.op == "call_function":
            if src.target in _VIEWS:
                chain.append(src)
                src = src.args[0]
            elif src.target is operator.getitem and isinstance(src.args[0], Node) \
                    and src.args[0].target in _SPLITS:  # a piece of a split (chunk, with dynamic sizes)
                chain += [src, src.args[0]]
                src = src.args[0].args[0]
            else:
                break
        if not chain or not isinstance(src, Node) or src.op != "placeholder" \
                or all(set(n.users) <= {out} | set(chain) for n in chain):
            continue  # not a view of an input, or nothing but the output reads the chain
        prev = src
        for n in reversed(chain):
            with graph.inserting_after(n):
                copy = graph.node_copy(n, lambda a, n=n, prev=prev: prev if a is n.args[0] else a)
            prev = copy
        copies[node] = prev
    if copies:
        out.args = (type(out.args[0])(copies.get(n, n) for n in outputs),) \
            if isinstance(out.args[0], (list, tuple)) else (copies.get(out.args[0], out.args[0]),)
        graph.lint()
        gm.recompile()


def _scalar_constants(gm: GraphModule) -> dict:
    """Values of the graph's 0-dim tensor constants (`torch.tensor(0.0)` in the traced code)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    out = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = gm
            for part in node.target.split("."):
                value = getattr(value, part, None)
            if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.is_complex():
                with unset_fake_temporarily():  # the compiler runs under AOTAutograd's fake mode
                    out[node] = value.item()
    return out


def _refusal(symbols: RuntimeSymbols, node: Node, eager: dict) -> Eager | None:
    if is_size_node(node):
        return Eager(node, SIZE, "size arithmetic runs in Python")
    if node.target is operator.getitem:
        src = node.args[0]
        return Eager(node, ELEMENT, f"an element of {src.name}") if src in eager else None
    if meta_val(node) is None:
        return Eager(node, UNSUPPORTED, "no traced value")
    rule = find_rule(node.target)
    if rule is None:
        return Eager(node, UNSUPPORTED, f"no lowering for {node.target}")
    try:
        RegionBuilder(symbols, [node], check_devices=True).build(lambda n: True)
    except NodeLoweringError as e:
        return Eager(node, UNSUPPORTED, e.reason)
    except Exception as e:  # noqa: BLE001 - a rule bug must not fail the compile: run ATen
        return Eager(node, UNSUPPORTED, f"lowering failed: {type(e).__name__}: {e}")
    return None


def _phases(nodes: list[Node], eager: dict, lift: dict):
    """Phase of each node (see the module docstring) and the fusible nodes per (phase, device);
    a lifted 0-dim CPU node (`host_scalars`) with the GPU fusions that read it. A fusible node
    reading one of another device's fusion (a GPU op reading a CPU scalar) takes a later phase."""
    phase: dict[Node, int] = {}
    device: dict[Node, str] = {}
    groups: dict[tuple, list[Node]] = {}
    for node in nodes:
        if node.op in ("placeholder", "get_attr"):
            phase[node] = -1
        elif node.op == "call_function" and node in eager:
            m = max((phase[p] for p in node.all_input_nodes), default=-1)
            phase[node] = m if m % 2 else m + 1
        elif node.op == "call_function":
            here = device[node] = str(lift.get(node) or node_device(node))
            m = max((phase[p] + (2 if device.get(p, here) != here else 0)
                     for p in node.all_input_nodes if not is_size_node(p)), default=-1)
            phase[node] = 2 * max(0, (m + 1) // 2)
    # a fusible node read only by fusions of a later phase on its device joins the first of them
    # (`g * 0.1` before an eager op whose result it meets): no intermediate written and read.
    # Not a reduction (its input, larger, would cross instead), nor a node of several results
    # or one of them (a tuple's elements go together)
    for node in reversed(nodes):
        here = device.get(node)
        if here is None or not node.users or any(device.get(u) != here for u in node.users) \
                or node.target is operator.getitem or not isinstance(meta_val(node), torch.Tensor) \
                or find_rule(node.target).kind is Kind.reduction:
            continue
        phase[node] = max(phase[node], min(phase[u] for u in node.users))
    for node in nodes:
        if node.target is aten.copy_.default and node in eager and isinstance(node.args[0], Node):
            # a write-back runs after every read of the value it replaces, through a view too
            # (a fusion's read in phase k: k + 1; an eager read in phase k: k, later in graph
            # order); nothing reads the write-back itself
            m = max([phase[node]] + [phase[u] for u in readers_of_memory(node.args[0]) if u is not node and u in phase])
            phase[node] = m if m % 2 else m + 1
    for node in nodes:
        if node in device:
            groups.setdefault((phase[node], device[node]), []).append(node)
    return phase, groups


def _sink_tail_views(groups: dict, phase: dict, eager: dict) -> None:
    for key, members in groups.items():
        inside = set(members)
        for node in reversed(members):
            if node.target in _VIEWS and all(u not in inside for u in node.users):
                inside.discard(node)
                eager[node] = Eager(node, VIEW, "a view of a fusion output, taken by ATen")
                phase[node] = key[0] + 1
        members[:] = [n for n in members if n in inside]


def _drop_idle_regions(groups: dict, phase: dict, eager: dict, on_gpu: bool) -> None:
    for key, members in groups.items():
        inside = set(members)
        computes = any(node.target is not operator.getitem and find_rule(node.target).compute
                       for node in members)
        reads = any(p not in inside and not is_size_node(p) for n in members for p in n.all_input_nodes)
        host_scalars = on_gpu and key[1] == "cpu" and scalars_only(members)
        if computes and reads and not host_scalars:
            continue
        why = "nothing to fuse (only views, matmuls or creation)" if not computes else \
            "no tensor input (creation only)" if not reads else \
            "0-dim CPU tensors in a GPU graph: ATen's CPU ops, cheaper than a kernel of Triton's interpreter"
        for node in members:
            eager[node] = Eager(node, NOT_WORTH, why)
            phase[node] = key[0] + 1
        members.clear()


def _build(symbols: RuntimeSymbols, members: list[Node], device: str) -> Region:
    inside = set(members)
    region = RegionBuilder(symbols, members).build(lambda n: any(u not in inside for u in n.users))
    region.device = torch.device(device) if device != "None" else None
    return region
