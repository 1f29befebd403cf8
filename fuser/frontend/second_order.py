"""Second-order gradients through fuser's backward: refused, never silently constant.

fuser's backward runs generated kernels, which record no autograd graph, so a backward run with
create_graph=True (a Hessian, a gradient penalty) would hand the second differentiation
constants: silently zero terms. `_Fused` (training.py) refuses it; the graphs AOTAutograd's own
runtime runs get the same refusal here, on every call: a training graph's first calls
(`TrainingCall._through_aot`) and the graphs that never become a TrainingCall (`AotCall`: an
input or a buffer written, BatchNorm's running statistics, an input's view returned). A backward
that reads no input needing a gradient, nor a value computed from one, differentiates.
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from ..errors import UnsupportedError


def input_positions_under(nodes: list, placeholders: list, through: Any = None) -> frozenset:
    """The positions (among `placeholders`) of the graph inputs that `nodes` are computed from;
    `through`: only along nodes for which it is true."""
    position = {p: k for k, p in enumerate(placeholders)}
    found, seen, stack = set(), set(), list(nodes)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if through is not None and not through(n):
            continue
        if n in position:
            found.add(position[n])
        stack.extend(n.all_input_nodes)
    return frozenset(found)


CREATE_GRAPH_REFUSED = (
    "fuser: create_graph=True through the backward of a function compiled by fuser "
    "(fuser.jit or torch.compile(backend=\"fuser\")) is not supported: its backward "
    "runs generated kernels, which record no autograd graph, so gradients of its "
    "gradients would be silently wrong; take the gradient of the eager function for "
    "a higher-order term")


class AotCall:
    """What Dynamo calls for a training graph that is no TrainingCall (it writes an input or a
    buffer, BatchNorm's running statistics; it returns a view of an input): AOTAutograd's
    compiled function, its runtime layers and all, made to refuse create_graph=True where
    `_Fused` refuses it (`TrainingCall._through_aot` hooks its first calls' nodes alike).
    Unrefused, a Hessian's second backward took the gradients of fuser's backward program as
    constants on every call, silently zeros. The refusal goes into the backward of the
    autograd.Function AOTAutograd made for the graph, found from the first call's node; later
    calls pass straight through (a pre-hook on each call's node cost 16 us of an 80 us call of
    a buffer-writing graph on the development CPU; this wrapper, 1 to 3 us). Where a torch's
    node does not lead to that Function (`_aot_function`), each call's node gets the pre-hook."""

    __slots__ = ("aot_compiled", "n_inputs", "read_by_backward", "guarded", "tensor_inputs")

    def __init__(self, aot_compiled: Any, record: Any):
        self.aot_compiled = aot_compiled
        self.guarded = False  # (the Function's backward refuses: calls pass straight through)
        forward = [p for p in record.programs if p.kind == "forward"]
        graph = forward[0].plan.graph if len(forward) == 1 else None
        placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"] if graph is not None else None
        self.n_inputs = len(placeholders) if placeholders is not None else -1
        # per input, whether it is a tensor (the node has edges for those only: `needs_grad`)
        self.tensor_inputs = (tuple(isinstance(n.meta.get("val"), torch.Tensor) for n in placeholders)
                              if placeholders is not None else None)
        returns = _forward_returns()
        # the inputs the backward reads (None: not known, every input counted)
        self.read_by_backward = (saved_from(graph, returns, self.n_inputs)
                                 if graph is not None and returns is not None else None)

    def __call__(self, *args: Any) -> Any:
        if self.guarded:
            return self.aot_compiled(*args)
        first = torch._C._autograd._get_sequence_nr()
        outs = self.aot_compiled(*args)
        node = _aot_node_made_since(first, outs, args)
        if node is None:  # (none while no call records one: under no_grad)
            return outs
        function = _aot_function(node)
        if function is not None and _refuse_create_graph_in(function, self.read_by_backward, self.n_inputs):
            self.guarded = True
        elif reads_values_needing_grad(needs_grad(node, self.tensor_inputs), self.read_by_backward,
                                        self.n_inputs):
            node.register_prehook(refuse_create_graph)
        return outs


def _forward_returns() -> Optional[int]:
    """How many of the forward graph's outputs AOTAutograd's runtime takes (the written inputs'
    values, the user's outputs, intermediate bases, an RNG offset) before the values saved for
    the backward, as its metadata on the tracing context says; None where it is not there or
    effect tokens come first."""
    meta = getattr(torch._guards.TracingContext.try_get(), "fw_metadata", None)
    returns = getattr(meta, "num_forward", None)
    return returns if isinstance(returns, int) and not getattr(meta, "tokens", None) else None


def _aot_node_made_since(first: int, outs: Any, args: tuple) -> Any:
    """The autograd node of AOTAutograd's CompiledFunction among the nodes recorded since
    sequence number `first` (this call's), reached from its outputs or, where they all alias
    inputs, from the inputs it wrote (their copy_ hangs from it); None where there is none
    (nothing recorded). Older nodes are not searched: a view of an input that an earlier
    compiled graph returned hangs from that graph's node."""
    starts = [getattr(t, "grad_fn", None) for t in (outs if isinstance(outs, (list, tuple)) else (outs,))]
    for group in (starts, [getattr(a, "grad_fn", None) for a in args]):
        stack, seen = [n for n in group if n is not None], set()
        while stack:
            node = stack.pop()
            if node in seen or node._sequence_nr() < first:
                continue
            if is_aot_node(node):
                return node
            seen.add(node)
            stack.extend(n for n, _ in node.next_functions if n is not None)
    return None


def _refuse_create_graph_in(function: type, read: Optional[frozenset], n_inputs: int) -> bool:
    """Make the backward of AOTAutograd's autograd.Function `function` (one class per compiled
    graph, whose backward autograd looks up at each call) raise, as `_Fused`'s does, when it
    runs with grad mode on (create_graph=True) and reads an input that needs a gradient or a
    value the forward computed from one (`read`: the positions of those inputs among the
    graph's `n_inputs`). False where the class takes no new backward."""
    backward = function.backward

    def refusing_backward(ctx: Any, *grads: Any) -> Any:
        if torch.is_grad_enabled() and reads_values_needing_grad(ctx.needs_input_grad, read, n_inputs):
            raise UnsupportedError(CREATE_GRAPH_REFUSED)
        return backward(ctx, *grads)

    try:
        function.backward = staticmethod(refusing_backward)
    except (AttributeError, TypeError):
        return False
    return True


# AOTAutograd's internals, named here only: the autograd node a compiled graph's call records is
# of the class autograd makes for AOTAutograd's autograd.Function `CompiledFunction` (named after
# it, from torch's own module), which leads to that Function as `_forward_cls`. Each lookup falls
# back where a torch differs: a node found by the Function's module where the name differs; the
# per-node pre-hook (`refuse_create_graph`) where the Function cannot be reached.
_AOT_NODE_NAME = "CompiledFunctionBackward"
_AOT_MODULE = "torch._functorch."


def is_aot_node(node: Any) -> bool:
    """Whether `node` is the autograd node of AOTAutograd's CompiledFunction."""
    if type(node).__name__ == _AOT_NODE_NAME:
        return True
    function = getattr(type(node), "_forward_cls", None)
    return isinstance(node, getattr(torch.autograd.function, "BackwardCFunction", ())) \
        and getattr(function, "__module__", "").startswith(_AOT_MODULE)


def _aot_function(node: Any) -> Optional[type]:
    """The autograd.Function of AOTAutograd's node `node`, whose backward `_refuse_create_graph_in`
    replaces; None where this torch's node does not lead to one."""
    function = getattr(type(node), "_forward_cls", None)
    if isinstance(function, type) and issubclass(function, torch.autograd.Function) \
            and callable(getattr(function, "backward", None)):
        return function
    return None


def needs_grad(node: Any, tensor_inputs: Optional[tuple] = None) -> tuple:
    """Per input of `node`, whether it needs a gradient (no edge: it needs none). An autograd
    Function's node has edges for its tensor inputs only: with `tensor_inputs` (per input of
    the graph, whether it is a tensor) counting as many, spread over all the inputs, as its
    backward's `ctx.needs_input_grad` is."""
    edges = tuple(edge is not None for edge, _ in node.next_functions)
    if tensor_inputs is None or sum(tensor_inputs) != len(edges):
        return edges
    per_tensor = iter(edges)
    return tuple(next(per_tensor) if is_tensor else False for is_tensor in tensor_inputs)


def reads_values_needing_grad(needs: tuple, read: Optional[frozenset], n_inputs: int) -> bool:
    """Whether a backward reads an input that needs a gradient or a value the forward computed
    from one (`_Fused`'s test): `needs`, per input, whether it needs one; `read`: the positions
    of the inputs the backward reads, None where not known (or where `needs` does not count the
    graph's `n_inputs`): then any input counts."""
    if read is None or len(needs) != n_inputs:
        return any(needs)
    return any(needs[k] for k in read)


def saved_from(graph: torch.fx.GraphModule, n_returns: int, n_inputs: int) -> Optional[frozenset]:
    """The positions of the forward graph's inputs that its saved tensors (the outputs after
    the first `n_returns`) are or are computed from; None where the graph's outputs do not tell."""
    nodes = list(graph.graph.nodes)
    out = next(n for n in nodes if n.op == "output").args[0]
    placeholders = [n for n in nodes if n.op == "placeholder"]
    if not isinstance(out, (list, tuple)) or len(out) < n_returns or len(placeholders) != n_inputs:
        return None
    saved = [n for n in out[n_returns:] if isinstance(n, torch.fx.Node)
             and isinstance(n.meta.get("val"), torch.Tensor)]
    return input_positions_under(saved, placeholders)


def refuse_create_graph(grad_outputs: tuple) -> None:
    """A pre-hook of AOTAutograd's node whose backward reads values that need gradients: a
    backward with create_graph=True (grad mode on while it runs) raises, as `_Fused`'s does."""
    if torch.is_grad_enabled():
        raise UnsupportedError(CREATE_GRAPH_REFUSED)
