"""Indexing ops with nvFuser's names and argument order: index_select, select, gather,
take_along_axis, scatter and embedding_fwd. Their values follow torch.index_select, torch.select,
torch.gather, torch.take_along_dim, torch.scatter and F.embedding. None of them becomes a
generated kernel: the segmenter sends them to ATen, between the kernels of their neighbours.

Index values are data, so their range is checked when ATen runs (a FusionInputError naming
the op); here only shapes and dtypes are. An index lies in [0, n) as torch.gather's (a negative
index too is refused: torch.take_along_dim reads one, and one past n, unchecked)."""
from __future__ import annotations

import math
from typing import Any

import sympy

from ..errors import FusionDefinitionError
from ..ir import (DataType, EmbeddingFwdOp, GatherOp, IndexSelectOp, IterDomain, IterType, Scalar,
                  ScatterOp, SelectOp, TensorView)
from ..ir.printer import format_val
from ..ir.types import int_range
from .common import as_dim, as_val, check_tensor, copy_id, fusion_of, new_tensor


def _check_index(op: str, index: Any, what: str = "index") -> None:
    dtype = index.dtype
    if dtype not in (DataType.Int, DataType.Int32, DataType.Index):  # (as ATen's index ops: no uint64)
        raise FusionDefinitionError(
            f"{op}: {what} {index!r} must have an integer dtype (DataType.Int or DataType.Int32), "
            f"got {dtype!r}")


def _dim(op: str, tv: TensorView, dim: Any, what: str = "input") -> int:
    """`dim` wrapped into [0, ndim) of `tv`, which must have at least one dim."""
    n = tv.ndim
    if n == 0:
        raise FusionDefinitionError(f"{op}: {what} {tv!r} is 0-D; it needs at least one dim")
    dim = as_dim(op, dim)
    if not -n <= dim < n:
        raise FusionDefinitionError(
            f"{op}: dim {dim} is out of range for {what} {tv!r} with {n} dims "
            f"(expected {-n} <= dim < {n})")
    return dim % n


def _same_rank(op: str, *named: tuple[str, TensorView]) -> None:
    ranks = {name: tv.ndim for name, tv in named}
    if len(set(ranks.values())) > 1:
        listed = ", ".join(f"{name} has {r}" for name, r in ranks.items())
        raise FusionDefinitionError(f"{op}: the tensors must have the same number of dims; {listed}")


def _not_longer(op: str, short: IterDomain, long: IterDomain, axis: int, what: str) -> None:
    """A static extent of an index axis larger than the static extent it indexes along: ATen
    would refuse it at every execution, so it is a definition error now."""
    a, b = short.size, long.size
    if isinstance(a, sympy.Integer) and isinstance(b, sympy.Integer) and a > b:
        raise FusionDefinitionError(f"{op}: axis {axis} of {what} is {a}, longer than {b}")


def index_select(arg: TensorView, index: TensorView, dim: int) -> TensorView:
    op = "index_select"
    check_tensor(op, arg, "arg")
    check_tensor(op, index, "index")
    f = fusion_of(op, arg, index)
    _check_index(op, index)
    dim = _dim(op, arg, dim, "arg")
    ids = arg.domain.no_reductions()
    idx = index.domain.no_reductions()
    if index.ndim == 0:
        along = f.new_id(1, iter_type=IterType.Broadcast)  # torch keeps the axis, of length 1
    elif index.ndim == 1:
        along = copy_id(f, idx[0])
    elif index.ndim == arg.ndim and all(d.is_broadcast for k, d in enumerate(idx) if k != dim):
        along = copy_id(f, idx[dim])  # (nvFuser's form of an index already broadcast to arg's rank)
    else:
        raise FusionDefinitionError(
            f"{op}: index {index!r} must be 0-D or 1-D (or broadcast on every axis but dim {dim})")
    out_ids = [along if k == dim else copy_id(f, d) for k, d in enumerate(ids)]
    out = new_tensor(f, out_ids, arg.dtype)
    f.add_expr(IndexSelectOp(inputs=(arg, index), outputs=(out,), dim=dim))
    return out


def select(arg: TensorView, index: Any, dim: int) -> TensorView:
    op = "select"
    check_tensor(op, arg, "arg")
    f = fusion_of(op, arg, *([index] if isinstance(index, Scalar) else []))
    if isinstance(index, bool) or not isinstance(index, (int, Scalar)):  # (a tensor is not one)
        raise FusionDefinitionError(f"{op}: index must be an integer scalar or an int, got {index!r}")
    index = as_val(f, index, op)
    _check_index(op, index)
    dim = _dim(op, arg, dim, "arg")
    out_ids = [copy_id(f, d) for k, d in enumerate(arg.domain.no_reductions()) if k != dim]
    out = new_tensor(f, out_ids, arg.dtype)
    f.add_expr(SelectOp(inputs=(arg, index), outputs=(out,), dim=dim))
    return out


def gather(arg: TensorView, index: TensorView, dim: int) -> TensorView:
    """Shaped as the index, which on the other axes may be shorter than `arg` (torch.gather)."""
    op = "gather"
    f = _gather_operands(op, arg, index)
    dim = _dim(op, arg, dim, "arg")
    _index_within(op, arg, index, dim)
    out = new_tensor(f, [copy_id(f, d) for d in index.domain.no_reductions()], arg.dtype)
    f.add_expr(GatherOp(inputs=(arg, index), outputs=(out,), dim=dim))
    return out


def take_along_axis(arg: TensorView, index: TensorView, dim: int) -> TensorView:
    """gather whose other axes are the same extents in `arg` and `index` (unified), or a
    broadcast in one of them (torch.take_along_dim broadcasts it)."""
    op = "take_along_axis"
    f = _gather_operands(op, arg, index)
    dim = _dim(op, arg, dim, "arg")
    out_ids = []
    for k, (a, i) in enumerate(zip(arg.domain.no_reductions(), index.domain.no_reductions())):
        # nvFuser's choice: the index's axis along dim, where arg's is a broadcast the index's
        # is not, and where both are broadcasts but the index's is expanded; else arg's
        if k == dim or (a.is_broadcast and (not i.is_broadcast or i.expanded_extent is not None)):
            out_ids.append(copy_id(f, i))
            continue
        if not a.is_broadcast and not i.is_broadcast:
            f.unify(a.extent, i.extent, f"{op}: axis {k} of arg {arg!r} and of index {index!r}")
        out_ids.append(copy_id(f, a))
    out = new_tensor(f, out_ids, arg.dtype)
    f.add_expr(GatherOp(inputs=(arg, index), outputs=(out,), dim=dim, take_along_axis=True))
    return out


def _index_within(op: str, arg: TensorView, index: TensorView, dim: int) -> None:
    """The index no longer than `arg` on every axis but `dim` (torch.gather's and scatter's rule)."""
    for k, (a, i) in enumerate(zip(arg.domain.no_reductions(), index.domain.no_reductions())):
        if k != dim:
            _not_longer(op, i, a, k, f"index {index!r} (arg {arg!r})")


def _gather_operands(op: str, arg: Any, index: Any):
    check_tensor(op, arg, "arg")
    check_tensor(op, index, "index")
    f = fusion_of(op, arg, index)
    _check_index(op, index)
    _same_rank(op, ("arg", arg), ("index", index))
    return f


def scatter(arg: TensorView, index: TensorView, src: Any, dim: int) -> TensorView:
    """`arg` with `src` (a tensor of arg's dtype, or a scalar) written where the index points;
    the index may be shorter than `arg` on the other axes and than `src` on every axis."""
    op = "scatter"
    check_tensor(op, arg, "arg")
    check_tensor(op, index, "index")
    f = fusion_of(op, arg, index, *([src] if isinstance(src, (TensorView, Scalar)) else []))
    _check_index(op, index)
    if isinstance(src, TensorView):
        _same_rank(op, ("arg", arg), ("index", index), ("src", src))
        if src.dtype is not arg.dtype:
            raise FusionDefinitionError(
                f"{op}: src {src!r} must have arg's dtype {arg.dtype!r}, got {src.dtype!r}")
    else:
        _same_rank(op, ("arg", arg), ("index", index))
        src = as_val(f, src, op)
        _check_scalar_src(op, src, arg.dtype)
    dim = _dim(op, arg, dim, "arg")
    _index_within(op, arg, index, dim)
    if isinstance(src, TensorView):
        for k, (i, d) in enumerate(zip(index.domain.no_reductions(), src.domain.no_reductions())):
            _not_longer(op, i, d, k, f"index {index!r} (src {src!r})")
    out = new_tensor(f, [copy_id(f, d) for d in arg.domain.no_reductions()], arg.dtype)
    f.add_expr(ScatterOp(inputs=(arg, index, src), outputs=(out,), dim=dim))
    return out


def _check_scalar_src(op: str, src: Scalar, dtype: DataType) -> None:
    """Refuse a scalar src that arg's dtype cannot hold, which eager's scatter refuses at every
    call ("value cannot be converted ... without overflow"), and which ATen's error then blamed
    on the index: a complex one for a real arg (as a complex fill of a real tensor is refused),
    and a number known now past the dtype's range. A scalar input's value is checked when
    ATen runs (evaluate/aten.py)."""
    if src.dtype.is_complex and not dtype.is_complex:
        raise FusionDefinitionError(f"{op}: src is the complex scalar {format_val(src)}, which a {dtype} arg "
                                    f"cannot hold (eager refuses it too); give a real src, or complex tensors")
    if src.value is None or dtype.is_boolean:  # (any number converts to a bool)
        return
    parts = (src.value.real, src.value.imag) if isinstance(src.value, complex) else (src.value,)
    if not all(_holds(dtype, v) for v in parts):
        raise FusionDefinitionError(f"{op}: src {src.value} does not fit arg's dtype {dtype}: expected "
                                    f"{_holdable(dtype)} (eager refuses it too)")


def _holds(dtype: DataType, v) -> bool:
    """Whether a real number converts to `dtype` without overflow, by eager's rule: a floating
    dtype holds inf and NaN but no finite number past its largest; an integer one only finite
    numbers within its range (a float just past it neither)."""
    if dtype.is_floating or dtype.is_complex:
        return not math.isfinite(v) or abs(v) <= _largest(dtype)
    low, high = int_range(dtype)
    return math.isfinite(v) and low <= v <= high - 1


def _holdable(dtype: DataType) -> str:
    if dtype.is_floating or dtype.is_complex:
        return f"inf, NaN or a number within +-{_largest(dtype):g}"
    low, high = int_range(dtype)
    return f"a finite number in [{low}, {high - 1}]"


def _largest(dtype: DataType) -> float:
    import torch  # lazily, as int_range: ops build IR and run no torch code

    return torch.finfo(dtype.to_torch()).max


def embedding_fwd(input: TensorView, weight: TensorView, padding_idx: Any = None,
                  max_norm: Any = None, norm_type: Any = None, scale_grad_by_freq: Any = None,
                  sparse: Any = None) -> TensorView:
    """Rows of `weight` [num_embeddings, embedding_dim] at the indices: input's shape +
    [embedding_dim], weight's dtype. The scalars are F.embedding's (forward values depend on
    max_norm and norm_type only)."""
    op = "embedding_fwd"
    check_tensor(op, input, "input")
    check_tensor(op, weight, "weight")
    scalars = {"padding_idx": padding_idx, "max_norm": max_norm, "norm_type": norm_type,
               "scale_grad_by_freq": scale_grad_by_freq, "sparse": sparse}
    for name, v in scalars.items():
        if isinstance(v, TensorView):
            raise FusionDefinitionError(f"{op}: {name} must be a scalar, got {v!r}")
    f = fusion_of(op, input, weight, *[v for v in scalars.values() if isinstance(v, Scalar)])
    _check_index(op, input, "input")
    if input.ndim == 0:
        raise FusionDefinitionError(f"{op}: input {input!r} is 0-D; it needs at least one dim")
    if weight.ndim != 2:
        raise FusionDefinitionError(
            f"{op}: weight {weight!r} must be 2-D [num_embeddings, embedding_dim], has {weight.ndim} dims")
    attrs = [as_val(f, 2.0 if norm_type is None else norm_type, op),
             as_val(f, False if scale_grad_by_freq is None else scale_grad_by_freq, op),
             as_val(f, False if sparse is None else sparse, op)]
    attrs += [as_val(f, v, op) for v in (padding_idx, max_norm) if v is not None]
    if padding_idx is not None:
        _check_index(op, attrs[3], "padding_idx")
    out_ids = [copy_id(f, d) for d in input.domain.no_reductions()]
    out_ids.append(copy_id(f, weight.domain.no_reductions()[1]))
    out = new_tensor(f, out_ids, weight.dtype)
    f.add_expr(EmbeddingFwdOp(inputs=(input, weight, *attrs), outputs=(out,),
                              has_padding_idx=padding_idx is not None, has_max_norm=max_norm is not None))
    return out
