"""grouped_mm (the MoE grouped matmul) and scaled_mm (a matmul of scaled, typically fp8,
operands). Like matmul, both run in ATen evaluator segments; their outputs keep the contraction
as a trailing reduction IterDomain (absent where K is a broadcast), as nvFuser's do.

grouped_mm's layouts, with `offsets` [g] the int32 cumulative ends of the groups:
    [m, k] x [k, n]    -> [g, m, n]   groups split k
    [g, m, k] x [k, n] -> [m, n]      groups split n (mat1 holds one [m, k] matrix per group)
    [m, k] x [g, k, n] -> [m, n]      groups split m (mat2 holds one [k, n] matrix per group)
"""
from __future__ import annotations

from typing import Optional

from ..errors import FusionDefinitionError, UnsupportedError
from ..ir import DataType, GroupedMmOp, IterDomain, IterType, ScaledMmOp, TensorView
from .common import check_tensor, copy_id, fusion_of, given_dtype, new_tensor

_UNSCALABLE = (DataType.Float8_e8m0fnu, DataType.Float4_e2m1fn, DataType.Float4_e2m1fn_x2)


def _check_operands(op: str, mat1: TensorView, mat2: TensorView, scaled: bool) -> None:
    """Both floating and of one dtype; fp8 only where scales come with them (torch multiplies
    fp8 only through its scaled matmuls)."""
    for name, t in (("mat1", mat1), ("mat2", mat2)):
        check_tensor(op, t, name)
        if t.dtype.category != 2 or t.dtype in _UNSCALABLE or (t.dtype.is_float8 and not scaled):
            what = "a floating dtype" + ("" if scaled else " (fp8 takes scale1 and scale2)")
            raise FusionDefinitionError(f"{op}: {name} must have {what}, got {t!r}")
    if mat1.dtype is not mat2.dtype:
        raise FusionDefinitionError(f"{op}: mat1 and mat2 must share a dtype, got {mat1!r} and {mat2!r}")


def _check_float_tensor(op: str, name: str, t: TensorView) -> None:
    check_tensor(op, t, name)
    if t.dtype is not DataType.Float:
        raise FusionDefinitionError(f"{op}: {name} must be a Float (fp32) tensor, got {t!r}")


def _out_dtype(op: str, dtype, default: DataType) -> DataType:
    out = given_dtype(op, dtype) or default
    if out.category != 2 or out in _UNSCALABLE:
        raise FusionDefinitionError(f"{op}: dtype must be a floating DataType, got {out!r}")
    return out


def _contraction(op: str, mat1: TensorView, mat2: TensorView) -> Optional[IterDomain]:
    """The output's reduction axis over K, after unifying mat1's and mat2's K; None where K is a
    broadcast in both (nvFuser: no reduction axis then)."""
    k1, k2 = mat1.domain.no_reductions()[-1], mat2.domain.no_reductions()[-2]
    if k1.is_broadcast != k2.is_broadcast:
        raise FusionDefinitionError(f"{op}: K must be a broadcast in both mat1 and mat2 or in neither, "
                                    f"got {mat1!r} and {mat2!r}")
    f = mat1.fusion
    k = f.unify(k1.size, k2.size, f"{op}: K (the last axis of mat1 {mat1!r} and the second to last "
                                  f"of mat2 {mat2!r})")
    return None if k1.is_broadcast else f.new_id(k, iter_type=IterType.Reduction)


def _check_scale(op: str, name: str, scale: TensorView, expected: list, k_axis: int) -> None:
    """`scale` has one axis per entry of `expected` (IterDomains it must match), with the K
    position `k_axis` a broadcast: one scale per row of mat1 / per column of mat2 and group."""
    _check_float_tensor(op, name, scale)
    ids = scale.domain.no_reductions()
    if len(ids) != len(expected) or not ids[k_axis].is_broadcast:
        raise FusionDefinitionError(f"{op}: {name} must have {len(expected)} axes with axis {k_axis % len(expected)} "
                                    f"of size 1 (K), got {scale!r}")
    for k, (d, want) in enumerate(zip(ids, expected)):
        if k != k_axis % len(expected):
            scale.fusion.unify(d.size, want.size, f"{op}: axis {k} of {name} {scale!r}")


def grouped_mm(mat1: TensorView, mat2: TensorView, offsets: TensorView,
               scale1: Optional[TensorView] = None, scale2: Optional[TensorView] = None,
               alpha: Optional[TensorView] = None, bias: Optional[TensorView] = None,
               beta: Optional[TensorView] = None, dtype: Optional[DataType] = None,
               output_block_scale_size: int = 0, output_block_scale_dtype: DataType = DataType.BFloat16,
               output_gamma: bool = False):
    """nvFuser's two overloads: (mat1, mat2, offsets) gives the output, of mat1's dtype; with
    scale1 and scale2 (fp32, dequantizing mat1 per row and mat2 per column, per group) it gives
    (output, None, None), of `dtype` (default BFloat16)."""
    op = "grouped_mm"
    scaled = scale1 is not None or scale2 is not None
    if not scaled and (alpha, bias, beta, dtype) != (None, None, None, None):
        raise FusionDefinitionError(f"{op}: alpha, bias, beta and dtype belong to the scaled form, "
                                    f"which takes scale1 and scale2 as well")
    if scaled and (scale1 is None or scale2 is None):
        raise FusionDefinitionError(f"{op}: scale1 and scale2 must be given together")
    _check_unsupported_outputs(op, alpha, bias, beta, output_block_scale_size, output_gamma)
    _check_operands(op, mat1, mat2, scaled)
    check_tensor(op, offsets, "offsets")
    f = fusion_of(op, mat1, mat2, offsets, *[s for s in (scale1, scale2) if s is not None])
    if offsets.ndim != 1 or offsets.dtype is not DataType.Int32:
        raise FusionDefinitionError(f"{op}: offsets must be a 1-D Int32 tensor (the cumulative group "
                                    f"ends), got {offsets!r}")
    a, b, (g,) = (t.domain.no_reductions() for t in (mat1, mat2, offsets))
    if (len(a), len(b)) == (2, 2):
        out_ids = [copy_id(f, g), copy_id(f, a[0]), copy_id(f, b[1])]
    elif (len(a), len(b)) == (3, 2):
        f.unify(a[0].size, g.size, f"{op}: the groups of mat1 {mat1!r} and of offsets {offsets!r}")
        out_ids = [copy_id(f, a[1]), copy_id(f, b[1])]
    elif (len(a), len(b)) == (2, 3):
        f.unify(b[0].size, g.size, f"{op}: the groups of mat2 {mat2!r} and of offsets {offsets!r}")
        out_ids = [copy_id(f, a[0]), copy_id(f, b[2])]
    else:
        raise FusionDefinitionError(f"{op}: mat1 and mat2 must be 2-D x 2-D, 3-D x 2-D or 2-D x 3-D "
                                    f"(two 3-D operands: use matmul), got {mat1!r} and {mat2!r}")
    k = _contraction(op, mat1, mat2)
    if scaled:
        out_rank = len(out_ids)
        grouped = [g] if out_rank == 3 or len(a) == 3 else []
        _check_scale(op, "scale1", scale1, (grouped + [a[-2], a[-1]])[-max(len(a), out_rank):], -1)
        grouped = [g] if out_rank == 3 or len(b) == 3 else []
        _check_scale(op, "scale2", scale2, (grouped + [b[-2], b[-1]])[-max(len(b), out_rank):], -2)
    out_dtype = _out_dtype(op, dtype, DataType.BFloat16) if scaled else mat1.dtype
    out = new_tensor(f, out_ids + ([k] if k is not None else []), out_dtype)
    inputs = (mat1, mat2, offsets) + ((scale1, scale2) if scaled else ())
    f.add_expr(GroupedMmOp(inputs=inputs, outputs=(out,), has_scale=scaled))
    return (out, None, None) if scaled else out


def _check_unsupported_outputs(op: str, alpha, bias, beta, output_block_scale_size, output_gamma,
                               epilogue: bool = False) -> None:
    """What nvFuser's own ATen fallback refuses as well: the quantized outputs, and for
    grouped_mm alpha, bias and beta."""
    if output_block_scale_size or output_gamma:
        raise UnsupportedError(f"{op}: quantized outputs (output_block_scale_size > 0, output_gamma) "
                               f"are not supported")
    if not epilogue and (alpha, bias, beta) != (None, None, None):
        raise UnsupportedError(f"{op}: alpha, bias and beta are not supported (nvFuser's ATen path "
                               f"refuses them too)")


def scaled_mm(mat1: TensorView, mat2: TensorView, scale1: TensorView, scale2: TensorView,
              alpha: Optional[TensorView] = None, bias: Optional[TensorView] = None,
              beta: Optional[TensorView] = None, dtype: DataType = DataType.BFloat16,
              output_block_scale_size: int = 0, output_block_scale_dtype: DataType = DataType.BFloat16,
              output_gamma: bool = False):
    """(out, None, None) with out = alpha * ((mat1 * scale1) @ (mat2 * scale2)) + beta * bias,
    cast to `dtype`. mat1 [m, k] and mat2 [k, n] (torch._scaled_mm's 2-D operands); scale1 is
    per tensor (every axis of size 1) or per row [m, 1], scale2 per tensor or per column [1, n],
    both fp32; alpha and beta hold one fp32 value each; bias is [n]; beta needs bias."""
    op = "scaled_mm"
    _check_unsupported_outputs(op, alpha, bias, beta, output_block_scale_size, output_gamma, epilogue=True)
    _check_operands(op, mat1, mat2, scaled=True)
    if mat1.ndim != 2 or mat2.ndim != 2:
        raise FusionDefinitionError(f"{op}: mat1 and mat2 must be 2-D ([m, k] and [k, n]), got {mat1!r} and {mat2!r}")
    if beta is not None and bias is None:
        raise FusionDefinitionError(f"{op}: beta needs bias")
    given = [t for t in (scale1, scale2, alpha, bias, beta) if t is not None]
    f = fusion_of(op, mat1, mat2, *[t for t in given if isinstance(t, TensorView)])
    a, b = mat1.domain.no_reductions(), mat2.domain.no_reductions()
    for name, scale, ids, k_axis in (("scale1", scale1, a, -1), ("scale2", scale2, b, -2)):
        if not _per_tensor(op, name, scale):
            _check_scale(op, name, scale, list(ids), k_axis)
    for name, t in (("alpha", alpha), ("beta", beta)):
        if t is not None and not _per_tensor(op, name, t):
            raise FusionDefinitionError(f"{op}: {name} must hold one value (every axis of size 1), got {t!r}")
    if bias is not None:
        check_tensor(op, bias, "bias")
        if bias.ndim != 1 or bias.dtype.category != 2:
            raise FusionDefinitionError(f"{op}: bias must be a 1-D floating tensor [n], got {bias!r}")
        f.unify(bias.domain.no_reductions()[0].size, b[1].size, f"{op}: bias {bias!r} and the columns of mat2")
    k = _contraction(op, mat1, mat2)
    out_ids = [copy_id(f, a[0]), copy_id(f, b[1])] + ([k] if k is not None else [])
    out = new_tensor(f, out_ids, _out_dtype(op, dtype, DataType.BFloat16))
    f.add_expr(ScaledMmOp(inputs=(mat1, mat2, *given), outputs=(out,), has_alpha=alpha is not None,
                          has_bias=bias is not None, has_beta=beta is not None))
    return out, None, None


def _per_tensor(op: str, name: str, t: TensorView) -> bool:
    """Whether `t` (an fp32 tensor) holds a single value: rank <= 2, every axis a broadcast."""
    _check_float_tensor(op, name, t)
    ids = t.domain.no_reductions()
    return t.ndim <= 2 and all(d.is_broadcast for d in ids)
