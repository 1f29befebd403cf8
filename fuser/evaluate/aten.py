"""ATen evaluation of the ops fusions compute: the reference semantics that generated kernels
are tested against (pointwise, reductions, views and shapes, indexing, scans and sorts, random
numbers); matmuls and attention are in `evaluate/matmul.py`, the dispatch in `evaluate/rules.py`.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Callable

import torch
import torch.nn.functional as F

from ..errors import FusionIndexError, FusionInputError
from ..ops.pointwise import result_type
from ..ir import (BinaryOp, BinaryOpType, BroadcastOp, CastOp, CatOp, ExpandOp, Expr, FullOp,
                  IotaOp, LoadStoreOp, PadOp, PermuteOp, ReductionOp,
                  ReductionOpType, ReshapeOp, RNGOp, SliceOp, SqueezeOp, TernaryOp,
                  TernaryOpType, UnaryOp, UnaryOpType, VarMeanOp)
from ..ir import EmbeddingFwdOp, GatherOp, IndexSelectOp, ScatterOp, SelectOp, TensorView
from ..ir.printer import format_val
from ..ir import ScanOp, SortOp, TopKOp
from .philox import draw_seed, random_tensor
from .rules import rule

def _dt(v):
    return v.dtype.to_torch()


def _to(x, dtype):
    return x.to(dtype) if isinstance(x, torch.Tensor) and x.dtype != dtype else x


def _wanted_order(tv: TensorView, rank: int) -> "list[int] | None":
    """The memory order (logical axes, outer to inner) `tv`'s allocation domain asks of a
    result of `rank` axes; None for row-major (fuser.jit's outputs take eager's layout so)."""
    order = tv.domain.allocation_order()
    return order if order is not None and len(order) == rank else None


def _dense_in(t: torch.Tensor, order: list[int]) -> bool:
    """Whether `t` is laid out densely in `order` (a size-1 axis's stride does not count)."""
    expected = 1
    for k in reversed(order):
        if t.shape[k] != 1 and t.stride(k) != expected:
            return False
        expected *= t.shape[k]
    return True


_U = UnaryOpType
_UNARY = {
    _U.abs: torch.abs, _U.neg: torch.neg, _U.exp: torch.exp, _U.exp2: torch.exp2,
    _U.expm1: torch.expm1, _U.log: torch.log, _U.log2: torch.log2, _U.log10: torch.log10,
    _U.log1p: torch.log1p, _U.sqrt: torch.sqrt, _U.rsqrt: torch.rsqrt,
    _U.reciprocal: torch.reciprocal, _U.sin: torch.sin, _U.cos: torch.cos, _U.tan: torch.tan,
    _U.tanh: torch.tanh, _U.sigmoid: torch.sigmoid, _U.relu: torch.relu, _U.silu: F.silu,
    _U.erf: torch.erf, _U.floor: torch.floor, _U.ceil: torch.ceil, _U.round: torch.round,
    _U.trunc: torch.trunc, _U.sign: torch.sign, _U.isnan: torch.isnan, _U.isinf: torch.isinf,
    _U.isfinite: torch.isfinite, _U.logical_not: torch.logical_not,
    _U.bitwise_not: torch.bitwise_not,
}


def _erfcinv(x):
    """erfcinv(x) = -ndtri(x / 2) / sqrt(2): eager has no erfcinv, and ndtri (the inverse of the
    normal distribution function) keeps the tail accurate, where erfinv(1 - x) would lose a
    small x in 1 - x; half types in fp32."""
    wide = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    return (torch.special.ndtri(x.to(wide) / 2) * -math.sqrt(0.5)).to(x.dtype)


_UNARY.update({  # (inverse trigonometric, hyperbolic, special functions, classification)
    _U.acos: torch.acos, _U.acosh: torch.acosh, _U.asin: torch.asin, _U.asinh: torch.asinh,
    _U.atan: torch.atan, _U.atanh: torch.atanh, _U.cosh: torch.cosh, _U.sinh: torch.sinh,
    _U.erfc: torch.erfc, _U.erfinv: torch.erfinv, _U.erfcinv: _erfcinv,
    _U.lgamma: torch.lgamma, _U.frac: torch.frac, _U.signbit: torch.signbit,
    _U.isneginf: torch.isneginf, _U.isposinf: torch.isposinf, _U.isreal: torch.isreal,
    _U.real: torch.real, _U.imag: torch.imag,
})


@rule(UnaryOp)
def _unary(e: UnaryOp, args, ctx):
    (x,) = args
    out = _dt(e.out)
    if out.is_floating_point and not (x.is_floating_point() or x.is_complex()):
        x = x.to(out)  # int-to-float ops (exp of an int tensor) compute in the result type
    return [_to(_UNARY[e.kind](x), out)]


def _divide(a, b):
    """nvFuser's div: C's truncating division for integers, true division otherwise."""
    if a.dtype.is_floating_point or a.dtype.is_complex:
        return torch.true_divide(a, b)
    return torch.div(a, b, rounding_mode="trunc")


def _logical_right_shift(a, b):
    """Shift the two's complement bits right, zeros coming in (jax.lax.shift_right_logical); a
    shift outside [0, bits) gives 0. The arithmetic shift's sign copies are masked off: with
    s = bits - shift, (1 << s) - 1 keeps the low s bits (all of them where s = bits: 1 << bits
    is 0 in eager, and 0 - 1 is all ones)."""
    bits = torch.iinfo(a.dtype).bits
    mask = torch.bitwise_left_shift(torch.ones_like(b), bits - b) - 1
    shifted = torch.bitwise_right_shift(a, b) & mask
    return torch.where((b < 0) | (b >= bits), torch.zeros_like(shifted), shifted)


_B = BinaryOpType
_BINARY = {
    _B.add: torch.add, _B.sub: torch.sub, _B.mul: torch.mul, _B.div: _divide,
    _B.pow: torch.pow, _B.maximum: torch.maximum, _B.minimum: torch.minimum, _B.fmod: torch.fmod,
    _B.remainder: torch.remainder, _B.eq: torch.eq, _B.ne: torch.ne, _B.lt: torch.lt,
    _B.le: torch.le, _B.gt: torch.gt, _B.ge: torch.ge, _B.logical_and: torch.logical_and,
    _B.logical_or: torch.logical_or, _B.bitwise_and: torch.bitwise_and,
    _B.bitwise_or: torch.bitwise_or, _B.bitwise_xor: torch.bitwise_xor, _B.atan2: torch.atan2,
}
_LOGICAL = {_B.logical_and, _B.logical_or}


_BINARY.update({
    _B.truediv: torch.true_divide, _B.mod: torch.fmod,  # (C's %: the dividend's sign)
    _B.nextafter: torch.nextafter, _B.gcd: torch.gcd, _B.bitwise_left_shift: torch.bitwise_left_shift,
    _B.bitwise_right_shift: torch.bitwise_right_shift, _B.logical_right_shift: _logical_right_shift,
})


def _scalar_tensor(value, dtype: torch.dtype, device) -> torch.Tensor:
    """A Python scalar as a 0-dim tensor of the computation type; an integer wraps to the
    type's width as eager arithmetic does (`int32_tensor + 2**40`)."""
    if isinstance(value, int) and not isinstance(value, bool) and not dtype.is_floating_point \
            and not dtype.is_complex and dtype != torch.bool:
        bits = torch.iinfo(dtype).bits
        if dtype.is_signed:
            value = (value + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))
        else:  # (uint64)
            value %= 1 << bits
    try:
        # (filled on the device: torch.tensor copies from pageable host memory, which waits
        # for the GPU's stream to drain at every call)
        return torch.full((), value, dtype=dtype, device=device)
    except (RuntimeError, OverflowError):
        # a value beyond the type's range, which torch.full refuses: eager's conversion
        # (inf for a float type)
        return torch.tensor(value, dtype=dtype, device=device)


@rule(BinaryOp)
def _binary(e: BinaryOp, args, ctx):
    """Operands are brought to the op's computation type first (the IR's promotion, which is
    PyTorch's), so a Python scalar never takes a tensor's narrower type."""
    a, b = args
    out = _dt(e.out)
    like = a if isinstance(a, torch.Tensor) else b
    if e.kind in _LOGICAL:
        a, b = (v if isinstance(v, torch.Tensor) else torch.full((), v, device=like.device) for v in (a, b))
        return [_to(_BINARY[e.kind](a, b), out)]
    compute = result_type(*e.inputs).to_torch()
    if out.is_floating_point and not compute.is_floating_point and not compute.is_complex:
        compute = out  # int-to-float ops (nextafter of integers) compute in the result type
    a, b = (v.to(compute) if isinstance(v, torch.Tensor) else _scalar_tensor(v, compute, like.device)
            for v in (a, b))
    if compute == torch.bool and e.kind in (_B.sub, _B.pow):  # ATen has no bool form of these
        a, b = a.to(torch.int64), b.to(torch.int64)
    try:
        return [_to(_BINARY[e.kind](a, b), out)]
    except RuntimeError as err:
        if "ZeroDivisionError" not in str(err):
            raise
        # the data's fault, not fuser's (ATen on the CPU refuses it; a kernel's result there is
        # undefined, as in nvFuser and in eager on CUDA)
        raise FusionInputError(f"{e.kind.value}: an integer divisor is zero in this execution (T{e.out.name} = "
                               f"{e.kind.value}({', '.join(format_val(v) for v in e.inputs)}))") from err


@rule(TernaryOp)
def _ternary(e: TernaryOp, args, ctx):
    """Scalar operands become 0-dim tensors (torch.where's condition, lerp's start and end and
    clamp's bounds beside tensors have no Python-number form), values of the result's type:
    where selects and clamp compares in it (rounding is monotonic), as the kernels do. lerp's
    weight stays a number, which ATen keeps at full precision, as eager's Python weight."""
    a, b, c = args
    out = _dt(e.out)
    device = next(v for v in args if isinstance(v, torch.Tensor)).device
    if e.kind is TernaryOpType.where:
        if not isinstance(a, torch.Tensor):
            a = torch.full((), bool(a), device=device)
        b, c = (_as_tensor(v, out, device) for v in (b, c))
        return [torch.where(a, b, c)]
    if e.kind is TernaryOpType.clamp:
        return [torch.clamp(*(_as_tensor(v, out, device) for v in (a, b, c)))]
    a, b = (_as_tensor(v, out, device) for v in (a, b))
    return [_to(torch.lerp(a, b, _to(c, out)), out)]


def _as_tensor(v, dtype: torch.dtype, device) -> torch.Tensor:
    return v.to(dtype) if isinstance(v, torch.Tensor) else _scalar_tensor(v, dtype, device)


@rule(CastOp)
def _cast(e: CastOp, args, ctx):
    return [args[0].to(_dt(e.out))]


@rule(ReductionOp)
def _reduction(e: ReductionOp, args, ctx):
    (x,) = args
    out = _dt(e.out)
    axes = list(e.axes)
    if not axes or x.dim() == 0:
        return [x.to(out).clone()]
    if e.kind in (ReductionOpType.max, ReductionOpType.min) and any(x.shape[a] == 0 for a in axes):
        raise FusionInputError(
            f"{e.kind.name}: T{e.inp.name} has size 0 on reduced axis "
            f"{next(a for a in axes if x.shape[a] == 0)} in this execution; {e.kind.name} of no "
            f"elements is undefined (PyTorch raises too)")
    if e.kind is ReductionOpType.sum:
        r = torch.sum(x, dim=axes)
    elif e.kind is ReductionOpType.prod:
        # in fp32 for fp16 and bf16, as the kernels multiply (ATen's CPU prod of fp16 rounds
        # each product to fp16: 2.6% off over 2000 factors near 1), and between axes
        r = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        for a in sorted(axes, reverse=True):
            r = torch.prod(r, dim=a)
    elif e.kind is ReductionOpType.max:
        r = torch.amax(x, dim=axes)
    else:
        r = torch.amin(x, dim=axes)
    return [_to(r, out)]


@rule(VarMeanOp)
def _var_mean(e: VarMeanOp, args, ctx):
    (x,) = args
    if not e.axes:
        return [torch.zeros_like(x), x.clone()]
    count = math.prod(x.shape[a] for a in e.axes)
    if x.numel() and count > e.correction:
        var, mean = torch.var_mean(x, dim=list(e.axes), correction=e.correction)
    else:  # NaN or empty, as the kernels give it, without ATen's warning (an op the user may not call)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            var, mean = torch.var_mean(x, dim=list(e.axes), correction=e.correction)
    if mean.is_floating_point() and count > 1:
        # the kernels' rule (codegen/math.py `_welford_mean`): a row of more than one element
        # holding an inf has NaN squared deviations, and so a NaN mean, where ATen keeps inf
        # or NaN by its order of reduction (an inf mean comes only from an inf element)
        mean = torch.where(torch.isinf(mean), float("nan"), mean)
    return [var, mean]


@rule(BroadcastOp)
def _broadcast(e: BroadcastOp, args, ctx):
    (x,) = args
    for k, new in enumerate(e.is_broadcast):
        if new:
            x = x.unsqueeze(k)
    return [x]


@rule(ExpandOp)
def _expand(e: ExpandOp, args, ctx):
    return [args[0].expand(ctx.shape(e.out))]


@rule(SqueezeOp)
def _squeeze(e: SqueezeOp, args, ctx):
    x = args[0]
    # an expanded axis (squeeze_expanded) holds one value along it: its first slice
    return [x[tuple(0 if k in e.dims else slice(None) for k in range(x.ndim))] if e.dims else x]


@rule(ReshapeOp)
def _reshape(e: ReshapeOp, args, ctx):
    return [args[0].reshape(ctx.shape(e.out))]


@rule(PermuteOp)
def _permute(e: PermuteOp, args, ctx):
    return [args[0].permute(e.dims)]


def method_form(e: Expr, shape_of: Callable[[Any], Any]) -> "tuple[str, tuple] | None":
    """The Tensor method, and its argument, that the rule of a view op above calls on its first
    input once the output's sizes are fixed (`shape_of(tv)`: those sizes, None where unknown):
    a ready program replays it as that one call (runtime/ready.py). None for other ops."""
    kind = type(e)
    if kind is PermuteOp:
        return "permute", tuple(e.dims)
    if kind is ReshapeOp or kind is ExpandOp:
        shape = shape_of(e.out)
        return None if shape is None else ("reshape" if kind is ReshapeOp else "expand", tuple(shape))
    return None


@rule(SliceOp)
def _slice(e: SliceOp, args, ctx):
    x, bounds = args[0], args[1:]
    index = tuple(slice(int(bounds[k]), int(bounds[k + 1]), int(bounds[k + 2]))
                  for k in range(0, len(bounds), 3))
    return [x[index]]


@rule(PadOp)
def _pad(e: PadOp, args, ctx):
    x, value, widths = args[0], args[1], [int(w) for w in args[2:]]
    try:
        return [torch.constant_pad_nd(x, widths, value)]  # (F.pad takes no complex value)
    except RuntimeError:  # (a value beyond x's type: see _fill_as_cast)
        return [torch.constant_pad_nd(x, widths, _fill_as_cast(value, x.dtype))]


@rule(CatOp)
def _cat(e: CatOp, args, ctx):
    out = _dt(e.out)
    return [torch.cat([_to(a, out) for a in args], dim=e.dim)]


@rule(LoadStoreOp)
def _set(e: LoadStoreOp, args, ctx):
    x = args[0]
    order = e.out.domain.allocation_order()
    if order is not None and len(order) == x.dim() and order != list(range(x.dim())):
        # a copy laid out as its allocation domain says (fd.ops.stride_order's output)
        return [torch.empty_permuted(x.shape, order, dtype=x.dtype, device=x.device).copy_(x)]
    # row-major, as a kernel writes it (`x.t().contiguous()` of a type without kernels: clone()
    # kept the transposed strides)
    return [x.clone(memory_format=torch.contiguous_format)]


@rule(FullOp)
def _full(e: FullOp, args, ctx):
    shape, dtype = ctx.shape(e.out), _dt(e.out)
    try:
        return [torch.full(shape, args[0], dtype=dtype, device=ctx.device)]
    except RuntimeError:  # (a value beyond the type: see _fill_as_cast)
        return [torch.full(shape, _fill_as_cast(args[0], dtype), dtype=dtype, device=ctx.device)]


def _fill_as_cast(value, dtype: torch.dtype):
    """A fill value converted to a floating or complex `dtype` as a cast converts it (1e300 in
    a complex64 is inf, as in a float32), where torch.full and constant_pad_nd refuse a value
    beyond the type's range; a Python number, converted on the host. Other values are
    returned as they are: an integer type's fill was cast when defined, and a complex value
    stays refused for a real type (a cast would drop its imaginary part)."""
    if not (dtype.is_floating_point or dtype.is_complex) or isinstance(value, bool):
        return value
    wide = {int: torch.int64, float: torch.float64, complex: torch.complex128}.get(type(value))
    if wide is None or (wide is torch.complex128 and not dtype.is_complex):
        return value
    return torch.tensor(value, dtype=wide).to(dtype).item()


@rule(IotaOp)
def _iota(e: IotaOp, args, ctx):
    (n,) = ctx.shape(e.out)
    _, start, step = args
    out = _dt(e.out)
    idx = torch.arange(n, device=ctx.device, dtype=torch.float64 if out.is_floating_point else torch.int64)
    return [(start + step * idx).to(out)]


@rule(RNGOp)
def _rng(e: RNGOp, args, ctx):
    """The numbers generated kernels draw (evaluate/philox.py); an op left unseeded (a fusion
    evaluated outside the executor, which seeds it) draws its seed here."""
    seed, offset = (args[2], args[3]) if e.seeded else (draw_seed(ctx.device), 0)
    return [random_tensor(e.kind.value, ctx.shape(e.out), (args[0], args[1], e.standard), seed, offset,
                          _dt(e.out), ctx.device)]


# -- indexing -----------------------------------------------------------------------------------
# ATen checks index values (on the CPU; a GPU asserts inside the kernel): its refusal becomes
# an input error that names the op and its tensors, as any other bad input does.


# nvFuser's op name and argument names, for the messages
_INDEXING_NAMES = {IndexSelectOp: ("index_select", ("arg", "index")), SelectOp: ("select", ("arg",)),
                   GatherOp: ("gather", ("arg", "index")), ScatterOp: ("scatter", ("arg", "index", "src")),
                   EmbeddingFwdOp: ("embedding_fwd", ("input", "weight"))}


# ATen's words for a scalar it cannot convert to a tensor's dtype (torch.scatter's value form)
_VALUE_CONVERSION = "value cannot be converted"


def _indexing(e: Expr, call: Callable[[], Any]) -> list:
    try:
        return [call()]
    except NotImplementedError:  # (a RuntimeError) no kernel for the dtype, not the index's fault:
        raise  # evaluate_expr's UnsupportedError names the op and dtypes
    except (IndexError, RuntimeError, AssertionError) as err:  # (embedding asserts its padding_idx)
        name, args = _INDEXING_NAMES[type(e)]
        if isinstance(e, ScatterOp) and not isinstance(e.inputs[2], TensorView) and _VALUE_CONVERSION in str(err):
            # a scalar input's value the arg's dtype cannot hold (a constant one is refused when
            # defined: ops/indexing.py): the value's fault, not the index's
            arg, src = e.inputs[0], e.inputs[2]
            raise FusionInputError(f"{name}: the value of src {format_val(src)} is out of the range of arg's dtype "
                                   f"{arg.dtype} ({err}); arg {format_val(arg)}") from err
        if isinstance(e, GatherOp) and e.take_along_axis:
            name = "take_along_axis"
        operands = ", ".join(f"{a} {format_val(v)}" for a, v in zip(args, e.inputs)
                             if isinstance(v, TensorView))
        error = FusionIndexError if isinstance(err, IndexError) else FusionInputError
        raise error(f"{name}: the index values or sizes do not fit the indexed tensor ({err}); "
                    f"{operands}") from err


def _long(index: torch.Tensor) -> torch.Tensor:
    return index if index.dtype == torch.int64 else index.to(torch.int64)  # gather/scatter take int64


@rule(IndexSelectOp)
def _index_select(e: IndexSelectOp, args, ctx):
    x, index = args
    index = index.reshape(-1)  # a 0-D index, or one broadcast to x's rank on the other axes: torch's 1-D form
    order = _wanted_order(e.out, x.dim())
    if order is None:
        return _indexing(e, lambda: torch.index_select(x, e.dim, index))
    # ATen's result is row-major: selecting from x's axes in the wanted memory order and
    # permuting back lays it out in that order with no copy (a flip of a channels-last tensor,
    # as eager's flip keeps its input's layout)
    back = sorted(range(len(order)), key=order.__getitem__)
    picked = _indexing(e, lambda: torch.index_select(x.permute(order), order.index(e.dim % x.dim()), index))
    return [picked[0].permute(back)]


@rule(SelectOp)
def _select(e: SelectOp, args, ctx):
    x, index = args
    return _indexing(e, lambda: torch.select(x, e.dim, int(index)))


@rule(GatherOp)
def _gather(e: GatherOp, args, ctx):
    x, index = args
    if e.take_along_axis:
        # (torch.take_along_dim reads out of bounds without a word): the broadcast, then gather
        # (a size 1 takes the other's size, 0 included: max(0, 1) would be 1)
        shape = [b if a == 1 else a for a, b in zip(x.shape, index.shape)]
        x = x.expand([n if k != e.dim else -1 for k, n in enumerate(shape)])
        index = index.expand([n if k != e.dim else -1 for k, n in enumerate(shape)])
    return _indexing(e, lambda: torch.gather(x, e.dim, _long(index)))


@rule(ScatterOp)
def _scatter(e: ScatterOp, args, ctx):
    x, index, src = args  # src: a tensor, or a Python scalar (torch.scatter's value form)
    return _indexing(e, lambda: torch.scatter(x, e.dim, _long(index), src))


@rule(EmbeddingFwdOp)
def _embedding_fwd(e: EmbeddingFwdOp, args, ctx):
    indices, weight, norm_type, scale_grad_by_freq, sparse = args[:5]
    rest = iter(args[5:])
    padding_idx = int(next(rest)) if e.has_padding_idx else None
    max_norm = float(next(rest)) if e.has_max_norm else None
    # F.embedding's max_norm renormalizes the weight's rows in place; here the looked-up rows
    # are renormalized instead (the same values, as ATen's renorm computes them), and the
    # fusion's input stays unchanged
    out = _indexing(e, lambda: F.embedding(indices, weight, padding_idx, None, float(norm_type),
                                           bool(scale_grad_by_freq), bool(sparse)))[0]
    if max_norm is not None:
        norms = torch.linalg.vector_norm(out, float(norm_type), dim=-1, keepdim=True).double()
        scale = torch.where(norms > max_norm, max_norm / (norms + 1e-7), torch.ones_like(norms))
        out = (out.double() * scale).to(out.dtype)
    return [out]


# -- scans, sorting, attention backward -------------------------------------------------------

_SCANS = {_B.add: torch.cumsum, _B.mul: torch.cumprod,
          _B.maximum: lambda x, d: torch.cummax(x, d).values,
          _B.minimum: lambda x, d: torch.cummin(x, d).values}


@rule(ScanOp)
def _scan(e: ScanOp, args, ctx):
    # eager's cumsum and cumprod give int64 for integer inputs; the IR keeps the input's dtype
    return [_to(_SCANS[e.op_type](args[0], e.dim), _dt(e.out))]


@rule(SortOp)
def _sort(e: SortOp, args, ctx):
    x = args[0]
    order = next((o for o in (_wanted_order(out, x.dim()) for out in e.outputs) if o is not None), None)
    if order is not None and not _dense_in(x, order):
        # ATen's sort lays both results out as its input: an input in the wanted order (the
        # lowering lays a computed input out so, so this copies only what ATen made otherwise)
        x = torch.empty_permuted(x.shape, order, dtype=x.dtype, device=x.device).copy_(x)
    values, indices = torch.sort(x, dim=e.dim, descending=e.descending, stable=e.stable)
    if order is None:
        return [values, indices]
    # (an output that asks no layout stays row-major, whatever its sibling asked)
    return [t if _wanted_order(out, x.dim()) is not None else t.contiguous() for t, out in zip((values, indices), e.outputs)]


@rule(TopKOp)
def _topk(e: TopKOp, args, ctx):
    x, k = args
    size = x.shape[e.dim] if x.dim() else 1
    if not 0 <= int(k) <= size:
        raise FusionInputError(
            f"topk: k = {int(k)} is out of range for axis {e.dim} of T{e.inp.name}, of size {size} "
            f"in this execution (0 <= k <= {size} needed)")
    values, indices = torch.topk(x, int(k), dim=e.dim if x.dim() else 0, largest=e.largest, sorted=e.sorted)
    return [values, indices]
