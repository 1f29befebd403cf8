"""Ops nvFuser builds from other ops: triu (an iota mask and a where) and welford (mean, sum of
squared deviations and count, from var_mean). Both stay generated-kernel arithmetic and fuse
with their neighbours."""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import sympy

from ..errors import FusionDefinitionError
from ..ir import BinaryOpType, DataType, FullOp, Scalar, TensorView, TernaryOpType
from .common import axes_of, check_tensor, copy_id, new_tensor
from .pointwise import binary, python_value, ternary
from .reduction import var_mean
from .shape import broadcast, iota


def triu(arg: TensorView, diagonal: Any = 0) -> TensorView:
    """The upper triangle of the last two dims: element (i, j) is kept where j - i >= diagonal,
    else zero. The mask is row index <= column index - diagonal, made of two iotas."""
    op = "triu"
    check_tensor(op, arg)
    if arg.ndim < 2:
        raise FusionDefinitionError(f"{op}: needs a tensor of 2 or more dims, got {arg!r}")
    f = arg.fusion
    if isinstance(diagonal, Scalar) and diagonal.dtype.is_integral:
        start = f.new_scalar(DataType.Int, expr=-diagonal.expr)
    elif isinstance(diagonal, bool) or not isinstance(diagonal, int):
        raise FusionDefinitionError(f"{op}: diagonal must be an int, got {diagonal!r}")
    else:
        start = -diagonal
    rows_id, cols_id = arg.domain.no_reductions()[-2:]
    rows = iota(f, f.extent_scalar(rows_id.size), 0, 1, DataType.Int)
    cols = iota(f, f.extent_scalar(cols_id.size), start, 1, DataType.Int)
    keep = binary(BinaryOpType.le, broadcast(rows, [False, True]), broadcast(cols, [True, False]))
    return ternary(TernaryOpType.where, keep, arg, python_value(0, arg.dtype))


def welford(arg: TensorView, dims: Optional[Sequence[int]] = None) -> tuple[TensorView, TensorView, TensorView]:
    """(avg, var_sum, n) over `dims`, as nvFuser's WelfordRaw: the mean, the sum of squared
    deviations from it (var_sum / n is the population variance) and the count of elements
    reduced (an Int tensor shaped like avg). One var_mean reduction computes the first two."""
    op = "welford"
    check_tensor(op, arg)
    if arg.ndim == 0:
        raise FusionDefinitionError(f"{op}: cannot reduce the 0-dim tensor {arg!r}")
    if not arg.dtype.is_floating:
        raise FusionDefinitionError(f"{op}: needs a floating tensor, got {arg.dtype} in {arg!r}")
    if not isinstance(dims, (list, tuple)) or not dims:
        raise FusionDefinitionError(f"{op}: dims must be a non-empty list of dims, got {dims!r}")
    axes = axes_of(op, arg, list(dims))
    f = arg.fusion
    ids = arg.domain.no_reductions()
    count = f.new_scalar(DataType.Int, expr=math.prod([ids[k].size for k in axes], start=sympy.Integer(1)))
    var, avg = var_mean(arg, axes, 0)
    var_sum = binary(BinaryOpType.mul, var, count)
    n = new_tensor(f, [copy_id(f, d) for d in avg.domain.no_reductions()], DataType.Int)
    f.add_expr(FullOp(inputs=(count,), outputs=(n,)))
    # over no element var is 0/0: the sum of squared deviations is 0 there, as nvFuser's
    # Welford accumulates it from 0
    empty = binary(BinaryOpType.eq, n, python_value(0, DataType.Int))
    var_sum = ternary(TernaryOpType.where, empty, python_value(0.0, var_sum.dtype), var_sum)
    return avg, var_sum, n
