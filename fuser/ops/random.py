"""Random tensors (nvFuser's uniform, normal, rand_like, randn_like): one RNGOp each.

`rng_seed` and `rng_offset` come together or not at all, as in nvFuser: given, they fix the
numbers (the same seed, offset and shape give the same tensor in every execution; element i
is drawn from counter `rng_offset + i`); left out, every execution draws fresh numbers from
PyTorch's generator. Outputs are floating point; half and bf16 are drawn in fp32 and rounded
once; a double draws 53 random bits a uniform (two philox words).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from ..errors import FusionDefinitionError
from ..ir import DataType, Fusion, IterType, RNGOp, RNGOpType, Scalar, TensorView, Val
from ..ir.printer import format_val
from ..ir.types import fits_int64
from .common import as_val, check_tensor, copy_id, extent_of, new_tensor


def uniform(fusion: Fusion, minval: Any, maxval: Any, shape: Sequence[Any], *, rng_seed: Any = None,
            rng_offset: Any = None, dtype: DataType = DataType.Float) -> TensorView:
    return _random(fusion, "uniform", RNGOpType.uniform, (minval, maxval), shape, rng_seed, rng_offset, dtype)


def normal(fusion: Fusion, mean: Any, std: Any, shape: Sequence[Any], *, rng_seed: Any = None,
           rng_offset: Any = None, dtype: DataType = DataType.Float) -> TensorView:
    return _random(fusion, "normal", RNGOpType.normal, (mean, std), shape, rng_seed, rng_offset, dtype)


def rand_like(x: TensorView, *, rng_seed: Any = None, rng_offset: Any = None) -> TensorView:
    return _like("rand_like", RNGOpType.uniform, x, rng_seed, rng_offset)


def randn_like(x: TensorView, *, rng_seed: Any = None, rng_offset: Any = None) -> TensorView:
    return _like("randn_like", RNGOpType.normal, x, rng_seed, rng_offset)


def _random(fusion: Fusion, op: str, kind: RNGOpType, params: tuple, shape: Sequence[Any], rng_seed: Any,
            rng_offset: Any, dtype: DataType) -> TensorView:
    fusion.check_open(op)
    _check_dtype(op, dtype, "dtype")
    if not isinstance(shape, (list, tuple)):
        raise FusionDefinitionError(f"{op}: shape must be a list or tuple of sizes, got {shape!r}")
    a, b = (_param(fusion, op, name, v) for name, v in zip(_PARAM_NAMES[kind], params))
    _check_params(fusion, op, kind, a, b, dtype)
    stream = _stream(fusion, op, rng_seed, rng_offset)
    # a size 1 is a broadcast axis, as in nvFuser: the tensor meets others' axes of any extent
    extents = [extent_of(fusion, s, op) for s in shape]
    ids = [fusion.new_id(e, iter_type=IterType.Broadcast if e == 1 else IterType.Iteration) for e in extents]
    return _add(fusion, kind, new_tensor(fusion, ids, dtype), (a, b) + stream)


def _like(op: str, kind: RNGOpType, x: TensorView, rng_seed: Any, rng_offset: Any) -> TensorView:
    check_tensor(op, x)
    _check_dtype(op, x.dtype, f"the input {x!r}'s dtype")
    f = x.fusion
    f.check_open(op)
    stream = _stream(f, op, rng_seed, rng_offset)
    # an expanded axis gets numbers of its own along it, as torch.rand_like's fresh tensor
    ids = [f.new_id(d.expanded_extent) if d.expanded_extent is not None else copy_id(f, d)
           for d in x.domain.no_reductions()]
    params = tuple(f.new_scalar(DataType.Double, value=v) for v in (0.0, 1.0))
    return _add(f, kind, new_tensor(f, ids, x.dtype), params + stream)


_PARAM_NAMES = {RNGOpType.uniform: ("minval", "maxval"), RNGOpType.normal: ("mean", "std")}
# the largest finite value of each floating dtype (a uniform's bounds and range stay within it)
_LARGEST = {DataType.Half: 65504.0, DataType.BFloat16: 3.3895313892515355e38, DataType.Float: 3.4028234663852886e38,
            DataType.Double: 1.7976931348623157e308}


def _check_params(fusion: Fusion, op: str, kind: RNGOpType, a: Val, b: Val, dtype: DataType) -> None:
    """Finite parameters a draw can hold: a uniform's minval, maxval and their difference
    within the dtype's range (a range of inf drew inf, which the step keeping draws off maxval
    turned into minval: all zeros), a normal's finite mean and std. As in nvFuser, a reversed
    range and a negative std are taken as written (minval + (maxval - minval) u, mean + std n),
    where eager refuses them. Numbers are checked here, scalar inputs at each execution
    (Fusion.finite)."""
    names = _PARAM_NAMES[kind]
    if kind is RNGOpType.uniform and dtype not in _LARGEST:  # (fp8: drawn in fp32, then cast)
        dtype = DataType.Float
    if kind is RNGOpType.uniform:
        top = _LARGEST[dtype]
        largest = f"{top:g} ({dtype.name}'s largest)"
        span = b.expr - a.expr
        rules = [(top - span, f"{largest} less maxval - minval"), (top + span, f"{largest} plus maxval - minval")]
        rules += [(top + sign * v.expr, f"{largest} {word} {name}") for v, name in zip((a, b), names)
                  for sign, word in ((-1, "less"), (1, "plus"))]
        expects = f"minval, maxval and maxval - minval within +-{top:g} ({dtype.name})"
    else:
        rules = [(a.expr, "mean"), (b.expr, "std")]
        expects = "a finite mean and std"
    for expr, why in rules:
        if getattr(expr, "free_symbols", None):
            fusion.finite.append((expr, f"{op}: {why}", "nonnegative" if kind is RNGOpType.uniform else "finite"))
        elif not _holds(float(expr), kind is RNGOpType.uniform):
            raise FusionDefinitionError(f"{op}: expects {expects}, got {names[0]}={format_val(a)} and "
                                        f"{names[1]}={format_val(b)}")


def _holds(v: float, nonnegative: bool) -> bool:
    return math.isfinite(v) and (not nonnegative or v >= 0)


def _add(fusion: Fusion, kind: RNGOpType, out: TensorView, inputs: tuple[Val, ...]) -> TensorView:
    fusion.add_expr(RNGOp(inputs=inputs, outputs=(out,), kind=kind))
    return out


def _check_dtype(op: str, dtype: Any, what: str) -> None:
    if not isinstance(dtype, DataType) or not dtype.is_floating:
        raise FusionDefinitionError(
            f"{op}: {what} must be a floating-point DataType (Float, Double, Half, BFloat16), got {dtype!r}")


def _param(fusion: Fusion, op: str, name: str, v: Any) -> Val:
    """A distribution parameter: a real number or a real scalar of this fusion."""
    if isinstance(v, Scalar):
        if v.fusion is not fusion:
            raise FusionDefinitionError(f"{op}: {name} {v!r} comes from another fusion definition")
        if v.dtype.is_complex or v.dtype.is_boolean:  # (as a Python bool is refused below)
            raise FusionDefinitionError(f"{op}: {name} must be a real number or a real scalar, "
                                        f"got {v!r} of {v.dtype}")
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise FusionDefinitionError(f"{op}: {name} must be a number or a scalar, got {v!r}")
    return as_val(fusion, v, op)


def _stream(fusion: Fusion, op: str, rng_seed: Any, rng_offset: Any) -> tuple[Val, ...]:
    """(seed, offset) as integer scalars, or () for fresh numbers in every execution."""
    if (rng_seed is None) != (rng_offset is None):
        raise FusionDefinitionError(f"{op}: rng_seed and rng_offset must be given together, got "
                                    f"rng_seed={rng_seed!r} and rng_offset={rng_offset!r}")
    if rng_seed is None:
        return ()
    return tuple(_integer(fusion, op, name, v) for name, v in (("rng_seed", rng_seed), ("rng_offset", rng_offset)))


def _integer(fusion: Fusion, op: str, name: str, v: Any) -> Scalar:
    if isinstance(v, Scalar):
        if v.fusion is not fusion:
            raise FusionDefinitionError(f"{op}: {name} {v!r} comes from another fusion definition")
        if v.dtype not in (DataType.Int, DataType.Int32):
            raise FusionDefinitionError(f"{op}: {name} must be an integer scalar, got {v!r}")
        return v
    if isinstance(v, bool) or not isinstance(v, int):
        raise FusionDefinitionError(f"{op}: {name} must be an int or an integer scalar, got {v!r}")
    if not fits_int64(v):
        raise FusionDefinitionError(f"{op}: {name} {v} does not fit in 64 bits")
    return fusion.new_scalar(DataType.Int, value=v)

