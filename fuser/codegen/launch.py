"""Running a kernel segment: allocate its outputs, fold the layout for this call's strides,
pick launch parameters, fetch (or generate and compile) the kernel, and launch it.

Everything that does not depend on the call is prepared once per segment: the extent
evaluators, each tensor's map from logical axes to loop axes, the kernel variants seen so far.

By default a kernel iterates its loop axes over their logical extents, evaluated under the
binding table: right where every tensor is whole. The host program runs kernels on local
tensors too (a rank's shard, a stream chunk): it then passes the loop axes' local extents and
the outputs' local shapes, both from the sharding math, and may pass destinations (chunk views
of a preallocated tensor) for the kernel to write into. This module never derives a local size.
"""
from __future__ import annotations

import hashlib
import math
import re
import threading
from dataclasses import replace
from typing import Any, Callable, Optional, Sequence

import torch

from ..errors import FusionInputError
from ..ir import IotaOp, RNGOp, TensorView
from ..ir.symbolic import compile_extent
from ..multidevice.sharding import local_extents
from ..schedulers.heuristics import (OUTER_STORING_PROGRAMS_PER_PROCESSOR, POINTWISE_TILE, SHARED_ROW_SCHEDULES,
                                     SPLIT_PROGRAMS_PER_PROCESSOR, LaunchParams, aligned_tile, autotune_row_loop,
                                     autotuning, choose, inner_outer_combine, inner_outer_programs, inner_outer_stages,
                                     inner_split, long_row_forms, looped_forms, next_pow2, outer_forms, outer_storing,
                                     reload_forms, row_loop, row_loop_programs, row_loop_stages, split_count,
                                     tuned_warps)
from ..schedulers.plan import KernelPlan, Template
from ..timing import phase
from . import autotune, compile_pool, parallel_compile, tuning
from .ahead import CompileJobs
from .canonical import named
from .compile import load_canonical
from .inner_outer import TwoKernels, generate_inner_outer, generate_row_loop
from .kernel import KernelSource, generate, workspace_dtype
from .launches import Launch, SharedRowLaunch, dense_strides
from .scratch import Semaphores
from .shared_row import SharedRowConfig, generate_shared_row, misaligned, shared_row_config, shared_row_possible
from .split_kernel import generate_split
from .steps import META, _DirectStep, _Step
from .layout import Layout, make_layout, row_alignment, row_broadcast, run_stride

_INT32_LIMIT = 2**31
_MISSING = object()


def scalar_key(v: Any) -> tuple:
    """A scalar as a cache key: its type and value, and for floats the sign (0.0 == -0.0, but a
    launch made for one computes 1 / (x * s) with the wrong sign for the other). Subclasses of
    float (numpy.float64, which binding accepts) and complex parts too. A NaN is one key
    (NaN != NaN: each call's fresh `float("nan")` missed every cache)."""
    if isinstance(v, float):
        return (type(v), v if v == v else _NAN, math.copysign(1.0, v))
    if isinstance(v, complex):
        if v != v:
            return (type(v), _NAN, v.real if v.real == v.real else _NAN, v.imag if v.imag == v.imag else _NAN,
                    math.copysign(1.0, v.real), math.copysign(1.0, v.imag))
        return (type(v), v, math.copysign(1.0, v.real), math.copysign(1.0, v.imag))
    return (type(v), v, None)


_NAN = "nan"  # (a NaN's value in a key)


def into_destinations(launch: Any, into: list) -> Optional[list]:
    """A launch's `dests` for outputs offered into their inputs (`Launch.destinations`; None:
    a launch of another kind, which allocates them all)."""
    destinations = getattr(launch, "destinations", None)
    return destinations(into) if destinations is not None else None


def target_for(device: torch.device) -> str:
    return "cuda" if device.type == "cuda" else "interpreter"


class KernelLauncher:
    def __init__(self, plan: KernelPlan, name: str):
        self.plan = plan
        self.name = name
        self.tensors = [v for v in plan.inputs if isinstance(v, TensorView)] + list(plan.outputs)
        self.axis_maps = [plan.axes.of(t) for t in self.tensors]
        # tensors made inside the kernel (iota) index their own loop axis: for folding the
        # layout they count as dense tensors, so their axis is never merged with a neighbour
        self.made_inside = [plan.axes.of(e.out) for e in plan.exprs if isinstance(e, IotaOp)]
        self.iota_axes = frozenset(a for axis_map in self.made_inside for a in axis_map if a is not None)
        # random numbers (RNGOp) are numbered by their row-major index in their own output: for
        # folding they count as dense row-major tensors of the output's extents, and the kernel
        # takes these strides of theirs ("rng_stride") to compute the index
        rng_outputs = [e.out for e in plan.exprs if isinstance(e, RNGOp)]
        self.rng_maps = [plan.axes.of(o) for o in rng_outputs]
        self.rng_extents = [[compile_extent(e) for e in local_extents(o)] for o in rng_outputs]
        first = len(self.tensors) + len(self.made_inside)  # (their place in `strides`)
        self.rng_slots = {id(o): first + k for k, o in enumerate(rng_outputs)}
        self.axis_extents = [compile_extent(a.extent) for a in plan.axes.axes]
        self.out_extents = [[compile_extent(e) for e in local_extents(o)] for o in plan.outputs]
        # each output's allocation order (None: row-major)
        self.out_orders = [o.domain.allocation_order() for o in plan.outputs]
        # symbols the loop space and the outputs depend on: with the inputs' shapes they key a
        # ready launch (an iota's or full's extent can come from a scalar input alone)
        exprs = [a.extent for a in plan.axes.axes] + [e for o in plan.outputs for e in local_extents(o)]
        if plan.axes.resized:  # the offsets of cat inputs and the sizes of padded ones
            exprs += [d.extent for t in plan.axes.tensors for d in t.domain.no_reductions()]
        self.key_symbols = sorted({s.name for e in exprs for s in e.free_symbols})
        self.variants: dict[tuple, tuple[KernelSource, Any]] = {}
        # (input shapes and strides, scalar values) -> a ready launch; the hot path of a call
        self.launches: dict[tuple, "Launch"] = {}
        self.last_source: str | None = None
        self._lock = threading.Lock()
        self._two_kernels: Optional[TwoKernels] = None  # an inner-outer plan's form for long rows
        self._apart: Optional[TwoKernels] = None  # the same with a column output apart (ApartParts)
        self.declined: set[tuple] = set()  # kernel keys whose code Gluon cannot compile (shared_row)

    def allocate_outputs(self, values, device) -> list[torch.Tensor]:
        outputs = []
        for o, fs, order in zip(self.plan.outputs, self.out_extents, self.out_orders):
            shape = [int(f(values)) for f in fs]
            if any(s < 0 for s in shape):
                raise FusionInputError(f"T{o.name} would have the negative shape {shape} in this "
                                       f"execution (its extents: {[str(e) for e in local_extents(o)]})")
            try:
                outputs.append(torch.empty_strided(shape, dense_strides(shape, order), dtype=o.dtype.to_torch(),
                                                   device=device))
            except RuntimeError as err:
                if "overflow" not in str(err):
                    raise
                raise FusionInputError(f"T{o.name} would have the shape {shape} in this execution, more bytes "
                                       f"than a 64-bit size counts (its extents: "
                                       f"{[str(e) for e in local_extents(o)]})") from None
        return outputs

    def strides(self, tensors: Sequence[torch.Tensor], n_axes: int, values) -> list[list[int]]:
        out = []
        for t, amap in zip(tensors, self.axis_maps):
            s = [0] * n_axes
            for k, a in enumerate(amap):
                if a is not None and t.shape[k] != 1:
                    s[a] = t.stride(k)
            out.append(s)
        for amap in self.made_inside:
            s = [0] * n_axes
            for a in amap:
                if a is not None:
                    s[a] = 1
            out.append(s)
        for amap, fs in zip(self.rng_maps, self.rng_extents):
            shape = [int(f(values)) for f in fs]
            s = [0] * n_axes
            for k, (a, stride) in enumerate(zip(amap, dense_strides(shape, None))):
                if a is not None and shape[k] != 1:
                    s[a] = stride
            out.append(s)
        return out

    def _spans_both(self, layout: Layout) -> list[bool]:
        """Per tensor of the kernel: whether it varies along both tile dims of `layout` (an
        aligned-rows kernel addresses it at the rows' aligned offsets)."""
        rows, cols = {a for run in layout.dim0 for a in run}, {a for run in layout.dim1 for a in run}
        return [any(a in rows for a in amap) and any(a in cols for a in amap) for amap in self.axis_maps]

    def kernel(self, layout: Layout, variant: str, target: str, stages: int = 1,
               config: Optional[SharedRowConfig] = None):
        """The kernel for (layout, variant, target, stages, config), generated and compiled on
        first use. Variants: tile (pointwise), persistent, looped, partial and combine (split),
        shared_row (an inner-outer plan's Gluon kernel of `config`: None where its code needs
        what Gluon lacks); `stages` pipelines the inner-outer kernel's row loop."""
        key = (layout, variant, target, stages, config)
        if key in self.declined:
            return None
        found = self.variants.get(key)
        if found is None:
            with self._lock:
                found = self.variants.get(key)
                if found is None:
                    split = variant if variant in ("partial", "combine") else None
                    with phase("codegen"):
                        if variant == "shared_row":
                            ks = generate_shared_row(self.plan, layout, f"{self.name}_{variant}", config)
                            if ks is None:
                                self.declined.add(key)
                                return None
                        elif self.plan.template is Template.inner_outer:
                            ks = generate_inner_outer(self.plan, layout, variant, target,
                                                      f"{self.name}_{variant}", stages)
                        elif variant == "split":
                            ks = generate_split(self.plan, layout, target, f"{self.name}_{variant}")
                        elif variant == "rows":
                            ks = generate_row_loop(self.plan, layout, target, f"{self.name}_{variant}", stages)
                        else:
                            ks = generate(self.plan, layout, variant == "persistent", target,
                                          f"{self.name}_{variant}", split, one_pass=variant == "reload",
                                          static_loop=variant == "looped_static",
                                          aligned_rows=variant in ("looped_aligned", "tile_aligned"))
                    cname, fn = load_canonical(ks.name, ks.source, target, ks.scalar_params)
                    # the source users read names the kernel as profilers show it
                    ks = replace(ks, name=cname, source=named(ks.source, ks.name, cname))
                    found = (ks, fn)
                    self.variants[key] = found
        return found

    def _key(self, inputs: Sequence[torch.Tensor], scalars: dict[int, Any], values) -> tuple:
        return (tuple((tuple(t.shape), t.stride()) for t in inputs), tuple(map(scalar_key, scalars.values())),
                tuple(values[name] for name in self.key_symbols))

    def run_local(self, inputs: Sequence[torch.Tensor], scalars: dict[int, Any], values, device,
                  extents: tuple[int, ...], out_shapes: tuple, dests: Optional[Sequence] = None) -> Optional[list]:
        """`run` on local tensors: the loop axes' local `extents` and the outputs' local
        `out_shapes` come from the caller (the sharding math); output k is written into
        `dests[k]` where that is given (a view of that shape: a chunk of a bigger tensor),
        else allocated. None: an empty loop space (the caller evaluates through ATen)."""
        key = (self._key(inputs, scalars, values), extents, out_shapes,
               None if dests is None else tuple(None if d is None else d.stride() for d in dests))
        return self._launch(key, inputs, device, dests,
                            lambda: self.prepare(inputs, scalars, values, device, extents, out_shapes, dests))

    def run(self, inputs: Sequence[torch.Tensor], scalars: dict[int, Any], values, device,
            used: Optional[list] = None, into: Optional[list] = None) -> Optional[list]:
        """The outputs of the kernel(s) on whole tensors; None: an empty loop space (the caller
        evaluates through ATen). `used` gets the launch made (None for an empty loop space):
        what a ready call replays, which a lookup after the call could miss (another thread's
        call may have cleared the launches). `into`: (output position, input tensor, the fusion's
        other arguments) of outputs to write into the inputs they alias where the launch can
        (`Launch.destinations`)."""
        return self._launch(self._key(inputs, scalars, values), inputs, device, None,
                            lambda: self.prepare(inputs, scalars, values, device), used, into)

    def _launch(self, key: tuple, inputs, device, dests, prepare: Callable,
                used: Optional[list] = None, into: Optional[list] = None) -> Optional[list]:
        """Launch the prepared launch of `key`, preparing it on first use (None, an empty loop
        space, is kept too)."""
        launch = self.launches.get(key, _MISSING)
        first = launch is _MISSING
        if first:
            launch = prepare()
            if len(self.launches) > 1024:  # many distinct shapes: start over rather than grow
                self.launches.clear()
            self.launches[key] = launch
        if used is not None:
            used.append(launch)
        if launch is None:
            self.last_source = None  # (nothing launched: last_triton_code shows no stale kernel)
            return None
        if into:
            dests = into_destinations(launch, into)
        try:
            if first:  # the first launch compiles the kernel (Triton's JIT)
                with phase("first launch"):
                    return launch(inputs, device, dests)
            return launch(inputs, device, dests)
        finally:  # (read after the call: a launch may change what it runs, a stand-in, a form timed)
            self.last_source = launch.source

    def prepare(self, inputs, scalars, values, device, local_extents=None, out_shapes=None,
                dests=None, ahead_jobs: "Optional[CompileJobs]" = None, in_one_pass: bool = False) -> "Optional[Launch]":
        """Everything about a launch that depends only on shapes, strides and scalars (and, on
        local tensors, the local extents and the destinations' strides: see `run_local`).
        None: the caller evaluates the segment through ATen (an empty loop space, or a form
        this plan has no kernel for). `ahead_jobs`: prepare for `compile_ahead` instead
        (outputs on the meta device, nothing launched or timed), adding the compile jobs of
        every form the first launch would compile to it. `in_one_pass`: None where an
        inner-outer plan would take its two-kernel form (ApartParts' kept plan)."""
        if local_extents is not None and self.plan.axes.resized:
            return None  # a resize's offsets are global extents: ATen runs local tensors
        if out_shapes is None:
            outputs = self.allocate_outputs(values, META if ahead_jobs is not None else device)
        else:
            dests = dests if dests is not None else [None] * len(out_shapes)
            outputs = [d if d is not None else torch.empty(shape, dtype=o.dtype.to_torch(), device=device)
                       for o, shape, d in zip(self.plan.outputs, out_shapes, dests)]
        tensors = list(inputs) + outputs
        if local_extents is None:
            extents = [int(f(values)) for f in self.axis_extents]
        else:
            extents = list(local_extents)
        if any(e == 0 for e in extents) or not extents:
            return None  # empty loop space: the caller evaluates through ATen
        strides = self.strides(tensors, len(extents), values)
        plan = self.plan
        # (a pointwise kernel walks its axes in the memory order of its first output spanning
        # them all: an output laid out as its inputs are is one run, a plain stream)
        order_by = next((k for k, t in enumerate(self.tensors) if k >= len(inputs) and plan.axes.spans_all(t)), None)
        layout = make_layout(plan.dim0, plan.dim1, strides, extents, plan.template is Template.pointwise,
                             frozenset(plan.axes.resized), order_by, self.iota_axes)
        runs = layout.super_axes
        run_extents = [math.prod(extents[a] for a in run) for run in runs]
        rows = math.prod(run_extents[:len(layout.dim0)])
        cols = math.prod(run_extents[len(layout.dim0):])
        params = choose(plan.template, rows, cols, plan.template is Template.pointwise and row_broadcast(
            layout, strides[:len(inputs)], extents))
        # (measured where the column sums split: a kernel that cannot keeps the plain tile)
        storing = plan.stores_rows_in_pass() and plan.splittable()
        if storing:
            params = outer_storing(params)
        if plan.axes.resized and not params.persistent:
            # shifted views are emitted in the program scope, with the whole row in registers;
            # rows too long for that (a softmax of a cat over 32768 columns) run through ATen
            return None
        two_kernels = None  # (first plan, second plan, their names) of a two-kernel form
        shared = None  # the shared-row form's config
        if plan.template is Template.inner_outer and not params.persistent:  # rows too long for registers
            if local_extents is not None:
                return None  # the two-kernel form iterates logical extents: ATen runs local tensors
            shared = shared_row_config(plan, layout, cols, tensors, strides, extents, device)
            if shared is not None and shared.pair and _processors(device) < 2:
                shared = None  # (no pair of processors)
            if shared is not None and self.kernel(layout, "shared_row", target_for(device),
                                                  config=shared.plain) is None:
                shared = None  # (its code names what Gluon lacks, whatever the copy schedule)
            if shared is None and (in_one_pass and not APART_KEEPS_TWO_KERNELS):
                return None
            two_kernels = (plan.parts.rows, plan.parts.columns, ("rows", "columns"))
            if shared is None and plan.parts.apart is not None and dests is None:
                apart = self._apart_form(two_kernels, inputs, scalars, values, device, rows, cols, ahead_jobs)
                if apart is not None:
                    return apart
        elif plan.statistics is not None and local_extents is None and self._splits(params, rows, cols, device):
            # one program a kept block (of columns, or a row) could not fill the GPU: the
            # statistics split over the reduced dim, then the outputs that read them (the same
            # bytes; StatisticsParts)
            two_kernels = (plan.statistics.split, plan.statistics.readers, ("statistics", "rows"))
        if two_kernels is not None:
            self._two_kernels_of(two_kernels)
            if shared is None:
                return self._two_kernels.prepare(inputs, scalars, values, device, ahead_jobs)
        # 64-bit indices where a tensor's offsets, or the loop space itself (a split's chunk
        # starts; broadcast inputs may be small), reach 2^31
        int64 = math.prod(extents) >= _INT32_LIMIT or any(
            t.numel() and sum((d - 1) * abs(s) for d, s in zip(t.shape, t.stride())) >= _INT32_LIMIT for t in tensors)
        target = target_for(device)
        chunks = 1  # of the reduced dim, each reduced by its own programs (a split reduction)
        if plan.splittable() and plan.template is Template.inner_reduction:
            split_params, chunks = inner_split(rows, cols, _processors(device))
            params = split_params if chunks > 1 else params
        elif plan.splittable():
            per_processor = OUTER_STORING_PROGRAMS_PER_PROCESSOR if storing else SPLIT_PROGRAMS_PER_PROCESSOR
            chunks = split_count(params, rows, _processors(device), per_processor)
        red_block = f"block{plan.red_dim}"  # (the reduced dim's block, of a reduction)
        chunk_len = rows if plan.red_dim == 0 else cols
        if chunks > 1:  # whole blocks a chunk
            block, reduced = getattr(params, red_block), chunk_len
            chunk_len = -(-(-(-reduced // chunks)) // block) * block
            chunks = -(-reduced // chunk_len)
        variants = ((["split"] if SPLIT_IN_ONE_KERNEL else ["partial", "combine"]) if chunks > 1 else
                    ["tile" if plan.template is Template.pointwise else
                     "persistent" if params.persistent else "looped"])
        align = 0  # elements: chunks of a row start at aligned addresses (layout.row_alignment)
        looped_rows = (variants == ["looped"] and plan.template is Template.inner_reduction and plan.red_dim == 1
                       and params.block0 == 1)
        if (looped_rows or variants == ["tile"]) and not plan.axes.resized:
            align = row_alignment(layout, strides, extents, [t.element_size() for t in tensors],
                                  self._spans_both(layout), cols, params.block1 if looped_rows else POINTWISE_TILE)
        if align and looped_rows:
            variants = ["looped_aligned"]
        elif align:
            tile = aligned_tile(rows, cols, align)
            if tile is not None:  # one chunk of a row a program (codegen/kernel.py write_aligned_pointwise)
                variants, params = ["tile_aligned"], tile
        step_params = {}  # launch parameters of steps that do not share the plan's
        stages = 1
        tile_bytes = sum(t.element_size() for t in inputs if t.numel() == rows * cols)  # what a row loop streams
        # a one-kernel inner reduction, which may also run as a row loop
        row_reduction = (variants == ["persistent"] and plan.template is Template.inner_reduction
                         and not plan.axes.resized)  # (the row loop has no shifted views)

        def rows_form() -> tuple:
            return (["rows"], {"rows": replace(params, grid=row_loop_programs(params, _processors(device)))},
                    row_loop_stages(params, tile_bytes))
        if shared is not None:
            # one program a processor, a workspace row each; a row's pair of programs share one
            chunks = min(_processors(device) // 2 if shared.pair else _processors(device), rows)
            variants = ["shared_row", "combine"]
            programs = 2 * chunks if shared.pair else chunks
            step_params = {"shared_row": LaunchParams(1, shared.block1, False, shared.warps, programs),
                           "combine": inner_outer_combine(cols, chunks, _processors(device))}
        elif plan.template is Template.inner_outer:
            stages = inner_outer_stages(params, tile_bytes)
            chunks = inner_outer_programs(params, _processors(device))
            step_params = {"persistent": replace(params, grid=chunks),
                           "combine": inner_outer_combine(cols, chunks, _processors(device))}
            variants = ["persistent", "combine"]
        elif row_reduction and row_loop(params, cols):
            variants, step_params, stages = rows_form()
        index = {id(v): k for k, v in enumerate(self.tensors)}
        n_tensors = len(self.tensors)

        def build(variants, step_params, stages, config: Optional[SharedRowConfig] = shared) -> Launch:
            steps, source, semaphores = [], [], 0
            for variant in variants:
                ks, fn = self.kernel(layout, variant, target, stages if variant in ("persistent", "rows") else 1,
                                     config if variant == "shared_row" else None)
                source.append(ks.source)
                n_work = sum(a.kind == "workspace" for a in ks.args)
                if variant == "split":  # a counter a column block
                    semaphores = params.grid
                args, slots = [], []
                for spec in ks.args:
                    if spec.kind == "tensor":
                        slots.append((len(args), index[id(spec.val)]))
                        args.append(None)
                    elif spec.kind == "workspace":
                        slots.append((len(args), n_tensors + spec.super_axis))
                        args.append(None)
                    elif spec.kind == "semaphore":  # after the workspaces
                        slots.append((len(args), n_tensors + n_work))
                        args.append(None)
                        if spec.dim > 0:  # the pair form's words: spec.dim a (row, half), and `broken`
                            semaphores = rows * 2 * spec.dim + 1
                    elif spec.kind == "stride":
                        args.append(run_stride(runs[spec.super_axis], strides[index[id(spec.val)]], extents))
                    elif spec.kind == "rng_stride":
                        args.append(run_stride(runs[spec.super_axis], strides[self.rng_slots[id(spec.val)]], extents))
                    elif spec.kind == "extent":
                        args.append(run_extents[spec.super_axis])
                    elif spec.kind == "split_count":
                        args.append(chunks)
                    elif spec.kind == "split_chunk":
                        args.append(chunk_len)
                    elif spec.kind == "size":
                        args.append(tensors[index[id(spec.val)]].shape[spec.dim])
                    elif spec.kind == "extent_expr":
                        args.append(int(compile_extent(spec.expr)(values)))
                    else:
                        args.append(scalars[id(spec.val)])
                p = step_params.get(variant)
                if p is None:
                    p = replace(params, grid=params.grid * (chunks if variant in ("partial", "split") else 1))
                    if variant == "combine":  # its reduced dim runs over the chunks' workspace rows
                        p = replace(p, **{red_block: min(next_pow2(chunks), getattr(p, red_block))})
                kwargs = dict(BLOCK0=p.block0, BLOCK1=p.block1, INT64=int64)
                cblock = f"CBLOCK{plan.red_dim}"
                if cblock in ks.constexprs:  # the combine part's workspace rows a step
                    kwargs[cblock] = min(next_pow2(chunks), getattr(p, red_block))
                if "SPT" in ks.constexprs:  # the shared-row kernel's layout
                    kwargs.update(SPT=config.per_thread, WARPS=config.warps)
                    if config.pair:  # its pairs wait on each other: all resident at once, or no launch
                        kwargs["launch_cooperative_grid"] = True
                if "EVEN0" in ks.constexprs:  # tile dims the blocks divide need no masks
                    kwargs.update(EVEN0=rows % p.block0 == 0, EVEN1=cols % p.block1 == 0)
                if "ALIGN" in ks.constexprs:
                    kwargs["ALIGN"] = align
                if "LOOP_EXTENT" in ks.constexprs:
                    # the looped kernel's trip count, fixed: the reduced extent rounded up to
                    # whole chunks (the masks cover the tail), so rows of varying length
                    # compile once per number of chunks, not once per length
                    block, extent = (p.block0, rows) if plan.red_dim == 0 else (p.block1, cols)
                    kwargs["LOOP_EXTENT"] = -(-extent // block) * block
                kwargs["num_warps"] = p.num_warps
                step = _DirectStep(fn, p.grid, kwargs) if target == "cuda" else _Step(fn, p.grid, kwargs)
                steps.append((step, args, slots))
            out_specs = [(tuple(t.shape), t.dtype) for t in outputs]
            out_strides = [t.stride() for t in outputs]
            # (each kept in its reduction's accumulator type: an fp32 workspace rounded int64
            # and double sums)
            # a workspace row: the columns (a split inner reduction's: the rows it keeps)
            kept = rows if plan.template is Template.inner_reduction else cols
            work_specs = [((chunks, kept), workspace_dtype(a.expr).to_torch()) for a in ks.args
                          if a.kind == "workspace"]
            return Launch(steps, out_specs, work_specs, "\n\n".join(source),
                           Semaphores(semaphores) if semaphores else None, out_strides)

        if shared is not None:
            return self._shared_row_form(shared, build, variants, step_params, stages, layout, target, inputs,
                                         scalars, values, device, dests, rows, cols, ahead_jobs)
        launch = build(variants, step_params, stages)
        forms = []  # the launch forms timed against each other, the default first
        if row_reduction and variants == ["persistent"] and dests is None and target in TUNED_TARGETS:
            # which form wins depends on the kernel: the forms are timed once per bucket
            forms = [("default", None)]
            forms += [(f"{w} warps", lambda w=w: build(variants, {"persistent": replace(params, num_warps=w)}, 1))
                      for w in tuned_warps(params, cols)]
            if autotune_row_loop(params, cols):
                forms.append(("row loop", lambda: build(*rows_form())))
            forms += [(f"one pass, {w} warps" if b0 == 1 else f"one pass, {b0} rows a program, {w} warps",
                       lambda b0=b0, w=w: build(["reload"], {"reload": replace(
                           params, persistent=False, num_warps=w, block0=b0, grid=-(-rows // b0))}, 1))
                      for b0, w in reload_forms(params, rows, cols)]
            forms += [(f"looped, {p.block1} columns a chunk, {p.num_warps} warps, constant row length",
                       lambda p=p: build(["looped_static"], {"looped_static": p}, 1))
                      for p in looped_forms(params, rows, cols)]
        elif variants in (["looped"], ["looped_aligned"]) and plan.template is Template.inner_reduction \
                and dests is None and target in TUNED_TARGETS:
            forms = [("default", None)] + [
                (f"{p.block1} columns a chunk, {p.num_warps} warps", lambda p=p: build(variants, {variants[0]: p}, 1))
                for p in long_row_forms(params)]
        elif plan.template is Template.outer_reduction and dests is None and target in TUNED_TARGETS \
                and variants in (["split"], ["looped"]) and not storing:
            # (not a storing kernel: its tile is kept small for the output it computes in its
            # pass, outer_storing; the unsplit tiles were measured on plain column sums)
            forms = [("default", None)] + [
                (f"unsplit, {p.block0} x {p.block1}, {p.num_warps} warps", lambda p=p: build(["looped"], {"looped": p}, 1))
                for p in outer_forms(params, _processors(device), cols)]
        if len(forms) > 1:
            return _fastest_form(launch, forms, rows, cols, inputs, device, ahead_jobs)
        if ahead_jobs is not None:
            ahead_jobs.add(launch, inputs, device)
        return launch

    def _shared_row_form(self, shared: SharedRowConfig, build: Callable, variants, step_params, stages, layout,
                         target, inputs, scalars, values, device, dests, rows: int, cols: int,
                         ahead_jobs: "Optional[CompileJobs]") -> "SharedRowLaunch":
        """The shared-row launch of the gate's `shared` (whose `ahead` is as many chunks as
        shared memory holds twice) in its plain copy schedule (no chunk held twice, one chunk a
        barrier), timed against the other schedules of SHARED_ROW_SCHEDULES where it names any
        (none by default: on the H200 they were within 1% of it). Untimed (FUSER_AUTOTUNE=0, a
        misaligned first call, given destinations): the plain one."""
        two = self._two_kernels

        def with_fallback(config: SharedRowConfig) -> SharedRowLaunch:
            # the two-kernel form, prepared (and compiled) by the first call that needs it
            return SharedRowLaunch(build(variants, step_params, stages, config),
                                    lambda ins: two.prepare(ins, scalars, values, device), shared.staged, config.pair)
        plain = shared.plain
        default = with_fallback(plain)  # (the gate checked its kernel)
        schedules = [plain]
        if dests is None and not misaligned(inputs, shared.staged) and autotuning():
            listed = dict.fromkeys(replace(shared, ahead=shared.ahead if held else 0, batch=batch)
                                   for held, batch in SHARED_ROW_SCHEDULES)
            schedules += [c for c in listed if c != plain
                          and self.kernel(layout, "shared_row", target, config=c) is not None]
        if len(schedules) == 1:
            # (a compile ahead on a background thread compiles the kernel itself: it is needed later)
            stand_in = (dests is None and tuning.in_background(target) and tuning.timing_forms()
                        and not compile_pool.patient() and not misaligned(inputs, shared.staged))
            if ahead_jobs is None and stand_in:
                default.compile_in_background(inputs, device)
            elif ahead_jobs is not None and stand_in and not default.ready(inputs, device):
                with tuning.untimed():  # the stand-in's kernels (the real call compiles this one behind)
                    two.prepare(inputs, scalars, values, device, ahead_jobs)
            elif ahead_jobs is not None:
                ahead_jobs.add(default, inputs, device)
            return default
        return _fastest_form(default, [
            (f"{c.ahead} chunks held twice, {c.batch} a barrier", None if k == 0 else lambda c=c: with_fallback(c))
            for k, c in enumerate(schedules)], rows, cols, inputs, device, ahead_jobs)

    def _apart_form(self, two_kernels: tuple, inputs, scalars, values, device, rows: int, cols: int,
                    ahead_jobs: "Optional[CompileJobs]"):
        """An inner-outer plan's column output apart (ApartParts: the LayerNorm backward's db
        over rows too long for registers), the others in one pass: x and dy read once more for
        db alone rather than twice for all; timed against the two-kernel form only where
        APART_TIMED says so; None where the kept outputs would not run in one pass."""
        if not (shared_row_possible(device) or APART_KEEPS_TWO_KERNELS):
            return None  # (the kept plan would take two kernels too)
        if self._apart is None:
            parts = self.plan.parts.apart
            self._apart = TwoKernels(self.plan, parts.kept, parts.apart, ("kept", "apart"), self._part_launcher)
        two = self._two_kernels_of(two_kernels)
        if misaligned(inputs, range(len(inputs))):
            # the kept part would fall back to its own two kernels (6 row-sized reads and
            # writes); the whole plan's read 5, and this launch is kept for the shape
            return None
        apart = self._apart.prepare(inputs, scalars, values, device, ahead_jobs, in_one_pass=True)
        if apart is None or device.type not in TUNED_TARGETS or not autotuning() or not APART_TIMED:
            return apart
        return _fastest_form(apart, [
            ("a column output apart", None),
            ("two kernels", lambda: two.prepare(inputs, scalars, values, device, ahead_jobs))],
            rows, cols, inputs, device, ahead_jobs)

    def _part_launcher(self, plan: KernelPlan, part: str) -> "KernelLauncher":
        """The launcher of one kernel of a form of several (TwoKernels), named after its part."""
        return KernelLauncher(plan, f"{self.name}_{part}")

    def _two_kernels_of(self, two_kernels: tuple) -> TwoKernels:
        """This plan's two-kernel form ((first plan, second plan, their names)), made once."""
        if self._two_kernels is None:
            self._two_kernels = TwoKernels(self.plan, *two_kernels, self._part_launcher)
        return self._two_kernels

    def _splits(self, params: LaunchParams, rows: int, cols: int, device) -> bool:
        """Whether a reduction with this launch would split over chunks of its reduced dim, were
        it splittable (its statistics form asks)."""
        if self.plan.template is Template.inner_reduction:
            return inner_split(rows, cols, _processors(device))[1] > 1
        return split_count(params, rows, _processors(device)) > 1

    def compile_ahead(self, inputs, scalars, values, device, jobs: "CompileJobs") -> Optional[list]:
        """For a runtime's compile-ahead pass: the outputs this segment would make, as meta
        tensors (None: it would run through ATen), after adding to `jobs` the compile of every
        kernel its first launch would compile, with stand-ins for its tensors. Nothing is
        launched or allocated on the device, and no launch is kept (the kernels' generated
        variants are, as the real call would make them): the first real call prepares its
        launch as always and finds Triton's kernels compiled. `inputs`: real or meta tensors
        (only their layouts are read)."""
        if self.prepare(inputs, scalars, values, device, ahead_jobs=jobs) is None:
            return None
        return self.allocate_outputs(values, META)


def _fastest_form(default: "Launch", forms: list, rows: int, cols: int, inputs, device,
                  ahead_jobs: "Optional[CompileJobs]" = None) -> "Launch":
    """The fastest of a kernel's launch forms ((label, builder) pairs; the first is `default`)
    for this bucket (codegen/autotune.py): remembered, or timed now on these inputs after
    compiling every form side by side, or (on the GPU, codegen/tuning.py) the default now, the
    others compiling in the background and timed at a later call (every form built now). A
    remembered choice builds only that form. `ahead_jobs` (see `prepare`): add the compile jobs
    of the remembered form, or of the default where the others compile later, or of every form
    to time, and return the default untimed."""
    labels = ",".join(label for label, _ in forms)
    # the kernels' canonical names (a digest of their canonical code): kernels alike but for
    # their tensors' names (a model's layers) share one measurement
    digest = hashlib.sha256(" ".join(re.findall(r"def (\w+)\(", default.source)).encode()).hexdigest()[:24]
    key = autotune.bucket_key(f"{digest}|{labels}", rows, cols, device)
    made = [default] + [None] * (len(forms) - 1)

    def form(k: int) -> Launch:
        if made[k] is None:
            made[k] = forms[k][1]()
        return made[k]
    chosen = autotune.CHOICES.get(key)
    remembered = chosen is not None and 0 <= chosen < len(forms)
    # (a thread compiling ahead in the background compiles every form: they are timed sooner)
    later = not remembered and tuning.in_background(target_for(device)) and not compile_pool.patient()
    if not remembered and not tuning.timing_forms():  # (a stand-in's launch: the default)
        if ahead_jobs is not None:
            ahead_jobs.add(default, inputs, device)
        return default
    if ahead_jobs is not None:
        for k in [chosen] if remembered else [0] if later else range(len(forms)):
            ahead_jobs.add(form(k), inputs, device)
        return default
    if later:  # the default runs while the others compile
        return tuning.TuningLaunch([form(k) for k in range(len(forms))], key, [label for label, _ in forms],
                                   inputs, device)
    with phase("autotune"):
        if not remembered:  # to be timed: compile them all at once first
            jobs = []
            for k in range(len(forms)):
                jobs += form(k).jobs_for(inputs, device)
            parallel_compile.compile_together(jobs)
        return form(autotune.fastest(key, [lambda k=k: form(k)(inputs, device) for k in range(len(forms))], device,
                                         labels=[label for label, _ in forms]))


# a split outer reduction runs as one kernel, its last program a column block combining
# (codegen/split_kernel.py); False: a partial kernel and a combine kernel
SPLIT_IN_ONE_KERNEL = True

# whether an inner-outer plan's kept part (ApartParts) may take its two-kernel form: False,
# since that reads x and dy twice for the kept sums and once more for the one apart; the CPU
# tests set it, where no shared-row kernel runs, to check the division's results
APART_KEEPS_TWO_KERNELS = False

# whether db apart is timed against the two-kernel form. On the H200 it won each time it was
# (347 against 375 us and 384 against 411 us at 4096x32768, fourteenth to sixteenth sessions:
# 4 row-sized reads and writes against 5), and timing it compiled the two-kernel form too, its
# row kernel in every timed form (the LayerNorm backward definition's first call at 4096x32768
# took 6.8 s, 6.6 of it in the autotune phase)
APART_TIMED = False

# targets where launch forms are timed to choose between them (the interpreter's timings say
# nothing about a GPU)
TUNED_TARGETS = ("cuda",)


def _processors(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return INTERPRETER_PROCESSORS


# the interpreter has no processors to fill; tests raise this to exercise split reductions
INTERPRETER_PROCESSORS = 0
