"""Launch-time layout: how the loop axes of a plan fold into "super-axes" for the sizes and
strides of one call. Adjacent axes merge when every tensor of the kernel steps through them as
one (stride_outer == stride_inner * extent_inner, or broadcast in both), which saves index
arithmetic and lets the compiler see long contiguous runs. The layout is part of the kernel's
cache key; it depends on strides only through which merges hold."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Layout:
    dim0: tuple[tuple[int, ...], ...]  # super-axes on tile dim 0, each a run of loop axes
    dim1: tuple[tuple[int, ...], ...]

    @property
    def super_axes(self) -> tuple[tuple[int, ...], ...]:
        return self.dim0 + self.dim1


def _mergeable(a: int, b: int, strides: list[list[int]], extents: list[int]) -> bool:
    if extents[a] == 1 or extents[b] == 1:
        return True
    for s in strides:
        if s[a] == 0 and s[b] == 0:
            continue
        if s[a] != s[b] * extents[b]:
            return False
    return True


def _fold(axes: list[int], strides: list[list[int]], extents: list[int], alone=frozenset()) -> list[tuple[int, ...]]:
    runs: list[list[int]] = []
    for a in axes:
        if runs and a not in alone and runs[-1][-1] not in alone \
                and _mergeable(_inner(runs[-1], extents), a, strides, extents):
            runs[-1].append(a)
        else:
            runs.append([a])
    return [tuple(r) for r in runs]


def _inner(run: list[int], extents: list[int]) -> int:
    """The innermost axis of a run that is not of extent 1 (it sets the run's stride)."""
    for a in reversed(run):
        if extents[a] != 1:
            return a
    return run[-1]


def run_stride(run: tuple[int, ...], strides: list[int], extents: list[int]) -> int:
    return strides[_inner(list(run), extents)]


def make_layout(dim0: list[int], dim1: list[int], strides: list[list[int]], extents: list[int],
                pointwise: bool, alone=frozenset(), order_by: Optional[int] = None, own=frozenset()) -> Layout:
    """`strides[t][a]`: stride of tensor t along loop axis a (0 where it does not span a).
    Axes in `alone` (those a slice, pad or cat shifts) are never merged with a neighbour, nor
    are those in `own` (an iota's: it numbers its own axis, which a merge with an axis of
    extent 1 would number by the run's index: an iota of extent 1 beside n rows counted 0..n-1).
    `order_by`: a pointwise kernel iterates its axes in the memory order of tensor
    `strides[order_by]` (outermost first; axes it does not step along, outermost), so a
    tensor written in a permuted layout is written in runs, not across them."""
    if pointwise:
        axes = dim0 + dim1
        if order_by is not None and not alone:
            s = strides[order_by]
            steps = [s[a] for a in axes if s[a] != 0 and extents[a] != 1]
            if steps != sorted(steps, reverse=True):  # a permuted layout (row-major: as it is)
                axes = sorted(axes, key=lambda a: (s[a] != 0 and extents[a] != 1, -s[a]))
        runs = _fold(axes, strides, extents, alone | own)
        return Layout(tuple(runs[:-1]), tuple(runs[-1:]))
    return Layout(tuple(_fold(dim0, strides, extents, alone | own)), tuple(_fold(dim1, strides, extents, alone | own)))


def row_alignment(layout: Layout, strides: list[list[int]], extents: list[int], element_sizes: list[int],
                  spans_both: list[bool], cols: int, block: int) -> int:
    """ALIGN, in elements, for a kernel whose chunks of a row start at aligned addresses
    (codegen/kernel.py `aligned_rows`: a looped row reduction, or a pointwise kernel a chunk of
    a row a program); 0 where that form does not apply or gains nothing. Tensor t has the
    strides `strides[t]` and element size `element_sizes[t]`; `spans_both[t]`: it varies along
    rows and columns in the plan, so the kernel addresses it at the row's aligned offsets.

    It applies where the rows and the columns are one super-axis each, every tensor spanning
    both has, in this call, contiguous columns and the same row stride (an expanded one, whose
    column stride is 0, does not), and a chunk of `block` columns holds ALIGN. A tensor varying
    along the columns alone (a norm's weight) is then loaded lane by lane, from L2: on the H200
    a LayerNorm forward over rows of 50257 bf16 read 0.44 of copy this way, 0.22 with its rows
    loaded lane by lane instead (docs/performance-history.md, thirty-seventh session). It gains where
    Triton cannot see that a row's start and end fall on 16-byte vectors: a row stride or a row
    length not a multiple of 16 (Triton specializes integer arguments on 16 only)."""
    if len(layout.dim0) != 1 or len(layout.dim1) != 1:
        return 0
    rows_run, cols_run = layout.dim0[0], layout.dim1[0]
    addressed = [(run_stride(rows_run, s, extents), run_stride(cols_run, s, extents), size)
                 for s, size, both in zip(strides, element_sizes, spans_both) if both]
    if not addressed:
        return 0
    if any(col != 1 for _, col, _ in addressed) or len({row for row, _, _ in addressed}) != 1:
        return 0
    align = 16 // min(size for _, _, size in addressed)
    row_stride = addressed[0][0]
    if align < 2 or align > block or (row_stride % 16 == 0 and cols % 16 == 0):
        return 0
    return align


def row_broadcast(layout: Layout, strides: list[list[int]], extents: list[int]) -> bool:
    """Whether a tensor of `strides` (the inputs') is broadcast along the layout's innermost
    row super-axis while it varies along the columns: a vector each row reads again."""
    if not layout.dim0 or all(extents[a] == 1 for a in layout.dim0[-1]):
        return False  # (no rows to read it again)
    return any(run_stride(layout.dim0[-1], s, extents) == 0 and run_stride(layout.dim1[0], s, extents) != 0
               for s in strides)
