"""Views and data movement (view, permute, expand, squeeze, slice, cat, pad), tensor creation
(full, arange) and two scatter patterns that are really pads and one-hots.

Target shapes are read from the node's traced output, whose sizes Dynamo already resolved (a
`-1` in `view`, the `end` of a slice), and translated into this fusion's extents."""
from __future__ import annotations

import math

import torch
from torch.fx import Node

from ...ir import DataType
from ...ops.pointwise import python_value
from ..meta import meta_val, size_expr
from . import Kind, LoweringError, indexing, refuse_overflow, register

aten = torch.ops.aten
_BIG = 2**62  # ATen's "to the end" slice bound is INT64_MAX


# -- views --------------------------------------------------------------------------------------


@register(aten.view.default, aten._unsafe_view.default, aten.reshape.default,
          aten.view_copy.default, kind=Kind.view)
def _view(b, node, x, size):
    before = [size_expr(s) for s in b.input_meta(node).shape]
    after = [size_expr(s) for s in b.meta(node).shape]
    if [e for e in before if e != 1] == [e for e in after if e != 1]:
        # only size-1 dims come or go: a squeeze and a broadcast, which kernels fuse
        ones = [k for k, e in enumerate(before) if e == 1]
        out = b.fd.ops.squeeze(x, ones) if ones else x
        flags = [e == 1 for e in after]
        return b.fd.ops.broadcast(out, flags) if any(flags) else out
    return b.fd.ops.reshape(x, b.out_shape(node))


@register(aten.permute.default, kind=Kind.view)
def _permute(b, node, x, dims):
    return b.fd.ops.permute(x, [d % x.ndim for d in dims]) if x.ndim else x


@register(aten.transpose.int, kind=Kind.view)
def _transpose(b, node, x, dim0, dim1):
    if x.ndim < 2:
        return x
    perm = list(range(x.ndim))
    a, c = dim0 % x.ndim, dim1 % x.ndim
    perm[a], perm[c] = perm[c], perm[a]
    return b.fd.ops.permute(x, perm)


@register(aten.t.default, kind=Kind.view)
def _t(b, node, x):
    return b.fd.ops.permute(x, [1, 0]) if x.ndim == 2 else x


def expand_to(b, x, shape: list):
    """`x` broadcast to `shape` (ints and extent Scalars), PyTorch's expand."""
    n = len(shape)
    if x.ndim < n:
        x = b.fd.ops.broadcast(x, [True] * (n - x.ndim) + [False] * x.ndim)
    target, needed = [], False
    for d, s in zip(x.domain.no_reductions(), shape):
        if d.is_broadcast and not (isinstance(s, int) and s == 1):
            target.append(s)
            needed = True
        else:
            target.append(-1)
    return b.fd.ops.expand(x, target) if needed else x


@register(aten.expand.default, aten.expand_copy.default, kind=Kind.view)
def _expand(b, node, x, size, implicit=False):
    return expand_to(b, x, b.out_shape(node))


@register(aten.repeat.default, kind=Kind.movement)
def _repeat(b, node, x, repeats):
    """x.repeat(r0, r1, ...): each axis k broadcast along a new axis before it to [r_k, s_k],
    then merged into r_k * s_k (leading counts beyond x's rank add axes)."""
    repeats = [b.size(meta_val(r)) if isinstance(r, Node) else r for r in repeats]
    if any(isinstance(r, int) and r < 1 for r in repeats):
        raise LoweringError(f"repeat by {repeats} (a count of 0 empties the tensor)")
    n, new = len(repeats), len(repeats) - x.ndim
    sizes = [1] * new + [b.size(s) for s in b.input_meta(node).shape]
    # [r0, s0, r1, s1, ...]: a count's axis before each of x's, and x's own for the counts past its rank
    spread = b.fd.ops.broadcast(x, [k % 2 == 0 or k // 2 < new for k in range(2 * n)])
    tiled = expand_to(b, spread, [v for r, s in zip(repeats, sizes) for v in (r, s)])
    return b.fd.ops.reshape(tiled, b.out_shape(node))


@register(aten.unsqueeze.default, kind=Kind.view)
def _unsqueeze(b, node, x, dim):
    n = x.ndim + 1
    return b.fd.ops.broadcast(x, [k == dim % n for k in range(n)])


@register(aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims, kind=Kind.view)
def _squeeze(b, node, x, dim=None):
    sizes = [size_expr(s) for s in b.input_meta(node).shape]
    if dim is None:
        dims = range(len(sizes))
    else:
        dims = [dim] if isinstance(dim, int) else dim
    ones = sorted({d % len(sizes) for d in dims if len(sizes) and sizes[d % len(sizes)] == 1})
    return b.fd.ops.squeeze(x, ones) if ones else x


# -- slicing and joining --------------------------------------------------------------------------


def _index(b, node: Node, raw, size) -> object:
    """A slice bound (int or SymInt node) as an op argument, counted from the start."""
    if raw is None:
        return None
    if isinstance(raw, Node):
        e = size_expr(meta_val(raw))
    elif isinstance(raw, int):
        return None if raw >= _BIG else raw
    else:
        raise LoweringError(f"slice bound {raw!r}")
    if e.is_Integer:
        return int(e)
    if _known(meta_val(raw) < 0):
        e = e + size_expr(size)
    elif not _known(meta_val(raw) >= 0):
        raise LoweringError(f"slice bound {e} of unknown sign")
    return b.scalar(e)


def _known(cond) -> bool:
    """True when Dynamo's shape facts prove `cond` (without adding a guard)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return bool(statically_known_true(cond))


def slice_axis(b, x, dim: int, start, end, step: int = 1):
    n = x.ndim
    starts, ends = [0] * n, list(x.shape())
    starts[dim] = 0 if start is None else start
    if end is not None:
        ends[dim] = end
    strides = [1] * n
    strides[dim] = step
    return b.fd.ops.slice(x, starts, ends, strides)


def _arg(node: Node, pos: int, name: str, default=None):
    if len(node.args) > pos:
        return node.args[pos]
    return node.kwargs.get(name, default)


@register(aten.slice.Tensor, kind=Kind.movement)
def _slice(b, node, x, dim=0, start=None, end=None, step=1):
    if not isinstance(step, int) or step < 1:
        raise LoweringError(f"slice step {step!r}")
    size = b.input_meta(node).shape[dim]
    start, end = (_index(b, node, _arg(node, k, name), size) for k, name in ((2, "start"), (3, "end")))
    whole_end = end is None or (type(end) is int and type(size) is int and end == size)  # (no SymInt guard)
    if step == 1 and (start is None or (type(start) is int and start == 0)) and whole_end:
        return x  # x[:, None] slices the whole of each axis first: no op, nothing to plan around
    return slice_axis(b, x, dim % x.ndim, start, end, step)


@register(aten.select.int, kind=Kind.movement)
def _select(b, node, x, dim, index):
    dim %= x.ndim
    start = _select_index(b, node, _arg(node, 2, "index"), b.input_meta(node).shape[dim])
    stop = start + 1 if isinstance(start, int) else b.fd.ops.add(start, 1)
    return b.fd.ops.squeeze(slice_axis(b, x, dim, start, stop), [dim])


def _select_index(b, node: Node, raw, size) -> object:
    """A select's index (int or SymInt node) along an axis of `size`, counted from the start."""
    if isinstance(raw, int) and raw < 0:
        return b.scalar(size_expr(size) + raw)
    return _index(b, node, raw, size)


@register(aten.select_scatter.default, kind=Kind.pointwise)
def _select_scatter(b, node, base, src, dim, index):
    """`src` written into `base.select(dim, index)`: `where(iota == index, src, base)` along
    `dim`, the core decomposition's form, which fuses (the op is kept whole for reinplace.py,
    which makes one written back into a graph input an in-place write of its row)."""
    fake = b.meta(node)
    dim %= fake.dim()
    at = _select_index(b, node, _arg(node, 3, "index"), fake.shape[dim])
    ops = b.fd.ops
    positions = ops.iota(b.out_shape(node)[dim], 0, 1, DataType.Int)
    hit = ops.eq(ops.broadcast(positions, [k != dim for k in range(fake.dim())]), at)
    dtype = DataType.from_torch(fake.dtype)
    src = src if src.dtype is dtype else ops.cast(src, dtype)
    return ops.where(hit, ops.broadcast(src, [k == dim for k in range(fake.dim())]), base)


@register(aten.split_with_sizes.default, kind=Kind.movement)
def _split_with_sizes(b, node, x, split_sizes, dim=0):
    dim %= x.ndim
    offset, out = size_expr(0), []
    for s in _arg(node, 1, "split_sizes"):
        e = size_expr(meta_val(s)) if isinstance(s, Node) else size_expr(s)
        out.append(slice_axis(b, x, dim, b.scalar(offset), b.scalar(offset + e)))
        offset = offset + e
    return tuple(out)


@register(aten.cat.default, kind=Kind.movement)
def _cat(b, node, tensors, dim=0):
    if len({t.ndim for t in tensors}) != 1:
        raise LoweringError("cat of tensors of different ranks")
    return b.fd.ops.cat(list(tensors), dim % tensors[0].ndim)


@register(aten.constant_pad_nd.default, kind=Kind.movement)
def _pad(b, node, x, pad, value=0):
    if any(not isinstance(p, int) or p < 0 for p in pad):
        raise LoweringError(f"pad widths {list(pad)} (only non-negative static widths)")
    refuse_overflow(value, b.meta(node).dtype, "constant_pad_nd")
    return b.fd.ops.pad(x, list(pad), value)


# -- creation ---------------------------------------------------------------------------------------


def _python_value(value, dtype: DataType):
    return python_value(value, dtype) if isinstance(value, (bool, int, float)) else value


def _full(b, node, value):
    dtype = DataType.from_torch(b.meta(node).dtype)
    value = _python_value(value, dtype)
    out = b.fd.ops.full(b.out_shape(node), value, dtype)
    if isinstance(value, (bool, int, float)):
        b.constants[id(out)] = value
    return out


@register(aten.full.default, aten.full_like.default, aten.new_full.default, kind=Kind.creation)
def _full_rule(b, node, *args, **kwargs):
    value = args[1] if len(args) > 1 else kwargs["fill_value"]
    refuse_overflow(value, b.meta(node).dtype, "full")
    return _full(b, node, value)


@register(aten.zeros.default, aten.zeros_like.default, aten.new_zeros.default,
          aten.empty.memory_format, aten.empty_like.default, aten.new_empty.default,
          aten.empty_strided.default, kind=Kind.creation)
def _zeros(b, node, *args, **kwargs):
    return _full(b, node, 0)  # empty tensors hold no defined values: zeros are one choice


@register(aten.ones.default, aten.ones_like.default, aten.new_ones.default, kind=Kind.creation)
def _ones(b, node, *args, **kwargs):
    return _full(b, node, 1)


@register(aten.scalar_tensor.default, kind=Kind.creation)
def _scalar_tensor(b, node, value, **kwargs):
    refuse_overflow(value, b.meta(node).dtype, "scalar_tensor")  # (`where(c, x, 2**40)` of int32 x)
    return _full(b, node, value)


@register(aten.arange.start_step, aten.arange.start, aten.arange.default, kind=Kind.creation)
def _arange(b, node, *args, **kwargs):
    dtype = DataType.from_torch(b.meta(node).dtype)
    if not dtype.is_integral:
        raise LoweringError("arange of a floating dtype (rounding of start + k * step)")
    positional = [a for a in args if not isinstance(a, torch.dtype)]
    if node.target is aten.arange.default:
        start, step = 0, 1
    else:
        start = positional[0]
        step = positional[2] if len(positional) > 2 else kwargs.get("step", 1)
    if any(isinstance(meta_val(v) if isinstance(v, Node) else v, (float, torch.SymFloat)) for v in (start, step)):
        # eager rounds each start + k * step down to the integer type; an iota takes integers
        raise LoweringError("arange of an integer type from a fractional start or step")
    (length,) = b.out_shape(node)
    return b.fd.ops.iota(length, start, step, dtype)


# -- scatters that are pads and one-hots --------------------------------------------------------------

_FILLS = {aten.full.default: 1, aten.full_like.default: 1, aten.new_full.default: 1,
          aten.zeros.default: None, aten.zeros_like.default: None, aten.new_zeros.default: None}


def _constant_fill(node) -> object:
    """The fill value of a tensor created by a full/zeros node, or None."""
    if not isinstance(node, Node) or node.target not in _FILLS:
        return None
    pos = _FILLS[node.target]
    if pos is None:
        return 0
    value = node.args[pos] if len(node.args) > pos else node.kwargs.get("fill_value")
    return value if isinstance(value, (int, float, bool)) else None


def _from_start(b, bound, total):
    """A negative int slice bound (`end=-1`) counted from the end, as the sizes of the zero
    blocks around `src` need."""
    if not isinstance(bound, int) or bound >= 0:
        return bound
    size = b.size(total)
    return size + bound if isinstance(size, int) else b.fd.ops.add(size, bound)


@register(aten.slice_scatter.default, kind=Kind.movement)
def _slice_scatter(b, node, base, src, dim=0, start=None, end=None, step=1):
    """Writing `src` into a slice of zeros is `src` between two blocks of zeros."""
    if _constant_fill(node.args[0]) != 0 or step != 1:
        raise LoweringError("slice_scatter into a tensor that is not all zeros, or with a step")
    fake = b.meta(node)
    dim %= fake.dim()
    total = fake.shape[dim]
    lo = _clamped_start(b, node, total)
    hi = _from_start(b, _index(b, node, _arg(node, 4, "end"), total), total)
    dtype = DataType.from_torch(fake.dtype)
    ops = b.fd.ops
    src = src if src.dtype is dtype else ops.cast(src, dtype)
    shape = b.out_shape(node)
    parts = []
    if lo is not None and not (isinstance(lo, int) and lo == 0):
        parts.append(ops.full(shape[:dim] + [lo] + shape[dim + 1:], _python_value(0, dtype), dtype))
    parts.append(src)
    if hi is not None:
        # the zeros after src: what the slice leaves of the size, from src's own length rather
        # than from `end`, which ATen clamps to the size (x[:, 2:5] of 4 columns has 2)
        rest = _minus(b, _minus(b, b.size(total), 0 if lo is None else lo),
                      b.size(b.input_meta(node, 1).shape[dim]))
        if not (isinstance(rest, int) and rest == 0):
            parts.append(ops.full(shape[:dim] + [rest] + shape[dim + 1:], _python_value(0, dtype), dtype))
    return parts[0] if len(parts) == 1 else ops.cat(parts, dim)


def _clamped_start(b, node, total):
    """Where `src` starts: ATen counts a negative start from the end and clamps it into
    [0, size] (x[:, -10:] of 4 columns starts at 0, x[:, 6:] at 4 with an empty src), which
    sym_max/sym_min keep symbolic where Dynamo's facts do not settle it."""
    raw = _arg(node, 3, "start")
    if not isinstance(raw, int) or isinstance(raw, bool):
        return _from_start(b, _index(b, node, raw, total), total)
    if raw >= 0:
        return b.size(raw if _known(total >= raw) else torch.sym_min(raw, total))
    at = total + raw
    return b.size(at if _known(at >= 0) else torch.sym_max(at, 0))


def _minus(b, x, y):
    """x - y for sizes that are ints or extent Scalars."""
    if isinstance(x, int) and isinstance(y, int):
        return x - y
    return x if isinstance(y, int) and y == 0 else b.fd.ops.sub(x, y)


@register(aten.scatter.value, kind=Kind.pointwise)
def _scatter_value(b, node, base, dim, index, value):
    """`full(f).scatter(dim, index, value)` with one index per row: a one-hot, as
    `where(iota == index, value, f)` (the cross-entropy gradient). Other scatters run through
    ATen."""
    refuse_overflow(value, b.meta(node).dtype, "scatter")
    fill = _constant_fill(node.args[0])
    # (an integer one-hot could not mark an index out of range: ATen raises for it)
    if fill is None or not b.meta(node).dtype.is_floating_point \
            or not _one_index_per_row(b.meta(node).shape, node.args[2], dim % b.meta(node).dim()):
        return indexing.scatter_value(b, base, dim, index, value)  # through ATen
    dtype = DataType.from_torch(b.meta(node).dtype)
    length = b.out_shape(node)[dim]
    hit = _one_hot(b, b.meta(node).shape, node.args[2], dim, length, index, "scatter")
    # an index out of range meets no position: eager raises, a fused kernel cannot, so its
    # row is NaN (a cross entropy's gradient row as its loss) rather than a plausible fill
    ops = b.fd.ops
    scalar = lambda v: b.fd.define_scalar(_python_value(v, dtype), dtype=dtype)  # noqa: E731 (in the one-hot's dtype)
    fill = ops.where(_in_range(ops, index, length), scalar(fill), scalar(float("nan")))
    return ops.where(hit, scalar(value), fill)  # (the fill once a row: one select an element, as before)


def _one_index_per_row(shape, index_node, dim: int) -> bool:
    """Whether the traced index has `shape` but 1 along `dim` (`dim` non-negative)."""
    sizes = [size_expr(s) for s in shape]
    return [size_expr(s) for s in meta_val(index_node).shape] == sizes[:dim] + [1] + sizes[dim + 1:]


def _in_range(ops, index, length):
    return ops.logical_and(ops.ge(index, 0), ops.lt(index, length))


def _one_hot(b, shape, index_node, dim, length, index, what):
    """`iota(length) == index` along `dim`, for an index holding one position per row (shape
    equal to `shape` but 1 along `dim`)."""
    dim %= len(shape)
    if not _one_index_per_row(shape, index_node, dim):
        raise LoweringError(f"{what} with more than one index per row")
    positions = b.fd.ops.iota(length, 0, 1, DataType.Int)
    positions = b.fd.ops.broadcast(positions, [k != dim for k in range(len(shape))])
    return b.fd.ops.eq(positions, index)


_MULS = (aten.mul.Tensor, aten.mul.Scalar)


def one_hot_row_sum(b, node, dim, keepdim):
    """A sum along `d` of a one-hot made by `scatter(zeros, d, index, v)` (one index per row),
    alone or times a factor `q` constant along `d`: the cross-entropy backward's sum of its
    one-hot gradient over a vocabulary-long row. Exactly one position meets an index in range,
    so the sum is `v * q` there, plus the `0 * q` terms of the other positions (0, or NaN where
    q is not finite, as in the sum), with no pass over the row. None where the summed value is
    not of this form (the sum is then lowered as it is)."""
    src = node.args[0]
    dims = [dim] if isinstance(dim, int) else list(dim or [])
    if not isinstance(src, Node) or len(dims) != 1:
        return None
    factor, scatter = 1.0, src
    if src.target in _MULS:
        p, q = src.args[0], src.args[1]
        scatter, factor = (p, q) if isinstance(p, Node) and p.target is aten.scatter.value else (q, p)
    if not isinstance(scatter, Node) or scatter.target is not aten.scatter.value \
            or _constant_fill(scatter.args[0]) != 0 or len(scatter.args) < 4:
        return None
    hot = meta_val(scatter)
    if not hot.dtype.is_floating_point or meta_val(node).dtype != meta_val(src).dtype:
        return None  # (an integer one-hot sums to int64; a float one keeps its type)
    ndim = hot.dim()
    if ndim == 0 or meta_val(src).dim() != ndim or dims[0] % ndim != scatter.args[1] % ndim:
        return None
    d = dims[0] % ndim
    index = scatter.args[2]
    if not _one_index_per_row(hot.shape, index, d):
        return None
    n = b.size(meta_val(scatter).shape[d])
    if isinstance(n, int) and n < 1:
        return None  # an empty row sums to 0 whatever q is
    if isinstance(factor, Node):
        fshape = [size_expr(s) for s in meta_val(factor).shape]
        k = d - (ndim - len(fshape))
        if len(fshape) > ndim or (k >= 0 and fshape[k] != 1):
            return None  # the factor varies along the row
    elif not isinstance(factor, (int, float)) or isinstance(factor, bool):
        return None
    idx = b.values.get(index)
    q = b.values.get(factor) if isinstance(factor, Node) else factor
    if idx is None or q is None:
        return None  # (computed outside this fusion)
    ops, dtype = b.fd.ops, DataType.from_torch(hot.dtype)
    inside = _in_range(ops, idx, n)
    # the value as the one-hot holds it: rounded to its dtype (1/3 in bf16 is 0.333984375)
    value = torch.tensor(scatter.args[3], dtype=hot.dtype).item()
    # (an index out of range: NaN, as the scatter's row)
    hit = ops.where(inside, b.fd.define_scalar(_python_value(value, dtype), dtype=dtype),
                    b.fd.define_scalar(float("nan"), dtype=dtype))
    total = ops.mul(hit, q)
    # the other positions' 0 * q: a symbolic length is at least 2 (Dynamo specializes 0 and 1)
    if not isinstance(n, int) or n > 1:
        if not isinstance(q, (int, float)):
            total = ops.add(total, ops.mul(q, 0.0))
        elif not math.isfinite(q):
            total = ops.add(total, float("nan"))
    return total if keepdim else ops.squeeze(total, [d])


_CASTS = (aten._to_copy.default, torch.ops.prims.convert_element_type.default)


def _picked_through_row_constants(b, src, dim: int, hit):
    """The pick of `src` (the one-hot sum along `dim`) taken before the values constant along
    `dim` that made it: a log-softmax's `(x - max) - log(sum)` picked is `x` picked, then
    `- max - log(sum)` once a row. Also through a cast (a bf16 log-softmax) and a product (a
    weighted one: `logp * w` picked is `logp` picked times `w` picked). The same float
    operations on the same element (the same bits), but the pick no longer waits for the row's
    max and sum: a kernel reads it with one load a row (codegen/pick.py), where it took a pass
    of its own over the row (a cross entropy's forward read its logits twice). None where no
    subtraction of a row constant is found under `src`."""
    out = meta_val(src) if isinstance(src, Node) else None
    if not isinstance(out, torch.Tensor) or not out.dtype.is_floating_point:
        return None
    args = src.args
    if src.target in _CASTS and isinstance(args[0], Node) and set(src.kwargs) <= {"dtype"} and len(args) <= 2:
        v = meta_val(args[0])
        inner = _picked_through_row_constants(b, args[0], dim, hit)
        if inner is None or not (isinstance(v, torch.Tensor) and v.shape == out.shape and v.dtype.is_floating_point):
            return None
        return b.fd.ops.cast(inner, DataType.from_torch(out.dtype))
    if src.target not in (aten.sub.Tensor, aten.mul.Tensor) or len(args) != 2 or src.kwargs.get("alpha", 1) != 1 \
            or out.dtype not in (torch.float32, torch.float64) or not all(isinstance(a, Node) for a in args):
        return None
    metas = [meta_val(a) for a in args]
    values = [b.values.get(a) for a in args]
    if any(not isinstance(m, torch.Tensor) or m.dtype != out.dtype or m.dim() != out.dim() for m in metas) \
            or any(v is None for v in values):  # (computed outside this fusion)
        return None
    row = [size_expr(m.shape[dim]) == 1 for m in metas]
    whole = [m.shape == out.shape for m in metas]
    ops = b.fd.ops
    if src.target is aten.sub.Tensor:
        if not (whole[0] and row[1]):
            return None
        inner = _picked_through_row_constants(b, args[0], dim, hit)
        return ops.sub(inner if inner is not None else _pick(b, values[0], dim, hit), values[1])
    if row[0] or row[1]:  # a row constant times what varies: picked if that is
        k = 0 if row[1] else 1
        inner = _picked_through_row_constants(b, args[k], dim, hit) if whole[k] else None
        if inner is None:
            return None
        return ops.mul(inner, values[1 - k]) if k == 0 else ops.mul(values[0], inner)
    inners = [_picked_through_row_constants(b, a, dim, hit) if w else None for a, w in zip(args, whole)]
    if inners == [None, None]:
        return None
    a, c = (inner if inner is not None else _pick(b, v, dim, hit) for inner, v in zip(inners, values))
    return ops.mul(a, c)


def _pick(b, value, dim: int, hit):
    return b.fd.ops.sum(b.fd.ops.where(hit, value, 0), [dim], True)


@register(aten.gather.default, kind=Kind.reduction)
def _gather(b, node, x, dim, index, sparse_grad=False):
    """`x.gather(dim, index)` with one index per row picks one element: the sum along `dim` of
    `where(iota == index, x, 0)`, a reduction a kernel fuses with its neighbours (the target
    logit of a cross entropy). Other gathers run through ATen."""
    shape = b.input_meta(node).shape
    dim %= len(shape)
    # (an integer pick could not mark an index out of range: ATen raises for it)
    if not _one_index_per_row(shape, node.args[2], dim) or not b.input_meta(node).dtype.is_floating_point:
        return indexing.gather(b, x, dim, index)  # through ATen
    length = b.size(shape[dim])
    hit = _one_hot(b, shape, node.args[2], dim, length, index, "gather")
    picked = _picked_through_row_constants(b, node.args[0], dim, hit)
    if picked is None:
        picked = _pick(b, x, dim, hit)
    # an index out of range matches no position: eager raises, a fused kernel cannot, so the
    # result is NaN (a NaN loss) rather than a plausible 0
    ops = b.fd.ops
    return ops.where(_in_range(ops, index, length), picked, float("nan"))
