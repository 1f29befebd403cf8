"""Running a planned graph: a short interpreter over its steps.

Every graph value has a slot in a list. A fusion step executes its FusionDefinition (built once,
its FusionExecutorCache reused by every call) on the slots it reads, plus the size symbols it
takes as scalars, read from the graph inputs that hold them; an eager step calls its ATen op.
A slot is cleared after its last reader, so intermediates die as early as in eager mode.
"""
from __future__ import annotations

import ast
import contextvars
import operator
import re
from typing import Any, Callable, Optional

import torch
from torch.fx import Node

from ..errors import FusionInputError
from ..runtime.in_place import write_back
from .host_scalars import is_host_scalar
from .lowering import Region
from .partition import UNSUPPORTED, Eager, Plan

# the statistics of the jitted callable being called (see jit.py); None outside one
CURRENT_STATS: contextvars.ContextVar = contextvars.ContextVar("fuser_jit_stats", default=None)


class _Slot:
    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


def _template(a: Any, slot_of: dict) -> Any:
    if isinstance(a, Node):
        return _Slot(slot_of[a])
    if isinstance(a, list):  # FX's immutable_list is a list subclass ATen's signatures refuse
        return [_template(x, slot_of) for x in a]
    if isinstance(a, tuple):
        return tuple(_template(x, slot_of) for x in a)
    if isinstance(a, dict):
        return {k: _template(v, slot_of) for k, v in a.items()}
    return a


def _resolve(a: Any, env: list) -> Any:
    if type(a) is _Slot:
        return env[a.index]
    if type(a) is list:
        return [_resolve(x, env) for x in a]
    if type(a) is tuple:
        return tuple(_resolve(x, env) for x in a)
    if isinstance(a, dict):
        return {k: _resolve(v, env) for k, v in a.items()}
    return a


def _holds_slot(a: Any) -> bool:
    if type(a) is _Slot:
        return True
    if isinstance(a, (list, tuple)):
        return any(_holds_slot(x) for x in a)
    if isinstance(a, dict):
        return any(_holds_slot(x) for x in a.values())
    return False


def _source(a: Any, consts: Optional[dict]) -> str:
    """Python source of a template's value read from `env`: a slot as `env[i]`, lists and
    tuples built anew, ints, bools and None as literals, any other value as a constant named in
    `consts`. LookupError where that cannot be: a slot inside a dict or another container, or
    a constant without `consts`."""
    if type(a) is _Slot:
        return f"env[{a.index}]"
    if type(a) in (list, tuple):
        inner = "".join(_source(x, consts) + ", " for x in a)
        return f"[{inner}]" if type(a) is list else f"({inner})"
    if type(a) in (int, bool) or a is None:
        return repr(a)
    if consts is None or _holds_slot(a):
        raise LookupError
    name = f"c{len(consts)}"
    consts[name] = a
    return name


def _output_reader(output: Any) -> Callable[[list], Any]:
    """`_resolve(output, env)` as one generated expression (a training forward returns its
    outputs and every saved value: a tuple of tens of slots), for outputs of slots, numbers and
    None in lists and tuples; `_resolve` itself for anything else."""
    env: dict[str, Any] = {}
    try:
        exec(compile(f"def read(env):\n    return {_source(output, None)}", "<fuser program output>", "exec"), env)
    except (LookupError, SyntaxError, RecursionError, ValueError):  # (nested past the parser's limit)
        return lambda env: _resolve(output, env)
    return env["read"]


def _reader(src, slot_of: dict, device: Optional[torch.device]):
    """A function of the environment giving one fusion input: a graph value (a 0-dim CPU
    tensor copied to the fusion's GPU: host_scalars.py), or a size computed from sizes of
    graph inputs."""
    if isinstance(src, Node):
        slot = slot_of[src]
        if device is not None and device.type != "cpu" and is_host_scalar(src):
            return lambda env: _moved(env[slot], device)
        return operator.itemgetter(slot)
    reads = [(slot_of[n], axis) for n, axis in src.reads]
    fn = src.fn
    return lambda env: fn(*[env[s] if axis is None else env[s].shape[axis] for s, axis in reads])


def _moved(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A 0-dim CPU tensor copied to `device` without waiting for it: from pageable memory the
    value is staged before the call returns; pinned memory is read by the copy later, after a
    write-back may have changed it (the step counter's), so a pageable copy of it goes."""
    return (t.clone() if t.is_pinned() else t).to(device, non_blocking=True)


class FusionStep:
    def __init__(self, region: Region, slot_of: dict, record: Any = None):
        self.region = region
        self.record = record  # (its Dynamo graph names the user's arguments in an input error)
        self.fd = region.fd
        self.readers = [_reader(src, slot_of, region.device) for src in region.inputs]  # env -> fusion input
        self.moves = any(type(r) is not operator.itemgetter for r, src in zip(self.readers, region.inputs)
                         if isinstance(src, Node))
        self.writes = [(slot_of[n], i) for n, i in region.outputs.items() if isinstance(i, int)]
        self.aliases = [(slot_of[n], slot_of[i]) for n, i in region.outputs.items() if isinstance(i, Node)]
        self.write_backs = [(k, slot_of[n]) for k, n in region.write_backs]
        self.n_outputs = len(region.fd.fusion.outputs())  # (aliased ones included)
        self.frees: list[int] = []

    def run(self, env: list) -> None:
        outs = self.execute([read(env) for read in self.readers])
        for slot, i in self.writes:
            env[slot] = outs[i]
        for slot, src in self.aliases:
            env[slot] = env[src]
        if self.write_backs and len(outs) == self.n_outputs:  # (else `fd.execute` wrote them: a first call)
            written, dsts, values = [], [], []
            for k, slot in self.write_backs:
                dst, value = env[slot], outs[k]
                if value is dst:  # (the kernel wrote it there: runtime/in_place.py)
                    written.append(dst)
                else:
                    dsts.append(dst)
                    values.append(value)
            write_back(written, dsts, values)

    def execute(self, inputs: list) -> list:
        try:
            cache = self.fd.cache  # (made by the first call)
            if cache is None:
                return self.fd.execute(inputs)
            if self.fd.writes_inference:  # (fd.execute's check, which the cache's call skips)
                self.fd._check_writable(inputs)
            return cache.execute(inputs)
        except FusionInputError as e:
            self.add_graph_context(e)
            raise

    def add_graph_context(self, err: FusionInputError) -> None:
        """Appends to `err`'s message what its fusion inputs (`input 0 (T0)`), which the user
        never sees, are in the traced graph: the ATen ops the fusion computes, and the node or
        argument each input it names comes from. Its type and first line stay (a caller may
        catch it). Built only here, when an error is raised."""
        named = dict.fromkeys(int(k) for k in re.findall(r"\binput (\d+) \(", str(err)))
        inputs = self.region.inputs
        lines = [_fusion_ops(self.region.nodes) + (", where" if any(k < len(inputs) for k in named) else "")]
        arguments = _argument_names(self.record)
        lines += [f"  input {k} is {_input_origin(inputs[k], arguments)}" for k in named if k < len(inputs)]
        err.args = ("\n".join([str(err)] + lines),)

    @property
    def kernels(self) -> int:
        """Distinct kernels generated for this step, over every runtime of its definition (the
        definition is this step's alone)."""
        return len(self.kernel_names())

    def kernel_names(self) -> list[str]:
        """The canonical name of each kernel generated for this step (one per kernel generated;
        kernels alike but for their tensors' names share one, and one compile)."""
        cache = self.fd.cache
        runtimes = cache.runtimes() if cache is not None else []
        return [ks.name for rt in runtimes for launcher in getattr(rt, "launchers", {}).values()
                for ks, _ in launcher.variants.values()]

    def reads_nodes(self) -> list[Node]:
        return [n for src in self.region.inputs
                for n in ([src] if isinstance(src, Node) else [r[0] for r in src.reads])]


# ATen views a step calls as Tensor methods, the same op at about 0.6 us less a call than
# through its OpOverload
_METHODS = {torch.ops.aten.view.default: torch.Tensor.view, torch.ops.aten.permute.default: torch.Tensor.permute,
            torch.ops.aten.t.default: torch.Tensor.t, torch.ops.aten.unsqueeze.default: torch.Tensor.unsqueeze,
            torch.ops.aten.squeeze.dim: torch.Tensor.squeeze}


def is_batched(t: torch.Tensor) -> bool:
    """Whether `t` is a batched tensor of torch's vmap (autograd's is_grads_batched)."""
    return torch._C._functorch.is_legacy_batchedtensor(t) or torch._C._functorch.is_batchedtensor(t)


def _dtype_casts(value: Any, traced: Any) -> dict:
    """{output position (None: the value itself): traced dtype} where an eager op's tensor
    output has another dtype than its trace. Not a quantized tensor's (qint8), which the trace
    records as float: the ops after it (dequantize) take it as it is, as in eager."""
    def differs(v: Any, t: Any) -> bool:
        return isinstance(v, torch.Tensor) and isinstance(t, torch.Tensor) and v.dtype != t.dtype \
            and not v.is_quantized
    if isinstance(value, torch.Tensor):
        return {None: traced.dtype} if differs(value, traced) else {}
    if isinstance(value, (tuple, list)) and isinstance(traced, (tuple, list)) and len(value) == len(traced):
        return {k: t.dtype for k, (v, t) in enumerate(zip(value, traced)) if differs(v, t)}
    return {}


def _cast(value: Any, casts: dict) -> Any:
    if None in casts:
        return value.to(casts[None])
    out = [v.to(casts[k]) if k in casts else v for k, v in enumerate(value)]
    return tuple(out) if isinstance(value, tuple) else out  # (the graph's getitems read by position)


class EagerStep:
    def __init__(self, eager: Eager, slot_of: dict):
        self.eager = eager
        node = eager.node
        self.target = node.target
        self.args = _template(node.args, slot_of)
        self.kwargs = _template(dict(node.kwargs), slot_of)
        self.slot = slot_of[node]
        self.frees: list[int] = []
        self._straight = self._straight_line()
        self.run = self._first_run  # (an attribute: no method binding a call)

    def _first_run(self, env: list) -> None:
        """The first call compares the op's outputs with the traced dtypes: some of ATen's CPU
        kernels and their meta functions disagree (native batch norm of bf16 on the CPU returns
        bf16 statistics where the trace says fp32), and the fusions after the step were built
        for the traced ones. Where they differ, every call casts to them."""
        self._straight(env)
        casts = _dtype_casts(env[self.slot], self.eager.node.meta.get("val"))
        if not casts:
            self.run = self._straight
            return
        straight, slot = self._straight, self.slot

        def run(env: list) -> None:
            straight(env)
            env[slot] = _cast(env[slot], casts)
        self.run = run
        env[slot] = _cast(env[slot], casts)

    def _straight_line(self) -> Callable[[list], None]:
        """`run` as one generated line, `env[slot] = target(env[i], [env[j], 4], ...)`: its
        arguments read from their slots without walking the templates at every call."""
        consts: dict[str, Any] = {}
        kwargs = self.kwargs
        if type(kwargs) is not dict or not all(type(k) is str and k.isidentifier() for k in kwargs):
            return self._run_templates
        target = self.target if kwargs else _METHODS.get(self.target, self.target)
        try:
            call = ", ".join([_source(a, consts) for a in self.args]
                             + [f"{k}={_source(v, consts)}" for k, v in kwargs.items()])
        except LookupError:
            return self._run_templates
        env = dict(consts, target=target)
        exec(compile(f"def run(env):\n    env[{self.slot}] = target({call})", "<fuser eager step>", "exec"), env)
        return env["run"]

    def _run_templates(self, env: list) -> None:
        env[self.slot] = self.target(*_resolve(self.args, env), **_resolve(self.kwargs, env))

    def reads_nodes(self) -> list[Node]:
        return list(self.eager.node.all_input_nodes)


class GraphProgram:
    """The compiled form of one ATen graph (forward, backward or inference): a boxed callable."""

    def __init__(self, plan: Plan, kind: str, record: Any = None, output_names: Optional[list] = None):
        # AOTAutograd passes the arguments as one list we may clear (in __dict__, so that the
        # wrappers it puts around a backward copy it along)
        self._boxed_call = True
        self.plan = plan
        self.kind = kind
        self.record = record
        # the outputs' names in the graph as AOTAutograd made it (planning may rename a node:
        # an output view of an input gets a copy of its own)
        self.output_names = output_names
        gm = plan.graph
        nodes = list(gm.graph.nodes)
        slot_of = {n: k for k, n in enumerate(nodes)}
        self.n_slots = len(nodes)
        self.inputs = [slot_of[n] for n in nodes if n.op == "placeholder"]
        self.constants = [(slot_of[n], _fetch_attr(gm, n.target)) for n in nodes if n.op == "get_attr"]
        self.steps = [FusionStep(s, slot_of, record) if isinstance(s, Region) else EagerStep(s, slot_of)
                      for s in plan.steps]
        out_node = next(n for n in nodes if n.op == "output")
        self.output = _template(out_node.args[0], slot_of)
        self._resolve_output = _output_reader(self.output)
        self._set_frees(out_node, slot_of)
        self._one_fusion = self._one_fusion_form(slot_of)
        self._plain = _plain_outputs(out_node) if kind == "forward" else []

    def _one_fusion_form(self, slot_of: dict) -> Optional[tuple]:
        """For a graph that is one fusion of graph inputs whose outputs are the graph's (the
        common case): (the fusion step, the argument positions it reads, per graph output
        ("out", k) for fusion output k, ("arg", j) for argument j or ("const", value) for a
        value of the graph itself), so that a call skips the environment of slots."""
        if len(self.steps) != 1 or not isinstance(self.steps[0], FusionStep) or self.constants:
            return None
        step = self.steps[0]
        position = {slot: j for j, slot in enumerate(self.inputs)}
        sources = step.region.inputs
        if not all(isinstance(src, Node) for src in sources) or step.aliases or step.moves or step.write_backs:
            return None
        take = [position.get(slot_of[src]) for src in sources]
        if None in take or type(self.output) not in (list, tuple):
            return None
        written = dict(step.writes)
        give = []
        for o in self.output:
            if type(o) is not _Slot:
                if isinstance(o, (list, tuple, dict)):
                    return None
                give.append(("const", o))  # None (no gradient) or a Python number
            elif o.index in written:
                give.append(("out", written[o.index]))
            elif o.index in position:
                give.append(("arg", position[o.index]))
            else:
                return None
        return step, take, give

    def positional_call(self) -> Callable[..., Any]:
        """The program as a function of positional arguments (as Dynamo calls a compiled
        graph), straight-line for a one-fusion graph: its fusion's inputs taken by position,
        its outputs given by position, no list of slots. Other graphs call `self`."""
        if self._one_fusion is None:
            return lambda *args: self(list(args))
        step, take, give = self._one_fusion
        env = {"CURRENT_STATS": CURRENT_STATS, "record": self.record, "fd": step.fd,
               "FusionInputError": FusionInputError, "step": step}
        inputs = "".join(f"args[{j}], " for j in take)
        parts = []
        for k, (kind, v) in enumerate(give):
            if kind == "const":
                env[f"c{k}"] = v
                parts.append(f"c{k}")
            else:
                parts.append(f"outs[{v}]" if kind == "out" else f"args[{v}]")
        result = (f"[{', '.join(parts)}]" if type(self.output) is list
                  else f"({''.join(p + ', ' for p in parts)})")
        lines = ["def call(*args):",
                 "    stats = CURRENT_STATS.get()",
                 "    if stats is not None and record is not None:",
                 "        stats.saw(record)",
                 "    cache = fd.cache",  # made by the first call (a step with write-backs, whose
                 # inputs FusionStep.execute checks, is no one-fusion program)
                 "    try:",
                 f"        outs = (cache.execute if cache is not None else fd.execute)([{inputs}])",
                 "    except FusionInputError as e:",  # (no cost to a call that raises nothing)
                 "        step.add_graph_context(e)",
                 "        raise",
                 f"    return {result}"]
        exec(compile("\n".join(lines), f"<fuser {self.kind} program>", "exec"), env)
        call = env["call"]
        if self._plain:
            plain = self._plain
            return lambda *args: _made_plain(call(*args), plain)
        return call

    def _set_frees(self, out_node: Node, slot_of: dict) -> None:
        last: dict[int, int] = {}
        for k, step in enumerate(self.steps):
            for n in step.reads_nodes():
                last[slot_of[n]] = k
        kept = {slot_of[n] for n in out_node.all_input_nodes}
        for slot, k in last.items():
            if slot not in kept:
                self.steps[k].frees.append(slot)

    def __call__(self, args: list) -> Any:
        stats = CURRENT_STATS.get()
        if stats is not None and self.record is not None:
            stats.saw(self.record)
        if self.kind == "backward" and any(isinstance(a, torch.Tensor) and is_batched(a) for a in args):
            # (AOTAutograd's own backward, a training graph's first calls, given vmap's batched
            # gradients, is_grads_batched=True: the graph's ATen ops batch them, no kernel can)
            result = self.plan.graph(*args)
            args.clear()
            return result
        if self._one_fusion is not None:
            step, take, give = self._one_fusion
            outs = step.execute([args[j] for j in take])
            result = [outs[k] if kind == "out" else args[k] if kind == "arg" else k for kind, k in give]
            args.clear()
            result = result if type(self.output) is list else tuple(result)
            return _made_plain(result, self._plain) if self._plain else result
        env: list = [None] * self.n_slots
        for slot, a in zip(self.inputs, args):
            env[slot] = a
        args.clear()
        for slot, value in self.constants:
            env[slot] = value
        for step in self.steps:
            step.run(env)
            for slot in step.frees:
                env[slot] = None
        result = self._resolve_output(env)
        return _made_plain(result, self._plain) if self._plain else result

    # -- statistics and inspection -------------------------------------------------------------

    @property
    def fusion_steps(self) -> list[FusionStep]:
        return [s for s in self.steps if isinstance(s, FusionStep)]

    @property
    def eager_steps(self) -> list[EagerStep]:
        return [s for s in self.steps if isinstance(s, EagerStep)]

    def counts(self) -> dict[str, int]:
        fusions = self.fusion_steps
        return {
            "fusions": len(fusions),
            "compiles": sum(f.fd.cache.num_runtimes for f in fusions if f.fd.cache is not None),
            "kernels": sum(f.kernels for f in fusions),
            "fallback_ops": sum(1 for s in self.eager_steps if s.eager.kind == UNSUPPORTED),
        }

    def kernel_names(self) -> set[str]:
        return {name for f in self.fusion_steps for name in f.kernel_names()}


def _plain_outputs(out_node: Node) -> list[int]:
    """The positions of a forward graph's outputs that AOTAutograd takes for new tensors and a
    caller may write in place (`y += r`), where the runtime may return a view: an
    `_unsafe_view` of an intermediate (a bias-free linear's or a matmul's 3-D result: a view of
    the 2-D product), or any op that makes no view (a reshape the plan moved to the fusion's
    edge returns a view of the kernel's output)."""
    outs = out_node.args[0]
    if not isinstance(outs, (list, tuple)):
        return []
    return [k for k, o in enumerate(outs) if isinstance(o, Node) and o.op == "call_function" and (
            (o.target is torch.ops.aten._unsafe_view.default and isinstance(o.args[0], Node)
             and o.args[0].op != "placeholder") or not getattr(o.target, "is_view", True))]


def _made_plain(result: Any, positions: list[int]) -> Any:
    """`result` with the outputs at `positions` made plain tensors where the runtime gave views
    (autograd forbids writing in place to a view a custom Function returns). A detached alias
    keeps the version counter of the memory it views, which the values saved for the backward
    on that memory (the 2-D product) share: a write to the output before a backward that reads
    them raises autograd's error, as eager's does, rather than going unseen."""
    out = list(result)
    for k in positions:
        t = out[k]
        if getattr(t, "_base", None) is not None:
            plain = t.detach()
            out = [plain if s is t else s for s in out]
    return out if type(result) is list else tuple(out)


# -- an input error in the traced graph's terms (FusionStep.add_graph_context) --------------------

_OPS_SHOWN = 8  # a fusion of a whole block lists its first ops and a count of the others


def _op_name(node: Node) -> str:
    target = node.target
    return str(target) if isinstance(target, torch._ops.OpOverload) else getattr(target, "__name__", str(target))


def _fusion_ops(nodes: list[Node]) -> str:
    shown = [f"{_op_name(n)} (node {n.name})" for n in nodes[:_OPS_SHOWN]]
    more = f" and {len(nodes) - _OPS_SHOWN} more" if len(nodes) > _OPS_SHOWN else ""
    return f"in a fusion of the traced ATen graph computing {', '.join(shown)}{more}"


def _input_origin(src: Any, arguments: list[str]) -> str:
    """What a fusion input is in the graph: a node's result, an argument, or a size of them."""
    if not isinstance(src, Node):  # a SizeInput: a size computed from sizes of graph inputs
        reads = ", ".join(_node_origin(n, arguments) + ("" if axis is None else f" axis {axis}")
                          for n, axis in src.reads)
        return f"the size {src.expr} computed from {reads}"
    return _node_origin(src, arguments)


def _node_origin(node: Node, arguments: list[str]) -> str:
    if node.op == "placeholder":
        desc = node.meta.get("desc")  # (AOTAutograd's: which of Dynamo's graph inputs it is)
        idx = getattr(desc, "idx", None) if type(desc).__name__ == "PlainAOTInput" else None
        if idx is not None and idx < len(arguments):
            return f"the argument {arguments[idx]} (graph input {node.name})"
        return f"the graph input {node.name}"
    if node.target is operator.getitem and node.args and isinstance(node.args[0], Node):
        return f"output {node.args[1]} of {_op_name(node.args[0])} (node {node.name})"
    return f"{_op_name(node)}'s result (node {node.name})"


def _argument_names(record: Any) -> list[str]:
    """The user's name of each input of Dynamo's graph, in order: the parameters of its
    `forward`, which Dynamo names after their source (`L_x_` for the argument x; a module's
    parameter as its path, `L_self_modules_fc_parameters_weight_`). [] where unknown."""
    code = getattr(record, "dynamo_code", None)
    if not code:
        return []
    try:
        forward = next(f for f in ast.parse(code.strip()).body if isinstance(f, ast.FunctionDef))
    except (SyntaxError, StopIteration):
        return []
    names = [a.arg for a in forward.args.args[1:]]  # (after self)
    return [m.group(1) if (m := re.fullmatch(r"L_(\w+?)_", n)) else n for n in names]


def _fetch_attr(gm: torch.fx.GraphModule, target: str) -> Any:
    obj: Optional[Any] = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj
