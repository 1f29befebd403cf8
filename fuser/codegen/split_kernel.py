"""A split reduction in one kernel.

A reduction whose kept blocks are too few to fill the GPU (a column sum over many rows and
few columns; a sum over a whole tensor, or over a few long rows) is split over chunks of the
reduced dim: each program reduces one chunk of one kept block into a workspace row. The
combine step, which reduces the workspace rows of a kept block and finishes the fusion, ran as
a second kernel; here it runs in the same kernel, by whichever program of the kept block
finishes last. Each program counts itself in on the block's semaphore after its partials are
stored; the one that brings the count to the number of chunks combines, then sets the
semaphore back to zero for the next launch. This saves a launch (host time) and the gap
between two kernels (GPU time).

Ordering: the program's threads meet at a barrier after their stores, and the count is an
acquire-release atomic at GPU scope, so the last program sees every partial; it reads them
past its L1 (`.cg`). The semaphores are a zeroed int32 per kept block, kept by the launch for
each stream (codegen/scratch.py: kernels of one stream do not overlap, so one launch's counts
never mix with another's).
"""
from __future__ import annotations

from ..schedulers.plan import KernelPlan
from .kernel import ArgSpec, KernelSource, KernelWriter
from .layout import Layout
from .math import helpers_for


def generate_split(plan: KernelPlan, layout: Layout, target: str, name: str) -> KernelSource:
    partial = KernelWriter(plan, layout, False, target, name, "partial")
    combine = KernelWriter(plan, layout, False, target, name, "combine", combine_in_line=True)
    partial.write()
    combine.write()
    specs = dict(zip(partial.params, partial.args))
    for param, spec in zip(combine.params, combine.args):
        specs.setdefault(param, spec)
    params = list(specs) + ["SEM_ptr"]
    args = list(specs.values()) + [ArgSpec("semaphore")]
    # the combine part's block of the reduced dim, over workspace rows: CBLOCK0 or CBLOCK1
    red, keep = plan.red_dim, 1 - plan.red_dim
    cblock, block = f"CBLOCK{red}", f"pid{keep}"  # (the kept block: the semaphore's index)
    constexprs = ("BLOCK0", "BLOCK1", "INT64", cblock)
    signature = ", ".join(params + [f"{c}: tl.constexpr" for c in constexprs])
    partial_args = ", ".join(partial.params + ["BLOCK0", "BLOCK1", "INT64"])
    blocks = [cblock if d == red else f"BLOCK{d}" for d in (0, 1)]
    combine_args = ", ".join(combine.params + [block, *blocks, "INT64"])
    # the partial part hands back its kept block
    parts = ["@triton.jit", partial.function(f"{name}_partial") + f"    return {block}\n",
             "@triton.jit", combine.function(f"{name}_combine", ("PID",))]
    main = [
        f"def {name}({signature}):",
        f"    {block} = {name}_partial({partial_args})",
        "    tl.debug_barrier()  # this program's partials are stored",
        f"    if tl.atomic_add(SEM_ptr + {block}, 1, sem=\"acq_rel\", scope=\"gpu\") == S - 1:  # the block's last",
        "        tl.debug_barrier()",
        f"        {name}_combine({combine_args})",
        f"        tl.atomic_xchg(SEM_ptr + {block}, 0, sem=\"relaxed\", scope=\"gpu\")  # zero for the next launch",
        ""]
    code = "\n".join(parts + main)
    header = partial.header()
    header[header.index(next(h for h in header if h.startswith("# Plan: ")))] = (
        f"# Plan: {plan.describe()}, split in one kernel (the last program of a kept block combines)")
    source = "\n".join(header + [""] + partial.imports() + ["", helpers_for(code), "", "", code])
    return KernelSource(name, source, args, params, False, constexprs)

