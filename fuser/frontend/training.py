"""Training graphs called without AOTAutograd's runtime layers.

AOTAutograd runs a compiled training graph through an autograd.Function of its own, wrapped in
layers that handle input mutations, outputs aliasing inputs, effect tokens, tensor subclasses,
functionalized RNG and tangent layouts, on both the forward and the backward call. For a graph
with none of these (the metadata AOTAutograd leaves on the tracing context says so), the layers
only pass values through, at a cost of tens of microseconds a call (a backward through
AOTAutograd took 86 us on the development CPU against 47 us for an autograd.Function over a
FusionDefinition). `TrainingCall` then runs fuser's forward and backward programs through one
small autograd.Function, `_Fused`.

The backward program is compiled when AOTAutograd first needs it, so the first calls go through
AOTAutograd; the direct form takes over once both programs exist. Saved values are matched
between the two graphs by node name (the partitioner names the backward's inputs after the
forward values they receive), and tangents by their order among outputs that require grad;
anything that does not match keeps AOTAutograd's path.

A backward run from some outputs only (`la.backward()` of a module returning two losses) gives
no gradient (None) to the inputs that reach none of those outputs, as eager does, where
AOTAutograd fills zero incoming gradients and returns zeros for them (AdamW then decays and
moves a parameter eager leaves untouched): `UnusedGradients`, applied by `_Fused` and, on
AOTAutograd's path, by a hook on its autograd node. A graph that is no TrainingCall (one that
writes an input or a buffer, BatchNorm's running statistics; one returning a view of an input)
keeps AOTAutograd's zeros. Such a graph runs through `AotCall` (second_order.py): AOTAutograd's
runtime with all its layers, refusing create_graph=True as `_Fused` does.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch.autograd.function import once_differentiable

from ..errors import UnsupportedError
from .frame_hook import set_eval_frame
from .program import GraphProgram, is_batched
from .second_order import (CREATE_GRAPH_REFUSED, input_positions_under, is_aot_node, needs_grad,
                           reads_values_needing_grad, refuse_create_graph, saved_from)


@dataclass
class ForwardFacts:
    """What the forward graph's metadata says, read when the forward is compiled."""

    n_inputs: int
    n_user: int                     # user outputs: the first graph outputs
    differentiable: list[bool]      # per user output: whether it requires grad
    # user outputs that are views of an intermediate nothing else aliases (a linear's output
    # reshaped back to 3-D): returned as plain tensors, as AOTAutograd returns them
    unsafe_views: list[int]


def plain_aot_metadata(graph: torch.fx.GraphModule, n_inputs: int, unsafe_views: bool = False) -> Any:
    """The metadata AOTAutograd left on the tracing context for `graph` when its runtime layers
    would only pass values through (the graph takes Dynamo's arguments as they are; no input
    mutated, no output aliasing an input or an intermediate, no effect tokens, tensor
    subclasses, RNG state or autocast to undo), else None (also when the metadata is not there
    or this torch's differs). `unsafe_views`: outputs that view an intermediate nothing else
    aliases pass too (their caller makes them plain tensors, as AOTAutograd's layers do)."""
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None)
    try:
        from torch._functorch import config as functorch_config
        from torch._functorch._aot_autograd.schemas import OutputType

        placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
        plain = (
            meta is not None
            and len(placeholders) == n_inputs
            and not any(i.mutates_data or i.mutates_metadata for i in meta.input_info)
            and all(o.output_type == OutputType.non_alias
                    or (unsafe_views and o.output_type == OutputType.unsafe_view_alias) for o in meta.output_info)
            and meta.num_intermediate_bases == 0 and not meta.tokens
            and meta.grad_enabled_mutation is None
            and not meta.is_rng_op_functionalized and not functorch_config.functionalize_rng_ops
            and not getattr(meta, "num_graphsafe_rng_states", 0)
            and all(type(m).__name__ == "PlainTensorMeta" or isinstance(m, int)
                    for m in meta.subclass_inp_meta)
            and not any(torch.is_autocast_enabled(d) for d in ("cpu", "cuda")))
    except (AttributeError, ImportError, TypeError):  # another torch's internals
        return None
    return meta if plain else None


def forward_facts(graph: torch.fx.GraphModule, n_inputs: int) -> Optional[ForwardFacts]:
    """ForwardFacts when AOTAutograd's runtime layers would only pass values through and every
    output is a tensor, else None."""
    meta = plain_aot_metadata(graph, n_inputs, unsafe_views=True)
    if meta is None:
        return None
    outputs = meta.output_info
    if not all(issubclass(o.raw_type, torch.Tensor) for o in outputs):
        return None
    from torch._functorch._aot_autograd.schemas import OutputType

    return ForwardFacts(n_inputs, len(outputs), [bool(o.requires_grad) for o in outputs],
                        [k for k, o in enumerate(outputs) if o.output_type == OutputType.unsafe_view_alias])


class UnusedGradients:
    """Which inputs of a forward graph get no gradient when only some of its user outputs get
    one: those whose values reach none of these outputs through differentiable ops (as eager's
    autograd graph connects them), found from the graph once, per pattern of outputs given."""

    def __init__(self, graph: torch.fx.GraphModule, facts: ForwardFacts):
        self.graph = graph
        self.n_inputs = facts.n_inputs
        self.n_user = facts.n_user
        self.differentiable = tuple(facts.differentiable)
        self._reached: Optional[list[frozenset]] = None  # per user output: the inputs it reaches
        self._unused: dict[tuple, frozenset] = {}

    def unused(self, given: tuple) -> frozenset:
        """The input positions that reach none of the user outputs whose entry in `given` is
        true (the outputs with an incoming gradient)."""
        found = self._unused.get(given)
        if found is None:
            if self._reached is None:
                self._reached = self._inputs_reached()
            kept = frozenset().union(*(r for r, g in zip(self._reached, given) if g))
            found = self._unused[given] = frozenset(range(self.n_inputs)) - kept
        return found

    def _inputs_reached(self) -> list[frozenset]:
        nodes = list(self.graph.graph.nodes)
        placeholders = [n for n in nodes if n.op == "placeholder"]
        out = next(n for n in nodes if n.op == "output").args[0]
        if len(placeholders) != self.n_inputs:  # (cannot tell: every input reaches every output)
            return [frozenset(range(self.n_inputs))] * self.n_user
        return [input_positions_under([o], placeholders, _carries_gradient) if isinstance(o, torch.fx.Node)
                else frozenset() for o in out[:self.n_user]]

    def drop(self, grads: tuple, given: tuple) -> tuple:
        """`grads` (one per input) with None for the inputs that reach no output `given`."""
        unused = self.unused(given)
        if not unused:
            return grads
        return tuple(None if k in unused else g for k, g in enumerate(grads))


def _carries_gradient(node: torch.fx.Node) -> bool:
    """Whether a gradient flows through `node` to its inputs in eager: not through a detach, an
    integer or bool tensor (a comparison, an argmax) or a size; where the value is not
    recorded, assumed to (an input then keeps its gradient, possibly zeros, as before). A
    `torch.no_grad()` block or `ones_like(x)` leaves no mark in the forward graph: an input
    read only there keeps zeros."""
    if node.target is torch.ops.aten.detach.default or str(node.meta.get("original_aten")) == "aten.detach.default":
        return False  # (AOTAutograd's forward holds `x.detach()` as an alias of x; by name: not one object)
    value = node.meta.get("val")
    if isinstance(value, torch.Tensor):
        return value.is_floating_point() or value.is_complex()
    return value is None or isinstance(value, (list, tuple))


@dataclass
class _Plan:
    forward: GraphProgram
    backward: GraphProgram
    n_user: int
    non_differentiable: list[int]   # user outputs to mark non-differentiable
    unsafe_views: list[int]         # user outputs to return as plain tensors (ForwardFacts)
    saved_tensors: list[int]        # positions among the saved values
    saved_ints: list[int]
    sources: list[tuple[str, int]]  # per backward input: ("tensor"|"int", k) or ("tangent", output)
    # the forward inputs that saved values the forward computed depend on: such a value comes
    # back from ctx.saved_tensors not requiring grad, though a function of them (create_graph)
    computed_from: frozenset = frozenset()
    # the inputs to give no gradient when some outputs get none (None: materialized zeros
    # throughout, where this torch's autograd nodes do not tell the outputs' sizes)
    unused: Optional[UnusedGradients] = None

    def __post_init__(self) -> None:
        # the programs as functions of positional arguments (straight-line for one fusion)
        self.run_forward = self.forward.positional_call()
        self.run_backward = self.backward.positional_call()


def _link(facts: ForwardFacts, forward: GraphProgram, backward: GraphProgram,
          unused: Optional[UnusedGradients] = None) -> Optional[_Plan]:
    fw_nodes = list(forward.plan.graph.graph.nodes)
    out = next(n for n in fw_nodes if n.op == "output").args[0]
    if not isinstance(out, (list, tuple)) or len(out) < facts.n_user:
        return None
    saved = list(out[facts.n_user:])
    if not all(isinstance(n, torch.fx.Node) for n in saved):
        return None
    is_int = [not isinstance(n.meta.get("val"), torch.Tensor) for n in saved]
    tensors = [k for k, i in enumerate(is_int) if not i]
    ints = [k for k, i in enumerate(is_int) if i]
    # the saved values by the names AOTAutograd gave them, which the backward's inputs carry
    names = forward.output_names or [n.name if isinstance(n, torch.fx.Node) else None for n in out]
    if len(names) != len(out):
        return None
    position = {name: k for k, name in enumerate(names[facts.n_user:])}
    with_tangent = [k for k, d in enumerate(facts.differentiable) if d]
    sources = []
    for p in (n for n in backward.plan.graph.graph.nodes if n.op == "placeholder"):
        if p.name.startswith("tangents_"):
            j = int(p.name.rsplit("_", 1)[1]) - 1
            if not 0 <= j < len(with_tangent):
                return None
            sources.append(("tangent", with_tangent[j]))
        elif p.name in position:
            k = position[p.name]
            sources.append(("int", ints.index(k)) if is_int[k] else ("tensor", tensors.index(k)))
        else:
            return None
    bw_out = next(n for n in backward.plan.graph.graph.nodes if n.op == "output").args[0]
    if not isinstance(bw_out, (list, tuple)) or len(bw_out) != facts.n_inputs:
        return None
    non_diff = [k for k, d in enumerate(facts.differentiable) if not d]
    computed = [saved[k] for k in tensors if saved[k].op != "placeholder"]
    return _Plan(forward, backward, facts.n_user, non_diff, facts.unsafe_views, tensors, ints, sources,
                 input_positions_under(computed, [n for n in fw_nodes if n.op == "placeholder"]),
                 unused if _OUTPUT_METADATA else None)


class _Fused(torch.autograd.Function):
    @staticmethod
    def forward(ctx, plan: _Plan, *args: Any) -> tuple:
        outs = plan.run_forward(*args)
        user, saved = list(outs[:plan.n_user]), outs[plan.n_user:]
        tensors = [saved[k] for k in plan.saved_tensors]
        ctx.rebuilt = None
        also = []  # further outputs in a saved value's storage: saved for their version checks only
        for k in plan.unsafe_views:
            user[k] = torch.ops.aten._unsafe_view(user[k], user[k].shape)
            _save_through(ctx, tensors, user[k], also)
        ctx.save_for_backward(*tensors, *also)
        ctx.ints = [saved[k] for k in plan.saved_ints]
        ctx.plan = plan
        if plan.unused is not None:
            ctx.set_materialize_grads(False)  # (run_backward fills the missing ones)
        if plan.non_differentiable:
            ctx.mark_non_differentiable(*[user[k] for k in plan.non_differentiable])
        return tuple(user)

    @staticmethod
    def backward(ctx, *grads: torch.Tensor) -> tuple:
        # (a backward called inside a compiled frame runs on its thread with Dynamo's hook on:
        # off before anything reads ctx.saved_tensors, which Dynamo would trace as fake tensors,
        # and a complex view of a reshaped input among them failed there)
        hook = set_eval_frame(None)
        try:
            return _Fused._backward(ctx, grads)
        finally:
            set_eval_frame(hook)

    @staticmethod
    def _backward(ctx, grads: tuple) -> tuple:
        if any(g is not None and is_batched(g) for g in grads):
            # torch.autograd.grad(..., is_grads_batched=True) (a vectorized jacobian): vmap's
            # batched tensors, which the kernels cannot read and the graph's ATen ops batch
            return _Fused.run_backward(ctx, grads, eager=True)
        if torch.is_grad_enabled():  # create_graph=True
            # (a saved value the forward computed from an input needing grad: plan.computed_from)
            if any(ctx.needs_input_grad[1 + k] for k in ctx.plan.computed_from) \
                    or any(t.requires_grad for t in ctx.saved_tensors):
                # the gradients would depend on values that need gradients, through kernels
                # that record no autograd graph: differentiating them (a gradient penalty)
                # would treat them as constants, silently
                raise UnsupportedError(CREATE_GRAPH_REFUSED)
            if any(g is not None and g.requires_grad for g in grads):
                # the gradients depend on the incoming ones alone (a linear function's): the
                # graph's ATen ops record how, for the gradient's own gradient
                return _Fused.run_backward(ctx, grads, eager=True)
            return _Fused.backward_once(ctx, *grads)
        return _Fused.run_backward(ctx, grads)

    @staticmethod
    @once_differentiable
    def backward_once(ctx, *grads: torch.Tensor) -> tuple:
        return _Fused.run_backward(ctx, grads)

    @staticmethod
    def run_backward(ctx, grads: tuple, eager: bool = False) -> tuple:
        """The backward program on the saved values and `grads`; `eager`: its ATen graph run
        op by op instead (each op eager's: batched, and recorded where grad mode is on)."""
        given = None
        if _NoneType in map(type, grads) and ctx.plan.unused is not None:  # (not materialized)
            given = tuple(g is not None for g in grads)
            grads = _with_zeros(ctx, grads)
        tensors, ints = ctx.saved_tensors, ctx.ints
        if ctx.rebuilt is not None:
            tensors = list(tensors)
            for j, (size, stride, offset) in ctx.rebuilt.items():
                tensors[j] = tensors[j].as_strided(size, stride, offset)
        pick = {"tensor": tensors, "int": ints, "tangent": grads}
        args = [pick[kind][k] for kind, k in ctx.plan.sources]
        if eager:
            result = ctx.plan.backward.plan.graph(*args)
        else:
            result = ctx.plan.run_backward(*args)
        if given is not None and given != ctx.plan.unused.differentiable:
            result = ctx.plan.unused.drop(tuple(result), given)
        return (None, *result)


_NoneType = type(None)
# whether a backward's ctx tells the sizes of the outputs' gradients (to fill those not given)
_OUTPUT_METADATA = hasattr(torch._C._FunctionBase, "_input_metadata")


def _with_zeros(ctx: Any, grads: tuple) -> tuple:
    """`grads` with the missing gradients of differentiable outputs filled with zeros, as
    autograd would have materialized them: the backward program takes one per such output
    (the inputs that reach only these outputs get None after it, `UnusedGradients`)."""
    differentiable = ctx.plan.unused.differentiable
    missing = [k for k, g in enumerate(grads) if g is None and differentiable[k]]
    if not missing:
        return grads
    grads, outputs = list(grads), ctx._input_metadata  # (the node's inputs: the forward's outputs)
    for k in missing:
        grads[k] = torch.zeros(outputs[k].shape, dtype=outputs[k].dtype, device=outputs[k].device)
    return tuple(grads)


def _save_through(ctx: Any, tensors: list, output: torch.Tensor, also: list) -> None:
    """Save `output` (an `_unsafe_view` the forward returns, a linear's 3-D result) in place of
    the saved values in its storage (the 2-D matmul result), to be rebuilt in the backward: the
    view has a version counter of its own, so an in-place change of the output (`y += r`) left
    the saved value's untouched and the gradient silently read the changed values, where eager
    raises autograd's in-place error. Saved through the output, the check fires as in eager.
    A value saved through an earlier output already (the pieces of `exp(x).unbind(1)`) keeps
    that one's geometry, and this output joins `also`, saved too, so that a write to any piece
    fires the check."""
    storage = output.untyped_storage().data_ptr()
    for j, t in enumerate(tensors):
        if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() == storage \
                and t.dtype == output.dtype:
            if ctx.rebuilt is not None and j in ctx.rebuilt:
                if not any(a is output for a in also):
                    also.append(output)
                continue
            if ctx.rebuilt is None:
                ctx.rebuilt = {}
            ctx.rebuilt[j] = (t.size(), t.stride(), t.storage_offset())
            tensors[j] = output


class TrainingCall:
    """What Dynamo calls for a training graph: AOTAutograd's compiled function until fuser has
    both programs and they link (see the module's doc), then `_Fused`."""

    def __init__(self, aot_compiled: Any, record: Any, facts: ForwardFacts):
        self.aot_compiled = aot_compiled
        self.record = record
        self.facts = facts
        self.plan: Optional[_Plan] = None
        self.settled = False  # the direct form was built, or can never be
        forward = [p for p in record.programs if p.kind == "forward"]
        self.unused = UnusedGradients(forward[0].plan.graph, facts) if len(forward) == 1 else None
        # the inputs the backward reads, as they are or through values the forward computed
        # from them (None: not known, every input counted)
        self.read_by_backward = (saved_from(forward[0].plan.graph, facts.n_user, facts.n_inputs)
                                 if len(forward) == 1 else None)

    def __call__(self, *args: Any) -> Any:
        if not self.settled:
            self._settle()
        if self.plan is None:
            return self._through_aot(args)
        if not torch.is_grad_enabled() and not torch.is_inference_mode_enabled():
            # a training graph called with grad off: the function turns it on inside (its
            # outputs require grad), so the node is recorded anyway, as AOTAutograd's runtime
            # wrapper records it (not under inference_mode, where eager records nothing)
            with torch.enable_grad():
                return _Fused.apply(self.plan, *args)
        return _Fused.apply(self.plan, *args)

    def _settle(self) -> None:
        programs = self.record.programs
        forward = [p for p in programs if p.kind == "forward"]
        backward = [p for p in programs if p.kind == "backward"]
        if len(forward) != 1 or len(backward) > 1:
            self.settled = True
        elif backward:
            self.plan = _link(self.facts, forward[0], backward[0], self.unused)
            self.settled = True

    def _through_aot(self, args: tuple) -> Any:
        """AOTAutograd's compiled function, its autograd node hooked to give no gradient to the
        inputs that reach no output given one (AOTAutograd's backward returns zeros for them),
        and to refuse create_graph=True where `_Fused` refuses it: AOTAutograd's backward runs
        fuser's backward program, whose gradients a second backward (a Hessian's, whose input
        is a view needing grad) took as constants, silently zeros."""
        outs = self.aot_compiled(*args)
        node = _aot_node(outs, self.facts)
        if node is not None:
            if self.unused is not None:
                node.register_hook(functools.partial(_drop_unused, self.unused))
            if reads_values_needing_grad(needs_grad(node), self.read_by_backward, self.facts.n_inputs):
                node.register_prehook(refuse_create_graph)
        return outs


def _aot_node(outs: Any, facts: ForwardFacts) -> Any:
    """The autograd node of AOTAutograd's CompiledFunction behind `outs` (an output returned as
    a plain tensor hangs from it through its `_unsafe_view`), None where there is none."""
    for k, out in enumerate(outs if isinstance(outs, (list, tuple)) else ()):
        node = getattr(out, "grad_fn", None)
        if node is not None and k in facts.unsafe_views and node.next_functions:
            node = node.next_functions[0][0]
        if node is not None and is_aot_node(node) and len(node.next_functions) == facts.n_inputs:
            return node
    return None


def _drop_unused(unused: UnusedGradients, grad_inputs: tuple, grad_outputs: tuple) -> Optional[tuple]:
    """A post-hook of AOTAutograd's node: its gradients (`grad_inputs`, one per input) with None
    for the inputs that reach none of the outputs given a gradient (`grad_outputs`, as given:
    None where AOTAutograd's backward took zeros)."""
    if len(grad_inputs) != unused.n_inputs or len(grad_outputs) != unused.n_user:
        return None
    given = tuple(g is not None for g in grad_outputs)
    return None if given == unused.differentiable else unused.drop(grad_inputs, given)
