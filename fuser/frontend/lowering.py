"""Lowering one region of a captured ATen graph (a set of FX nodes) to a FusionDefinition.

A region's inputs are the tensors its nodes read from outside it, declared with `-1` for each
symbolic size and `1` for each size-1 dim, so one definition serves every size Dynamo's guards
admit. Dynamo's size symbols (`s0`, `s1`, ...) map to the extents of those inputs: the first
input axis whose traced size is a bare symbol defines it, later axes with the same symbol are
unified with it. A size no input axis carries (a symbol of another graph input, or an
operation the fusion's scalar arithmetic lacks, such as `s0 // 2`) becomes an integer scalar
input of the fusion, computed at run time from the graph inputs (`SizeInput`).

Each node is lowered by its rule (`rules/`), then checked against the node's traced metadata:
the same rank, the same dtype, size-1 dims as broadcast dims, the same static sizes. A node
that a rule refuses, or whose result does not match, raises `NodeLoweringError` naming it.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import sympy
import torch
from torch.fx import Node

from ..errors import FuserError, UnsupportedError
from ..ir import BroadcastOp, DataType, Scalar, SliceOp, SortOp, SqueezeOp, TensorView
from .definition import FusionDefinition
from .host_scalars import is_host_scalar
from .meta import EqualSizes, equal_sizes, is_size_node, is_tensor_node, meta_val, node_device, size_expr
from .rules import Kind, LoweringError, find_rule
from .sizes import RuntimeSymbols, SizeInput, opaque_parts, size_exprs



def define_input_like(fd: FusionDefinition, fake: torch.Tensor) -> tuple[TensorView, list]:
    """A fusion input for a traced tensor: its dtype and rank, each size a number where the
    trace fixed it, else symbolic (its layout bound at execution); with the sizes' expressions."""
    exprs = [size_expr(s) for s in fake.shape]
    tv = fd.define_tensor(shape=[int(e) if e.is_Integer else -1 for e in exprs], contiguity=None,
                          dtype=DataType.from_torch(fake.dtype))
    return tv, exprs

class NodeLoweringError(UnsupportedError):
    def __init__(self, node: Node, reason: str):
        super().__init__(f"{node.name}: {reason}")
        self.node = node
        self.reason = reason


# ---------------------------------------------------------------------------------------------
# The result of lowering a region


@dataclass
class Region:
    fd: FusionDefinition
    nodes: list[Node]
    # fusion inputs in order: a graph node (a tensor) or a size computed from graph inputs
    inputs: list[Union[Node, SizeInput]]
    # graph nodes the fusion produces: node -> output index, or the input node it aliases
    outputs: dict[Node, Union[int, Node]] = field(default_factory=dict)
    # where it runs (partition's device key; None: no tensor says); an input elsewhere is a
    # 0-dim CPU tensor, copied there at each call (host_scalars.py)
    device: Optional[torch.device] = None
    # (fusion output, graph input): the output is written into the input (write_backs.py)
    write_backs: list[tuple[int, Node]] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# The builder


class RegionBuilder:
    def __init__(self, symbols: RuntimeSymbols, nodes: list[Node], check_devices: bool = False):
        self.symbols = symbols
        self.nodes = nodes
        self.members = set(nodes)
        self.check_devices = check_devices
        self.fd = FusionDefinition()
        self.values: dict[Node, Any] = {}
        self.inputs: list = []
        # Dynamo size expressions -> the first input axis of that size, or the scalar input
        self._dims: dict[sympy.Expr, tuple[TensorView, int]] = {}
        self._opaque: dict[sympy.Expr, Scalar] = {}
        self._floats: dict[sympy.Expr, Scalar] = {}  # float size expressions: scalar inputs
        # tensors known to hold one constant everywhere (id -> Python number), set by rules
        self.constants: dict[int, Any] = {}
        self._equal: Optional[EqualSizes] = None

    # -- the whole region --------------------------------------------------------------------

    def build(self, needed_outside) -> Region:
        """Lower every node; `needed_outside(node)` says whether a value leaves the region."""
        tensor_inputs = self._tensor_inputs()
        self._define_inputs(tensor_inputs)
        for node in self.nodes:
            self._lower(node)
        return self._outputs(needed_outside)

    def _tensor_inputs(self) -> list[Node]:
        found: dict[Node, None] = {}
        for node in self.nodes:
            for inp in node.all_input_nodes:
                if inp in self.members or inp in found:
                    continue
                if is_tensor_node(inp):
                    found[inp] = None
                elif not is_size_node(inp):
                    raise NodeLoweringError(node, f"reads {inp.name}, which is neither a tensor nor a size")
        return list(found)

    def _define_inputs(self, tensor_nodes: list[Node]) -> None:
        in_tensors = {size_expr(s) for n in tensor_nodes for s in meta_val(n).shape}
        wanted: set = set()
        for node in self.nodes:
            for v in [meta_val(node)] + [meta_val(i) for i in node.all_input_nodes if is_size_node(i)]:
                wanted |= size_exprs(v)
        opaque: set = set()
        for e in wanted:
            opaque_parts(e, in_tensors, opaque)
        # a size written as its equal (meta.equal_sizes) whose symbols this graph cannot read:
        # the other members' parts too, for `scalar`
        members = self._equal_sizes().members
        for written in [x for x in members if any(w.has(x) for w in wanted)]:
            parts: set = set()
            opaque_parts(written, in_tensors, parts)
            if any(self.symbols.source(p) is None for p in parts):
                for other in members[written]:
                    opaque_parts(other, in_tensors, opaque)
        for e in sorted(opaque, key=str):
            src = self.symbols.source(e)
            if src is not None:  # else a rule that needs it fails, naming the expression
                self._opaque[e] = self.fd.define_scalar(dtype=DataType.Int)
                self.inputs.append(src)
        floats = {size_expr(meta_val(i)) for node in self.nodes for i in node.all_input_nodes
                  if isinstance(meta_val(i), torch.SymFloat)}
        for e in sorted(floats, key=str):
            src = self.symbols.source(e, floating=True)
            if src is not None and not e.is_Number:
                self._floats[e] = self.fd.define_scalar(dtype=DataType.Double)
                self.inputs.append(src)
        for node in tensor_nodes:
            fake = meta_val(node)
            try:
                tv, exprs = define_input_like(self.fd, fake)
            except FuserError as e:
                raise NodeLoweringError(_first_user(node, self.members), str(e)) from None
            self.values[node] = tv
            if node in self.symbols.constants:
                self.constants[id(tv)] = self.symbols.constants[node]
            self.inputs.append(node)
            for axis, e in enumerate(exprs):
                if e.is_Integer:
                    continue
                if e in self._dims:
                    self._unify(_axis_extent(*self._dims[e]), _axis_extent(tv, axis), f"size {e}")
                else:
                    self._dims[e] = (tv, axis)

    def _unify(self, a, b, why: str) -> None:
        self.fd.fusion.unify(a, b, f"{why} (equal by Dynamo's guards)")

    # -- one node ----------------------------------------------------------------------------

    def _lower(self, node: Node) -> None:
        try:
            if self.check_devices:
                _check_devices(node)
            if node.target is operator.getitem:
                src, index = node.args
                value = self.values[src][index]
            else:
                rule = find_rule(node.target)
                if rule is None:
                    raise LoweringError(f"no lowering for {_target_name(node.target)}")
                args = self._convert(node.args)
                kwargs = self._convert(dict(node.kwargs))
                if rule.kind is Kind.pointwise:
                    args, kwargs = self._inline_constants(node, args, kwargs)
                value = rule.fn(self, node, *args, **kwargs)
            self.values[node] = self._check(node, value)
        except NodeLoweringError:
            raise
        except FuserError as e:
            raise NodeLoweringError(node, str(e)) from e
        except (TypeError, ValueError, KeyError, IndexError, NotImplementedError) as e:
            # a call shape a rule does not model (an extra argument, an unexpected type)
            raise NodeLoweringError(node, f"{type(e).__name__}: {e}") from e

    def _convert(self, a: Any) -> Any:
        if isinstance(a, Node):
            if a in self.values:
                return self.values[a]
            if isinstance(meta_val(a), torch.SymFloat):
                return self._float_size(meta_val(a))
            if is_size_node(a):
                return self.size(meta_val(a))
            raise LoweringError(f"{a.name} is not available in this region")
        if isinstance(a, (list, tuple)):
            return type(a)(self._convert(x) for x in a)
        if isinstance(a, dict):
            return {k: self._convert(v) for k, v in a.items()}
        return a

    def _inline_constants(self, node: Node, args: tuple, kwargs: dict):
        """0-dim constants (`scalar_tensor(0.0)`, a `full([], -inf)`) become Python numbers
        when an operand that stays a tensor fixes the result type the same way (a dimensioned
        tensor of at least their category, or a tensor of their dtype), so no 0-dim tensor is
        made at run time. Where all operands are such constants of one dtype (`where(c, 0.0,
        -inf)`, `torch.tensor(2.0) * torch.tensor(3.0)`), the first stays a tensor and fixes
        the others' type. A `where` condition does not take part in its result type."""
        values = list(args[1:] if node.target in _WHERE else args) + list(kwargs.values())

        def constant(a) -> bool:
            return isinstance(a, TensorView) and id(a) in self.constants and a.ndim == 0

        # (not two constants fixing each other: as two numbers they would take the types of
        # Python numbers, and 0-dim f64 and f32 constants promote to f64, a number and the f32
        # one to f32)
        tensors = [t for t in values if isinstance(t, TensorView)]
        anchors = [t for t in tensors if not constant(t)]
        if not anchors and len({t.dtype for t in tensors}) == 1:
            anchors = tensors[:1]

        def inline(a):
            if not constant(a):
                return a
            for t in anchors:
                if t is not a and (t.dtype is a.dtype or (t.ndim > 0 and t.dtype.category >= a.dtype.category)):
                    return self.constants[id(a)]
            return a
        return tuple(inline(a) for a in args), {k: inline(v) for k, v in kwargs.items()}

    def _check(self, node: Node, value: Any) -> Any:
        meta = meta_val(node)
        if isinstance(meta, torch.Tensor):
            if not isinstance(value, TensorView):
                raise LoweringError(f"lowered to {type(value).__name__}, traced a tensor")
            return self._match(value, meta)
        if isinstance(meta, (list, tuple)):
            if not isinstance(value, (list, tuple)) or len(value) != len(meta):
                raise LoweringError(f"lowered to {value!r}, traced {len(meta)} results")
            return tuple(self._match(v, m) if isinstance(m, torch.Tensor) else v
                         for v, m in zip(value, meta))
        raise LoweringError(f"traced value {type(meta).__name__} is not a tensor")

    def _match(self, tv: TensorView, fake: torch.Tensor) -> TensorView:
        """The lowered tensor agrees with the traced one; size-1 dims become broadcast dims."""
        if not isinstance(tv, TensorView):
            raise LoweringError(f"lowered to {tv!r}, traced a tensor")
        if tv.ndim != fake.dim():
            raise LoweringError(f"lowered to {tv.ndim} dims, traced {fake.dim()} ({tuple(fake.shape)})")
        want = DataType.from_torch(fake.dtype)
        if tv.dtype is not want:
            if not (tv.dtype.is_floating and want.is_floating):
                raise LoweringError(f"lowered to dtype {tv.dtype.name}, traced {fake.dtype}")
            if want.itemsize > tv.dtype.itemsize:
                # computed narrower than eager computes (integer math promoted to Float under a
                # float64 default dtype): a widening cast would hide the digits lost
                raise LoweringError(f"lowered to dtype {tv.dtype.name}, traced the wider {fake.dtype}")
            tv = self.fd.ops.cast(tv, want)
        ones = []
        for axis, (d, s) in enumerate(zip(tv.domain.no_reductions(), fake.shape)):
            e = size_expr(s)
            if e == 1:
                if not d.is_broadcast or d.expanded_extent is not None:
                    ones.append(axis)
            elif e.is_Integer and d.extent.is_Integer and not d.is_broadcast and int(d.extent) != int(e):
                raise LoweringError(f"axis {axis}: lowered to size {d.extent}, traced {e}")
            elif d.is_broadcast and d.expanded_extent is None:
                raise LoweringError(f"axis {axis}: lowered to a broadcast dim, traced size {e}")
        return self.as_broadcast(tv, ones) if ones else tv

    # -- helpers for rules ---------------------------------------------------------------------

    def as_broadcast(self, tv: TensorView, axes: list[int]) -> TensorView:
        """`tv` with the given size-1 axes as broadcast dims (they broadcast in elementwise ops)."""
        axes = [a for a in axes if not (tv.domain.no_reductions()[a].is_broadcast and
                                        tv.domain.no_reductions()[a].expanded_extent is None)]
        if not axes:
            return tv
        squeezed = self.fd.ops.squeeze(tv, axes)
        return self.fd.ops.broadcast(squeezed, [k in axes for k in range(tv.ndim)])

    def meta(self, node: Node) -> Any:
        return meta_val(node)

    def input_meta(self, node: Node, k: int = 0) -> Any:
        """The traced value of the node's k-th argument."""
        return meta_val(node.args[k])

    def out_shape(self, node: Node) -> list:
        """The traced output shape as op arguments (ints and extent Scalars)."""
        return [self.size(s) for s in meta_val(node).shape]

    def size(self, s: Any) -> Union[int, Scalar]:
        """A traced size (int or SymInt) as an op argument: an int, or an integer Scalar."""
        if isinstance(s, bool) or not isinstance(s, (int, torch.SymInt)):
            raise LoweringError(f"{s!r} is not an integer size")
        return self.scalar(size_expr(s))

    def scalar(self, e: sympy.Expr) -> Union[int, Scalar]:
        """Dynamo's size expression `e` as an op argument: an int, an input's extent, a scalar
        input, or scalar arithmetic on those (recorded, so `repr(fd)` rebuilds it)."""
        if e.is_Integer:
            return int(e)
        if e in self._dims:
            tv, axis = self._dims[e]
            return tv.shape()[axis]
        if e in self._opaque:
            return self._opaque[e]
        try:
            return self._arithmetic(e)
        except LoweringError:
            # (a size the guards equate with one this graph can compute: meta.equal_sizes)
            for other in self._equal_sizes().members.get(e, ()):
                try:
                    return self.scalar(other)
                except LoweringError:
                    continue
            raise

    def _arithmetic(self, e: sympy.Expr) -> Union[int, Scalar]:
        """`e` as scalar arithmetic (+, *, max, min, floor division) on sizes `scalar` computes."""
        ops = self.fd.ops
        # (by name: torch's sizes hold its own Max and Min, torch.utils._sympy.functions', as
        # well as sympy's)
        combine = {"Add": (operator.add, ops.add), "Mul": (operator.mul, ops.mul),
                   "Max": (max, ops.maximum), "Min": (min, ops.minimum)}
        kind = type(e).__name__
        if kind in combine:
            py, ir = combine[kind]
            acc = None
            for a in e.args:
                v = self.scalar(a)
                both_int = isinstance(acc, int) and isinstance(v, int)
                acc = v if acc is None else py(acc, v) if both_int else ir(acc, v)
            return acc
        if kind in ("FloorDiv", "CleanDiv") and all(a.is_nonnegative for a in e.args):
            # (Dynamo's `(s + 1) // 2`, a chunk's size; on sizes, truncation is the floor)
            n, d = (self.scalar(a) for a in e.args)
            return n // d if isinstance(n, int) and isinstance(d, int) else ops.div(n, d)
        raise LoweringError(f"size {e} is neither an input size nor computable from graph inputs")

    def _equal_sizes(self) -> EqualSizes:
        """The sizes the trace's guards equate (meta.equal_sizes), from the shape environment of
        the first symbolic size among the region's values."""
        if self._equal is None:
            self._equal = EqualSizes()
            for node in self.nodes:
                val = meta_val(node)
                sizes = val.shape if isinstance(val, torch.Tensor) else [val]
                env = next((s.node.shape_env for s in sizes if isinstance(s, torch.SymInt)), None)
                if env is not None:
                    self._equal = equal_sizes(env)
                    break
        return self._equal

    def _float_size(self, s: torch.SymFloat) -> Any:
        e = size_expr(s)
        if e.is_Number:
            return float(e)
        if e in self._floats:
            return self._floats[e]
        raise LoweringError(f"float size {e} cannot be computed from graph inputs")

    def extent(self, e: sympy.Expr) -> sympy.Expr:
        """Dynamo's size expression `e` in this fusion's extents."""
        v = self.scalar(e)
        return sympy.Integer(v) if isinstance(v, int) else v.expr

    # -- outputs -----------------------------------------------------------------------------

    def _outputs(self, needed_outside) -> Region:
        region = Region(self.fd, list(self.nodes), list(self.inputs))
        input_of = {id(v): n for n, v in self.values.items() if n not in self.members}
        index_of: dict[int, int] = {}
        for node in self.nodes:
            value = self.values[node]
            if not isinstance(value, TensorView) or not needed_outside(node):
                continue
            if id(value) in input_of:
                region.outputs[node] = input_of[id(value)]  # the node is its input, unchanged
                continue
            if id(value) not in index_of:
                index_of[id(value)] = len(self.fd.fusion.outputs())
                self.fd.add_output(value)
                if value.domain.allocation is None:
                    _lay_out(value, traced_order(meta_val(node)))
            region.outputs[node] = index_of[id(value)]
        self._lay_out_sliced_sources()
        self._lay_out_sorted_sources()
        _drop_dead_exprs(self.fd.fusion)
        return region

    def _lay_out_sliced_sources(self) -> None:
        """A computed tensor that outputs slice (the pieces of a `split` or `chunk`, a piece of
        one element a slice squeezed and unsqueezed) takes its traced layout: the pieces are
        ATen views of it where they do not join its kernel, and eager's pieces of a
        channels-last or transposed value keep that layout (their own traced strides have the
        gaps of a slice, which `traced_order` leaves row-major)."""
        outputs = {id(o) for o in self.fd.fusion.outputs()}
        for e in reversed(self.fd.fusion.exprs):  # (a piece of one element: a slice squeezed, unsqueezed)
            if isinstance(e, (SqueezeOp, BroadcastOp)) and id(e.outputs[0]) in outputs:
                outputs.add(id(e.inputs[0]))
        inputs = {id(v) for v in self.fd.fusion.inputs()}
        node_of = {id(v): n for n, v in self.values.items()}
        for e in self.fd.fusion.exprs:
            if not isinstance(e, SliceOp) or id(e.outputs[0]) not in outputs:
                continue
            source = e.inputs[0]
            if id(source) in inputs or source.domain.allocation is not None or id(source) not in node_of:
                continue
            _lay_out(source, traced_order(meta_val(node_of[id(source)])))

    def _lay_out_sorted_sources(self) -> None:
        """A computed tensor that a sort reads takes the layout of the sort's output: ATen's
        sort lays its results out as its input, so the kernel computing it writes it in the
        order eager's sort of a channels-last or transposed tensor returns, and the sort's
        evaluator does not copy it."""
        inputs = {id(v) for v in self.fd.fusion.inputs()}
        for e in reversed(self.fd.fusion.exprs):  # (a sort of a sort: the later one's first)
            if not isinstance(e, SortOp) or id(e.inputs[0]) in inputs or e.inputs[0].domain.allocation is not None:
                continue
            _lay_out(e.inputs[0], next((o.domain.allocation_order() for o in e.outputs
                                        if o.domain.allocation_order() is not None), None))


def _lay_out(tv: TensorView, order: Optional[list[int]]) -> None:
    """`tv` allocated in `order` (its logical axes, outer to inner); None leaves it row-major."""
    if order is not None:
        dims = tv.domain.no_reductions()
        tv.set_allocation_domain([dims[k] for k in order], True)


_WHERE = {torch.ops.aten.where.self, torch.ops.aten.where.ScalarSelf,
          torch.ops.aten.where.ScalarOther, torch.ops.aten.where.Scalar}


def traced_order(fake) -> "list[int] | None":
    """The memory order (logical axes, outer to inner) of a traced dense tensor whose layout
    is not row-major, from its strides' hints (Dynamo guards the inputs' stride order, so the
    order holds for every call of the graph); None for row-major, or a layout no dense
    allocation gives (an expand's 0 strides, a slice's gaps)."""
    if not isinstance(fake, torch.Tensor) or fake.dim() < 2:
        return None
    hint = lambda s: s.node.hint if isinstance(s, torch.SymInt) else int(s)  # noqa: E731
    try:
        sizes, strides = [hint(s) for s in fake.shape], [hint(s) for s in fake.stride()]
    except Exception:  # noqa: BLE001 - an unbacked size: keep row-major
        return None
    if None in sizes or None in strides:
        return None
    # equal strides: a size-1 axis inside (as eager's channels-last puts C = 1)
    order = sorted(range(len(sizes)), key=lambda k: (-strides[k], sizes[k] == 1, k))
    if order == list(range(len(sizes))):
        return None
    expected = 1
    for k in reversed(order):
        if sizes[k] != 1 and strides[k] != expected:
            return None
        expected *= max(sizes[k], 1)
    return order


def _drop_dead_exprs(fusion) -> None:
    """Remove exprs no output depends on (a constant inlined into its users, the zeros a
    scatter lowering does not read), so no segment computes them."""
    live = {id(o) for o in fusion.outputs()}
    kept = []
    for e in reversed(fusion.exprs):
        if any(id(o) in live for o in e.outputs):
            kept.append(e)
            live |= {id(v) for v in e.inputs}
    fusion.exprs[:] = reversed(kept)


def _axis_extent(tv: TensorView, axis: int) -> sympy.Expr:
    return tv.domain.no_reductions()[axis].extent


def _first_user(node: Node, members: set) -> Node:
    return next((u for u in node.users if u in members), node)


def _check_devices(node: Node) -> None:
    device = node_device(node)
    for inp in node.all_input_nodes:
        d = node_device(inp)
        if d is not None and device is not None and d != device and not is_host_scalar(inp):
            # (a 0-dim CPU tensor joins an op elsewhere as a number, as in ATen)
            raise LoweringError(f"mixes devices ({inp.name} on {d}, result on {device})")


def _target_name(target) -> str:
    return str(target) if hasattr(target, "overloadpacket") else getattr(target, "__name__", repr(target))


