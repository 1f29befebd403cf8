"""The reference evaluator: a short loop over exprs (JAX's eval_jaxpr), reading inputs from an
environment and writing outputs to it. After every op, each output's size is checked against
the IR under the binding table (invariant 3). The same loop on meta tensors infers shapes and
strides without touching data."""
from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

import torch

from ..errors import InternalError
from ..ir import Expr, Fusion, Scalar, TensorView, Val
from ..ir.printer import format_expr, format_extent
from ..multidevice.sharding import local_extents, local_sizes
from .rules import evaluate_expr
from .binding import BindingTable


class EvalContext:
    """What a rule may ask: local sizes of a tensor, scalar values, the device. Inside a stream
    loop (`with_streams`), sizes are those of the current chunk (`stream_index`)."""

    def __init__(self, table: BindingTable, device, with_streams: bool = False, sizes=None,
                 stands_for: Optional[torch.device] = None):
        self.table = table
        self.device = device
        self.with_streams = with_streams
        self.stream_index: Optional[int] = None
        # the sharding math's local_sizes, or a runtime's precompiled LocalSizes
        self._sizes = sizes or local_sizes
        self._transposed: dict[int, tuple] = {}  # id -> (a weight, its .t()), this execution's
        # the device a run on meta tensors stands for (a compile-ahead pass), where a rule's
        # output layout depends on the device's kernel
        self.stands_for = stands_for

    def shape(self, tv: TensorView) -> tuple[int, ...]:
        return self._sizes(tv, self.table, self.with_streams, self.stream_index)

    def transposed(self, w):
        """`w.t()`, made once while the same weight comes back (a linear evaluated on each
        chunk of a stream loop reuses the view instead of an aten::t per chunk)."""
        known = self._transposed.get(id(w))
        if known is None or known[0] is not w:
            known = self._transposed[id(w)] = (w, w.t())
        return known[1]

    def scalar(self, s: Scalar) -> Any:
        if s.is_constant:
            return s.value
        return self.table.evaluate(s.expr, "scalar")


class Environment:
    """Values of the fusion's Vals during one evaluation, keyed by identity."""

    def __init__(self, ctx: EvalContext):
        self.ctx = ctx
        self._values: dict[int, Any] = {}

    def __setitem__(self, val: Val, value: Any) -> None:
        self._values[id(val)] = value

    def __getitem__(self, val: Val) -> Any:
        v = self._values.get(id(val))
        if v is None:
            if isinstance(val, Scalar):
                return self.ctx.scalar(val)
            raise InternalError(f"T{val.name} is read before any op produced it")
        return v

    def __contains__(self, val: Val) -> bool:
        return id(val) in self._values


def check_output(expr: Expr, tv: TensorView, value: Any, ctx: EvalContext) -> None:
    """Invariant 3: the produced local size equals what the IR predicts."""
    if not isinstance(value, torch.Tensor):
        raise InternalError(f"{expr.op_name} produced {type(value).__name__} for T{tv.name}")
    expected = ctx.shape(tv)
    actual = tuple(value.shape)
    if actual != expected:
        _size_mismatch(expr, tv, actual, expected, ctx)
    want = tv.dtype.to_torch()
    if value.dtype != want:
        raise InternalError(f"{expr.op_name} produced dtype {value.dtype} for T{tv.name}, IR says {want}")


def _size_mismatch(expr: Expr, tv: TensorView, actual: tuple, expected: tuple, ctx: EvalContext):
    extents = local_extents(tv, ctx.with_streams)
    if len(actual) != len(extents):
        raise InternalError(
            f"{expr.op_name} produced a {len(actual)}-D tensor of shape {actual} for T{tv.name}, "
            f"but the IR has {len(extents)} axes:\n{format_expr(expr)}")
    for axis, (e, size, want) in enumerate(zip(extents, actual, expected)):
        if want != size:
            whole = ctx.table.extent(e)
            chunk = "" if want == whole else f" (the last chunk of it: {want})"
            raise InternalError(
                f"{expr.op_name} produced size {size} on axis {axis} of T{tv.name}, but the IR "
                f"extent {format_extent(e)} is {whole}{chunk} (with "
                f"{ctx.table.describe(e)}):\n{format_expr(expr)}")


def run_exprs(exprs: Iterable[Expr], env: Environment, check: bool = True) -> None:
    # (the environment's dict read directly: this loop runs for every ATen op of every call)
    values, ctx = env._values, env.ctx
    for expr in exprs:
        args = []
        for v in expr.inputs:
            value = values.get(id(v))
            args.append(env[v] if value is None else value)  # (env: a table's scalar, or the error)
        outs = evaluate_expr(expr, args, ctx)
        for o, value in zip(expr.outputs, outs):
            if check and isinstance(o, TensorView):
                check_output(expr, o, value, ctx)
            values[id(o)] = value


def put_tensor_inputs(env: Environment, fusion: Fusion, args: Sequence[Any]) -> None:
    """The tensor inputs' values; a scalar input's the environment reads from the table, which
    holds what binding made of its argument (a float for an int, a Half's rounded to half), as
    a kernel gets it: the argument itself would be neither."""
    for val, arg in zip(fusion.inputs(), args):
        if not isinstance(val, Scalar):
            env[val] = arg


def evaluate_fusion(fusion: Fusion, args: Sequence[Any], table: BindingTable,
                    device=None, check: bool = True) -> list[torch.Tensor]:
    """Run every expr of `fusion` through ATen; `args` are the already-bound inputs."""
    from .binding import tensor_device

    ctx = EvalContext(table, device if device is not None else tensor_device(args) or torch.device("cpu"))
    env = Environment(ctx)
    put_tensor_inputs(env, fusion, args)
    run_exprs(fusion.exprs, env, check)
    return [env[o] for o in fusion.outputs()]


def infer_meta(fusion: Fusion, args: Sequence[Any], table: BindingTable) -> list[torch.Tensor]:
    """Output shapes and strides by running the ATen rules on meta tensors (no data touched);
    every op's result is checked against the IR as in a real run."""
    metas = [torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="meta")
             if isinstance(a, torch.Tensor) else a for a in args]
    return evaluate_fusion(fusion, metas, table, device=torch.device("meta"))
