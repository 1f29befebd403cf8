"""Kernels of the inner-outer template (schedulers/inner_outer.py): row and column reductions of
the same rows in one pass, a norm's backward.

The persistent kernel: program `pid` of P loops over the row blocks pid, pid + P, ... (BLOCK0
rows each, the whole row of BLOCK1 columns in registers). Values along columns only (the
weight) are loaded once, before the loop; row values, the row reductions (inline over tile dim
1, as in the persistent inner template) and the row outputs live in the loop. Each column
reduction adds the terms of the program's rows into a [BLOCK0, BLOCK1] fp32 tile; after the loop
the program sums the tile over its rows and stores it as row `pid` of that reduction's workspace
[P, columns]. The combine kernel is the split outer reduction's: it reduces the workspace rows
and computes the column outputs (the cast to the output dtype).

Rows too long for registers run as the shared-row Gluon kernel (codegen/shared_row.py) where
it applies, else as the plan's two-kernel form (TwoKernels).
"""
from __future__ import annotations

from typing import Callable, Optional

from ..ir import Expr, ReductionOpType, TensorView, Val
from ..schedulers.plan import KernelPlan
from . import parallel_compile
from .kernel import KernelSource, KernelWriter, generate
from .layout import Layout
from .scope import Scope
from .steps import META


class RowLoopWriter(KernelWriter):
    """A persistent kernel whose programs loop over blocks of rows: program `pid` of P takes
    row blocks pid, pid + P, ... with the whole row of BLOCK1 columns in registers, the loop
    software-pipelined over `stages` (the next rows' loads are in flight while this row
    computes). Tile dim 0 is the row loop, so a value is tile-level (computed in the loop) when
    it varies along rows; values along columns only are computed once, before the loop; the
    row reductions (over tile dim 1) are inline. Column reductions, when given (the inner-outer
    template), add the terms of the program's rows into a [BLOCK0, BLOCK1] fp32 accumulator
    that is stored as partial row `pid` of a workspace [P, columns]."""
    PICKS_BY_LOAD = False  # (its row reductions are in line with its own layout)

    def __init__(self, plan: KernelPlan, layout: Layout, target: str, name: str, stages: int = 1,
                 column_reductions: tuple = ()):
        super().__init__(plan, layout, True, target, name)
        # masks stay: without them the pipelined row loop of the layernorm backward at 16384x4096
        # ran 0.55 of copy against 0.87 (H200, 2026-12-01)
        self.even_masks = False
        self.stages = stages  # software-pipelining stages of the row loop (1: a plain loop)
        self.looped = True  # over rows
        self.column_reductions = list(column_reductions)
        self.workspaces = [(e, "acc") for e in self.column_reductions]

    def tile_level(self, v: Val) -> bool:
        return isinstance(v, TensorView) and 0 in self.dims_of(v)

    def reduces_in_loop(self, e: Expr) -> bool:
        return False  # row reductions are inline; column reductions are accumulated in write()

    def program_dims(self) -> list[int]:
        return [0]  # an output not varying along rows is stored by program 0

    def variant_name(self) -> str:
        more = ", one partial column row per program" if self.column_reductions else ""
        return f"persistent over rows, {self.stages} stage(s){more}"

    def write(self) -> KernelSource:
        ps = self.begin_program()
        ps.lines.append("pid0 = pid")
        self.emit_dim_index(ps, 1, "0")
        for o in self.plan.outputs:  # outputs along columns only: once, before the loop
            if isinstance(o, TensorView) and not self.tile_level(o):
                self.emit_store(ps, o)
        accs = []
        for e in self.column_reductions:
            acc = f"acc{e.out.name}"
            ps.lines.append(f"{acc} = tl.full([BLOCK0, BLOCK1], {self.identity(e.kind, e.out.dtype)}, tl.float32)")
            accs.append(acc)
        body = Scope(parent=ps)
        self.emit_dim_index(body, 0, "r_start")
        for o in self.plan.outputs:
            if isinstance(o, TensorView) and self.tile_level(o):
                self.emit_store(body, o)
        finals = []
        for e, acc in zip(self.column_reductions, accs):
            dt = e.out.dtype
            masked = f"tl.where(r_mask & c_mask, {self.operand(body, e.inp, dt)}, {self.identity(e.kind, dt)})"
            if e.kind is ReductionOpType.sum:
                body.lines.append(f"{acc} = {acc} + {masked}")
                finals.append(f"tl.sum({acc}, axis=0, keep_dims=True)")
            else:
                fn = self.combine(e.kind)
                body.lines.append(f"{acc} = {fn}({acc}, {masked})")
                finals.append(f"tl.reduce({acc}, 0, {fn}, keep_dims=True)")
        bounds = "pid * BLOCK0, R, tl.num_programs(0) * BLOCK0"
        stages = self.stages
        ps.lines.append(f"for r_start in range({bounds}):" if stages == 1 else
                        f"for r_start in tl.range({bounds}, num_stages={stages}):")
        ps.lines += ["    " + line for line in body.lines]
        for k, final in enumerate(finals):
            ps.lines.append(f"tl.store(W{k}_ptr + pid * C + c, {final}, mask=c_mask)")
        return KernelSource(self.name, self.assemble(), self.args, list(self.params), True,
                            self.constexprs())


def generate_inner_outer(plan: KernelPlan, layout: Layout, variant: str, target: str, name: str,
                         stages: int = 1) -> KernelSource:
    """variant "persistent": the pass over rows (its loop pipelined over `stages`); "combine":
    the reduction of its partial rows."""
    if variant == "persistent":
        return RowLoopWriter(plan.parts.persistent, layout, target, name, stages,
                             tuple(plan.parts.split.column_reductions)).write()
    return generate(plan.parts.combine, layout, False, target, name, "combine")


def generate_row_loop(plan: KernelPlan, layout: Layout, target: str, name: str, stages: int) -> KernelSource:
    """An inner reduction as a persistent kernel looping over blocks of rows."""
    return RowLoopWriter(plan, layout, target, name, stages).write()


class TwoKernels:
    """A plan run as two kernels, the second reading the first's outputs: the inner-outer
    plan's form for rows too long for registers (the row kernel writing the row statistics,
    then the column kernel; `first` is None when the column outputs need no row value) and a
    reduction's statistics form (the statistics split over the reduced dim, then the outputs
    that read them; schedulers/plan.py StatisticsParts). `launcher(plan, suffix)` makes the
    KernelLauncher of one of them."""

    def __init__(self, plan: KernelPlan, first: "KernelPlan | None", second: KernelPlan,
                 names: tuple[str, str], launcher: Callable[[KernelPlan, str], object]):
        self.first = launcher(first, names[0]) if first is not None else None
        self.second = launcher(second, names[1])
        tensors = [v for v in plan.inputs if isinstance(v, TensorView)]
        source = {id(v): ("in", k) for k, v in enumerate(tensors)}
        first_outputs = first.outputs if first is not None else []
        source.update({id(v): ("first", k) for k, v in enumerate(first_outputs)})
        self.first_take = [source[id(v)][1] for v in (first.inputs if first is not None else [])]
        self.second_take = [source[id(v)] for v in second.inputs]
        source.update({id(v): ("second", k) for k, v in enumerate(second.outputs)})
        self.give = [source[id(o)] for o in plan.outputs]

    def prepare(self, inputs, scalars, values, device, ahead_jobs=None, in_one_pass=False) -> "Optional[_TwoLaunches]":
        """`ahead_jobs`: see KernelLauncher.prepare; `in_one_pass`: the first plan's, whose
        launch returns None (and so this) where it would take its own two-kernel form."""
        first_launch = None
        made = {"in": list(inputs), "first": []}
        if self.first is not None:
            first_launch = self.first.prepare([inputs[k] for k in self.first_take], scalars, values, device,
                                              ahead_jobs=ahead_jobs, in_one_pass=in_one_pass)
            if first_launch is None and in_one_pass:
                return None
            # for their sizes and strides
            made["first"] = self.first.allocate_outputs(values, META if ahead_jobs is not None else device)
        joined = []  # whether the first part's kernels compiled in the second part's batch
        join = None
        if first_launch is not None and ahead_jobs is None:
            # should the second part time its forms, the first's kernels compile beside them
            # (not after, alone, at the first launch): the LayerNorm backward's shared-row kernel
            # beside db's column forms
            first_inputs = [inputs[k] for k in self.first_take]

            def first_jobs() -> list:
                jobs = first_launch.jobs_for(first_inputs, device)
                joined.append(True)
                return jobs
            join = first_jobs
        with parallel_compile.joined_by(join):
            second_launch = self.second.prepare([made[s][k] for s, k in self.second_take], scalars, values, device,
                                                ahead_jobs=ahead_jobs)
        both = _TwoLaunches(first_launch, second_launch, self.first_take, self.second_take, self.give)
        if joined:  # (that batch compiled the second part's forms, each then launched to be timed)
            both.cold = False
        return both


class _TwoLaunches:
    """Prepared launches of a two-kernel form, called like one prepared launch."""

    __slots__ = ("first_launch", "second_launch", "first_take", "second_take", "give", "compiles", "cold",
                 "_source", "_source_of")

    def __init__(self, first_launch, second_launch, first_take, second_take, give):
        self.first_launch, self.second_launch = first_launch, second_launch
        self.first_take, self.second_take, self.give = first_take, second_take, give
        self.compiles = sum(launch.compiles for launch in (first_launch, second_launch) if launch is not None)
        self.cold = self.compiles > 1
        self._source, self._source_of = "", (None, None)

    @property
    def source(self) -> str:
        """Both launches' code, as they run now (a part may change what it runs: a stand-in
        while its kernel compiles, a form chosen after timing); the same object while they do not."""
        first = self.first_launch.source if self.first_launch is not None else None
        second = self.second_launch.source
        if first is not self._source_of[0] or second is not self._source_of[1]:
            self._source_of = (first, second)
            self._source = "\n\n".join(text for text in (first, second) if text is not None)
        return self._source

    def __call__(self, inputs, device, dests=None):  # (whole tensors only: `dests` is None)
        if self.cold:
            self.cold = False
            self._compile_together(inputs, device)
        made = {"in": inputs, "first": []}
        if self.first_launch is not None:
            made["first"] = self.first_launch([inputs[k] for k in self.first_take], device)
        made["second"] = self.second_launch([made[s][k] for s, k in self.second_take], device)
        return [made[s][k] for s, k in self.give]

    def direct_lines(self, *args, **kwargs) -> None:
        """No inline form (see `launches.Launch.direct_lines`): each of the two launches is called."""
        return None

    @property
    def settled(self) -> bool:
        """Whether both launches run what they will keep running (codegen/tuning.py)."""
        return all(getattr(launch, "settled", True) for launch in (self.first_launch, self.second_launch))

    def _compile_together(self, inputs, device) -> None:
        """Compile both kernels side by side before the first launch."""
        parallel_compile.compile_together(self.jobs_for(inputs, device))

    # no steps of its own: a compile-ahead pass finds the jobs of its launches, which added
    # theirs when prepared (ahead.CompileJobs.add)
    steps = ()

    def jobs_for(self, inputs, device) -> list:
        """The compile jobs of both kernels (which then need no compile together at the first
        call): the second kernel's arguments are made here from the first kernel's output specs
        (its outputs do not exist before it runs). Where the second reads none of them, the
        first launch gives its own jobs (ApartParts' kept plan: a shared-row launch, or, in the
        CPU tests, two kernels); where it does and the first is two kernels itself, the second
        compiles at its first call."""
        self.cold = False
        made, jobs = {"in": inputs, "first": []}, []
        first_inputs = [inputs[k] for k in self.first_take]
        reads_first = any(source == "first" for source, _ in self.second_take)
        if self.first_launch is not None and (not reads_first or isinstance(self.first_launch, _TwoLaunches)):
            jobs += self.first_launch.jobs_for(first_inputs, device)
            if reads_first:
                return jobs
        elif self.first_launch is not None:
            tensors, made["first"] = self.first_launch.tensors_for(first_inputs, device)
            jobs += self.first_launch.compile_jobs(tensors)
        tensors, _ = self.second_launch.tensors_for([made[s][k] for s, k in self.second_take], device)
        return jobs + self.second_launch.compile_jobs(tensors)
