"""Reductions and the normalizations built from them: sum, mean, amax, any, all, var_mean,
vector norms, softmax, log_softmax, layer norm, group norm. Half and bf16 inputs compute in fp32 where ATen does."""
from __future__ import annotations

from typing import Optional

import torch
from torch.fx import Node

from ...ir import DataType, Scalar
from ..meta import meta_val
from . import Kind, LoweringError, register
from .pointwise import rounded, upcast
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


def _correction(correction) -> Optional[int]:
    """The correction as the IR's var_mean takes it, a non-negative int (None means 1); None for
    one it does not take: a fraction, a negative number (eager divides by n - correction all
    the same), or an int argument known only at execution (a symbol)."""
    if correction is None:
        return 1
    if isinstance(correction, Scalar):
        if not correction.is_constant:
            return None
        correction = correction.value
    if float(correction) != int(correction) or correction < 0:
        return None
    return int(correction)


def _corrected_var_mean(b, node, x, dim, correction, keepdim):
    """var and mean with eager's correction: the squared deviations over max(n - correction, 0)
    (inf or NaN past the element count, as eager). A correction the IR's var_mean does not
    take is applied to the biased variance, in the compute type, the result rounded once."""
    ops = b.fd.ops
    dims = reduce_dims(x, dim)
    fixed = _correction(correction)
    if fixed is not None:
        return ops.var_mean(x, dims, fixed, keepdim)
    var, mean = ops.var_mean(upcast(b, x), dims, 0, keepdim)
    n = reduced_count(b, node, dims)
    if isinstance(n, int) and not isinstance(correction, Scalar):  # (numbers: Python's arithmetic)
        divisor = max(n - correction, 0)
    else:
        divisor = ops.maximum(ops.sub(n, correction), 0)
    var = ops.div(ops.mul(var, n), divisor)
    return tuple(v if v.dtype is x.dtype else ops.cast(v, x.dtype) for v in (var, mean))


@register(aten.var_mean.correction, kind=Kind.reduction)
def _var_mean(b, node, x, dim=None, *, correction=None, keepdim=False):
    return _corrected_var_mean(b, node, x, dim, correction, keepdim)


@register(aten.var.correction, kind=Kind.reduction)
def _var(b, node, x, dim=None, *, correction=None, keepdim=False):
    return _corrected_var_mean(b, node, x, dim, correction, keepdim)[0]


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


def _check_norm_params(x, weight, bias, norm: str) -> None:
    """Eager takes a norm's parameters of the input's type, or all fp32 with a half input: any
    other mix is its error (raised by ATen, which runs the node)."""
    params = [p for p in (weight, bias) if p is not None]
    mixed = x.dtype in (DataType.Half, DataType.BFloat16) and any(p.dtype is DataType.Float for p in params)
    if not all(p.dtype is (DataType.Float if mixed else x.dtype) for p in params):
        raise LoweringError(f"{norm} of a {x.dtype.name} input with parameters of "
                            f"{', '.join(p.dtype.name for p in params)}")


@register(aten.native_layer_norm.default, kind=Kind.reduction)
def _layer_norm(b, node, x, normalized_shape, weight, bias, eps):
    ops = b.fd.ops
    _check_norm_params(x, weight, bias, "layer norm")
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


@register(aten.native_group_norm.default, kind=Kind.reduction)
def _group_norm(b, node, x, weight, bias, batch_size, channels, inner_size, groups, eps):
    """Group norm as the core-ATen table leaves it (whole; torch's own decomposition takes a
    CPU input through as_strided, which runs through ATen): the input viewed as [N, groups,
    channels per group, *spatial], its statistics a var_mean in fp32 over all but the first
    two axes, the output rounded once to the traced type. Returns the output and the [N,
    groups] mean and 1/std the backward reads, of their traced types."""
    ops = b.fd.ops
    _check_norm_params(x, weight, bias, "group norm")
    shape = [b.size(s) for s in b.input_meta(node).shape]
    per_group = _channels_per_group(shape, groups)
    grouped = [shape[0], groups, per_group, *shape[2:]]
    axes = list(range(2, len(grouped)))
    xg = ops.reshape(upcast(b, x), grouped)
    var, mean = ops.var_mean(xg, axes, 0, False)
    rstd = ops.rsqrt(ops.add(var, eps))
    spread = [False, False] + [True] * len(axes)
    y = ops.mul(ops.sub(xg, ops.broadcast(mean, spread)), ops.broadcast(rstd, spread))
    per_channel = [1, groups, per_group] + [1] * len(axes[1:])
    if weight is not None:
        y = ops.mul(y, ops.reshape(upcast(b, weight), per_channel))
    if bias is not None:
        y = ops.add(y, ops.reshape(upcast(b, bias), per_channel))
    out = ops.reshape(y, shape)
    traced = [DataType.from_torch(v.dtype) for v in meta_val(node)]
    return tuple(v if v.dtype is t else ops.cast(v, t) for v, t in zip((out, mean, rstd), traced))


def _channels_per_group(shape: list, groups) -> int:
    """Group norm's channel count over its group count: an int, or -1 for reshape to infer
    (a channel count known only at execution: reshape checks the division when the inputs are
    bound). Counts eager refuses go through ATen, which raises its error."""
    channels = shape[1]
    if not isinstance(groups, int) or groups <= 0 or (isinstance(channels, int) and channels % groups):
        raise LoweringError(f"group norm of {channels} channels in {groups} groups")
    if isinstance(channels, int):
        return channels // groups
    if any(isinstance(s, int) and s == 0 for s in shape):  # (reshape cannot infer -1 of no elements)
        raise LoweringError("group norm of an empty input with a channel count known only at execution")
    return -1


def _truth(b, x):
    """x != 0 as bool, the test eager's any and all make of each element (NaN is true); a half
    or bf16 value rounded to its dtype first, as eager stores it."""
    if x.dtype is DataType.Bool:
        return x
    return b.fd.ops.ne(rounded(b, x), 0)


def _any_or_all(b, node, x, dim, keepdim: bool, every: bool):
    """any (`every` False) or all of x over dim: the max (min) of its elements' truth, a bool
    reduction. Over no elements, any is False and all True (a max refuses an empty axis).
    An empty dim list tests each element and reduces nothing (eager's any.dims, unlike sum's).
    (A uint8 x, whose any eager returns as uint8, has no fuser DataType: it runs through ATen.)"""
    ops = b.fd.ops
    truth = _truth(b, x)
    dims = [] if isinstance(dim, (list, tuple)) and len(dim) == 0 else reduce_dims(x, dim)
    extents = [d.extent for d in x.domain.no_reductions()]
    if not dims:
        return ops.set(truth)
    if any(extents[d % x.ndim] == 0 for d in dims):
        return ops.full(b.out_shape(node), every, DataType.Bool)
    return (ops.min if every else ops.max)(truth, dims, keepdim)


@register(aten.any.default, aten.any.dim, aten.any.dims, kind=Kind.reduction)
def _any(b, node, x, dim=None, keepdim=False):  # (.default: over every dim)
    return _any_or_all(b, node, x, dim, keepdim, every=False)


@register(aten.all.default, aten.all.dim, aten.all.dims, kind=Kind.reduction)
def _all(b, node, x, dim=None, keepdim=False):
    return _any_or_all(b, node, x, dim, keepdim, every=True)


@register(aten.max.default, kind=Kind.reduction)
def _max_all(b, node, x):
    return b.fd.ops.max(x, reduce_dims(x, None), False)


@register(aten.min.default, kind=Kind.reduction)
def _min_all(b, node, x):
    return b.fd.ops.min(x, reduce_dims(x, None), False)


def _norm_order(ord) -> "float | Scalar":
    """A vector norm's order: a number, or an integer Scalar for one known only at execution (an
    int argument, traced as a symbol; the lowering does not lean on the guards Dynamo's trace
    happens to put on its sign and parity). A floating order known only at execution is
    refused: +-inf would take formulas of their own."""
    if isinstance(ord, Scalar):
        if ord.is_constant:
            return float(ord.value)
        if not ord.dtype.is_integral:
            raise LoweringError(f"vector norm of a {ord.dtype.name} order known only at execution")
        return ord
    return float(ord)


def _single_element(b, node, dims: list[int]) -> bool:
    """Each output element is one input element: every reduced dim traced of size 1 (Dynamo
    specializes it: never a symbol), or a 0-d input."""
    sizes = b.input_meta(node).shape
    return all(isinstance(s, int) and s == 1 for s in (b.size(sizes[d % len(sizes)]) for d in dims))


def _nonzero(b, x, xf):
    """1 for each element of x that is not 0 (NaN too), 0 for each zero, in xf's type."""
    return b.fd.ops.cast(_truth(b, x), xf.dtype)


def _norm_of_one_element(b, x, xf, p, dims, keepdim):
    """The norm of single elements, as eager takes it: order 0 counts it, any other is |x|
    itself (where |x| ** p could overflow)."""
    ops = b.fd.ops
    nonzero, magnitude = (ops.squeeze(v, dims) if dims and not keepdim else v
                          for v in (_nonzero(b, x, xf), ops.abs(xf)))
    if isinstance(p, Scalar):
        return ops.where(ops.eq(p, 0), nonzero, magnitude)
    return nonzero if p == 0 else magnitude


def _norm_of_order_at_execution(b, x, xf, p: Scalar, dims, keepdim):
    """An integer order known only at execution: 0 counts the nonzero elements, any other (never
    inf) is sum(|x| ** p) ** (1 / p). Both are one sum, its terms and root chosen by the order."""
    ops = b.fd.ops
    counts = ops.eq(p, 0)
    terms = ops.where(counts, _nonzero(b, x, xf), ops.pow(ops.abs(xf), p))
    total = ops.sum(terms, dims, keepdim)
    return ops.where(counts, total, ops.pow(total, ops.div(1.0, p)))  # (1 / 0 is inf, not chosen)


@register(aten.linalg_vector_norm.default, kind=Kind.reduction)
def _vector_norm(b, node, x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """Each order as eager defines it, in the compute type (fp32 for half and bf16, the result
    rounded once): 0 counts the nonzero elements (NaN too), +-inf are the max and min of |x|,
    any other p is sum(|x| ** p) ** (1 / p), a negative p's zeros giving inf terms and so a
    norm of 0."""
    ops = b.fd.ops
    p = _norm_order(ord)
    if dtype is not None:
        x = ops.cast(x, DataType.from_torch(dtype))
    xf, dims = upcast(b, x), reduce_dims(x, dim)
    if _single_element(b, node, dims):
        return _norm_of_one_element(b, x, xf, p, dims, keepdim)
    if isinstance(p, Scalar):
        return _norm_of_order_at_execution(b, x, xf, p, dims, keepdim)
    if p == 0:
        return ops.sum(_nonzero(b, x, xf), dims, keepdim)
    if p == 2:
        return ops.sqrt(ops.sum(ops.mul(xf, xf), dims, keepdim))
    if p == 1:
        return ops.sum(ops.abs(xf), dims, keepdim)
    if p == float("inf"):
        return ops.max(ops.abs(xf), dims, keepdim)
    if p == float("-inf"):
        return ops.min(ops.abs(xf), dims, keepdim)
    return ops.pow(ops.sum(ops.pow(ops.abs(xf), p), dims, keepdim), 1.0 / p)
