"""Cut a Fusion into segments by greedy merging.

Each expr starts as its own group. In topological order, an expr that a kernel can compute is
merged into the groups producing its inputs while the scheduler still accepts the union and the
group graph stays acyclic; other exprs join neighbouring evaluator groups. (A pointwise or
single-reduction group grows by one pointwise op with no plan of the union where its known loop
axes show that the scheduler takes it, `GrowableAxes`: a long chain costs each op, not the
chain.) Then kernel groups that
only share inputs join where the scheduler says one kernel pays (a norm's backward). Every
refused merge is recorded with its reason, for `fd.last_segments()` and bug reports.
"""
from __future__ import annotations

import bisect
import heapq
import itertools
from typing import Callable, Optional, Protocol

from ..errors import InternalError
from ..ir import VIEW_OPS, Expr, Fusion, TensorView
from ..ir.fusion import live_exprs
from ..timing import phase
from .segments import LASTING, NO_SPANNING_TENSOR, RESIZED_OUTPUTS, Segment, SegmentKind, segment_inputs, segment_io

# (exprs, inputs, outputs) -> (plan or None, reason it was refused); a plan may offer
# `growable_axes()`, the loop axes by which its group grows without a new plan (GrowableAxes)
TryKernel = Callable[[list[Expr], list, list], tuple[Optional[object], str]]
# expr -> can a kernel compute it at all
KernelCapable = Callable[[Expr], bool]


class _Group:
    def __init__(self, expr: Expr, index: int, kernel: bool):
        self.exprs = [expr]
        self.first = index
        self.kernel = kernel
        self.refusals: list[tuple[str, Expr]] = []  # (why a merge was refused, an expr of the other group)
        # (an expr of another group, why): merges refused for a cause that any larger union keeps
        self.lasting: list[tuple[Expr, str]] = []
        # the loop axes of `exprs` where they plan as a pointwise kernel (`growable_axes`)
        self.axes: Optional[GrowableAxes] = None
        # ids of the exprs outside the group reading its values: its consumers without a walk
        # over its exprs (set by the Segmenter, kept by `absorb`)
        self.read_outside: set[int] = set()
        # ids of the exprs outside the group whose values it reads: its producers, likewise
        self.sources: set[int] = set()
        # its place in a topological order of the groups (`Segmenter.place_union`): a group
        # that depends on it comes later, so a search for a path to a group stops at its place
        self.pos = index


class GrowableAxes(Protocol):
    """A pointwise group's loop axes (the schedulers' `PointwiseAxes`): what one more expr
    brings where the group's plan would provably still hold (`joined`, else None), and taking
    it in (`join`)."""

    def joined(self, e: Expr) -> Optional[object]: ...

    def join(self, e: Expr, found: object) -> None: ...


def growable_axes(plan: Optional[object]) -> Optional[GrowableAxes]:
    offer = getattr(plan, "growable_axes", None)
    return offer() if offer is not None else None


# the groups of a segmentation, in creation order (a dict for removal and membership in O(1))
Groups = dict[_Group, None]


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
        self.order_of: Callable[[Expr], int] = lambda e: self.order[id(e)]
        self.retry: list[tuple[Expr, Expr]] = []  # merges to try again after the greedy pass

    # -- graph helpers ----------------------------------------------------------------------

    def producers(self, g: _Group) -> set[_Group]:
        return {self.group_of[p] for p in g.sources}

    def consumers(self, g: _Group) -> set[_Group]:
        # (readers not yet in a group, later exprs of the greedy pass, are no consumers yet)
        return {self.group_of[r] for r in g.read_outside if r in self.group_of}

    def readers_outside(self, exprs: list[Expr]) -> set[int]:
        """ids of the exprs not in `exprs` that read a value of theirs."""
        inside = {id(e) for e in exprs}
        return {id(r) for e in exprs for o in e.outputs for r in self.readers.get(id(o), ())
                if id(r) not in inside}

    def sources_of(self, exprs: list[Expr]) -> set[int]:
        """ids of the exprs not in `exprs` whose values they read."""
        inside = {id(e) for e in exprs}
        return {id(p) for e in exprs for v in e.inputs
                if (p := self.producer.get(id(v))) is not None and id(p) not in inside}

    def reaches(self, src: _Group, dst: _Group) -> bool:
        """Whether `dst` depends on `src` other than directly (through a third group): whether
        `src` reaches another of `dst`'s producers. The search goes no further than the last
        of those in the topological order: searching every group downstream of `src` made
        an unrolled loop's segmentation quadratic in its steps."""
        if src.pos > dst.pos:
            return False
        targets = {p for p in self.producers(dst) if p.pos > src.pos}
        last = max((p.pos for p in targets), default=-1)
        stack = [h for h in self.consumers(src) if h.pos <= last]
        seen = set()
        while stack:
            h = stack.pop()
            if h in targets:
                return True
            if h in seen:
                continue
            seen.add(h)
            stack.extend(n for n in self.consumers(h) if n.pos <= last)
        return False

    def between(self, start: _Group, edges: Callable[[_Group], set[_Group]], low: int, high: int) -> list[_Group]:
        """The groups placed strictly between `low` and `high` that `start` reaches along
        `edges` (consumers or producers) through such groups only."""
        return list(_reached(edges(start), edges, lambda h: low < h.pos < high))

    def place_union(self, a: _Group, b: _Group) -> int:
        """Keep `pos` a topological order as `a` and `b` become one group (neither reaching
        the other through a third), and return the union's place. Only the groups placed
        between the two move (Pearce and Kelly's reordering): those the later one depends on
        before the union, those depending on the earlier one after it, in their order, onto
        the places they and the two held; the last of those places is left free."""
        early, late = sorted((a, b), key=lambda g: g.pos)
        before = self.between(late, self.producers, early.pos, late.pos)
        after = self.between(early, self.consumers, early.pos, late.pos)
        places = sorted([early.pos, late.pos] + [g.pos for g in before + after])
        before.sort(key=lambda g: g.pos)
        after.sort(key=lambda g: g.pos)
        for g, place in zip(before + after, places[:len(before)] + places[len(before) + 1:]):
            g.pos = place
        return places[len(before)]

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

    def in_order(self, a: _Group, b: _Group) -> list[Expr]:
        """The exprs of both groups in the fusion's order (each group keeps its own in order):
        the smaller group's inserted into a copy of the larger's."""
        small, large = sorted((a.exprs, b.exprs), key=len)
        merged = list(large)
        for e in small:
            bisect.insort(merged, e, key=self.order_of)
        return merged

    def grown_axes(self, a: _Group, b: _Group) -> Optional[GrowableAxes]:
        """The loop axes of the union of kernel groups `a` and `b`, where one is a group with
        known axes (pointwise, or one reduction) and the other a single expr that provably
        keeps them (then the scheduler would take the union, and it needs no plan); else None.
        A chain of pointwise ops grows one op at a time, and planning the whole union at each
        op made segmentation quadratic in the chain's length."""
        grown, single = (a, b) if a.axes is not None else (b, a)
        if grown.axes is None or len(single.exprs) != 1:
            return None
        e = single.exprs[0]
        found = grown.axes.joined(e)
        if found is None:
            return None
        with phase("planning"):  # the scheduler's checks of the op itself (lowering, kind)
            alone, why = self.try_kernel([e], *self.merged_io([e]))
        if alone is None and not why.startswith("only views"):
            return None
        grown.axes.join(e, found)
        return grown.axes

    def try_merge(self, a: _Group, b: _Group, groups: Groups) -> Optional[_Group]:
        """The union of `a` and `b` where the scheduler takes it (kernel groups) and the group
        graph stays acyclic, else None with the refusal recorded on `a`."""
        if a.kernel != b.kernel:
            return None
        if not self.acyclic_merge(a, b):
            a.refusals.append((f"not merged with the group of {b.exprs[0].op_name}: it would make a cycle", b.exprs[0]))
            return None
        if a.kernel and self.lasting_refusal(a, b):
            return None  # (refused before, and recorded then)
        exprs = self.in_order(a, b)
        axes = self.grown_axes(a, b) if a.kernel else None
        if axes is not None:
            return self.absorb(a, b, exprs, groups, axes)
        plan = None
        if a.kernel:
            with phase("planning"):
                plan, why = self.try_kernel(exprs, *self.merged_io(exprs))
            if plan is None and not why.startswith("only views"):
                if why == RESIZED_OUTPUTS or why.endswith(NO_SPANNING_TENSOR):
                    self.retry.append((a.exprs[0], b.exprs[0]))
                a.refusals.append((f"not merged with the group of {b.exprs[0].op_name}: {why}", b.exprs[0]))
                if why.endswith(LASTING):
                    a.lasting.append((b.exprs[0], why))
                return None
        return self.absorb(a, b, exprs, groups, growable_axes(plan))

    def lasting_refusal(self, a: _Group, b: _Group) -> Optional[str]:
        """Why a merge of groups holding `a` and `b` was refused, where the cause stays in their
        union however they grew (`LASTING`): a tail that reads both a norm backward's dx and a
        broadcast of its dw was planned with the whole backward again at each op it grew by."""
        for g, other in ((a, b), (b, a)):
            for e, why in g.lasting:
                if self.group_of[id(e)] is other:
                    return why
        return None

    def absorb(self, a: _Group, b: _Group, exprs: list[Expr], groups: Groups,
               axes: Optional[GrowableAxes]) -> _Group:
        """Make `a` and `b` one group of `exprs` and return it. The larger of the two lives on
        (which one is no matter: groups are ordered by `first` wherever order counts), so that
        a long chain joined by one op at a time costs each join the op, not the chain."""
        keep, gone = (a, b) if len(a.exprs) >= len(b.exprs) else (b, a)
        keep.pos = self.place_union(a, b)
        keep.exprs = exprs
        keep.axes = axes
        keep.first = min(a.first, b.first)
        keep.refusals = a.refusals + b.refusals
        keep.lasting = [(e, why) for e, why in a.lasting + b.lasting if self.group_of[id(e)] not in (a, b)]
        for e in gone.exprs:
            self.group_of[id(e)] = keep
        # (the readers that were the other group's exprs are inside now)
        keep.read_outside |= gone.read_outside
        keep.read_outside.difference_update(id(e) for e in gone.exprs)
        keep.read_outside.difference_update([r for r in gone.read_outside if self.group_of.get(r) is keep])
        # (and the sources that were the other group's exprs too)
        keep.sources |= gone.sources
        keep.sources.difference_update(id(e) for e in gone.exprs)
        keep.sources.difference_update([p for p in gone.sources if self.group_of[p] is keep])
        del groups[gone]
        return keep

    def retry_refused(self, groups: Groups) -> None:
        """Merges refused for what later merges may mend are tried again once the greedy pass is
        done. A value read by two slices (x[..., :h] and x[..., h:] of rope's backward) cannot
        join the first slice's group while the second still reads it from outside: the group
        would write it at another extent than its own output. And a group with a reduction
        whose loop space no tensor spans yet (a rope's backward in bf16: its batch and head
        axes linked only by ops that join later)."""
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

    def absorb_scalar_groups(self, groups: Groups) -> None:
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

    def join_siblings(self, groups: Groups) -> None:
        """Kernel groups that read a common value, with no producer between them, join when the
        scheduler's plan for the union says one kernel pays (`plan.fuses_siblings`: the row and
        column reductions of a norm's backward read the rows once; pointwise kernels over one
        loop space). Refusals are not recorded: siblings are cut by default.

        Each group, by its first expr, tries the later groups sharing a value with it, in that
        order. After a join only pairs with the union are new: the union and the earlier
        groups sharing a value with it are scanned again, the rest goes on (starting the scan
        over at each join made an unrolled loop's segmentation quadratic in its steps)."""
        tried: set[tuple] = set()  # pairs refused, by their groups' sizes (a join changes them)
        views_only = lambda g: all(isinstance(e, VIEW_OPS) for e in g.exprs)  # noqa: E731
        # value id -> the kernel groups reading it (each pair sharing a value is a candidate)
        read_by: dict[int, Groups] = {}
        for g in groups:
            if g.kernel:
                for v in self.tensors_read(g):
                    read_by.setdefault(v, {})[g] = None
        count = itertools.count()  # (orders scans of one group: a heap compares no groups)
        pending = [(g.first, next(count), g) for g in groups if g.kernel]
        heapq.heapify(pending)
        while pending:
            first, _, a = heapq.heappop(pending)
            if a not in groups or a.first != first:
                continue  # joined since: scanned again as the union
            fresh = []
            for b in self.sharing(a, read_by, lambda b: b.first > a.first):
                key = (id(a), len(a.exprs), id(b), len(b.exprs))
                if key not in tried and not (views_only(a) and views_only(b)):
                    fresh.append(b)  # (views alone are no kernel: a slice of the input at each step of a loop)
                tried.add(key)
            if not fresh:
                continue
            # the groups depending on `a` through another, and those it depends on so, as far
            # as the candidates lie: a pair of them would make a cycle (searched once for all
            # the pairs of `a`, not for each: the steps of a loop reading one bias)
            earliest, latest = min(b.pos for b in fresh), max(b.pos for b in fresh)
            cycles = (self.through_another(a, self.consumers, lambda h: h.pos <= latest)
                      | self.through_another(a, self.producers, lambda h: h.pos >= earliest))
            for b in fresh:
                if b in cycles:
                    continue
                exprs = self.in_order(a, b)
                with phase("planning"):
                    plan, _ = self.try_kernel(exprs, *self.merged_io(exprs))
                if plan is not None and getattr(plan, "fuses_siblings", False):
                    union = self.absorb(a, b, exprs, groups, growable_axes(plan))
                    gone = b if union is a else a
                    for v in self.tensors_read(gone):
                        del read_by[v][gone]
                        read_by[v][union] = None
                    for g in [union] + self.sharing(union, read_by, lambda g: g.first < union.first):
                        heapq.heappush(pending, (g.first, next(count), g))
                    break

    def through_another(self, g: _Group, edges: Callable[[_Group], set[_Group]],
                        within: Callable[[_Group], bool]) -> set[_Group]:
        """The groups `within` a span of the topological order that `g` reaches along `edges`
        (consumers or producers) through another group (so through groups within it only)."""
        return _reached([n for h in edges(g) if within(h) for n in edges(h)], edges, within)

    def tensors_read(self, g: _Group) -> dict[int, None]:
        """The ids of the tensors `g`'s exprs read (its own values too), in order."""
        return dict.fromkeys(id(v) for e in g.exprs for v in e.inputs if isinstance(v, TensorView))

    def sharing(self, a: _Group, read_by: dict[int, Groups], where: Callable[[_Group], bool]) -> list[_Group]:
        """The kernel groups other than `a` reading a tensor `a` reads, `where` holds, by first expr."""
        found = {b: None for v in self.tensors_read(a) for b in read_by[v] if b is not a and where(b)}
        return sorted(found, key=lambda b: b.first)

    def free_views(self, groups: Groups) -> None:
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
                inside = {id(f) for f in g.exprs}
                for e in g.exprs:
                    chain = self._view_chain(e, inside, available)
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
                    g.axes = growable_axes(plan)
                    g.read_outside = self.readers_outside(rest)
                    g.sources = self.sources_of(rest)
                    # (its `pos` is no place in the topological order: no merge follows)
                    view = _Group(chain[-1], min(self.order[id(f)] for f in chain), kernel=True)
                    view.exprs = sorted(chain, key=lambda f: self.order[id(f)])  # alone: "only views", for ATen
                    view.read_outside = self.readers_outside(view.exprs)
                    view.sources = self.sources_of(view.exprs)
                    for f in chain:
                        self.group_of[id(f)] = view
                    groups[view] = None
                    moved = True
                    break

    def _view_chain(self, e: Expr, inside: set[int], available: set[int]) -> list[Expr]:
        """The views of a group (the ids of its exprs: `inside`) ending in `e` that ATen could
        make instead: `e` is a view whose output the group gives out and does not read itself,
        and so is each view before it up to a value the group reads or writes anyway. Empty:
        none."""
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
        groups: Groups = {}
        for k, e in enumerate(self.exprs):
            g = _Group(e, k, self.capable(e))
            g.read_outside = self.readers_outside(g.exprs)
            g.sources = self.sources_of(g.exprs)
            self.group_of[id(e)] = g
            groups[g] = None
            for p in sorted(self.producers(g), key=lambda h: (-len(h.exprs), h.first)):
                if p in groups and g in groups:
                    g = self.try_merge(p, g, groups) or g
        self.retry_refused(groups)
        self.absorb_scalar_groups(groups)
        self.join_siblings(groups)
        self.free_views(groups)
        return self.to_segments(groups)

    def execution_order(self, groups: Groups) -> list[_Group]:
        """The groups in an order that runs each after its producers: of those whose producers
        have run, the one with the earliest expr first."""
        # (a group left by views keeps its `first`: ties go by creation)
        rank = {g: k for k, g in enumerate(sorted(groups, key=lambda g: g.first))}
        waiting = {g: len(self.producers(g)) for g in groups}
        ready = [(rank[g], g) for g, n in waiting.items() if n == 0]
        heapq.heapify(ready)
        ordered = []
        while ready:
            _, g = heapq.heappop(ready)
            ordered.append(g)
            for c in self.consumers(g):
                waiting[c] -= 1
                if waiting[c] == 0:
                    heapq.heappush(ready, (rank[c], c))
        if len(ordered) != len(waiting):  # (groups in a cycle: never ready; merges keep it acyclic)
            raise InternalError(f"segmentation left {len(waiting) - len(ordered)} of {len(waiting)} groups in a cycle")
        return ordered

    def to_segments(self, groups: Groups) -> list[Segment]:
        segments = []
        for g in self.execution_order(groups):
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


def _reached(starts, edges: Callable[[_Group], set[_Group]], within: Callable[[_Group], bool]) -> set[_Group]:
    """The groups `within` a span that a walk along `edges` from `starts` meets, passing
    through groups within it only."""
    stack, seen = list(starts), set()
    while stack:
        h = stack.pop()
        if h not in seen and within(h):
            seen.add(h)
            stack.extend(edges(h))
    return seen
