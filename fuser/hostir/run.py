"""Running a host program: HostRuntime is the per-signature runtime of a multi-device or
stream-parallel fusion (FusionExecutorCache picks it), HostRunner executes the ops.

Values live in a dict keyed by tensor identity. A loop iteration rebinds its chunk tensors;
`dests` holds the chunk views that exprs write into (the chunks of preallocated outputs). On
CUDA, each iteration runs on its own stream (a pool indexed by `i % numberOfStreams`), after
waiting for the caller's stream; the caller's stream waits for all of them after the loop.
On the CPU the same ops run in order.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Optional, Sequence

import torch

from ..codegen import KernelLauncher, target_for
from ..codegen.kernel import can_emit
from ..errors import FuserError, FusionInputError, InternalError
from ..evaluate.aten import evaluate_expr, evaluate_expr_into
from ..evaluate.binding import BindingTable
from ..evaluate.evaluator import EvalContext, check_output
from ..ir import Fusion, Scalar, TensorView
from ..multidevice.communication import Collective
from ..multidevice.communicator import Communicator, Pending
from ..multidevice.sharding import LocalSizes, StreamChunker, mesh_index, team
from ..schedulers.plan import plan_kernel
from ..segment import segment_fusion
from .lower import lower
from .nodes import (Allocate, Communicate, Evaluate, ForLoop, GetCurrentStream, HostProgram,
                    LaunchKernel, SetCurrentStream, ShardByStream, Synchronize, Wait)

MAX_STREAMS = int(os.environ.get("FUSER_MAX_STREAMS", "8"))

# (what ran: "Evaluate", "LaunchKernel", a collective's name; its expr; the values it produced)
Trace = Callable[[str, Any, list], None]


class _State:
    __slots__ = ("table", "device", "comm", "trace", "values", "dests", "pending", "index",
                 "ctx", "loop_ctx", "chunkers", "main", "pool", "cuda")

    def __init__(self, table: BindingTable, device, comm: Communicator, trace: Optional[Trace],
                 sizes: LocalSizes):
        self.table, self.device, self.comm, self.trace = table, device, comm, trace
        self.values: dict[int, Any] = {}
        self.dests: dict[int, torch.Tensor] = {}
        self.pending: dict[int, tuple[Pending, Any]] = {}
        self.index: dict[str, int] = {}
        self.ctx = EvalContext(table, device, sizes=sizes)
        self.loop_ctx = EvalContext(table, device, with_streams=True, sizes=sizes)
        self.chunkers: dict[int, StreamChunker] = {}
        self.cuda = device.type == "cuda"
        self.main = None
        self.pool: list = []

    def value(self, v, ctx: EvalContext):
        if isinstance(v, Scalar):
            return v.value if v.is_constant else ctx.scalar(v)
        found = self.values.get(id(v))
        if found is None:
            raise InternalError(f"T{v.name} is read before the host program produced it")
        return found


class HostRunner:
    def __init__(self, program: HostProgram, device: torch.device):
        self.program = program
        self.device = device
        self._checked_world: Optional[int] = None
        self.sizes = LocalSizes()  # every tensor's local sizes, compiled on first use
        self._teams: dict[tuple[int, int], tuple[int, ...]] = {}
        self._dispatch = {
            Allocate: self._allocate, ForLoop: self._for, GetCurrentStream: self._get_stream,
            SetCurrentStream: self._set_stream, Synchronize: self._synchronize,
            ShardByStream: self._shard_by_stream, Evaluate: self._evaluate,
            LaunchKernel: self._launch, Communicate: self._communicate, Wait: self._wait,
        }

    def run(self, args: Sequence[Any], table: BindingTable, comm: Optional[Communicator] = None,
            device=None, trace: Optional[Trace] = None) -> list:
        comm = comm or Communicator.default()
        self._check_world(comm)
        state = _State(table, device or self.device, comm, trace, self.sizes)
        for val, arg in zip(self.program.inputs, args):
            state.values[id(val)] = arg
        self._ops(self.program.body, state)
        return [state.values[id(o)] for o in self.program.outputs]

    def _check_world(self, comm: Communicator) -> None:
        if self._checked_world == comm.world_size:
            return
        for tv in self.program.inputs + self.program.outputs:
            mesh = getattr(tv, "device_mesh", None)
            if mesh is not None and max(mesh.devices) >= comm.world_size:
                raise FuserError(
                    f"T{tv.name} lives on {mesh!r}, which needs {max(mesh.devices) + 1} processes, "
                    f"but this program runs {comm.world_size}; launch it with "
                    f"torchrun --nproc-per-node={max(mesh.devices) + 1}, or use a mesh of one device")
        self._checked_world = comm.world_size

    def _ops(self, ops: list, state: _State) -> None:
        for op in ops:
            self._dispatch[type(op)](op, state)

    # -- memory and loops -------------------------------------------------------------------

    def _allocate(self, op: Allocate, state: _State) -> None:
        tv = op.tv
        state.values[id(tv)] = torch.empty(self.sizes(tv, state.table), dtype=tv.dtype.to_torch(),
                                           device=state.device)

    def _for(self, op: ForLoop, state: _State) -> None:
        n = state.table.extent(op.extent, f"loop {op.index} extent")
        if state.cuda and not state.pool:
            count = max(1, min(n, MAX_STREAMS))
            state.pool = _stream_pool(state.device, count)
        try:
            for i in range(n):
                state.index[op.index] = i
                state.loop_ctx.stream_index = i
                self._ops(op.body, state)
        finally:
            state.loop_ctx.stream_index = None
            if state.cuda and state.main is not None:
                torch.cuda.set_stream(state.main)  # also when an op in the loop raised

    def _stream_of(self, index: Optional[str], state: _State):
        if index is None:
            return state.main
        return state.pool[state.index[index] % len(state.pool)]

    def _get_stream(self, op, state: _State) -> None:
        if state.cuda:
            state.main = torch.cuda.current_stream(state.device)

    def _set_stream(self, op: SetCurrentStream, state: _State) -> None:
        if state.cuda:
            torch.cuda.set_stream(self._stream_of(op.index, state))

    def _synchronize(self, op: Synchronize, state: _State) -> None:
        if state.cuda:
            torch.cuda.current_stream(state.device).wait_stream(self._stream_of(op.index, state))

    def _shard_by_stream(self, op: ShardByStream, state: _State) -> None:
        src = state.value(op.src, state.ctx)
        chunker = state.chunkers.get(id(op))
        if chunker is None:
            chunker = StreamChunker(op.dst, state.table, tuple(src.shape), f"T{op.src.name}", self.sizes)
            state.chunkers[id(op)] = chunker
        view = chunker(src, state.index[op.index])
        state.values[id(op.dst)] = view
        state.dests[id(op.dst)] = view
        for a in op.aliases:
            state.dests[id(a)] = view

    # -- compute ----------------------------------------------------------------------------

    def _evaluate(self, op: Evaluate, state: _State) -> None:
        ctx = state.loop_ctx if op.in_loop else state.ctx
        for expr in op.segment.exprs:
            args = [state.value(v, ctx) for v in expr.inputs]
            dsts = [state.dests.get(id(o)) for o in expr.outputs] if op.in_loop else None
            if dsts and any(d is not None for d in dsts):
                outs = evaluate_expr_into(expr, args, ctx, dsts)
            else:
                outs = evaluate_expr(expr, args, ctx)
            for o, value in zip(expr.outputs, outs):
                if isinstance(o, TensorView):
                    check_output(expr, o, value, ctx)
                state.values[id(o)] = value
            if state.trace is not None:
                state.trace("Evaluate", expr, outs)

    def _launch(self, op: LaunchKernel, state: _State) -> None:
        seg, ctx = op.segment, state.ctx
        scalars = {id(v): ctx.scalar(v) for v in op.scalars}
        inputs = [state.value(v, ctx) for v in seg.inputs]
        outs = op.launcher.run(inputs, scalars, state.table.values, state.device)
        if outs is None:  # an empty loop space: ATen does it
            self._evaluate(Evaluate(seg), state)
            return
        for o, t in zip(seg.outputs, outs):
            state.values[id(o)] = t
        if seg.source is not op.launcher.last_source:
            seg.source = op.launcher.last_source
        if state.trace is not None:
            state.trace("LaunchKernel", seg, outs)

    # -- communication ----------------------------------------------------------------------

    def _communicate(self, op: Communicate, state: _State) -> None:
        c = op.comm
        ctx = state.loop_ctx if op.in_loop else state.ctx
        comm = state.comm
        members = self._teams.get((op.number, comm.rank))
        if members is None:
            members = self._teams[(op.number, comm.rank)] = team(c.mesh, c.parallel_type, comm.rank)
        inp = state.value(c.inputs[0], ctx)
        out_tv = c.outputs[0]
        dst = state.dests.get(id(out_tv)) if op.in_loop else None
        reduce = c.reduce.value if c.reduce is not None else "sum"

        def buffer():
            return dst if dst is not None else torch.empty(
                ctx.shape(out_tv), dtype=out_tv.dtype.to_torch(), device=inp.device)

        kind = c.collective
        if kind is Collective.allreduce:
            buf = inp if op.in_place else (dst.copy_(inp) if dst is not None else inp.clone())
            result, pending = buf, comm.allreduce(buf, members, reduce)  # in place
        elif kind is Collective.allgather:
            result = buffer()
            pending = comm.allgather(result, inp, members, c.in_axis)
        elif kind is Collective.reduce_scatter:
            result = buffer()
            pending = comm.reduce_scatter(result, inp, members, c.out_axis, reduce)
        elif kind is Collective.all_to_all:
            result = buffer()
            pending = comm.all_to_all(result, inp, members, c.in_axis, c.out_axis)
        elif kind is Collective.shard:
            k = mesh_index(c.mesh, c.parallel_type, comm.rank)
            n = inp.shape[c.out_axis] // len(members)
            piece = inp.narrow(c.out_axis, k * n, n)
            result = dst.copy_(piece) if dst is not None else piece.clone(memory_format=torch.contiguous_format)
            pending = Pending(comm, "shard")
        elif kind is Collective.broadcast:
            result = buffer()
            j = state.index[op.loop_index]
            per_rank = state.table.extent(op.loop_extent) // len(members)
            chunk = self.sizes(out_tv, state.table, True)[c.out_axis]  # every chunk but a last
            if chunk * per_rank != inp.shape[c.in_axis]:
                raise FusionInputError(
                    f"T{c.inputs[0].name} axis {c.in_axis}: {inp.shape[c.in_axis]} rows per rank do "
                    f"not split into {per_rank} stream chunks of {chunk}; gathering chunk by chunk "
                    f"needs each chunk on one rank")
            root = members[j // per_rank]
            if comm.rank == root:
                rows = result.shape[c.out_axis]
                result.copy_(inp.narrow(c.in_axis, (j % per_rank) * chunk, rows))
            pending = comm.broadcast(result, members, root)
        else:
            raise InternalError(f"no host implementation of {kind}")
        state.pending[op.number] = (pending, result, dst)

    def _wait(self, op: Wait, state: _State) -> None:
        c = op.communicate.comm
        pending, result, dst = state.pending.pop(op.communicate.number)
        pending.wait()
        if dst is not None and result is not dst:
            result = dst.copy_(result)
        ctx = state.loop_ctx if op.communicate.in_loop else state.ctx
        check_output(c, c.outputs[0], result, ctx)
        state.values[id(c.outputs[0])] = result
        if state.trace is not None:
            state.trace(c.collective.value, c, [result])


def _stream_pool(device, count: int) -> list:
    key = (device.index if device.index is not None else torch.cuda.current_device(), count)
    pool = _POOLS.get(key)
    if pool is None:
        with torch.cuda.device(device):
            pool = [torch.cuda.Stream() for _ in range(count)]
        _POOLS[key] = pool
    return pool


_POOLS: dict[tuple, list] = {}  # CUDA streams are reused across executions, never recreated


class ShapeOnlyCommunicator(Communicator):
    """Collectives that only produce the right shapes: for shape inference on meta tensors."""

    def __init__(self, rank: int, world_size: int):
        super().__init__(None, rank, world_size, "meta")

    def _noop(self, *args, **kwargs) -> Pending:
        return Pending(self, "meta")

    allreduce = allgather = reduce_scatter = all_to_all = broadcast = _noop


class HostRuntime:
    """The runtime of one input signature of a multi-device or stream-parallel fusion."""

    def __init__(self, fusion: Fusion, device: torch.device, use_kernels: bool = True):
        self.fusion = fusion
        self.device = device
        self.target = target_for(device)
        self.launchers: list[KernelLauncher] = []
        segment_kernels = None
        if use_kernels:
            target = self.target
            segment_kernels = lambda sub: segment_fusion(  # noqa: E731
                sub, lambda exprs, i, o: plan_kernel(exprs, i, o, lambda e: can_emit(e, target)),
                lambda e: can_emit(e, target))
        self.program = lower(fusion, self._make_launcher, segment_kernels)
        self.segments = self.program.segments
        self.runner = HostRunner(self.program, device)
        flags = {f.strip() for f in os.environ.get("FUSER_DUMP", "").split(",") if f.strip()}
        if "fusion_ir" in flags:
            print(fusion)
        if "host_ir" in flags:
            print(self.program)
        if "segments" in flags:
            print("\n\n".join(s.describe() for s in self.segments))

    def _make_launcher(self, seg) -> LaunchKernel:
        first = seg.outputs[0].name if seg.outputs else len(self.launchers)
        launcher = KernelLauncher(seg.params, f"fuser_{seg.params.template.name}_T{first}")
        self.launchers.append(launcher)
        found = {id(v): v for e in seg.exprs for v in e.inputs if isinstance(v, Scalar) and not v.is_constant}
        return LaunchKernel(seg, launcher, list(found.values()))

    def run(self, args: Sequence[Any], table: BindingTable, comm: Optional[Communicator] = None) -> list:
        return self.runner.run(args, table, comm)

    def infer_meta(self, args: Sequence[Any], table: BindingTable, rank: int = 0, world_size: int = 1,
                   trace: Optional[Trace] = None) -> list:
        """Run the host program on meta tensors: every op, in loops too, on chunk-shaped meta
        tensors, each result checked against the IR; collectives only shape their outputs."""
        metas = [torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="meta")
                 if isinstance(a, torch.Tensor) else a for a in args]
        runner = HostRunner(_aten_only(self.program), torch.device("meta"))
        return runner.run(metas, table, ShapeOnlyCommunicator(rank, world_size),
                          torch.device("meta"), trace)

    def triton_code(self) -> list[str]:
        return [l.last_source for l in self.launchers if l.last_source]


def _aten_only(program: HostProgram) -> HostProgram:
    """The program with its kernel launches replaced by ATen evaluation of the same exprs."""
    def swap(ops):
        out = []
        for op in ops:
            if isinstance(op, LaunchKernel):
                out.append(Evaluate(op.segment))
            elif isinstance(op, ForLoop):
                out.append(ForLoop(op.index, op.extent, swap(op.body)))
            else:
                out.append(op)
        return out
    return HostProgram(program.inputs, program.outputs, swap(program.body), program.segments)
