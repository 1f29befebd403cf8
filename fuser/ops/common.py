"""Helpers shared by the op builders: operand checks, constants, implicit broadcasting."""
from __future__ import annotations

import numbers
import threading
from contextlib import contextmanager
from typing import Any, Iterator, Optional, Sequence

import sympy

from ..errors import FusionDefinitionError, UnsupportedError
from ..ir.scalar_functions import SCALAR_FUNCTION_CODES
from ..ir.symbolic import scalarFn
from ..ir import (BroadcastOp, DataType, Fusion, IterDomain, IterType, Scalar, TensorView, Val,
                  tensor_domain)
from ..ir.types import fits_int64

Operand = Any  # TensorView, Scalar or a Python number


_building = threading.local()  # .fusion: the fusion whose fd.ops call runs on this thread, or None


@contextmanager
def building(fusion: Fusion) -> Iterator[None]:
    """Ops called inside belong to `fusion` where no operand names one: fd.ops.exp(0.5) is a
    constant of the definition whose fd.ops was called, as nvFuser's (its ops on Python
    numbers are Vals of the definition being built)."""
    outer = getattr(_building, "fusion", None)
    _building.fusion = fusion
    try:
        yield
    finally:
        _building.fusion = outer


def fusion_of(op: str, *operands: Operand) -> Fusion:
    fusions = {id(v.fusion): v.fusion for v in operands if isinstance(v, TensorView)}
    fusions.update({id(v.fusion): v.fusion for v in operands if isinstance(v, Scalar)})
    if len(fusions) > 1:
        raise FusionDefinitionError(f"{op}: operands come from different fusion definitions")
    if not fusions and getattr(_building, "fusion", None) is None:
        raise FusionDefinitionError(f"{op}: needs at least one tensor or defined scalar operand (Python numbers "
                                    f"alone: call it as fd.ops.{op} of the definition it belongs to)")
    fusion = next(iter(fusions.values())) if fusions else _building.fusion
    fusion.check_open(op)  # before the op unifies any extent
    return fusion


def check_tensor(op: str, v: Any, what: str = "input") -> TensorView:
    if not isinstance(v, TensorView):
        raise FusionDefinitionError(f"{op}: {what} must be a TensorView, got {v!r}")
    return v


def python_scalar_dtype(value: Any) -> DataType:
    if isinstance(value, bool):
        return DataType.Bool
    if isinstance(value, int):
        return DataType.Int
    if isinstance(value, float):
        return DataType.Double
    if isinstance(value, complex):
        return DataType.ComplexDouble
    raise FusionDefinitionError(f"unsupported scalar operand {value!r} of type {type(value).__name__}")


def given_dtype(op: str, dtype: Any) -> Optional[DataType]:
    """An optional dtype argument: None, or nvFuser's DataType.Null ("none given"), is None."""
    if dtype is None or dtype is DataType.Null:
        return None
    return value_dtype(op, dtype)


def value_dtype(op: str, dtype: Any) -> DataType:
    """A dtype that values are to have: a DataType that torch can hold."""
    if not isinstance(dtype, DataType):
        raise FusionDefinitionError(f"{op}: dtype must be a DataType, got {dtype!r}")
    if dtype is DataType.Null:
        raise FusionDefinitionError(f"{op}: DataType.Null means no dtype; give the values' dtype")
    if dtype is DataType.Float4_e2m1fn:
        raise UnsupportedError(f"{op}: DataType.Float4_e2m1fn has no torch dtype (torch holds fp4 "
                               f"values only packed in pairs); use DataType.Float4_e2m1fn_x2")
    return dtype


def check_computable(op: str, *operands: Operand) -> None:
    """Packed fp4 values can be stored and moved (set, permute, broadcast, ...) but torch can
    neither convert nor compute with them."""
    for v in operands:
        if isinstance(v, (TensorView, Scalar)) and v.dtype.is_opaque:
            raise UnsupportedError(f"{op}: {v!r} holds {v.dtype!r} values, which can only be moved "
                                   f"(set, segment_set, permute, broadcast, ...), not converted or "
                                   f"computed with")


def as_val(fusion: Fusion, v: Operand, op: str) -> Val:
    if isinstance(v, (TensorView, Scalar)):
        return v
    if isinstance(v, (bool, int, float, complex)):
        if type(v) is int and not fits_int64(v):  # (a kernel's literal would wrap it)
            raise FusionDefinitionError(f"{op}: the integer {v} does not fit in 64 bits (eager refuses "
                                        f"it too); pass a float if a float is meant")
        return fusion.new_scalar(python_scalar_dtype(v), value=v)
    raise FusionDefinitionError(f"{op}: unsupported operand {v!r} (expected a tensor or a number)")


def listed(op: str, name: str, value: Any) -> list:
    """A list argument (a list or tuple) as a list; anything else refused by name (a number
    given for a list was a raw TypeError from iterating it)."""
    if not isinstance(value, (list, tuple)):
        raise FusionDefinitionError(f"{op}: {name} must be a list, got {value!r}")
    return list(value)


def check_keepdim(op: str, keepdim: Any) -> None:
    """keepdim as nvFuser's binding takes it: a bool (or an int); a string or None is refused
    rather than read by its truth."""
    if not isinstance(keepdim, int):
        raise FusionDefinitionError(f"{op}: keepdim must be a bool, got {keepdim!r}")


def as_dim(op: str, d: Any, what: str = "dim") -> int:
    """A dim argument as a Python int: numpy's integers too, as the scheduling API takes them.
    Anything else (a bool, a float, a defined scalar, a tensor) is refused for its type, not
    reported as a dim out of range."""
    if isinstance(d, bool) or not isinstance(d, numbers.Integral):
        raise FusionDefinitionError(f"{op}: {what} {d!r} must be an int, got a {type(d).__name__}")
    return int(d)


def axes_of(op: str, tv: TensorView, dims: Sequence[int] | int | None) -> tuple[int, ...]:
    """Normalise `dims` (negative allowed) against the tensor's non-reduction dims."""
    n = tv.ndim
    if dims is None:
        return tuple(range(n))
    if isinstance(dims, numbers.Integral):
        dims = [dims]
    out = []
    for d in dims:
        d = as_dim(op, d)
        if not -max(n, 1) <= d < max(n, 1):
            raise FusionDefinitionError(
                f"{op}: dim {d!r} is out of range for {tv!r} with {n} dims")
        out.append(d % n if n else 0)
    if len(set(out)) != len(out):
        raise FusionDefinitionError(f"{op}: repeated dims {list(dims)}")
    return tuple(sorted(out))


def copy_id(fusion: Fusion, d: IterDomain, iter_type: Optional[IterType] = None) -> IterDomain:
    """A fresh IterDomain with the extents of `d` (an op's output never shares an input's ids)."""
    return fusion.new_id(d.extent, iter_type=iter_type or d.iter_type,
                         expanded_extent=d.expanded_extent)


def new_tensor(fusion: Fusion, ids: Sequence[IterDomain], dtype: DataType) -> TensorView:
    return fusion.new_tensor(tensor_domain(ids, True), dtype)


def broadcast_to_rank(tv: TensorView, rank: int) -> TensorView:
    """Left-pad `tv` with broadcast dims (PyTorch's implicit broadcasting)."""
    missing = rank - tv.ndim
    if missing <= 0:
        return tv
    f = tv.fusion
    ids = [f.new_id(1, iter_type=IterType.Broadcast) for _ in range(missing)]
    ids += [copy_id(f, d) for d in tv.domain.no_reductions()]
    out = new_tensor(f, ids, tv.dtype)
    f.add_expr(BroadcastOp(inputs=(tv,), outputs=(out,),
                           is_broadcast=tuple([True] * missing + [False] * tv.ndim)))
    return out


def broadcast_ids(fusion: Fusion, op: str, tvs: Sequence[TensorView]) -> list[IterDomain]:
    """Output ids of an elementwise op over same-rank tensors, unifying equal extents."""
    rank = tvs[0].ndim
    out = []
    for k in range(rank):
        dims = [tv.domain.no_reductions()[k] for tv in tvs]
        concrete = [d for d in dims if not d.is_broadcast]
        if concrete:
            extent = concrete[0].extent
            for d in concrete[1:]:
                extent = fusion.unify(extent, d.extent, f"{op}: axis {k} of the operands")
            # an expanded broadcast holds that many elements too (as eager's expand does)
            for d in dims:
                if d.is_broadcast and d.expanded_extent is not None:
                    extent = fusion.unify(extent, d.expanded_extent, f"{op}: expanded axis {k} of the operands")
            out.append(fusion.new_id(extent))
            continue
        expanded = [d.expanded_extent for d in dims if d.expanded_extent is not None]
        ex = expanded[0] if expanded else None
        for e in expanded[1:]:
            ex = fusion.unify(ex, e, f"{op}: expanded axis {k} of the operands")
        out.append(fusion.new_id(1, iter_type=IterType.Broadcast, expanded_extent=ex))
    return out


def extent_of(fusion: Fusion, v: Any, op: str) -> sympy.Expr:
    """A shape entry (int or Scalar) as an extent expression."""
    if isinstance(v, Scalar):
        if v.fusion is not fusion:
            raise FusionDefinitionError(f"{op}: shape entry {v!r} belongs to another fusion definition")
        if v.dtype.is_floating and v.value is None:  # a size computed in doubles (Thunder's)
            e = scalarFn(SCALAR_FUNCTION_CODES["exact_int"], v.expr)
        elif v.dtype not in (DataType.Int, DataType.Int32, DataType.Index):
            raise FusionDefinitionError(f"{op}: shape entry {v!r} must be an integer scalar")
        else:
            e = v.expr
        if e.is_number:  # a constant scalar: checked now, as an int entry is (no execution checks it)
            if e.is_negative:
                raise FusionDefinitionError(f"{op}: shape entry {v!r} (the constant {e}) must be non-negative here")
            return e
        fusion.add_size_check(e, f"{op}: size")
        return e
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise FusionDefinitionError(f"{op}: shape entry {v!r} must be an int or an integer scalar")
    v = int(v)  # (numpy's integers too)
    if v < 0:
        raise FusionDefinitionError(f"{op}: shape entry {v} must be non-negative here")
    return sympy.Integer(v)
