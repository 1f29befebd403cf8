"""Cut a Fusion into segments by greedy merging.

Each expr starts as its own group. In topological order, an expr that a kernel can compute is
merged into the groups producing its inputs while the scheduler still accepts the union and the
group graph stays acyclic; other exprs join neighbouring evaluator groups. Then kernel groups
that only share inputs join where the scheduler says one kernel pays (a norm's backward). Every
refused merge is recorded with its reason, for `fd.last_segments()` and bug reports.
"""
from __future__ import annotations

from typing import Callable, Optional

from ..ir import VIEW_OPS, Expr, Fusion, TensorView
from ..ir.fusion import live_exprs
from ..schedulers.axes import RESIZED_OUTPUTS
from ..timing import phase
from .segments import Segment, SegmentKind, segment_inputs, segment_io

# (exprs, inputs, outputs) -> (plan or None, reason it was refused)
TryKernel = Callable[[list[Expr], list, list], tuple[Optional[object], str]]
# expr -> can a kernel compute it at all
KernelCapable = Callable[[Expr], bool]


class _Group:
    def __init__(self, expr: Expr, index: int, kernel: bool):
        self.exprs = [expr]
        self.first = index
        self.kernel = kernel
        self.refusals: list[tuple[str, Expr]] = []  # (why a merge was refused, an expr of the other group)


class Segmenter:
    def __init__(self, fusion: Fusion, exprs: list[Expr], try_kernel: TryKernel, capable: KernelCapable):
        self.exprs = exprs  # the fusion's live exprs, in order
        self.try_kernel = try_kernel
        self.capable = capable
        self.producer: dict[int, Expr] = {id(o): e for e in exprs for o in e.outputs}
        # value id -> the exprs reading it: a group's consumers from its own edges, not by
        # asking every group for its producers (that made segmentation cubic in the exprs)
        self.fusion_outputs = {id(v) for v in fusion.outputs()}
        self.readers: dict[int, list[Expr]] = {}
        for e in exprs:
            for v in dict.fromkeys(id(v) for v in e.inputs):
                self.readers.setdefault(v, []).append(e)
        self.group_of: dict[int, _Group] = {}
        self.order = {id(e): k for k, e in enumerate(exprs)}
        self.retry: list[tuple[Expr, Expr]] = []  # merges to try again after the greedy pass

    # -- graph helpers ----------------------------------------------------------------------

    def producers(self, g: _Group) -> set[_Group]:
        out = set()
        for e in g.exprs:
            for v in e.inputs:
                p = self.producer.get(id(v))
                if p is not None and self.group_of[id(p)] is not g:
                    out.add(self.group_of[id(p)])
        return out

    def consumers(self, g: _Group) -> set[_Group]:
        out = set()
        for e in g.exprs:
            for v in e.outputs:
                for reader in self.readers.get(id(v), ()):
                    h = self.group_of.get(id(reader))
                    if h is not None and h is not g:
                        out.add(h)
        return out

    def reaches(self, src: _Group, dst: _Group) -> bool:
        """Whether `dst` depends on `src` other than directly (through a third group)."""
        stack = [h for h in self.consumers(src) if h is not dst]
        seen = set()
        while stack:
            h = stack.pop()
            if h is dst:
                return True
            if h in seen:
                continue
            seen.add(h)
            stack.extend(self.consumers(h))
        return False

    def acyclic_merge(self, a: _Group, b: _Group) -> bool:
        return not (self.reaches(a, b) or self.reaches(b, a))

    def merged_io(self, exprs: list[Expr]):
        """`segment_io` of a group: its outputs are the values a fusion output or an expr
        outside the group reads (found through `readers`, not by scanning every expr)."""
        inside = {id(x) for x in exprs}
        outputs = [o for e in exprs for o in e.outputs if id(o) in self.fusion_outputs
                   or any(id(r) not in inside for r in self.readers.get(id(o), ()))]
        return segment_inputs(exprs), outputs

    # -- the greedy pass --------------------------------------------------------------------

    def try_merge(self, a: _Group, b: _Group, groups: list[_Group]) -> bool:
        if a.kernel != b.kernel:
            return False
        if not self.acyclic_merge(a, b):
            a.refusals.append((f"not merged with the group of {b.exprs[0].op_name}: it would make a cycle", b.exprs[0]))
            return False
        exprs = sorted(a.exprs + b.exprs, key=lambda e: self.order[id(e)])
        if a.kernel:
            with phase("planning"):
                plan, why = self.try_kernel(exprs, *self.merged_io(exprs))
            if plan is None and not why.startswith("only views"):
                if why == RESIZED_OUTPUTS:
                    self.retry.append((a.exprs[0], b.exprs[0]))
                a.refusals.append((f"not merged with the group of {b.exprs[0].op_name}: {why}", b.exprs[0]))
                return False
        self.absorb(a, b, exprs, groups)
        return True

    def absorb(self, a: _Group, b: _Group, exprs: list[Expr], groups: list[_Group]) -> None:
        a.exprs = exprs
        a.first = min(a.first, b.first)
        a.refusals += b.refusals
        for e in b.exprs:
            self.group_of[id(e)] = a
        groups.remove(b)

    def retry_resized(self, groups: list[_Group]) -> None:
        """A value read by two slices (x[..., :h] and x[..., h:] of rope's backward) cannot join
        the first slice's group while the second still reads it from outside: the group would
        write it at another extent than its own output. Once both slices are in one group, the
        merge is tried again."""
        pending = self.retry
        while pending:
            self.retry = []
            for ea, eb in pending:
                a, b = self.group_of[id(ea)], self.group_of[id(eb)]
                if a is not b and a in groups and b in groups:
                    self.try_merge(a, b, groups)
            if len(self.retry) >= len(pending):
                break  # nothing joined this round
            pending = self.retry

    def absorb_scalar_groups(self, groups: list[_Group]) -> None:
        """Kernel groups of 0-dim values only (`x / sqrt(d)` with a symbolic d: full, casts and
        sqrt of one element) have no loop axes, so no kernel of their own; each would run as
        an ATen call. They join a consumer's kernel instead, which computes them per program."""
        def scalar(g: _Group) -> bool:
            return g.kernel and all(not t.domain.no_reductions() for e in g.exprs
                                    for t in list(e.inputs) + list(e.outputs) if isinstance(t, TensorView))
        joined = True
        while joined:
            joined = False
            for g in sorted((g for g in groups if scalar(g)), key=lambda g: -g.first):
                for c in sorted(self.consumers(g), key=lambda c: c.first):
                    if c.kernel and not scalar(c) and self.try_merge(c, g, groups):
                        joined = True
                        break

    def join_siblings(self, groups: list[_Group]) -> None:
        """Kernel groups that read a common value, with no producer between them, join when the
        scheduler's plan for the union says one kernel pays (`plan.fuses_siblings`: the row and
        column reductions of a norm's backward read the rows once; pointwise kernels over one
        loop space). Refusals are not recorded: siblings are cut by default."""
        tried: set[tuple] = set()  # pairs refused, by their groups' sizes (a join changes them)
        joined = True
        while joined:
            joined = False
            kernels = sorted((g for g in groups if g.kernel), key=lambda g: g.first)
            rank = {id(g): k for k, g in enumerate(kernels)}
            # value id -> the kernel groups reading it (each pair sharing a value is a candidate)
            read_by: dict[int, list[_Group]] = {}
            for g in kernels:
                for v in dict.fromkeys(id(v) for e in g.exprs for v in e.inputs if isinstance(v, TensorView)):
                    read_by.setdefault(v, []).append(g)
            for a in kernels:
                sharing = {id(b): b for e in a.exprs for v in e.inputs if isinstance(v, TensorView)
                           for b in read_by.get(id(v), ()) if rank[id(b)] > rank[id(a)]}
                for b in sorted(sharing.values(), key=lambda b: rank[id(b)]):
                    key = (id(a), len(a.exprs), id(b), len(b.exprs))
                    if key in tried:
                        continue
                    tried.add(key)
                    if not self.acyclic_merge(a, b):
                        continue
                    exprs = sorted(a.exprs + b.exprs, key=lambda e: self.order[id(e)])
                    with phase("planning"):
                        plan, _ = self.try_kernel(exprs, *self.merged_io(exprs))
                    if plan is not None and getattr(plan, "fuses_siblings", False):
                        self.absorb(a, b, exprs, groups)
                        joined = True
                        break
                if joined:
                    break

    def free_views(self, groups: list[_Group]) -> None:
        """A kernel group's output that only views a value the group reads or writes anyway
        (a permute, broadcast or slice of an input or of another output, or a chain of such
        views) leaves the group for ATen, which makes it free: in the kernel it was a copy. A
        linear layer's backward reads the gradient for the bias's column sum and transposes it
        for the weight's matmul; the sibling join made the transpose a second output of the
        sum's kernel. Views that the kernel itself reads stay."""
        # (a group of views alone is ATen's already)
        for g in [g for g in groups if g.kernel and not all(isinstance(e, VIEW_OPS) for e in g.exprs)]:
            moved = True
            while moved:
                moved = False
                inputs, outputs = self.merged_io(g.exprs)
                available = {id(v) for v in inputs} | {id(o) for o in outputs}
                for e in g.exprs:
                    chain = self._view_chain(g, e, available)
                    if not chain:
                        continue
                    rest = [f for f in g.exprs if f not in chain]
                    if all(isinstance(f, VIEW_OPS) for f in rest):
                        continue  # (the views would all leave: the group is ATen's as it is)
                    with phase("planning"):
                        plan, why = self.try_kernel(rest, *self.merged_io(rest))
                    if plan is None and not why.startswith("only views"):
                        continue
                    g.exprs = rest
                    view = _Group(chain[-1], min(self.order[id(f)] for f in chain), kernel=True)
                    view.exprs = sorted(chain, key=lambda f: self.order[id(f)])  # alone: "only views", for ATen
                    for f in chain:
                        self.group_of[id(f)] = view
                    groups.append(view)
                    moved = True
                    break

    def _view_chain(self, g: _Group, e: Expr, available: set[int]) -> list[Expr]:
        """The views of group `g` ending in `e` that ATen could make instead: `e` is a view
        whose output the group gives out and does not read itself, and so is each view before
        it up to a value the group reads or writes anyway. Empty: none."""
        inside = {id(f) for f in g.exprs}
        chain: list[Expr] = []
        f = e
        while isinstance(f, VIEW_OPS):
            out = f.outputs[0]
            readers = [r for r in self.readers.get(id(out), ()) if id(r) in inside]
            if chain and (id(out) in self.fusion_outputs or any(r is not chain[-1] for r in readers)):
                return []  # an intermediate view something else reads (or a fusion output)
            if not chain and (id(out) not in available or readers):
                return []
            chain.append(f)
            source = f.inputs[0]
            if id(source) in available:
                return chain
            f = self.producer.get(id(source))
            if f is None or id(f) not in inside:
                return []
        return []

    def run(self) -> list[Segment]:
        groups: list[_Group] = []
        for k, e in enumerate(self.exprs):
            g = _Group(e, k, self.capable(e))
            self.group_of[id(e)] = g
            groups.append(g)
            for p in sorted(self.producers(g), key=lambda h: (-len(h.exprs), h.first)):
                if p in groups and g in groups:
                    target, other = (p, g)
                    if self.try_merge(target, other, groups):
                        g = target
        self.retry_resized(groups)
        self.absorb_scalar_groups(groups)
        self.join_siblings(groups)
        self.free_views(groups)
        return self.to_segments(groups)

    def to_segments(self, groups: list[_Group]) -> list[Segment]:
        ordered, done = [], set()
        pending = sorted(groups, key=lambda g: g.first)
        while pending:
            for g in pending:
                if all(p in done for p in self.producers(g)):
                    break
            pending.remove(g)
            done.add(g)
            ordered.append(g)
        segments = []
        for g in ordered:
            inputs, outputs = self.merged_io(g.exprs)
            # a refused merge whose groups joined later (another way) is no cut
            refusals = "; ".join(dict.fromkeys(why for why, other in g.refusals if self.group_of[id(other)] is not g))
            if g.kernel:
                with phase("planning"):
                    plan, why = self.try_kernel(g.exprs, inputs, outputs)
                if plan is not None:
                    seg = Segment(SegmentKind.kernel, g.exprs, inputs, outputs,
                                  why=plan.describe() + (f"; {refusals}" if refusals else ""), params=plan)
                    segments.append(seg)
                    continue
                refusals = why + (f"; {refusals}" if refusals else "")
            else:
                refusals = f"{g.exprs[0].op_name} runs through ATen" + (f"; {refusals}" if refusals else "")
            segments.append(Segment(SegmentKind.evaluator, g.exprs, inputs,
                                    [o for o in outputs if isinstance(o, TensorView)], why=refusals))
        return segments


def segment_fusion(fusion: Fusion, try_kernel: Optional[TryKernel] = None,
                   capable: Optional[KernelCapable] = None) -> list[Segment]:
    """Segments in execution order, of the exprs some output depends on (`live_exprs`).
    Without a kernel scheduler everything runs through ATen."""
    exprs = live_exprs(fusion.exprs, fusion.outputs())
    if not exprs:
        return []
    if try_kernel is None:
        inputs, outputs = segment_io(exprs, fusion.outputs(), [])
        return [Segment(SegmentKind.evaluator, exprs, inputs, outputs, why="ATen evaluation")]
    with phase("segmentation"):
        return Segmenter(fusion, exprs, try_kernel, capable or (lambda e: True)).run()
