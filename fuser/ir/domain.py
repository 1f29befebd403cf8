"""IterDomain, the Split and Merge transforms, and TensorDomain with nvFuser's four domains.

A TensorDomain has a logical domain (the tensor's global shape), an optional root domain (when
the logical domain was derived from it, as by reshape or an rfactor), an allocation domain (the
memory layout; defaults to logical) and a loop domain (how it is iterated; defaults to logical).
Scheduling (split, merge, reorder) transforms the loop domain and records each transform, so any
domain can be traced back to the logical one.

IterDomains are identities (eq=False): the same object appears in several domains of one tensor.
`parallelize` changes one in place, as nvFuser's API does; it belongs to exactly one tensor.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence, Union

import sympy

from ..errors import FusionDefinitionError
from .symbolic import Extent, ExtentLike, as_extent, ceilDiv, is_static
from .types import IterType, ParallelType


class CallableBool(int):
    """A flag that nvFuser's method spelling can also call: fuser reads `id.is_reduction` as a
    bool where nvfuser_direct binds `id.is_reduction()`, and both give it. Python's bool admits
    no subclasses, so this is an int of 0 or 1 that prints, compares and hashes as the bool."""

    def __call__(self) -> bool:
        return bool(self)

    def __repr__(self) -> str:
        return repr(bool(self))

    __str__ = __repr__


_TRUE, _FALSE = CallableBool(1), CallableBool(0)


def as_int(value: Any, what: str, name: str = "axis") -> int:
    """`value` as a Python int, numpy's integers included (nvFuser's int64_t arguments take
    anything with __index__); a bool is refused, as it is no axis or factor."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise FusionDefinitionError(f"{what}: {name} must be an int, got {value!r}")


@dataclass(eq=False)
class IterDomain:
    name: int
    extent: Extent
    iter_type: IterType = IterType.Iteration
    parallel_type: ParallelType = ParallelType.serial
    expanded_extent: Optional[Extent] = None  # a broadcast that was expanded to this size
    is_rfactor: bool = False
    # why the extent is not the symbol it was defined with (the op that unified it with
    # another), for an input's size error to name the op
    origin: Optional[str] = field(default=None, repr=False)
    # the fusion that made it (set by Fusion.new_id): parallelize asks it whether it is final
    fusion: Optional[Any] = field(default=None, repr=False)

    @property
    def size(self) -> Extent:
        """Elements along the axis: an expanded broadcast counts its expanded size."""
        return self.expanded_extent if self.expanded_extent is not None else self.extent

    @property
    def is_reduction(self) -> CallableBool:
        return _TRUE if self.iter_type is IterType.Reduction else _FALSE

    @property
    def is_broadcast(self) -> CallableBool:
        return _TRUE if self.iter_type is IterType.Broadcast else _FALSE

    @property
    def is_device_dim(self) -> bool:
        return self.parallel_type.is_device

    @property
    def is_stream(self) -> bool:
        return self.parallel_type.is_stream

    def parallelize(self, parallel_type: ParallelType) -> "IterDomain":
        if not isinstance(parallel_type, ParallelType):
            raise FusionDefinitionError(
                f"parallelize expects a ParallelType, got {parallel_type!r}")
        if self.fusion is not None:
            self.fusion.check_open("parallelize")
        self.parallel_type = parallel_type
        return self

    def __repr__(self) -> str:
        from .printer import format_id

        return format_id(self)


@dataclass(eq=False)
class Split:
    input: IterDomain
    outer: IterDomain
    inner: IterDomain
    factor: Extent
    inner_split: bool  # True: the inner output has extent `factor`; False: the outer one

    @property
    def inputs(self) -> tuple[IterDomain, ...]:
        return (self.input,)

    @property
    def outputs(self) -> tuple[IterDomain, ...]:
        return (self.outer, self.inner)


@dataclass(eq=False)
class Merge:
    outer: IterDomain
    inner: IterDomain
    output: IterDomain

    @property
    def inputs(self) -> tuple[IterDomain, ...]:
        return (self.outer, self.inner)

    @property
    def outputs(self) -> tuple[IterDomain, ...]:
        return (self.output,)


Transform = Union[Split, Merge]
IdFactory = Callable[..., IterDomain]  # Fusion.new_id(extent, iter_type=..., ...)


@dataclass(eq=False)
class TensorDomain:
    logical: list[IterDomain]
    root: Optional[list[IterDomain]] = None
    allocation: Optional[list[IterDomain]] = None
    loop: list[IterDomain] = field(default_factory=list)
    # one entry per allocation (or logical) dim: True/False, None for broadcast and reduction
    contiguity: list[Optional[bool]] = field(default_factory=list)
    root_transforms: list[Transform] = field(default_factory=list)  # root -> logical
    transforms: list[Transform] = field(default_factory=list)  # logical -> loop / allocation

    def __call__(self) -> "TensorDomain":
        """Itself: nvFuser's `tv.domain()` is a method where fuser's `tv.domain` is the domain."""
        return self

    def __str__(self) -> str:
        """The loop domain, as nvFuser prints a TensorDomain: `[iS0{2}, iS1{4}]`."""
        return "[" + ", ".join(repr(d) for d in self.loop) + "]"

    def __post_init__(self):
        if not self.loop:
            self.loop = list(self.logical)
        if not self.contiguity:
            self.contiguity = default_contiguity(self.maybe_allocation, True)

    @property
    def maybe_allocation(self) -> list[IterDomain]:
        return self.allocation if self.allocation is not None else self.logical

    def no_reductions(self) -> list[IterDomain]:
        return [i for i in self.logical if not i.is_reduction]

    # -- scheduling -----------------------------------------------------------------------

    def _loop_axis(self, axis: int, what: str) -> int:
        n = len(self.loop)
        axis = as_int(axis, what)
        if not -n <= axis < n:
            raise FusionDefinitionError(
                f"{what}: axis {axis} is out of range for a loop domain of {n} axes "
                f"(expected -{n} <= axis < {n})")
        return axis % n

    def split(self, new_id: IdFactory, axis: int, factor: ExtentLike, inner_split: bool) -> None:
        axis = self._loop_axis(axis, "split")
        if not isinstance(factor, sympy.Basic):  # (an extent where a split is replayed)
            factor = as_int(factor, "split", "factor")
        factor = as_extent(factor)
        if is_static(factor) and int(factor) < 1:
            raise FusionDefinitionError(f"split: factor must be at least 1, got {factor}")
        src = self.loop[axis]
        rest = ceilDiv(src.extent, factor)
        outer_extent, inner_extent = (rest, factor) if inner_split else (factor, rest)
        # both halves keep the input's parallel type, as nvFuser's IterDomain::split gives them
        make = lambda e: new_id(e, iter_type=src.iter_type, parallel_type=src.parallel_type,  # noqa: E731
                                is_rfactor=src.is_rfactor)
        outer, inner = make(outer_extent), make(inner_extent)
        if src.expanded_extent is not None:  # its halves are expanded broadcasts too
            rest = ceilDiv(src.expanded_extent, factor)
            outer.expanded_extent, inner.expanded_extent = (rest, factor) if inner_split else (factor, rest)
        self.transforms.append(Split(src, outer, inner, factor, inner_split))
        self.loop[axis:axis + 1] = [outer, inner]

    def merge(self, new_id: IdFactory, axis_o: int, axis_i: Optional[int]) -> None:
        axis_o = self._loop_axis(axis_o, "merge")
        axis_i = self._loop_axis(axis_o + 1 if axis_i is None else axis_i, "merge")
        if axis_o == axis_i:
            raise FusionDefinitionError(f"merge: cannot merge axis {axis_o} with itself")
        outer, inner = self.loop[axis_o], self.loop[axis_i]
        if outer.is_reduction != inner.is_reduction and not (outer.is_broadcast or inner.is_broadcast):
            raise FusionDefinitionError(
                f"merge: cannot merge the reduction axis {outer if outer.is_reduction else inner} "
                f"with the iteration axis {inner if outer.is_reduction else outer}")
        if outer.is_broadcast and inner.is_broadcast:
            iter_type = IterType.Broadcast
        elif outer.is_reduction or inner.is_reduction:
            iter_type = IterType.Reduction
        else:
            iter_type = IterType.Iteration
        # an expanded broadcast counts its expanded size (as in nvFuser)
        size = outer.size * inner.size
        # the output keeps the outer axis's parallel type, as nvFuser's IterDomain::merge gives it
        parallel_type, is_rfactor = outer.parallel_type, outer.is_rfactor or inner.is_rfactor
        if iter_type is IterType.Broadcast:
            expanded = size if outer.expanded_extent is not None or inner.expanded_extent is not None else None
            out = new_id(sympy.Integer(1), iter_type=iter_type, parallel_type=parallel_type,
                         expanded_extent=expanded, is_rfactor=is_rfactor)
        else:
            out = new_id(size, iter_type=iter_type, parallel_type=parallel_type, is_rfactor=is_rfactor)
        self.transforms.append(Merge(outer, inner, out))
        pos = min(axis_o, axis_i)
        self.loop = [d for k, d in enumerate(self.loop) if k not in (axis_o, axis_i)]
        self.loop.insert(pos, out)

    def reorder(self, old_to_new: dict[int, int]) -> None:
        n = len(self.loop)
        if not isinstance(old_to_new, dict):
            raise FusionDefinitionError(f"reorder expects a dict {{old: new}}, got {old_to_new!r}")
        src = {self._loop_axis(o, "reorder"): self._loop_axis(t, "reorder") for o, t in old_to_new.items()}
        if len(src) != len(old_to_new):
            raise FusionDefinitionError(f"reorder: one axis is given twice in {old_to_new} (negative "
                                        f"axes count from the end)")
        if len(set(src.values())) != len(src):
            raise FusionDefinitionError(f"reorder: two axes sent to one position in {old_to_new}")
        result: list[Optional[IterDomain]] = [None] * n
        for o, t in src.items():
            result[t] = self.loop[o]
        rest = iter(d for k, d in enumerate(self.loop) if k not in src)
        self.loop = [d if d is not None else next(rest) for d in result]

    def set_allocation(self, ids: Sequence[IterDomain], contiguity) -> None:
        if not isinstance(ids, (list, tuple)):
            raise FusionDefinitionError(f"set_allocation_domain expects a list of IterDomains, got {ids!r}")
        known = set(map(id, self.all_ids()))
        seen: set[int] = set()
        for d in ids:
            if not isinstance(d, IterDomain) or id(d) not in known:
                raise FusionDefinitionError(
                    f"set_allocation_domain: {d!r} is not an IterDomain of this tensor")
            if id(d) in seen:
                raise FusionDefinitionError(f"set_allocation_domain: {d!r} is given twice in {list(ids)}")
            seen.add(id(d))
        self._check_covers_logical(list(ids))
        self.allocation = list(ids)
        self.contiguity = normalize_contiguity(contiguity, self.allocation, "set_allocation_domain")

    def _check_covers_logical(self, ids: list[IterDomain]) -> None:
        """An allocation domain lays out every element once: undoing the splits (both halves
        given) and merges below the logical domain must give each logical axis exactly once
        (a reduction or a broadcast may be left out: it holds no elements of its own)."""
        pending, _ = self._undo_transforms(ids)
        logical = {id(d) for d in self.logical}
        for d in pending:
            if id(d) not in logical:
                raise FusionDefinitionError(f"set_allocation_domain: {d!r} is not derived from the logical "
                                            f"domain {self.logical}")
        for d in self.logical:
            if not any(x is d for x in pending) and not (d.is_reduction or d.is_broadcast):
                raise FusionDefinitionError(f"set_allocation_domain: {list(ids)} leaves out the logical axis "
                                            f"{d!r}; an allocation domain covers every axis")
        if len(pending) != len({id(x) for x in pending}):
            raise FusionDefinitionError(f"set_allocation_domain: {list(ids)} covers a logical axis twice")

    def _undo_transforms(self, ids: list[IterDomain]) -> tuple[list[IterDomain], bool]:
        """`ids` with the splits and merges below the logical domain undone, in order, and
        whether all of it is serial (no device or stream axis: a plain strided layout). The
        halves of a serial split lie next to each other, outer first, or the layout is no
        strided one."""
        made_by = {id(o): t for t in self.transforms for o in t.outputs}
        pending = list(ids)
        serial = not any(d.is_device_dim or d.is_stream for d in ids)
        while True:
            t = next((made_by[id(d)] for d in pending if id(d) in made_by), None)
            if t is None:
                return pending, serial
            at = [k for k, x in enumerate(pending) if any(x is o for o in t.outputs)]
            if isinstance(t, Split):
                if len(at) != 2:
                    d = pending[at[0]]
                    other = t.inner if d is t.outer else t.outer
                    raise FusionDefinitionError(
                        f"set_allocation_domain: {d!r} is half of a split of {t.input!r}; give the other "
                        f"half {other!r} too")
                halves = (pending[at[0]], pending[at[1]])
                parallel = any(h.is_device_dim or h.is_stream for h in halves)
                if not parallel and (at[1] != at[0] + 1 or halves[0] is not t.outer):
                    raise FusionDefinitionError(
                        f"set_allocation_domain: {t.outer!r} and {t.inner!r}, the halves of a split of "
                        f"{t.input!r}, must be next to each other, outer first: any other order is no "
                        f"strided layout")
            pending = [x for k, x in enumerate(pending) if k not in at]
            pending[at[0]:at[0]] = list(t.inputs)

    def allocation_order(self) -> Optional[list[int]]:
        """The allocation domain as a permutation of the logical (non-reduction) axes, outer
        to inner (serial splits and merges undone); None where it is the logical order or holds
        a device or stream axis (the sharding math allocates those)."""
        if self.allocation is None:
            return None
        undone, serial = self._undo_transforms(self.allocation)
        if not serial:
            return None
        logical = self.no_reductions()
        pos = {id(d): k for k, d in enumerate(logical)}
        order = [pos.get(id(a), -1) for a in undone if not a.is_reduction]
        if -1 in order or sorted(order) != list(range(len(logical))) or order == sorted(order):
            return None
        return order

    def all_ids(self) -> list[IterDomain]:
        seen: dict[int, IterDomain] = {}
        for d in (self.root or []) + self.logical + self.loop + (self.allocation or []):
            seen.setdefault(id(d), d)
        for t in self.root_transforms + self.transforms:
            for d in t.inputs + t.outputs:
                seen.setdefault(id(d), d)
        return list(seen.values())

    def transforms_from(self, start: Sequence[IterDomain]) -> list[Transform]:
        """The transforms reachable from `start`, in the order they were applied."""
        live = set(map(id, start))
        out = []
        for t in self.root_transforms + self.transforms:
            if any(id(d) in live for d in t.inputs):
                out.append(t)
                live.update(map(id, t.outputs))
        return out


def default_contiguity(ids: Sequence[IterDomain], value: Optional[bool]) -> list[Optional[bool]]:
    return [None if (d.is_broadcast or d.is_reduction) else value for d in ids]


def normalize_contiguity(contiguity, ids: Sequence[IterDomain], op: str = "contiguity") -> list[Optional[bool]]:
    if contiguity is None or isinstance(contiguity, bool):
        return default_contiguity(ids, bool(contiguity))
    if not isinstance(contiguity, (list, tuple)):
        raise FusionDefinitionError(f"{op}: contiguity must be a bool, None or a list of them (one an "
                                    f"axis), got {contiguity!r}")
    contiguity = list(contiguity)
    if len(contiguity) != len(ids):
        raise FusionDefinitionError(
            f"{op}: contiguity has {len(contiguity)} entries but the domain has {len(ids)} axes")
    for k, c in enumerate(contiguity):
        # (a string or a number would count by its truth; numpy's bool is a bool)
        if c is not None and not isinstance(c, bool) and not (type(c).__module__ == "numpy"
                                                               and type(c).__name__ in ("bool", "bool_")):
            raise FusionDefinitionError(f"{op}: contiguity[{k}] is {c!r}; expected True, False or None")
    return [None if (d.is_broadcast or d.is_reduction or c is None) else bool(c) for c, d in zip(contiguity, ids)]
