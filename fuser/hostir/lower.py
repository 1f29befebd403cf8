"""Lower a fusion (after the pre-segmentation passes) to a host program.

The exprs come grouped by `stream_loops`. A stream loop becomes a ForLoop whose body works on
chunk tensors: every tensor the loop reads whole-allocated gets a ShardByStream view (a chunk
tensor: the same logical extents, the loop's stream split, a stream-parallel allocation, so
the sharding math reads one chunk for it); every tensor the loop hands to later exprs is
allocated whole before the loop and each iteration writes its chunk through such a view.
Intermediates the pass gave a stream-parallel allocation stay as they are. Exprs in the loop
are copies of the fusion's exprs reading and writing chunk tensors, so an op evaluated there
consumes and produces chunks (invariant 4), and its output is checked against chunk extents.
An expr whose output's stream axis no input maps to (iota, full, random ops, a scan or a slice
along it) cannot make a chunk from chunks: it is computed whole before the loop, which reads
chunks of its result (`computed_whole`).

Outside loops, each Communication becomes Communicate + Wait. Runs of other exprs, in loops
and outside, go through the segmenter: matmul, linear and the like run through ATen; fusible
exprs (pointwise, casts, reductions) become generated kernels. A kernel on whole tensors
iterates their logical extents. A kernel on local tensors (a rank's shards; inside a loop,
chunk tensors) iterates local extents instead: `local_axes` picks, per loop axis of the
kernel, a tensor whose local size (the sharding math's, per stream iteration) is that axis's
extent, after checking that every tensor of the kernel on that axis has the same local size
rule. A kernel segment whose tensors disagree, or which the local form does not cover, runs
through ATen instead; lowering never fails for that. The lowering works on its own clone of
the fusion, so the chunk tensors it adds never touch a fusion shared by other runtimes.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from ..errors import UnsupportedError
from ..ir import Expr, FullOp, Fusion, IotaOp, LinearOp, MatmulOp, RNGOp, TensorView
from ..multidevice.axis_map import mapped_input_axis
from ..multidevice.communication import Collective, Communication
from ..multidevice.sharding import is_sharded, local_size_rules, stream_leaf
from ..multidevice.transform import is_split, like, replay_splits, set_stream_allocation
from ..passes.schedule_stream_loops import loop_axis, stream_loops
from ..schedulers.plan import KernelPlan, Template
from ..segment import Segment, SegmentKind
from ..segment.segments import segment_io
from .nodes import (Allocate, Communicate, Evaluate, ForLoop, GetCurrentStream, HostProgram,
                    SetCurrentStream, ShardByStream, Synchronize, Wait)

# (exprs) -> kernel and ATen segments, for a run of exprs; None: ATen only
KernelSegmenter = Optional[Callable[[object], list[Segment]]]


class _Lowering:
    def __init__(self, fusion: Fusion, make_launcher: Callable, segment_kernels: KernelSegmenter):
        self.fusion = fusion
        self.make_launcher = make_launcher
        self.segment_kernels = segment_kernels
        self.segments: list[Segment] = []
        self.n_comms = 0
        self.consumers: dict[int, list[Expr]] = {}
        for e in fusion.exprs:
            for v in e.inputs:
                self.consumers.setdefault(id(v), []).append(e)
        self.fusion_outputs = {id(o) for o in fusion.outputs()}

    # -- top level --------------------------------------------------------------------------

    def lower(self) -> HostProgram:
        body: list = []
        plain: list[Expr] = []
        groups = stream_loops(self.fusion.exprs)
        for g in groups:
            if isinstance(g, list):
                whole, g = computed_whole(g)
                plain += whole
                if g:
                    body += self.plain(plain)
                    plain = []
                    body += self.loop(g)
            elif isinstance(g, Communication):
                body += self.plain(plain)
                plain = []
                body += self.communicate(g, None)
            else:
                plain.append(g)
        body += self.plain(plain)
        f = self.fusion
        return HostProgram(f.inputs(), f.outputs(), body, self.segments)

    def communicate(self, comm: Communication, loop: Optional[ForLoop], in_place: bool = False) -> list:
        if comm.collective is Collective.allreduce and not in_place:
            # the partial sums are read by nothing else: reduce them where they are
            partial = comm.inputs[0]
            in_place = (len(self.consumers.get(id(partial), [])) == 1 and id(partial) not in self.fusion_outputs
                        and all(partial is not v for v in self.fusion.inputs()))
        op = Communicate(self.n_comms, comm, in_loop=loop is not None, in_place=in_place)
        if comm.collective is Collective.broadcast:
            op.loop_index, op.loop_extent = loop.index, loop.extent
        self.n_comms += 1
        seg = Segment(SegmentKind.communication, [comm], list(comm.inputs), list(comm.outputs),
                      why=f"{comm.collective.value} over {comm.mesh!r} ({comm.parallel_type.value})")
        self.segments.append(seg)
        return [op, Wait(op)]

    def plain(self, exprs: list[Expr]) -> list:
        """Exprs outside loops and collectives: kernels (on local shards where tensors are
        sharded on device axes), ATen for the rest."""
        if not exprs:
            return []
        later = [e for e in self.fusion.exprs if all(e is not x for x in exprs)]
        inputs, outputs = segment_io(exprs, self.fusion.outputs(), later)
        segments = self.segment(exprs, outputs)
        if segments is None:
            tvs = [v for e in exprs for v in (*e.inputs, *e.outputs) if isinstance(v, TensorView)]
            why = "sharded tensors: ATen on the local shards" if any(is_sharded(t) for t in tvs) \
                else "ATen evaluation"
            segments = [Segment(SegmentKind.evaluator, exprs, inputs,
                                [o for o in outputs if isinstance(o, TensorView)], why=why)]
        return self.segment_ops(segments, in_loop=False)

    def segment(self, exprs: list[Expr], outputs: list) -> Optional[list[Segment]]:
        """The segmenter's kernel and ATen segments of a run of exprs; None: ATen only."""
        if self.segment_kernels is None:
            return None
        try:
            return self.segment_kernels(_SubFusion(exprs, outputs))
        except UnsupportedError:  # a domain the kernel scheduler cannot read: ATen takes the run
            return None

    def segment_ops(self, segments: list[Segment], in_loop: bool) -> list:
        """LaunchKernel or Evaluate per segment. A kernel segment on local tensors (sharded, or
        chunks in a loop) iterates local extents; where those cannot be read off its tensors it
        runs through ATen, with the reason in its `why`."""
        ops = []
        for seg in segments:
            if seg.kind is SegmentKind.kernel:
                tvs = seg.params.axes.tensors
                if not in_loop and not any(is_sharded(tv) for tv in tvs):
                    self.segments.append(seg)
                    ops.append(self.make_launcher(seg))
                    continue
                axes, why = local_axes(seg.params, in_loop)
                if axes is not None:
                    self.segments.append(seg)
                    ops.append(dataclasses.replace(self.make_launcher(seg), in_loop=in_loop, local=axes))
                    continue
                where = "stream loop: ATen on chunks" if in_loop else "sharded tensors: ATen on the local shards"
                seg = Segment(SegmentKind.evaluator, seg.exprs, seg.inputs, seg.outputs, why=f"{where} ({why})")
            self.segments.append(seg)
            ops.append(Evaluate(seg, in_loop=in_loop))
        return ops

    # -- stream loops -----------------------------------------------------------------------

    def loop(self, group: list[Expr]) -> list:
        leaf, split = loop_axis(group[0])
        index = str(self.fusion.new_symbol())
        loop = ForLoop(index, leaf.extent)
        members = {id(e) for e in group}
        produced = {id(o) for e in group for o in e.outputs}
        leaving = [o for e in group for o in e.outputs if isinstance(o, TensorView) and (
            id(o) in self.fusion_outputs
            or any(id(c) not in members for c in self.consumers.get(id(o), [])))]
        before = [Allocate(o) for o in leaving]
        body = [SetCurrentStream(index), Synchronize(None)]
        chunks: dict[int, TensorView] = {}  # whole tensor -> its chunk tensor in this loop
        aliases = self.aliases(group, {id(o) for o in leaving})
        views: dict[int, ShardByStream] = {}
        run: list[tuple[Expr, Expr]] = []  # (expr, its copy on chunks) since the last collective
        leaving_ids = {id(o) for o in leaving}
        for e in group:
            ins = []
            for v in e.inputs:
                if not isinstance(v, TensorView):
                    ins.append(v)
                elif id(v) in produced:
                    ins.append(chunks.get(id(v), v))
                elif isinstance(e, Communication) and e.collective is Collective.broadcast:
                    ins.append(v)  # each chunk comes whole from the rank that holds it
                else:
                    c = self.input_chunk(v, e, index, chunks, body)
                    ins.append(c)
            outs = []
            for o in e.outputs:
                if isinstance(o, TensorView) and any(o is x for x in leaving):
                    c = _chunk_tensor(o)
                    chunks[id(o)] = c
                    view = ShardByStream(o, c, index)
                    views[id(o)] = view
                    body.append(view)
                    outs.append(c)
                else:
                    outs.append(o)
            local = dataclasses.replace(e, inputs=tuple(ins), outputs=tuple(outs))
            if isinstance(e, Communication):
                body += self.loop_run(run, leaving_ids)
                run = []
                body += self.communicate(local, loop, in_place=any(c is e for _, c in aliases))
            else:
                run.append((e, local))
        body += self.loop_run(run, leaving_ids)
        # the producer of an aliased partial writes into the collective's output chunk
        for partial, comm in aliases:
            view = views[id(comm.outputs[0])]
            view.aliases = (*view.aliases, partial)
            body.remove(view)
            producer_pos = next(k for k, op in enumerate(body) if isinstance(op, Evaluate)
                                and any(o is partial for e in op.segment.exprs for o in e.outputs))
            body.insert(producer_pos, view)
        loop.body = body + [SetCurrentStream(None)]
        join = ForLoop(index, leaf.extent, [Synchronize(index)])
        return before + [GetCurrentStream(), loop, join]

    def loop_run(self, run: list[tuple[Expr, Expr]], leaving: set[int]) -> list:
        """Segments for the exprs of a loop between two collectives, on chunks: kernels for
        what fuses, ATen for the rest. The ShardByStream views they read and write are in the
        body already (they only read tensors that exist before the loop)."""
        if not run:
            return []
        members = {id(e) for e, _ in run}
        exprs = [local for _, local in run]
        outputs = [lo for e, local in run for o, lo in zip(e.outputs, local.outputs)
                   if id(o) in leaving or any(id(c) not in members for c in self.consumers.get(id(o), []))]
        segments = self.segment(exprs, outputs)
        if segments is None:
            segments = [Segment(SegmentKind.evaluator, [x], [v for v in x.inputs if isinstance(v, TensorView)],
                                [o for o in x.outputs if isinstance(o, TensorView)],
                                why="stream loop: ATen on chunks") for x in exprs]
        return self.segment_ops(segments, in_loop=True)

    def aliases(self, group: list[Expr], leaving: set[int]) -> list[tuple[TensorView, Communication]]:
        """Allreduces whose partial sums a linear or matmul can write straight into the
        output chunk, so the collective runs in place there (no copy, no extra buffer)."""
        out = []
        producers = {id(o): e for e in group for o in e.outputs}
        for e in group:
            if not (isinstance(e, Communication) and e.collective is Collective.allreduce):
                continue
            partial = e.inputs[0]
            p = producers.get(id(partial))
            if (p is not None and isinstance(p, (LinearOp, MatmulOp)) and len(p.outputs) == 1
                    and len(self.consumers.get(id(partial), [])) == 1
                    and id(e.outputs[0]) in leaving and partial.dtype == e.outputs[0].dtype):
                out.append((partial, e))
        return out

    def input_chunk(self, v: TensorView, e: Expr, index: str, chunks: dict, body: list) -> TensorView:
        """The chunk of `v` that the loop expr `e` reads, or `v` itself when `e` reads it whole
        (an axis `e`'s stream axis does not map to, or a broadcast one)."""
        out = next(o for o in e.outputs if isinstance(o, TensorView))
        leaf, split = stream_leaf(out)
        a = mapped_input_axis(e, v, out, split.input)
        if a is None or a.is_broadcast:
            return v
        key = id(v)
        if key in chunks:
            return chunks[key]
        own = stream_leaf(v)
        if own is not None:
            if own[1].input is not a or own[1].factor != split.factor or own[1].inner_split != split.inner_split:
                raise UnsupportedError(
                    f"{e.op_name}: its input {v!r} is split onto streams differently from its "
                    f"output {out!r}; split both the same way")
            c = _chunk_tensor(v)
        else:
            if is_split(v, a):
                raise UnsupportedError(
                    f"{e.op_name}: cannot take stream chunks of {v!r} along {a!r}, which is "
                    f"already split; gather it first")
            c = like(v)
            target = c.domain.logical[next(k for k, d in enumerate(v.domain.logical) if d is a)]
            replay_splits(out, split.input, c, target, keep=lambda x: x.is_stream)
            set_stream_allocation(c)
        chunks[key] = c
        body.append(ShardByStream(v, c, index))
        return c


def computed_whole(group: list[Expr]) -> tuple[list[Expr], list[Expr]]:
    """(the exprs of a stream loop computed whole before it, the rest, which stay in it). An
    expr whose output's stream axis no tensor input maps to cannot make one chunk from chunks:
    iota, full and random ops (values and philox counters of logical positions), a scan, a
    slice, a cat or a pad along that axis, a reshape across it. As `decompose_reshardings` does
    for device axes, it is computed whole, and the loop reads chunks of its result. It reads
    nothing the loop makes: a loop expr reading another's output maps that output's stream
    axis to its own (`joins`), so everything it reads exists before the loop."""
    whole = [e for e in group if not _chunks_from_inputs(e)]
    return whole, [e for e in group if all(e is not x for x in whole)]


def _chunks_from_inputs(e: Expr) -> bool:
    """Whether some tensor input of the loop expr `e` maps to its output's stream axis, so
    that a chunk of that input (or the input whole, on a broadcast axis) gives a chunk of the
    output."""
    leaf, split = loop_axis(e)
    out = next(o for o in e.outputs if isinstance(o, TensorView) and any(leaf is d for d in o.domain.loop))
    return any(mapped_input_axis(e, v, out, split.input) is not None for v in e.inputs if isinstance(v, TensorView))


def local_axes(plan: KernelPlan, with_streams: bool) -> tuple[Optional[tuple[tuple[TensorView, int], ...]], str]:
    """Per loop axis of a kernel plan, a tensor of the kernel and its logical axis whose local
    size is the extent the kernel iterates on local tensors (`with_streams`: one chunk, per
    stream iteration), or None and the reason the kernel cannot run on them. Every tensor
    that spans a loop axis must have the same local size rule on it (sharding.local_size_rules):
    a kernel reads and writes all its tensors over one extent per axis."""
    if plan.template is Template.inner_outer:
        return None, "an inner-outer kernel runs on whole tensors only"
    if any(isinstance(e, (IotaOp, FullOp, RNGOp)) for e in plan.exprs):
        return None, "iota, full and random ops index logical positions"
    axes = plan.axes
    found: list[Optional[tuple]] = [None] * len(axes.axes)
    for tv in axes.tensors:
        try:
            rules = local_size_rules(tv, with_streams)
        except UnsupportedError as err:
            return None, str(err)
        for k, a in enumerate(axes.of(tv)):
            if a is None:
                continue
            if found[a] is None:
                found[a] = (tv, k, rules[k])
            elif found[a][2] != rules[k]:
                t0, k0 = found[a][0], found[a][1]
                return None, (f"T{t0.name} axis {k0} and T{tv.name} axis {k} share a loop axis but "
                              f"not their local sizes")
    if any(f is None for f in found):
        return None, "a loop axis no tensor of the kernel spans"
    return tuple((tv, k) for tv, k, _ in found), ""


def _chunk_tensor(tv: TensorView) -> TensorView:
    c = like(tv)
    set_stream_allocation(c)
    return c


class _SubFusion:
    """A run of exprs seen by the segmenter as a fusion of its own."""

    def __init__(self, exprs: list[Expr], outputs: list):
        self.exprs = exprs
        self._outputs = outputs

    def outputs(self) -> list:
        return list(self._outputs)


def lower(fusion: Fusion, make_launcher: Callable, segment_kernels: KernelSegmenter) -> HostProgram:
    """The host program of `fusion` (already through the passes). `make_launcher(segment)`
    makes the LaunchKernel op of a kernel segment; `segment_kernels(subfusion)` cuts a run of
    exprs into kernel and ATen segments (None: ATen only)."""
    return _Lowering(fusion.clone(), make_launcher, segment_kernels).lower()
