"""Lowering rules: one function per ATen op, turning a node of a captured graph into
FusionDefinition calls.

A rule receives the region builder (`b`: its `fd`, and helpers that read the node's traced
metadata), the FX node, and the node's arguments with graph values already replaced by IR
values (TensorView for tensors, Scalar or int for sizes). It returns a TensorView, or a tuple of
them for ops with several outputs. A rule that cannot take a particular call (an argument it
does not model, a dtype the IR lacks) raises `LoweringError` with the reason; the node then runs
as its own ATen call between fusions.

Each rule has a `Kind`. Only pointwise ops and reductions are arithmetic a kernel fuses: a
region made of views, data movement, matmuls and creation alone is not worth a fusion and runs
eagerly. Pointwise ops and views are cheap to recompute (see recompute.py).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from math import isfinite  # (not `import math`: it would hide the rules module math.py)
from typing import Any, Callable, Optional

import torch

from ...errors import UnsupportedError


class LoweringError(UnsupportedError):
    """This node cannot become IR ops (the reason says why); it runs through ATen instead."""


# types a number bound at execution (an int argument, traced as a symbol) may not fit
_NARROW = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.float16)


def refuse_overflow(value, torch_dtype: torch.dtype, op: str) -> None:
    """Eager refuses a fill value or bound out of its tensor's range (a kernel would store inf,
    or wrap an integer): through ATen, the node raises as eager does. A number known only at
    execution is checked when bound, where the type is narrow enough to miss it."""
    from ...ir import Scalar

    if isinstance(value, Scalar):
        if value.is_constant:
            value = value.value
        elif torch_dtype in _NARROW and not (value.dtype.is_floating or value.dtype.is_complex):
            # checked at each execution, as eager converts it checked (SGD's integer dampening
            # into a half step); the kernel takes it as it is
            value.fusion.finite.append((value.expr, f"{op}: a number bound at execution",
                                        f"holds {str(torch_dtype).removeprefix('torch.')}"))
            return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or torch_dtype is torch.bool:
        return
    if torch_dtype.is_floating_point:
        big = torch.finfo(torch_dtype).max
        out = float("-inf") < value < float("inf") and not -big <= value <= big  # (inf and nan are kept)
    elif not torch_dtype.is_complex:
        info = torch.iinfo(torch_dtype)
        # (a float too: eager converts it checked, 1e12 or NaN into int32 raising)
        out = not (isfinite(value) and info.min <= value <= info.max)
    else:
        out = False
    if out:
        raise LoweringError(f"{op} with {value}, out of the range of {torch_dtype} (eager refuses it)")


class Kind(enum.Enum):
    pointwise = "pointwise"    # elementwise math and casts
    reduction = "reduction"    # sums, maxima, var_mean, softmax, layer norm
    view = "view"              # reshape, permute, expand, squeeze: no data moved in a kernel
    movement = "movement"      # slice, cat, pad: run through ATen inside the fusion
    matmul = "matmul"          # linear, matmul: ATen (cuBLAS) inside the fusion
    creation = "creation"      # full, arange


@dataclass(frozen=True)
class Rule:
    fn: Callable[..., Any]
    kind: Kind

    @property
    def compute(self) -> bool:
        return self.kind in (Kind.pointwise, Kind.reduction)


RULES: dict[Any, Rule] = {}


def register(*targets, kind: Kind = Kind.pointwise):
    """Register a rule for ATen overloads (`aten.add.Tensor`) or whole packets (`aten.exp`)."""
    def deco(fn):
        for t in targets:
            RULES[t] = Rule(fn, kind)
        return fn
    return deco


def find_rule(target) -> Optional[Rule]:
    rule = RULES.get(target)
    if rule is None and hasattr(target, "overloadpacket"):
        rule = RULES.get(target.overloadpacket)
    if rule is None and callable(getattr(target, "name", None)):
        rule = RULES.get(target.name())  # (an op registered by name: "prims::fma")
    return rule


def _load() -> None:
    from . import (argreduce, indexing, math, matmul, pointwise, random,  # noqa: F401 - they register their rules
                   reduction, scan_sort, shape)


_load()
