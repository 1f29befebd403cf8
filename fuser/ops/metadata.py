"""Tensor metadata as values: shape and size (Scalars whose expressions are the tensor's
extents, usable wherever a shape entry or a scalar operand is) and stride_order (a copy laid
out in a given order)."""
from __future__ import annotations

from typing import Any, Sequence

from ..errors import FusionDefinitionError
from ..ir import Scalar, TensorView
from .common import as_dim, check_tensor, listed
from .shape import set as _set


def shape(arg: TensorView) -> list[Scalar]:
    """The logical extents, an expanded broadcast's expanded size included (nvFuser's
    getMaybeExpandedExtent)."""
    check_tensor("shape", arg)
    arg.fusion.check_open("shape")
    return [arg.fusion.extent_scalar(d.size) for d in arg.domain.no_reductions()]


def size(arg: TensorView, dim: int) -> Scalar:
    check_tensor("size", arg)
    n = arg.ndim
    dim = as_dim("size", dim)
    if not -n <= dim < n:
        raise FusionDefinitionError(f"size: dim {dim} is out of range for {arg!r} with {n} dims")
    return shape(arg)[dim]


def stride_order(arg: TensorView, stride_order: Sequence[Any]) -> TensorView:  # noqa: F811
    """A copy of `arg` whose allocation puts dim k at stride rank stride_order[k] (0: the
    fastest-moving), contiguous; an empty order keeps the default layout."""
    op = "stride_order"
    check_tensor(op, arg)
    # ints first: a tensor or a scalar among them failed the sort below with Python's TypeError
    order = [as_dim(op, o, "stride_order entry") for o in listed(op, "stride_order", stride_order)]
    out = _set(arg)
    if not order:
        return out
    n = arg.ndim
    if len(order) != n or sorted(order) != list(range(n)):
        raise FusionDefinitionError(
            f"{op}: stride_order {order} must be a permutation of 0..{n - 1} for {arg!r}")
    logical = out.domain.no_reductions()
    outer_to_inner = sorted(range(n), key=lambda k: -order[k])
    # the domain itself, not TensorView.set_allocation_domain: that call would be recorded as a
    # scheduling line of its own, printed by repr(fd) before the line that makes the tensor
    out.domain.set_allocation([logical[k] for k in outer_to_inner], True)
    return out
