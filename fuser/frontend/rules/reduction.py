"""Reductions and the normalizations built from them: sum, mean, amax, var_mean, softmax,
log_softmax, layer norm. Half and bf16 inputs compute in fp32 where ATen does."""
from __future__ import annotations

import torch
from torch.fx import Node

from ...ir import DataType
from ..meta import meta_val
from . import Kind, LoweringError, register
from .pointwise import upcast
from .shape import one_hot_row_sum

aten = torch.ops.aten


def reduce_dims(x, dim) -> list[int]:
    """ATen's dim argument: None or an empty list reduce every dim. A 0-d tensor takes dim 0 or
    -1 and reduces nothing (its one element is the result)."""
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.ndim))
    dims = [dim] if isinstance(dim, int) else [int(d) for d in dim]
    if x.ndim == 0:
        if any(d not in (0, -1) for d in dims):
            raise LoweringError(f"dim {dims} is out of range for a 0-d tensor")
        return []
    return dims


def _dtype(dtype):
    return None if dtype is None else DataType.from_torch(dtype)


def reduced_count(b, node, dims: list[int]):
    """The number of elements each output element reduces over (an int or a Scalar), from the
    traced input's sizes (an expanded dim counts its expanded size)."""
    sizes = b.input_meta(node).shape
    n = 1
    for d in dims:
        if len(sizes):
            s = b.size(sizes[d % len(sizes)])
            n = n * s if isinstance(n, int) and isinstance(s, int) else b.fd.ops.mul(n, s) \
                if not isinstance(n, int) else b.fd.ops.mul(s, n)
    return n


@register(aten.sum.dim_IntList, kind=Kind.reduction)
def _sum(b, node, x, dim=None, keepdim=False, dtype=None):
    if dtype is None and dim is not None:
        found = one_hot_row_sum(b, node, dim, keepdim)  # (cross entropy's backward)
        if found is None:
            found = _log_softmax_row_sum(b, node, dim, keepdim)  # (label smoothing's forward)
        if found is not None:
            return found
    return b.fd.ops.sum(x, reduce_dims(x, dim), keepdim, dtype=_dtype(dtype))


def _op(v, target) -> bool:
    return isinstance(v, Node) and v.target is target


def _log_softmax_row_sum(b, node, dim, keepdim):
    """The row sum of a log-softmax, `sum((x - max) - log(sum(exp(x - max))))` along the softmax's
    dim (a cross entropy's label smoothing), as `sum(x - max) - n log(sum(...))`: the log-sum is
    a row constant, so the sum no longer waits for it, and a looped kernel takes `sum(x - max)`
    in the online softmax pass (codegen/online_softmax.py) instead of a second pass over the
    row. Both parts are at most 0 (the log-sum is at least log(1)): no cancellation. None where
    the sum is not of this form."""
    src = node.args[0]
    dims = [dim] if isinstance(dim, int) else list(dim or [])
    if len(dims) != 1 or not _op(src, aten.sub.Tensor) or len(src.args) != 2 or src.kwargs.get("alpha", 1) != 1:
        return None
    shifted, log = src.args
    out = meta_val(src)
    if not (isinstance(out, torch.Tensor) and out.dtype in (torch.float32, torch.float64) and out.dim() > 0):
        return None
    d = dims[0] % out.dim()
    total = log.args[0] if _op(log, aten.log.default) else None
    exp = total.args[0] if _op(total, aten.sum.dim_IntList) and len(total.args) >= 3 and total.args[2] else None
    if not (_op(exp, aten.exp.default) and exp.args[0] is shifted and [a % out.dim() for a in total.args[1]] == [d]
            and _op(shifted, aten.sub.Tensor) and len(shifted.args) == 2 and shifted.kwargs.get("alpha", 1) == 1):
        return None
    x, top = shifted.args
    if not (_op(top, aten.amax.default) and top.args[0] is x and len(top.args) >= 3 and top.args[2]
            and [a % out.dim() for a in top.args[1]] == [d]) or meta_val(shifted).shape != out.shape:
        return None
    a, lse = b.values.get(shifted), b.values.get(log)
    if a is None or lse is None:
        return None  # (computed outside this fusion)
    ops = b.fd.ops
    scaled = ops.mul(lse, reduced_count(b, node, [d]))
    return ops.sub(ops.sum(a, [d], keepdim), scaled if keepdim else ops.squeeze(scaled, [d]))


@register(aten.sum.default, kind=Kind.reduction)
def _sum_all(b, node, x, dtype=None):
    return b.fd.ops.sum(x, reduce_dims(x, None), False, dtype=_dtype(dtype))


@register(aten.prod.dim_int, kind=Kind.reduction)
def _prod(b, node, x, dim, keepdim=False, dtype=None):
    return b.fd.ops.prod(x, reduce_dims(x, dim), keepdim, dtype=_dtype(dtype))


@register(aten.prod.default, kind=Kind.reduction)
def _prod_all(b, node, x, dtype=None):
    return b.fd.ops.prod(x, reduce_dims(x, None), False, dtype=_dtype(dtype))


@register(aten.mean.dim, kind=Kind.reduction)
def _mean(b, node, x, dim=None, keepdim=False, dtype=None):
    ops = b.fd.ops
    if dtype is not None:
        x = ops.cast(x, DataType.from_torch(dtype))
    if not x.dtype.is_floating:
        raise LoweringError(f"mean of a {x.dtype.name} tensor")
    dims = reduce_dims(x, dim)
    total = ops.sum(upcast(b, x), dims, keepdim)
    return ops.div(total, reduced_count(b, node, dims))


@register(aten.mean.default, kind=Kind.reduction)
def _mean_all(b, node, x, dtype=None):
    return _mean(b, node, x, None, False, dtype)


@register(aten.amax.default, kind=Kind.reduction)
def _amax(b, node, x, dim=(), keepdim=False):
    return b.fd.ops.max(x, reduce_dims(x, dim), keepdim)


@register(aten.amin.default, kind=Kind.reduction)
def _amin(b, node, x, dim=(), keepdim=False):
    return b.fd.ops.min(x, reduce_dims(x, dim), keepdim)


def _correction(correction) -> int:
    if correction is None:
        return 1
    if float(correction) != int(correction) or correction < 0:
        raise LoweringError(f"correction {correction!r} is not a non-negative integer")
    return int(correction)


@register(aten.var_mean.correction, kind=Kind.reduction)
def _var_mean(b, node, x, dim=None, *, correction=None, keepdim=False):
    return b.fd.ops.var_mean(x, reduce_dims(x, dim), _correction(correction), keepdim)


@register(aten.var.correction, kind=Kind.reduction)
def _var(b, node, x, dim=None, *, correction=None, keepdim=False):
    return b.fd.ops.var(x, reduce_dims(x, dim), _correction(correction), keepdim)


@register(aten.std.correction, kind=Kind.reduction)
def _std(b, node, x, dim=None, *, correction=None, keepdim=False):
    return b.fd.ops.sqrt(_var(b, node, x, dim, correction=correction, keepdim=keepdim))


def _shifted(b, x, dim):
    """x - max(x) along dim, in the compute type, and the exp of it summed."""
    ops = b.fd.ops
    xf = upcast(b, x)
    dims = reduce_dims(xf, dim)
    shifted = ops.sub(xf, ops.max(xf, dims, True))
    return shifted, ops.sum(ops.exp(shifted), dims, True)


@register(aten._softmax.default, kind=Kind.reduction)
def _softmax(b, node, x, dim, half_to_float=False):
    ops = b.fd.ops
    xf = upcast(b, x)
    dims = reduce_dims(xf, dim)
    e = ops.exp(ops.sub(xf, ops.max(xf, dims, True)))
    return ops.div(e, ops.sum(e, dims, True))


@register(aten._log_softmax.default, kind=Kind.reduction)
def _log_softmax(b, node, x, dim, half_to_float=False):
    shifted, total = _shifted(b, x, dim)
    return b.fd.ops.sub(shifted, b.fd.ops.log(total))


@register(aten.native_layer_norm.default, kind=Kind.reduction)
def _layer_norm(b, node, x, normalized_shape, weight, bias, eps):
    ops = b.fd.ops
    params = [p for p in (weight, bias) if p is not None]
    mixed = x.dtype in (DataType.Half, DataType.BFloat16) and any(p.dtype is DataType.Float for p in params)
    if not all(p.dtype is (DataType.Float if mixed else x.dtype) for p in params):
        # eager takes parameters of the input's type, or all fp32 with a half input: any other
        # mix is its error (raised by ATen, which runs the node)
        raise LoweringError(f"layer norm of a {x.dtype.name} input with parameters of "
                            f"{', '.join(p.dtype.name for p in params)}")
    axes = list(range(x.ndim - len(normalized_shape), x.ndim))
    xf = upcast(b, x)
    var, mean = ops.var_mean(xf, axes, 0, True)
    rstd = ops.rsqrt(ops.add(var, eps))
    y = ops.mul(ops.sub(xf, mean), rstd)
    if weight is not None:
        y = ops.mul(y, upcast(b, weight))
    if bias is not None:
        y = ops.add(y, upcast(b, bias))
    return ops.cast(y, x.dtype) if y.dtype is not x.dtype else y, mean, rstd


@register(aten.max.default, kind=Kind.reduction)
def _max_all(b, node, x):
    return b.fd.ops.max(x, reduce_dims(x, None), False)


@register(aten.min.default, kind=Kind.reduction)
def _min_all(b, node, x):
    return b.fd.ops.min(x, reduce_dims(x, None), False)


@register(aten.linalg_vector_norm.default, kind=Kind.reduction)
def _vector_norm(b, node, x, ord=2, dim=None, keepdim=False, *, dtype=None):
    ops = b.fd.ops
    if dtype is not None:
        x = ops.cast(x, DataType.from_torch(dtype))
    xf, dims = upcast(b, x), reduce_dims(x, dim)
    if ord == 2:
        return ops.sqrt(ops.sum(ops.mul(xf, xf), dims, keepdim))
    if ord == 1:
        return ops.sum(ops.abs(xf), dims, keepdim)
    if ord == float("inf"):
        return ops.max(ops.abs(xf), dims, keepdim)
    raise LoweringError(f"vector norm of order {ord!r}")
