"""A host program compiled for one set of sizes: the steps one execution runs.

Everything in a host program that depends only on the binding table is worked out once per
table values and kept as constants of small closures: allocation shapes, loop extents, each
chunk's offset and size, the size each output must have in each iteration (the output check of
invariant 3), scalar values, collective teams, the stream of each iteration. An execution then
runs the steps over a list of values indexed by slot: no IR walking, no sympy, no size math per
call or per chunk. The steps issue the same torch calls, in the same order, as the ops of the
program say (`hostir/nodes.py`); the only liberties are below, each stated where it is made:

- a collective whose Wait comes right after it is posted synchronously: on NCCL its kernel
  then runs on the current stream, as a plain `dist.all_reduce(chunk)` does, instead of on
  NCCL's internal stream with an event each way;
- "Synchronize Stream 0" inside a loop that queues nothing on Stream 0 waits on one event
  recorded on Stream 0 when the loop starts, instead of recording one per iteration;
- the loop's closing "SetCurrentStream to Stream 0" runs once, after the last iteration;
- the join loop ("FOR i: Synchronize Stream (i % numberOfStreams)") waits on each stream of
  the pool once, not once per iteration.

A plan is a function of the table's values (its key), the rank and the device; it never holds
the table. Each execution still gets its own immutable BindingTable, which the steps read for
error messages and for rules that ask the context for sizes.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from ..errors import InternalError
from ..evaluate.rules import evaluate_expr, evaluate_expr_into
from ..evaluate.evaluator import EvalContext, check_output
from ..ir import Scalar, TensorView
from ..ir.symbolic import format_extent
from ..multidevice.sharding import StreamChunker, local_extents
from .nodes import (Allocate, Communicate, Evaluate, ForLoop, GetCurrentStream, HostProgram,
                    LaunchKernel, SetCurrentStream, ShardByStream, Synchronize, Wait)
from .plan_comm import CommunicationSteps
from .streams import MAX_STREAMS

Step = Callable[["Call", Optional[int]], None]  # (this execution, loop iteration or None)


class Call:
    """One execution's state: values and chunk destinations by slot, posted collectives."""

    __slots__ = ("v", "d", "pending", "main", "events", "comm", "ctx", "loop_ctx", "trace", "table")

    def __init__(self, plan: "Plan", args, table, comm, device, trace, sizes):
        v = plan.init.copy()
        for k, a in zip(plan.inputs, args):
            v[k] = a
        self.v = v
        self.d: list = [None] * len(v)
        self.pending: dict[int, tuple] = {}
        self.main = None
        self.events = None
        self.comm, self.trace, self.table = comm, trace, table
        self.ctx = EvalContext(table, device, sizes=sizes)
        self.loop_ctx = EvalContext(table, device, with_streams=True, sizes=sizes)


class Plan:
    __slots__ = ("steps", "init", "inputs", "outputs", "event_count")

    def __init__(self, steps, init, inputs, outputs, event_count):
        self.steps, self.init, self.inputs, self.outputs = steps, init, inputs, outputs
        self.event_count = event_count


class _Loop:
    __slots__ = ("index", "n", "streams", "hoisted")

    def __init__(self, index: str, n: int, streams: Optional[list], hoisted: bool):
        self.index, self.n, self.streams, self.hoisted = index, n, streams, hoisted


_MAIN, _ITER = "main", "iter"  # which stream is current, as far as the compiler knows


class Compiler(CommunicationSteps):
    """Turns a host program and one binding table into a Plan."""

    def __init__(self, program: HostProgram, table, rank: int, device, streams, sizes):
        self.program, self.table, self.rank, self.device = program, table, rank, device
        self.S = streams  # streams.CudaStreams or None
        self.sizes = sizes  # the runtime's precompiled LocalSizes
        self.ctx = EvalContext(table, device, sizes=sizes)
        self.slots: dict[int, int] = {}  # id of a Val of the program (which outlives the plan)
        self.init: list = []
        self.produced: set[int] = set()
        self.dests: set[int] = set()  # tensors a ShardByStream gave a chunk destination
        self.cur = _MAIN
        self.pool: Optional[list] = None

    # -- slots ------------------------------------------------------------------------------

    def slot(self, v) -> int:
        k = self.slots.get(id(v))
        if k is None:
            k = self.slots[id(v)] = len(self.init)
            self.init.append(None)
        return k

    def read(self, v, what: str) -> int:
        """The slot an op reads `v` from: a scalar's value is fixed by the table, so it is a
        constant of the plan; a tensor must have been produced by an earlier op."""
        if isinstance(v, Scalar):
            k = len(self.init)
            self.init.append(v.value if v.is_constant else self.ctx.scalar(v))
            return k
        if id(v) not in self.produced:
            raise InternalError(f"T{v.name} is read by {what} before the host program produced it")
        return self.slot(v)

    def write(self, v) -> int:
        self.produced.add(id(v))
        return self.slot(v)

    def expected(self, tv: TensorView, loop: Optional[_Loop], in_loop: bool):
        """The local size `tv` must have: one tuple, or per iteration inside a stream loop."""
        if in_loop and loop is not None:
            return [self.sizes(tv, self.table, True, i) for i in range(loop.n)]
        return self.sizes(tv, self.table)

    # -- the program ------------------------------------------------------------------------

    def compile(self) -> Plan:
        p = self.program
        inputs = [self.write(v) for v in p.inputs]
        steps = self.ops(p.body, None)
        for o in p.outputs:
            if id(o) not in self.produced:
                raise InternalError(f"the host program never produces its output T{o.name}")
        outputs = [self.slot(o) for o in p.outputs]
        count = (len(self.pool) + 1) if self.S is not None and self.pool is not None else 1
        return Plan(steps, self.init, inputs, outputs, count)

    def ops(self, ops: list, loop: Optional[_Loop]) -> list[Step]:
        steps: list[Step] = []
        k = 0
        while k < len(ops):
            op = ops[k]
            nxt = ops[k + 1] if k + 1 < len(ops) else None
            if isinstance(op, Communicate) and isinstance(nxt, Wait) and nxt.communicate is op:
                steps.append(self.communicate(op, loop, blocking=True))
                k += 2
                continue
            if (loop is not None and isinstance(op, SetCurrentStream) and op.index is None
                    and k == len(ops) - 1):
                self.cur = _MAIN  # the loop sets the caller's stream back once, when it ends
                k += 1
                continue
            step = self.op(op, loop)
            if step is not None:
                steps.append(step)
            k += 1
        return steps

    def op(self, op, loop: Optional[_Loop]) -> Optional[Step]:
        kind = type(op)
        if kind is Allocate:
            return self.allocate(op)
        if kind is ForLoop:
            return self.for_loop(op, loop)
        if kind is GetCurrentStream:
            return self.get_stream()
        if kind is SetCurrentStream:
            return self.set_stream(op, loop)
        if kind is Synchronize:
            return self.synchronize(op, loop)
        if kind is ShardByStream:
            return self.shard_by_stream(op, loop)
        if kind is Evaluate:
            return self.evaluate(op.segment.exprs, op.in_loop, loop)
        if kind is LaunchKernel:
            return self.launch(op, loop)
        if kind is Communicate:
            return self.communicate(op, loop, blocking=False)
        if kind is Wait:
            return self.wait(op, loop)
        raise InternalError(f"no host implementation of {op!r}")

    # -- memory and loops -------------------------------------------------------------------

    def allocate(self, op: Allocate) -> Step:
        k = self.write(op.tv)
        shape, dtype, device = self.sizes(op.tv, self.table), op.tv.dtype.to_torch(), self.device

        def allocate(c, i):
            c.v[k] = torch.empty(shape, dtype=dtype, device=device)
        return allocate

    def for_loop(self, op: ForLoop, outer: Optional[_Loop]) -> Optional[Step]:
        if outer is not None:
            raise InternalError(f"a stream loop inside a stream loop ({op.index} in {outer.index})")
        n = self.table.extent(op.extent, f"loop {op.index} extent")
        S, streams = self.S, None
        if S is not None:
            if self.pool is None:
                self.pool = S.pool(max(1, min(n, MAX_STREAMS)))
            pool = self.pool
            streams = [pool[i % len(pool)] for i in range(n)]
            if (self.cur == _MAIN and op.body
                    and all(type(o) is Synchronize and o.index == op.index for o in op.body)):
                return self.join(min(n, len(pool)))
        hoisted = S is not None and self._stream0_idle(op.body)
        loop = _Loop(op.index, n, streams, hoisted)
        body = self.ops(op.body, loop)
        self.cur = _MAIN  # the loop ends on the caller's stream (below, `finally`)
        if not body:
            return None

        used = streams[:len(self.pool)] if streams is not None else None

        def for_loop(c, _):
            lc = c.loop_ctx
            try:
                if hoisted:
                    S.record(c.events[-1], c.main)
                for i in range(n):
                    lc.stream_index = i
                    for step in body:
                        step(c, i)
            except BaseException:
                if used is not None and c.main is not None:
                    # the join after the loop will not run, but the caller frees (and its stream
                    # reuses) the buffers the work already queued on the side streams writes
                    for k, stream in enumerate(used):
                        S.record(c.events[k], stream)
                        S.wait_event(c.main, c.events[k])
                raise
            finally:
                lc.stream_index = None
                if S is not None and c.main is not None:
                    S.set(c.main)  # also when an op in the loop raised
        return for_loop

    def _stream0_idle(self, body: list) -> bool:
        """True when the loop body queues nothing on Stream 0 (every op that issues work runs
        after a SetCurrentStream to the iteration's stream), so Stream 0 does not change while
        the loop runs and one event recorded on it before the loop serves every iteration."""
        cur = self.cur
        for op in body:
            if type(op) is SetCurrentStream:
                cur = _MAIN if op.index is None else _ITER
            elif type(op) is not GetCurrentStream and cur == _MAIN:
                return False  # work, or a wait, queued on Stream 0 inside the loop
        return True

    def join(self, count: int) -> Step:
        """Stream 0 waits for every stream the loop used (each once: waiting twice on one
        stream at the same point is the same wait)."""
        S, pool = self.S, self.pool[:count]

        def join(c, _):
            events, main = c.events, c.main
            for k, stream in enumerate(pool):
                S.record(events[k], stream)
                S.wait_event(main, events[k])
        return join

    # -- streams ----------------------------------------------------------------------------

    def get_stream(self) -> Optional[Step]:
        self.cur = _MAIN
        if self.S is None:
            return None
        S = self.S

        def get_stream(c, i):
            c.main = S.current()
        return get_stream

    def set_stream(self, op: SetCurrentStream, loop: Optional[_Loop]) -> Optional[Step]:
        if op.index is None:
            self.cur = _MAIN
        else:
            self._check_index(op.index, loop)
            self.cur = _ITER
        if self.S is None:
            return None
        S = self.S
        if op.index is None:
            def set_main(c, i):
                S.set(c.main)
            return set_main
        streams = loop.streams

        def set_iteration_stream(c, i):
            S.set(streams[i])
        return set_iteration_stream

    def synchronize(self, op: Synchronize, loop: Optional[_Loop]) -> Optional[Step]:
        if op.index is not None:
            self._check_index(op.index, loop)
        if self.S is None:
            return None
        S = self.S
        waiter_iter, waited_iter = self.cur == _ITER, op.index is not None
        if waiter_iter == waited_iter:
            return None  # a stream waiting for itself
        if waiter_iter and loop.hoisted:
            streams = loop.streams

            def iteration_waits_for_stream0(c, i):
                S.wait_event(streams[i], c.events[-1])
            return iteration_waits_for_stream0
        streams = loop.streams

        def synchronize(c, i):
            waiter, waited = (streams[i], c.main) if waiter_iter else (c.main, streams[i])
            event = c.events[-1]
            S.record(event, waited)
            S.wait_event(waiter, event)
        return synchronize

    @staticmethod
    def _check_index(index: str, loop: Optional[_Loop]) -> None:
        if loop is None or loop.index != index:
            raise InternalError(f"stream {index} is used outside its loop")

    def shard_by_stream(self, op: ShardByStream, loop: Optional[_Loop]) -> Step:
        self._check_index(op.index, loop)
        src = self.read(op.src, f"ShardByStream of T{op.src.name}")
        dst = self.write(op.dst)
        for a in (op.dst, *op.aliases):
            self.dests.add(id(a))
        dests = tuple(self.slot(a) for a in (op.dst, *op.aliases))
        src_shape = self.sizes(op.src, self.table)
        chunker = StreamChunker(op.dst, self.table, src_shape, f"T{op.src.name}", self.sizes)
        if chunker.generic is not None:  # a stream leaf inside the axis: a select per chunk
            chunker.table = None  # that path reads no sizes; the plan keeps no table

            def shard_by_stream(c, i):
                view = c.v[dst] = chunker(c.v[src], i)
                for k in dests:
                    c.d[k] = view
            return shard_by_stream
        axis, nominal, whole = chunker.axis, chunker.nominal, src_shape[chunker.axis]
        bounds = [(min(i * nominal, whole), self.sizes(op.dst, self.table, True, i)[axis])
                  for i in range(loop.n)]
        if axis == 0:
            rows = [slice(start, start + size) for start, size in bounds]

            def shard_rows(c, i):
                view = c.v[dst] = c.v[src][rows[i]]
                for k in dests:
                    c.d[k] = view
            return shard_rows

        def shard_axis(c, i):
            start, size = bounds[i]
            view = c.v[dst] = c.v[src].narrow(axis, start, size)
            for k in dests:
                c.d[k] = view
        return shard_axis

    # -- compute ----------------------------------------------------------------------------

    def evaluate(self, exprs: list, in_loop: bool, loop: Optional[_Loop]) -> Step:
        steps = [self.expr(e, in_loop, loop) for e in exprs]
        if len(steps) == 1:
            return steps[0]

        def evaluate(c, i):
            for step in steps:
                step(c, i)
        return evaluate

    def expr(self, expr, in_loop: bool, loop: Optional[_Loop]) -> Step:
        args = [self.read(v, expr.op_name) for v in expr.inputs]
        dsts = None
        if in_loop and any(id(o) in self.dests for o in expr.outputs):
            dsts = [self.slot(o) if id(o) in self.dests else None for o in expr.outputs]
        per_iteration = in_loop and loop is not None
        checks = []  # (output slot, tv or None, expected size(s), dtype)
        for o in expr.outputs:
            if isinstance(o, TensorView):
                checks.append((self.write(o), o, self.expected(o, loop, in_loop), o.dtype.to_torch()))
            else:
                checks.append((self.write(o), None, None, None))
        Tensor = torch.Tensor

        def evaluate_expr_step(c, i):
            v = c.v
            ctx = c.loop_ctx if in_loop else c.ctx
            values = [v[k] for k in args]
            if dsts is not None:
                outs = evaluate_expr_into(expr, values, ctx, [None if k is None else c.d[k] for k in dsts])
            else:
                outs = evaluate_expr(expr, values, ctx)
            for (k, tv, want, dtype), value in zip(checks, outs):
                if tv is not None:
                    size = want[i] if per_iteration else want
                    if not isinstance(value, Tensor) or value.shape != size or value.dtype != dtype:
                        check_output(expr, tv, value, ctx)  # raises, showing the IR extent
                v[k] = value
            if c.trace is not None:
                c.trace("Evaluate", expr, outs)
        return evaluate_expr_step

    def launch(self, op: LaunchKernel, loop: Optional[_Loop]) -> Step:
        seg, launcher, device = op.segment, op.launcher, self.device
        scalars = {id(v): self.ctx.scalar(v) for v in op.scalars}
        inputs = [self.read(v, "a kernel") for v in seg.inputs]
        in_loop = op.in_loop and loop is not None
        # an empty loop space (a chunk of no rows): ATen does it, on chunks in a loop
        fallback = self.evaluate(seg.exprs, op.in_loop, loop)
        producer = {id(o): e for e in seg.exprs for o in e.outputs}
        # the output check of invariant 3, as for ATen: sizes per iteration inside a loop
        checks = [(self.write(o), o, producer[id(o)], self.expected(o, loop, op.in_loop), o.dtype.to_torch())
                  for o in seg.outputs]
        def finish(c, outs, ctx, i: Optional[int]) -> None:
            """Check each output (sizes per iteration `i` inside a loop) and store it."""
            v = c.v
            for (k, tv, expr, want, dtype), value in zip(checks, outs):
                size = want if i is None else want[i]
                if value.shape != size or value.dtype != dtype:
                    check_output(expr, tv, value, ctx)  # raises, showing the IR extent
                v[k] = value
            if seg.source is not launcher.last_source:
                seg.source = launcher.last_source
            if c.trace is not None:
                c.trace("LaunchKernel", seg, outs)

        if op.local is None:
            def launch(c, i):
                v = c.v
                outs = launcher.run([v[k] for k in inputs], scalars, c.table.values, device)
                if outs is None:
                    fallback(c, i)
                    return
                finish(c, outs, c.ctx, None)
            return launch

        # on local tensors: the loop axes' local extents, the outputs' local shapes and the
        # inputs' local sizes (checked: a kernel must not read past a chunk), from the sharding
        # math, once per iteration of the loop (or once outside loops)
        table, sizes = self.table, self.sizes
        n = loop.n if in_loop else 1
        index = (lambda j: j) if in_loop else (lambda j: None)
        extents = [tuple(sizes(tv, table, in_loop, index(j))[k] for tv, k in op.local) for j in range(n)]
        out_shapes = [tuple(sizes(o, table, in_loop, index(j)) for o in seg.outputs) for j in range(n)]
        in_tvs = list(seg.inputs)
        in_shapes = [[sizes(t, table, in_loop, index(j)) for t in in_tvs] for j in range(n)]
        dsts = None
        if any(id(o) in self.dests for o in seg.outputs):
            dsts = [self.slot(o) if id(o) in self.dests else None for o in seg.outputs]

        def launch_local(c, i):
            v = c.v
            j = i if in_loop else 0
            args = [v[k] for k in inputs]
            for t, want, tv in zip(args, in_shapes[j], in_tvs):
                if t.shape != want:
                    ir = ", ".join(format_extent(e) for e in local_extents(tv, in_loop))
                    raise InternalError(
                        f"a kernel of T{', T'.join(str(o.name) for o in seg.outputs)} got the input "
                        f"T{tv.name} of local size {tuple(t.shape)}, but its IR extents [{ir}] are "
                        f"{want}{' in this chunk' if in_loop else ''}")
            dests = None if dsts is None else [None if k is None else c.d[k] for k in dsts]
            outs = launcher.run_local(args, scalars, c.table.values, device, extents[j], out_shapes[j], dests)
            if outs is None:
                fallback(c, i)
                return
            finish(c, outs, c.loop_ctx if in_loop else c.ctx, i if in_loop else None)
        return launch_local


def compile_program(program: HostProgram, table, rank: int, device, streams, sizes) -> Plan:
    return Compiler(program, table, rank, device, streams, sizes).compile()


def run_plan(plan: Plan, args, table, comm, device, trace, sizes, streams) -> list:
    c = Call(plan, args, table, comm, device, trace, sizes)
    restore = None
    if streams is not None:
        c.events = streams.events(plan.event_count)
        # making a stream of another device current switches the current device too
        # (torch.cuda.set_stream); the caller's device is put back, as torch.cuda.stream() does
        restore = streams.enter()
    try:
        for step in plan.steps:
            step(c, None)
    finally:
        if restore is not None:
            streams.leave(restore)
    v = c.v
    return [v[k] for k in plan.outputs]

