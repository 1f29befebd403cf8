"""Ops that move or create data without arithmetic: broadcast, expand, squeeze, reshape,
permute, slice, pad, cat, set, full, iota. Each checks its arguments and derives the output
extents (symbolic where the input is)."""
from __future__ import annotations

import math
import numbers
from typing import Any, Optional, Sequence

import sympy

from ..errors import FusionDefinitionError, UnsupportedError
from ..ir import (BroadcastOp, CatOp, DataType, ExpandOp, FullOp, IotaOp, IterType,
                  LoadStoreOp, LoadStoreOpType, PadOp, PermuteOp, ReshapeOp, Scalar, SliceOp,
                  SqueezeOp, TensorView, Val, ceilDiv)
from ..ir.printer import format_val
from ..ir.symbolic import normIndex, sliceLen
from ..ir.symbolic import is_static
from .common import as_dim, as_val, check_tensor, copy_id, extent_of, fusion_of, listed, new_tensor, value_dtype
from .pointwise import cast, result_type


def broadcast(tv: TensorView, is_broadcast_dim: Sequence[bool]) -> TensorView:
    check_tensor("broadcast", tv)
    flags = listed("broadcast", "is_broadcast_dim", is_broadcast_dim)
    for b in flags:
        if not _is_flag(b):
            raise FusionDefinitionError(f"broadcast: is_broadcast_dim entries must be True or False, got {b!r} "
                                        f"in {flags}")
    flags = [bool(b) for b in flags]
    if sum(not b for b in flags) != tv.ndim:
        raise FusionDefinitionError(
            f"broadcast: {len(flags)} flags with {sum(not b for b in flags)} kept dims, but "
            f"{tv!r} has {tv.ndim} dims")
    f = tv.fusion
    src = iter(tv.domain.no_reductions())
    ids = [f.new_id(1, iter_type=IterType.Broadcast) if b else copy_id(f, next(src)) for b in flags]
    out = new_tensor(f, ids, tv.dtype)
    f.add_expr(BroadcastOp(inputs=(tv,), outputs=(out,), is_broadcast=tuple(flags)))
    return out


def _is_flag(b: Any) -> bool:
    """True or False, numpy's bool included (a string or a number would count by its truth)."""
    return isinstance(b, bool) or (type(b).__module__ == "numpy" and type(b).__name__ in ("bool", "bool_"))


def broadcast_in_dim(tv: TensorView, shape: Sequence[Any], broadcast_dims: Sequence[int]) -> TensorView:
    op = "broadcast_in_dim"
    check_tensor(op, tv)
    shape = listed(op, "shape", shape)
    bdims = [as_dim(op, d, "broadcast_dims entry") for d in listed(op, "broadcast_dims", broadcast_dims)]
    # a negative output dim counts from the end, as nvFuser wraps it
    bdims = [d + len(shape) if -len(shape) <= d < 0 else d for d in bdims]
    if len(bdims) != tv.ndim:
        raise FusionDefinitionError(
            f"{op}: broadcast_dims has {len(bdims)} entries but {tv!r} has {tv.ndim} dims")
    if len(frozenset(bdims)) != len(bdims) or any(not 0 <= d < len(shape) for d in bdims) or bdims != sorted(bdims):
        raise FusionDefinitionError(
            f"{op}: broadcast_dims {bdims} must be increasing output dims below {len(shape)}")
    out = broadcast(tv, [k not in bdims for k in range(len(shape))]) if len(shape) > tv.ndim else tv
    return expand(out, shape) if _needs_expand(out, shape) else out


def _needs_expand(tv: TensorView, shape) -> bool:
    for d, s in zip(tv.domain.no_reductions(), shape):
        if d.is_broadcast and not (isinstance(s, int) and s in (1, -1)):
            return True
        if not d.is_broadcast and not (isinstance(s, int) and s == -1):
            tv.fusion.unify(d.extent, extent_of(tv.fusion, s, "broadcast_in_dim"),
                            f"broadcast_in_dim: shape entry {s!r} for axis of extent {d.extent}")
    return False


def expand(tv: TensorView, shape: Sequence[Any]) -> TensorView:
    op = "expand"
    check_tensor(op, tv)
    shape = listed(op, "shape", shape)
    if len(shape) != tv.ndim:
        raise FusionDefinitionError(f"{op}: shape has {len(shape)} entries but {tv!r} has {tv.ndim} dims")
    f = tv.fusion
    ids = []
    for k, (d, s) in enumerate(zip(tv.domain.no_reductions(), shape)):
        keep = isinstance(s, int) and s == -1
        if d.is_broadcast and not keep:
            e = extent_of(f, s, op)
            ids.append(f.new_id(1, iter_type=IterType.Broadcast,
                                expanded_extent=None if e == 1 else e))
        else:
            if not keep:
                f.unify(d.extent, extent_of(f, s, op), f"{op}: axis {k} of {tv!r}")
            ids.append(copy_id(f, d))
    out = new_tensor(f, ids, tv.dtype)
    f.add_expr(ExpandOp(inputs=(tv,), outputs=(out,)))
    return out


def squeeze(tv: TensorView, dims: Sequence[int], squeeze_expanded: bool = False) -> TensorView:
    """nvFuser's squeeze: the axes must be broadcasts (or of extent 1); an expanded broadcast
    only with `squeeze_expanded` (its values are one value repeated)."""
    op = "squeeze"
    check_tensor(op, tv)
    n = tv.ndim
    given = _check_dims(op, tv, dims)
    dims = sorted(d % n for d in given)
    if len(frozenset(dims)) != len(dims):  # (as eager's squeeze and the reductions refuse them)
        raise FusionDefinitionError(f"{op}: repeated dims {given} of {tv!r}")
    f = tv.fusion
    ids = []
    for k, d in enumerate(tv.domain.no_reductions()):
        if k in dims:
            if d.expanded_extent is not None and not squeeze_expanded:
                raise FusionDefinitionError(f"{op}: axis {k} of {tv!r} is expanded to {d.expanded_extent} "
                                            f"(squeeze_expanded=True squeezes it)")
            if not d.is_broadcast:
                f.unify(d.extent, sympy.Integer(1), f"{op}: squeezed axis {k} of {tv!r} must have size 1")
        else:
            ids.append(copy_id(f, d))
    out = new_tensor(f, ids, tv.dtype)
    f.add_expr(SqueezeOp(inputs=(tv,), outputs=(out,), dims=tuple(dims)))
    return out


def _check_dims(op: str, tv: TensorView, dims) -> list[int]:
    n = tv.ndim
    dims = [dims] if isinstance(dims, numbers.Integral) else listed(op, "dims", dims)
    dims = [as_dim(op, d) for d in dims]
    for d in dims:
        if not -n <= d < n:
            raise FusionDefinitionError(f"{op}: dim {d} out of range for {tv!r} with {n} dims")
    return dims


def _quotient(numerator: sympy.Expr, denominator: sympy.Expr) -> sympy.Expr:
    """numerator / denominator, exact, in a factored form: sympy divides products of symbols as
    it builds the quotient; sums are cancelled and factored (`simplify` took milliseconds)."""
    q = numerator / denominator
    if sympy.denom(q) != 1:
        q = sympy.cancel(q)
    return sympy.factor(q) if q.is_Add else q


def reshape(tv: TensorView, new_shape: Sequence[Any]) -> TensorView:
    op = "reshape"
    check_tensor(op, tv)
    f = tv.fusion
    new_shape = listed(op, "new_shape", new_shape)
    if sum(1 for s in new_shape if isinstance(s, int) and s == -1) > 1:
        raise FusionDefinitionError(f"{op}: at most one -1 in new_shape {new_shape}")
    in_numel = math.prod([d.size for d in tv.domain.no_reductions()], start=sympy.Integer(1))
    known = [extent_of(f, s, op) for s in new_shape if not (isinstance(s, int) and s == -1)]
    known_numel = math.prod(known, start=sympy.Integer(1))
    extents = []
    for s in new_shape:
        if isinstance(s, int) and s == -1:
            if known_numel == 0:
                raise FusionDefinitionError(f"{op}: cannot infer -1 in {new_shape} with zero elements")
            e = _quotient(in_numel, known_numel)
            if is_static(in_numel) and is_static(known_numel):
                if int(in_numel) % int(known_numel):
                    raise FusionDefinitionError(f"{op}: cannot reshape {in_numel} elements into {new_shape}")
            elif sympy.denom(e) != 1:  # (checked when the inputs are bound)
                f.divisible.append((in_numel, known_numel, f"{op} of {tv!r} to {new_shape}"))
            extents.append(e)
        else:
            extents.append(extent_of(f, s, op))
    # the ids first: unifying the element counts may replace a symbol of `extents` everywhere
    # in the fusion, these ids included (made after, they kept a symbol no input binds)
    # a size-1 entry is a broadcast axis (nvFuser's reshape makes it one): later ops may
    # expand it, as broadcast_in_dim(reshape(x, [3, 4, 1]), [3, 4, 5]) does
    ids = [f.new_id(e, iter_type=IterType.Broadcast if e == 1 else IterType.Iteration) for e in extents]
    out_numel = math.prod(extents, start=sympy.Integer(1))
    # expand, not simplify: products of extents cancel after expansion, and simplify's search
    # cost milliseconds per reshape (most of a model's lowering time)
    if sympy.expand(out_numel - in_numel) != 0:
        f.unify(in_numel, out_numel, f"{op}: {tv!r} has {in_numel} elements, new shape {out_numel}")
    out = new_tensor(f, ids, tv.dtype)
    f.add_expr(ReshapeOp(inputs=(tv,), outputs=(out,)))
    return out


def permute(tv: TensorView, dims: Sequence[int]) -> TensorView:
    op = "permute"
    check_tensor(op, tv)
    n = tv.ndim
    dims = [d % n if n else d for d in _check_dims(op, tv, listed(op, "dims", dims))]
    if sorted(dims) != list(range(n)):
        raise FusionDefinitionError(f"{op}: dims {list(dims)} is not a permutation of {n} dims of {tv!r}")
    f = tv.fusion
    src = tv.domain.no_reductions()
    out = new_tensor(f, [copy_id(f, src[d]) for d in dims], tv.dtype)
    f.add_expr(PermuteOp(inputs=(tv,), outputs=(out,), dims=tuple(dims)))
    return out


def slice(tv: TensorView, start_indices: Sequence[Any], end_indices: Sequence[Any],
          strides: Optional[Sequence[Any]] = None, manual_normalization: bool = False) -> TensorView:
    op = "slice"
    check_tensor(op, tv)
    n = tv.ndim
    start_indices, end_indices = listed(op, "start_indices", start_indices), listed(op, "end_indices", end_indices)
    strides = listed(op, "strides", strides) if strides is not None else [1] * len(start_indices)
    if not len(start_indices) == len(end_indices) == len(strides) == n:
        raise FusionDefinitionError(
            f"{op}: start, end and strides need {n} entries for {tv!r}, got "
            f"{len(start_indices)}, {len(end_indices)}, {len(strides)}")
    f = tv.fusion
    ids, bounds = [], []
    for k, (d, a, b, s) in enumerate(zip(tv.domain.no_reductions(), start_indices, end_indices, strides)):
        if not isinstance(s, int) or s < 1:
            raise FusionDefinitionError(f"{op}: stride {s!r} of axis {k} must be a positive int")
        ext = d.size
        lo, hi = (_normalize_index(f, v, ext, op) for v in (a, b))
        hi = hi if _at_most(lo, hi) else sympy.Max(lo, hi)
        length = ceilDiv(sliceLen(_raw_index(a), _raw_index(b), ext), sympy.Integer(s))
        ids.append(f.new_id(length, iter_type=IterType.Broadcast if d.is_broadcast and length == 1
                            else IterType.Iteration))  # an expanded axis sliced: a real axis
        bounds += [_int_scalar(f, lo), _int_scalar(f, hi), f.new_scalar(DataType.Int, value=s)]
    out = new_tensor(f, ids, tv.dtype)
    f.add_expr(SliceOp(inputs=(tv, *bounds), outputs=(out,)))
    return out


def _at_most(lo, hi) -> bool:
    """lo <= hi known without Max: x[i:] (a bound clamped into [0, n] below n), x[:n], x[0:]."""
    if lo == 0 or lo == hi or (lo.is_Integer and hi.is_Integer and lo <= hi):
        return True
    return isinstance(lo, normIndex) and lo.args[1] == hi


def _int_scalar(f, e) -> Scalar:
    """A bound: a constant where it is a number (kernels then take it as a literal)."""
    return f.new_scalar(DataType.Int, value=int(e)) if e.is_Integer else f.new_scalar(DataType.Int, expr=e)


def _normalize_index(f, v, ext, op):
    """PyTorch's slicing rules: negative counts from the end, then clamp to [0, extent]."""
    if isinstance(v, Scalar):
        if not v.dtype.is_integral:  # (as a Python 1.5: a Double's start made an extent of 4.5)
            raise FusionDefinitionError(f"{op}: index {v!r} must be an int or an integer scalar, got a "
                                        f"scalar of {v.dtype}")
        return normIndex(v.expr, ext)
    if isinstance(v, bool) or not isinstance(v, int):
        raise FusionDefinitionError(f"{op}: index {v!r} must be an int or an integer scalar")
    return sympy.Max(ext + v, 0) if v < 0 else sympy.Min(v, ext)


def _raw_index(v) -> sympy.Expr:
    return v.expr if isinstance(v, Scalar) else sympy.Integer(v)


def pad(tv: TensorView, pad_widths: Sequence[int], value: Any = None) -> TensorView:
    op = "pad"
    check_tensor(op, tv)
    # a defined scalar whose value is known (computed from constants) counts as its value
    widths = [w.value if isinstance(w, Scalar) and w.value is not None and w.dtype.is_integral else w
              for w in listed(op, "pad_widths", pad_widths)]
    if len(widths) % 2 or len(widths) // 2 > tv.ndim:
        raise FusionDefinitionError(
            f"{op}: pad_widths {widths} needs an even count, at most 2 x {tv.ndim} for {tv!r}")
    for w in widths:
        if isinstance(w, bool) or not isinstance(w, int):
            raise FusionDefinitionError(f"{op}: pad widths must be ints or integer scalars of a known value, "
                                        f"got {widths}")
    f = tv.fusion
    if any(w < 0 for w in widths):  # a negative width crops (as nvFuser's and F.pad's): a slice first
        tv = _crop(tv, widths)
        widths = [max(w, 0) for w in widths]
    if isinstance(value, TensorView):  # (nvFuser's value is a scalar; a tensor read out of bounds)
        raise FusionDefinitionError(f"{op}: value must be a scalar, got the tensor {value!r}")
    value = _fill_value(f, 0 if value is None else value, tv.dtype, op)
    ids = [copy_id(f, d) for d in tv.domain.no_reductions()]
    for k in range(len(widths) // 2):
        axis = tv.ndim - 1 - k
        extra = widths[2 * k] + widths[2 * k + 1]
        if extra:
            ids[axis] = f.new_id(ids[axis].size + extra)
    width_vals = [f.new_scalar(DataType.Int, value=w) for w in widths]
    out = new_tensor(f, ids, tv.dtype)
    f.add_expr(PadOp(inputs=(tv, value, *width_vals), outputs=(out,)))
    return out


def _crop(tv: TensorView, widths: list[int]) -> TensorView:
    """`tv` without the elements negative pad widths remove (widths[2k], widths[2k + 1]: the
    low and high side of axis ndim - 1 - k)."""
    f = tv.fusion
    starts, ends = [], []
    for axis, d in enumerate(tv.domain.no_reductions()):
        k = tv.ndim - 1 - axis
        lo, hi = (widths[2 * k], widths[2 * k + 1]) if 2 * k < len(widths) else (0, 0)
        lo_cut, hi_cut = max(-lo, 0), max(-hi, 0)
        if is_static(d.size) and lo_cut + hi_cut > int(d.size):
            raise FusionDefinitionError(f"pad: widths {widths} crop {lo_cut + hi_cut} elements from axis {axis} "
                                        f"of {tv!r}, which has {d.size}")
        if lo_cut + hi_cut:  # (as F.pad refuses to crop more than there is)
            f.add_size_check(d.size - lo_cut - hi_cut, f"pad: axis {axis} of T{tv.name} cropped by widths {widths}:")
        starts.append(lo_cut)
        ends.append(f.extent_scalar(d.size - hi_cut) if hi_cut else f.extent_scalar(d.size))
    return slice(tv, starts, ends, manual_normalization=True)


def cat(tensors: Sequence[TensorView], dim: int = 0, manual_padding: bool = False) -> TensorView:
    """nvFuser's cat; with `manual_padding` each input is already padded to the output's extent
    along `dim` (nvFuser's printed definitions pad first), and each position takes the input
    whose un-padded region covers it: the cat of the pads' sources, which is what is built."""
    op = "cat"
    tensors = listed(op, "tensors", tensors)
    if not tensors:
        raise FusionDefinitionError(f"{op}: needs at least one tensor")
    for t in tensors:
        check_tensor(op, t)
    f = fusion_of(op, *tensors)
    n = tensors[0].ndim
    if any(t.ndim != n for t in tensors):
        raise FusionDefinitionError(f"{op}: all tensors need {n} dims, got {[t.ndim for t in tensors]}")
    dim = _check_dims(op, tensors[0], [dim])[0] % n
    if manual_padding and len(tensors) > 1:  # (one input: nvFuser's cat is a set of it, pad and all)
        tensors = _pad_sources(f, tensors, dim)
    dtype = result_type(*tensors)
    ids = []
    for k in range(n):
        dims = [t.domain.no_reductions()[k] for t in tensors]
        if k == dim:
            ids.append(f.new_id(_joined_size([d.size for d in dims])))
        else:
            e = dims[0].size
            for other in dims[1:]:
                e = f.unify(e, other.size, f"{op}: axis {k} of the inputs")
            ids.append(f.new_id(e))
    out = new_tensor(f, ids, dtype)
    f.add_expr(CatOp(inputs=tuple(tensors), outputs=(out,), dim=dim))
    return out


def _pad_sources(f, padded: list[TensorView], dim: int) -> list[TensorView]:
    """The tensors each of `padded` pads, where the pads tile axis `dim` exactly: all padded to
    one extent, the first with nothing before its source, each next one's source starting where
    the previous one's ends, the last with nothing after it. Other axes unpadded."""
    op = "cat(manual_padding=True)"
    size = lambda t: t.domain.no_reductions()[dim].size  # noqa: E731  (read afresh: unify may substitute)
    for k, t in enumerate(padded[1:], 1):
        f.unify(size(padded[0]), size(t),
                f"{op}: every input must be padded to the output's extent along dim {dim}; input {k} {t!r} "
                f"has {size(t)}, input 0 {padded[0]!r} has {size(padded[0])}")
    sources, start = [], sympy.Integer(0)
    for k, t in enumerate(padded):
        src, (before, after) = _unpadded(f, op, k, t, dim)
        start = f.unify(start, sympy.Integer(before),
                        f"{op}: input {k} {t!r} pads {before} before its source along dim {dim}, but the inputs "
                        f"before it cover {start}: the sources must tile the axis in order")
        if k == len(padded) - 1 and after != 0:
            raise FusionDefinitionError(
                f"{op}: the last input {t!r} pads {after} after its source along dim {dim}; the sources must "
                f"end at the output's end, so its padding after must be 0")
        sources.append(src)
        start = start + size(src)
    return sources


def _unpadded(f, op: str, k: int, t: TensorView, dim: int) -> tuple[TensorView, tuple[int, int]]:
    """The source of `t`, the padded input `k` of a cat along `dim`, and its pad widths there."""
    made = f.definition_of(t)
    if not isinstance(made, PadOp):
        raise FusionDefinitionError(
            f"{op}: input {k} {t!r} is not a pad's output; each input must be padded along dim {dim} "
            f"to the output's extent (or leave manual_padding False)")
    widths = [int(w.value) for w in made.inputs[2:]]  # (last axis first, as F.pad's)
    at = 2 * (t.ndim - 1 - dim)
    along = tuple(widths[at:at + 2]) if at < len(widths) else (0, 0)
    if any(widths[:at] + widths[at + 2:]):
        raise FusionDefinitionError(
            f"{op}: input {k} {t!r} is padded by {widths}, on axes other than dim {dim} too; "
            f"only dim {dim} may be padded")
    return made.inputs[0], along


def _joined_size(sizes: list) -> sympy.Expr:
    """The sum of a cat's pieces' sizes, where a piece x[:a] meets x[a:] (a rotate,
    `cat([x[a:], x[:a]])`) the extent n itself: min(a, n) + max(n - a, 0), which sympy leaves
    as written, is n for every n (a dynamic rotate's sizes grew per level, not staying n)."""
    terms = list(sizes)
    for i, low in enumerate(terms):
        if not (isinstance(low, sympy.Min) and len(low.args) == 2):
            continue
        for j, high in enumerate(terms):
            rest = _max_with_zero(high)
            if rest is None:
                continue
            whole = next((n for a, n in (low.args, low.args[::-1]) if sympy.expand(rest - (n - a)) == 0), None)
            if whole is not None:
                left = [t for k, t in enumerate(terms) if k not in (i, j)]
                return _joined_size(left + [whole])
    return sum(terms, sympy.Integer(0))


def _max_with_zero(e):
    """`e` of max(e, 0), else None."""
    if isinstance(e, sympy.Max) and len(e.args) == 2 and sympy.Integer(0) in e.args:
        return e.args[0] if e.args[1] == 0 else e.args[1]
    return None


def set(tv: TensorView, kind: LoadStoreOpType = LoadStoreOpType.set) -> TensorView:  # noqa: A001
    if not isinstance(kind, LoadStoreOpType):
        raise FusionDefinitionError(f"set: kind must be a LoadStoreOpType, got {kind!r}")
    if kind is LoadStoreOpType.set and isinstance(tv, (Scalar, bool, int, float, complex)):
        # (nvFuser's set of a scalar, or of a number: its copy, a Val of the definition)
        tv = as_val(fusion_of(kind.value, tv), tv, kind.value)
        return tv.fusion.new_scalar(tv.dtype, value=tv.value, expr=None if tv.is_constant else tv.expr)
    check_tensor(kind.value, tv)
    f = tv.fusion
    out = new_tensor(f, [copy_id(f, d) for d in tv.domain.no_reductions()], tv.dtype)
    f.add_expr(LoadStoreOp(inputs=(tv,), outputs=(out,), kind=kind))
    return out


def segment_set(tv: TensorView) -> TensorView:
    return set(tv, LoadStoreOpType.segment_set)


def full(fusion, shape: Sequence[Any], fill_value: Any, dtype: DataType) -> TensorView:
    op = "full"
    dtype = value_dtype(op, dtype)
    if dtype.is_opaque:
        raise UnsupportedError(f"{op}: torch cannot fill a tensor of {dtype!r}")
    if isinstance(fill_value, TensorView):  # (nvFuser's fill_value is a scalar)
        raise FusionDefinitionError(f"{op}: fill_value must be a scalar, got the tensor {fill_value!r}")
    ids = [fusion.new_id(extent_of(fusion, s, op)) for s in listed(op, "shape", shape)]
    out = new_tensor(fusion, ids, dtype)
    fill = _fill_value(fusion, fill_value, dtype, op)
    fusion.add_expr(FullOp(inputs=(fill,), outputs=(out,)))
    return out


def _fill_value(fusion, value: Any, dtype: DataType, op: str) -> Val:
    """A fill of an integer or Bool tensor converted as a cast converts it, which checks it: a
    known NaN or a number past the type's range is a FusionDefinitionError (a kernel wrapped
    2**40 into an Int32 as 0), an input's value at each execution."""
    fill = as_val(fusion, value, op)
    if fill.dtype.is_complex and not dtype.is_complex:  # (a cast would drop its imaginary part)
        raise FusionDefinitionError(f"{op}: the fill value {format_val(fill)} is complex, which a {dtype} result "
                                    f"cannot hold (eager refuses it too)")
    if fill.dtype is not dtype and not (dtype.is_floating or dtype.is_complex or fill.dtype.is_complex):
        try:
            return cast(fill, dtype)
        except FusionDefinitionError as err:
            raise FusionDefinitionError(f"{op}: the fill value {format_val(fill)} does not fit {dtype} ({err})") from None
    return fill


def iota(fusion, length: Any, start: Any = None, step: Any = None,
         dtype: DataType = DataType.Int) -> TensorView:
    op = "iota"
    dtype = value_dtype(op, dtype)
    if dtype is DataType.Bool:  # (as torch.arange refuses it: a range of bools is no range)
        raise FusionDefinitionError(f"{op}: dtype must be an integer or floating DataType, got {dtype!r}")
    n = extent_of(fusion, length, op)
    vals = (as_val(fusion, length, op), as_val(fusion, 0 if start is None else start, op),
            as_val(fusion, 1 if step is None else step, op))
    for name, v in (("start", vals[1]), ("step", vals[2])):
        # nvFuser's rules: a start or step of the iota's kind (an Int iota of start 0.5 held
        # 0.5 in a kernel and 0 through ATen), finite, and a step other than 0
        if (v.dtype.is_complex and not dtype.is_complex) or (v.dtype.is_floating and dtype.is_integral):
            raise FusionDefinitionError(f"{op}: {name} {format_val(v)} is {v.dtype}, which an iota of "
                                        f"{dtype} cannot take; give an integer {name}")
        if isinstance(v, Scalar) and v.is_constant and not v.dtype.is_complex and (
                not math.isfinite(v.value) or (name == "step" and v.value == 0)):
            raise FusionDefinitionError(f"{op}: {name} must be finite" + (" and not 0" if name == "step" else "")
                                        + f", got {v.value!r}")
        if isinstance(v, Scalar) and not v.is_constant and not v.dtype.is_complex:
            fusion.finite.append((v.expr, f"{op}: {name}", "nonzero" if name == "step" else "finite"))  # (each execution)
    out = new_tensor(fusion, [fusion.new_id(n)], dtype)
    fusion.add_expr(IotaOp(inputs=vals, outputs=(out,)))
    return out
