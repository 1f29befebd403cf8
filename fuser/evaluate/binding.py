"""The per-execution binding table: extent symbols -> integers, built once from the inputs.

`bind_inputs` checks every input against the definition (count, kind, rank, dtype, device,
static sizes, declared contiguity), maps local sizes to logical extents through the sharding
math, binds each bare symbol once, then checks every derived extent and recorded constraint.
A second value for a bound symbol is an ExtentConflictError naming both sources. The table is
frozen afterwards: nothing binds during execution, and nothing survives the execution.
"""
from __future__ import annotations

import functools
import math
import sys
import types
from typing import Any, Callable, Mapping, Optional, Sequence

from ..errors import ExtentConflictError, FusionInputError, InternalError
from ..ir import Fusion, Scalar, TensorView
from ..ir.domain import Merge, Split
from ..ir.printer import format_id
from ..ir.symbolic import (CAST_BFLOAT16, CAST_FLOAT, CAST_HALF, Extent, compile_extent, convert_scalar,
                           format_extent, is_static, is_symbol, scalarCast)
from ..ir.types import DataType, fits_int64, int_range
from ..multidevice.sharding import local_extents, sharding_factors


class BindingTable:
    """Immutable mapping from symbol names to values, with where each value came from."""

    __slots__ = ("values", "sources")

    def __init__(self, values: dict[str, Any], sources: Mapping[str, str]):
        self.values: Mapping[str, Any] = types.MappingProxyType(values)
        self.sources: Mapping[str, str] = (sources if isinstance(sources, types.MappingProxyType)
                                           else types.MappingProxyType(sources))

    def evaluate(self, e: Extent, what: str = "extent") -> Any:
        try:
            v = compile_extent(e)(self.values)
        except KeyError as err:
            raise InternalError(f"{what} {format_extent(e)} uses {err.args[0]}, which no input binds") from None
        except (ArithmeticError, ValueError) as err:  # a division by zero, a cast of nan to an integer
            raise FusionInputError(f"{what} {format_extent(e)} cannot be evaluated with {self.describe(e)}: "
                                   f"{err}") from None
        # (exact integer algebra past int64: as eager refuses it); a cast's value is in its
        # type's range, a UInt64's past int64's, and so is a scalar input's (checked when bound)
        if type(v) is int and not fits_int64(v) and not isinstance(e, scalarCast) and not is_symbol(e):
            given = self.describe(e)
            raise FusionInputError(f"{what} {format_extent(e)} = {v} is out of the range of a 64-bit integer"
                                   + (f" (with {given})" if given else ""))
        return v

    def extent(self, e: Extent, what: str = "extent") -> int:
        v = self.evaluate(e, what)
        if isinstance(v, float):
            if not v.is_integer():
                raise FusionInputError(f"{what} {format_extent(e)} evaluates to {v}, not an integer "
                                       f"(with {self.describe(e)})")
            v = int(v)
        if v < 0:
            raise FusionInputError(f"{what} {format_extent(e)} evaluates to {v}, a negative size "
                                   f"(with {self.describe(e)})")
        return v

    def describe(self, e: Extent) -> str:
        names = sorted(s.name for s in e.free_symbols)
        return ", ".join(f"{n} = {self.values.get(n)} from {self.sources.get(n, '?')}" for n in names)

    def __repr__(self) -> str:
        return "BindingTable{" + ", ".join(f"{k}={v}" for k, v in self.values.items()) + "}"


# a number bound at execution that an op converts to a narrow type: eager's checked conversion
# (the range, and the C++ type eager's error names); an integer scalar computed at execution
# that becomes a float, within its own type (ops/pointwise.py _check_integers_fit)
_HOLDS = {"int8": (-2**7, 2**7 - 1, "int8_t"), "uint8": (0, 2**8 - 1, "uint8_t"),
          "int16": (-2**15, 2**15 - 1, "int16_t"), "int32": (-2**31, 2**31 - 1, "int"),
          "int64": (-2**63, 2**63 - 1, "int64_t"), "uint64": (0, 2**64 - 1, "uint64_t"),
          "float16": (-65504.0, 65504.0, "c10::Half")}
_RULE_TEXT = {"finite": "", "nonzero": " other than 0", "nonnegative": " of at least 0",
              **{f"holds {t}": f" that {t} holds, within [{lo}, {hi}] (as eager: value cannot be converted "
                               f"to type {c} without overflow)" for t, (lo, hi, c) in _HOLDS.items()},
              # (fuser's own rule: its host computes integer scalars exactly, where a kernel's
              # arithmetic would wrap them, so a value past its type is refused, not given two values)
              **{f"fits {t}": f" within [{lo}, {hi}], the range of its type (fuser refuses an integer scalar "
                              f"computed past it rather than wrap it)" for t, (lo, hi, _) in _HOLDS.items()}}


def breaks(v, rule: str) -> bool:
    """Whether a checked scalar value `v` breaks its rule (Fusion.finite)."""
    if rule.startswith(("holds ", "fits ")):
        lo, hi, _ = _HOLDS[rule.split(" ", 1)[1]]
        return not (math.isfinite(v) and lo <= v <= hi)
    return not math.isfinite(v) or (rule == "nonzero" and v == 0) or (rule == "nonnegative" and v < 0)


def meta_input_error(label: str) -> FusionInputError:
    return FusionInputError(f"{label}: a meta tensor, which holds no values to compute with; pass a CPU or CUDA tensor")


def input_label(index: int, val) -> str:
    name = f"T{val.name}" if isinstance(val, TensorView) else f"scalar {val!r}"
    return f"input {index} ({name})"


def tensor_device(args: Sequence[Any]):
    for a in args:
        if hasattr(a, "device") and hasattr(a, "dim"):
            return a.device
    return None


_INT64_END = 2 ** 63  # sizes at or past it: the full check's error, naming the op and inputs


def bind_inputs(fusion: Fusion, args: Sequence[Any], metas: bool = False) -> BindingTable:
    """`metas`: meta tensors stand for the tensors (a compile ahead of a call)."""
    import torch

    verb = "compile_ahead" if metas else "execute"
    inputs = fusion.inputs()
    if not isinstance(args, (list, tuple)):
        raise FusionInputError(f"{verb} expects a list of inputs, got {type(args).__name__}")
    if len(args) != len(inputs):
        raise FusionInputError(f"the fusion has {len(inputs)} inputs but {verb} got {len(args)}")
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    checks: list[tuple[Extent, int, str]] = []
    device = None
    for i, (val, arg) in enumerate(zip(inputs, args)):
        label = input_label(i, val)
        if isinstance(val, Scalar):
            _bind_scalar(val, arg, label, values, sources)
            continue
        if not isinstance(arg, torch.Tensor):
            raise FusionInputError(f"{label}: expected a tensor, got {type(arg).__name__}")
        if arg.is_nested:
            raise FusionInputError(f"{label}: a nested tensor; fuser takes dense (strided) tensors of one "
                                   f"shape (pad it with torch.nested.to_padded_tensor, or call per component)")
        if arg.layout is not torch.strided:
            raise FusionInputError(f"{label}: a tensor of layout {arg.layout}; fuser takes dense (strided) "
                                   f"tensors (call .to_dense() first)")
        if device is None:
            device, device_label = arg.device, label
        elif arg.device != device:
            raise FusionInputError(
                f"{label}: on device {arg.device}, expected {device} like {device_label}; "
                f"all tensor inputs must be on one device")
        if arg.device.type == "meta" and not metas:
            raise meta_input_error(label)
        _check_tensor(val, arg, label)
        ids = val.domain.no_reductions()
        extents = [d.size for d in ids]  # (an expanded broadcast's size binds its expanded extent)
        factors = sharding_factors(val)
        for axis, (e, size, factor) in enumerate(zip(extents, arg.shape, factors)):
            where = f"{label} axis {axis}"
            if factor is not None:
                if not is_static(factor):
                    raise FusionInputError(f"{where}: sharding factor {factor} must be static")
                size = size * int(factor)
                where += f" (local size {arg.shape[axis]} x {factor} shards)"
            if is_symbol(e):
                prev = values.get(e.name)
                if prev is None:
                    values[e.name], sources[e.name] = size, where
                elif prev != size:
                    raise ExtentConflictError(
                        f"extent {e.name} has two values in one execution: {prev} from "
                        f"{sources[e.name]} and {size} from {where}")
            else:
                checks.append((e, size, where, None if factor is None else int(factor), f"{label} axis {axis}",
                               ids[axis].origin))
    table = BindingTable(values, sources)
    for e, why in fusion.sizes:  # (first: a negative size is named by its op, not as a divisor)
        table.extent(e, why)
    for e, why, rule in fusion.finite:
        v = table.evaluate(e, why)
        if breaks(v, rule):
            raise FusionInputError(f"{why} {format_extent(e)} = {v!r}, expected a finite value"
                                   + _RULE_TEXT[rule] + f" (with {table.describe(e)})")
    for numerator, denominator, why in fusion.divisible:
        n, d = table.extent(numerator), table.extent(denominator)
        if d and n % d:
            raise FusionInputError(f"{why}: {n} elements do not divide into {d} (with "
                                   f"{table.describe(numerator + denominator)})")
    for e, size, where, shards, axis_label, origin in checks:
        expected = table.extent(e, f"{where}: extent")
        if expected != size:
            cls = FusionInputError if is_static(e) else ExtentConflictError
            detail = f"declares {expected}" if is_static(e) else \
                f"requires {format_extent(e)} = {expected} (with {table.describe(e)})"
            if origin is not None:  # (the op that fixed this extent)
                detail += f" ({origin})"
            if shards is None:
                raise cls(f"{where}: size {size}, but the definition {detail}")
            detail = f"declares the global extent {expected}" if is_static(e) else \
                f"requires the global extent {format_extent(e)} = {expected} (with {table.describe(e)})"
            raise cls(_shard_mismatch(axis_label, size // shards, shards, expected, detail))
    for a, b, why in fusion.constraints:
        va, vb = table.extent(a), table.extent(b)
        if va != vb:
            raise ExtentConflictError(
                f"{why}: {format_extent(a)} = {va} but {format_extent(b)} = {vb} "
                f"(with {table.describe(a + b)})")
    return table


def _shard_mismatch(where: str, local: int, shards: int, expected: int, detail: str) -> str:
    """A sharded axis whose local size does not fit: both the local and the global sizes."""
    need = (f"each of the {shards} shards must have local size {expected // shards}"
            if expected % shards == 0 else f"{expected} does not split evenly into {shards} shards")
    return f"{where}: local size {local} x {shards} shards = {local * shards}, but the definition {detail}; {need}"


def _bind_scalar(val: Scalar, arg: Any, label: str, values: dict, sources: dict) -> None:
    import torch

    if isinstance(arg, torch.Tensor) and arg.dim() == 0:
        if arg.device.type == "meta":  # (a scalar's value is needed even ahead of a call)
            raise meta_input_error(label)
        arg = arg.item()
    given, arg = arg, _numpy_number(arg)
    dt = val.dtype
    ok = (isinstance(arg, bool) if dt.is_boolean else
          isinstance(arg, int) and not isinstance(arg, bool) if dt.is_integral else
          isinstance(arg, (int, float)) and not isinstance(arg, bool) if dt.is_floating else
          isinstance(arg, (int, float, complex)))
    if not ok:
        raise FusionInputError(f"{label}: expected {_a_scalar_of(dt)}, got {given!r} ({_type_name(given)})")
    if dt.is_integral and not dt.is_boolean:
        lo, hi = int_range(dt)
        if not lo <= arg < hi:  # (the kernel's argument would wrap it silently)
            kind = f"{'a' if lo < 0 else 'an unsigned'} {(hi - lo).bit_length() - 1}-bit integer"
            raise FusionInputError(f"{label}: {arg} is out of the range of {kind} ({_a_scalar_of(dt)})")
    convert = scalar_conversion(dt)
    if convert is not None:
        try:
            arg = convert(arg)
        except OverflowError:  # (an integer past any float)
            raise FusionInputError(f"{label}: {arg} is out of the range of {_a_scalar_of(dt)}") from None
    name = val.expr.name
    if name in values and values[name] != arg:
        raise ExtentConflictError(
            f"{name} has two values in one execution: {values[name]} from {sources[name]} and "
            f"{arg} from {label}")
    values[name] = arg
    sources[name] = label


def _numpy_number(arg: Any) -> Any:
    """A numpy scalar (numpy.float32, numpy.int64, numpy.bool_) as the Python number it holds,
    so that it fits the scalars a Python number of its kind fits; anything else as it is."""
    np = sys.modules.get("numpy")  # (not imported: no argument is a numpy scalar)
    return arg.item() if np is not None and isinstance(arg, np.generic) else arg


def _type_name(arg: Any) -> str:
    """A refused argument's type, numpy's by their numpy name (numpy.bool's own name is "bool")."""
    kind = type(arg)
    return f"numpy.{kind.__name__}" if kind.__module__ == "numpy" else kind.__name__


def _a_scalar_of(dt: DataType) -> str:
    """A scalar type as an error names it: 'a Double scalar', 'an Int scalar'."""
    return f"{'an' if dt.name[0] in 'AEIOU' else 'a'} {dt.name} scalar"


# a scalar input holds a value of its declared type, as nvFuser passes it to its kernel (eager's
# analog: a 0-d tensor of that dtype): a Float, Half or BFloat16 one rounded to that type
_ROUNDED = {DataType.Float: CAST_FLOAT, DataType.Half: CAST_HALF, DataType.BFloat16: CAST_BFLOAT16}


def scalar_conversion(dt: DataType) -> Optional[Callable[[Any], Any]]:
    """What binding makes of a number that fits a scalar input of type `dt` (an int for a float
    scalar, a float for a complex one): the value of that type, or None where the number is
    kept (a bool, an int). It may raise OverflowError (an integer past any float)."""
    if dt in _ROUNDED:
        return functools.partial(convert_scalar, _ROUNDED[dt])
    if dt.is_floating:
        return float
    if dt is DataType.ComplexFloat:
        return _complex64
    if dt.is_complex:
        return complex
    return None


def _complex64(v) -> complex:
    """A complex value with each part rounded to fp32, as torch's complex64 holds it."""
    v = complex(v)
    return complex(convert_scalar(CAST_FLOAT, v.real), convert_scalar(CAST_FLOAT, v.imag))


def _check_tensor(tv: TensorView, arg, label: str) -> None:
    if arg.dim() != tv.ndim:
        raise FusionInputError(f"{label}: expected a {tv.ndim}-D tensor, got {arg.dim()}-D of shape {tuple(arg.shape)}")
    expected = tv.dtype.to_torch()
    if arg.dtype != expected:
        raise FusionInputError(f"{label}: expected dtype {expected}, got {arg.dtype}")
    for axis, d in enumerate(tv.domain.no_reductions()):
        if d.is_broadcast and d.expanded_extent is None and arg.shape[axis] != 1:
            raise FusionInputError(
                f"{label} axis {axis}: declared broadcast (size 1), got size {arg.shape[axis]}")
    _check_contiguity(tv, arg, label)
    _check_expanded(tv, arg, label)


def _check_expanded(tv: TensorView, arg, label: str) -> None:
    """An axis declared an expanded broadcast (contiguity None, size not 1) holds one element
    for all its positions: the tensor must have stride 0 there (as nvFuser checks), or kernels
    reading one element would drop the others. A size of 0 or 1 addresses one element at most."""
    for axis in _expanded_axes(tv):
        size, stride = arg.shape[axis], arg.stride(axis)
        if size > 1 and stride != 0:
            raise FusionInputError(
                f"{label} axis {axis}: declared an expanded broadcast ({format_id(tv.domain.no_reductions()[axis])}: "
                f"contiguity None on a size other than 1), so stride 0 was expected, got stride {stride} "
                f"(sizes {tuple(arg.shape)}, strides {tuple(arg.stride())}); pass the tensor expanded "
                f"(t.expand, stride 0), or declare the axis contiguous (True or False)")


def _expanded_axes(tv: TensorView) -> list[int]:
    return [axis for axis, d in enumerate(tv.domain.no_reductions())
            if d.is_broadcast and d.expanded_extent is not None]


def _check_contiguity(tv: TensorView, arg, label: str) -> None:
    """Axes declared contiguous must have the stride of a dense layout in allocation order."""
    dom = tv.domain
    if dom.allocation is not None and any(x.is_device_dim or x.is_stream for x in dom.allocation):
        return  # sharded layouts are checked by the multidevice layer
    if arg.numel() == 0:
        return  # (no element to address: any strides are a dense layout, as is_contiguous() says)
    order, contiguity = _allocation_axes(dom)
    expected_stride = 1
    strided_none = []  # inner axes declared None (stride 0, taking no room) that have a stride
    for axis, contiguous in reversed(list(zip(order, contiguity))):
        size, stride = arg.shape[axis], arg.stride(axis)
        if size <= 1 or contiguous is None:
            if contiguous is None and size > 1 and stride:
                strided_none.append(axis)
            continue
        if contiguous and stride != expected_stride:
            hint = "".join(f"; axis {a} is declared None (a broadcast or expanded axis, stride 0) but "
                           f"has stride {arg.stride(a)}" for a in strided_none)
            raise FusionInputError(
                f"{label} axis {axis}: declared contiguous, so stride {expected_stride} was "
                f"expected, got {stride} (strides {tuple(arg.stride())}{hint}); pass a tensor of that "
                f"layout or declare contiguity=False")
        expected_stride = stride * size


def _allocation_axes(dom) -> tuple[list[int], list]:
    """The logical axes in allocation order, outer to inner, each with its contiguity flag: a
    serial split's halves (next to each other, outer first) stand for their axis with the inner
    half's flag, a merge for its two axes with its own (the flags were paired with the wrong
    axes, or with none, where the allocation held a split or a merge)."""
    position = {id(d): k for k, d in enumerate(dom.no_reductions())}
    made_by = {id(o): t for t in dom.transforms for o in t.outputs}

    def axes(d) -> list[int]:
        if id(d) in position:
            return [position[id(d)]]
        t = made_by.get(id(d))
        if isinstance(t, Merge):
            return axes(t.outer) + axes(t.inner)
        if isinstance(t, Split) and d is t.inner:  # (its outer half, just before, adds nothing)
            return axes(t.input)
        return []

    pairs = [(k, flag) for d, flag in zip(dom.maybe_allocation, dom.contiguity) if not d.is_reduction
             for k in axes(d)]
    return [k for k, _ in pairs], [flag for _, flag in pairs]


def local_shape(tv: TensorView, table: BindingTable, with_streams: bool = False) -> tuple[int, ...]:
    return tuple(table.extent(e, f"T{tv.name} extent") for e in local_extents(tv, with_streams))


class InputBinder:
    """`bind_inputs` precompiled for one fusion: its checks and bindings as flat lists, so a call
    walks no IR and evaluates no sympy. Anything that does not match exactly falls back to
    `bind_inputs`, which raises the error naming the input (or, if it passes, binds as usual).
    Where each symbol comes from is fixed by the definition, so the sources are computed once."""

    def __init__(self, fusion: Fusion):
        self.fusion = fusion
        inputs = fusion.inputs()
        self.count = len(inputs)
        self.scalars: list[tuple[int, str]] = []
        self.tensors: list[tuple] = []
        self.checks: list[tuple] = []  # (evaluator, input index, axis, factor)
        sources: dict[str, str] = {}
        for i, val in enumerate(inputs):
            label = input_label(i, val)
            if isinstance(val, Scalar):
                self.scalars.append((i, val.expr.name, val.dtype))
                sources.setdefault(val.expr.name, label)
                continue
            axes = []
            for axis, (d, factor) in enumerate(zip(val.domain.no_reductions(), sharding_factors(val))):
                f = int(factor) if factor is not None and is_static(factor) else 1
                e = d.size
                if d.is_broadcast and d.expanded_extent is None:
                    axes.append((axis, None, 1, 1))
                elif is_symbol(e):
                    axes.append((axis, e.name, f, None))
                    sources.setdefault(e.name, f"{label} axis {axis}")
                elif is_static(e):
                    axes.append((axis, None, f, int(e)))
                else:
                    self.checks.append((compile_extent(e), i, axis, f))
            self.tensors.append((i, val.ndim, val.dtype.to_torch(), tuple(axes), tuple(_expanded_axes(val)),
                                 _dense_declared(val)))
        self.constraints = [(compile_extent(a), compile_extent(b)) for a, b, _ in fusion.constraints]
        self.divisible = [(compile_extent(a), compile_extent(b)) for a, b, _ in fusion.divisible]
        self.sizes = [compile_extent(e) for e, _ in fusion.sizes]
        self.finite = [(compile_extent(e), rule) for e, _, rule in fusion.finite]
        self.sources = types.MappingProxyType(sources)  # fixed by the definition, read-only
        self._fast = self._compile_fast()

    def _compile_fast(self) -> Optional[Callable]:
        """The common case of `bind` as one straight-line function of the arguments (no loops
        over the definition's inputs and axes): the bound values as a dict, or None where
        anything differs from the plain case (then `bind_inputs` decides). None when some
        input's declared layout always needs the full check."""
        import torch

        if any(dense is None for *_, dense in self.tensors):
            return None
        env: dict[str, Any] = {"PLAIN": (torch.Tensor, torch.nn.Parameter),  # Parameters: module inputs
                               "STRIDED": torch.strided}
        lines = ["def fast(args):",
                 f"    if not isinstance(args, (list, tuple)) or len(args) != {self.count}:",
                 "        return None"]
        bound: dict[str, str] = {}  # symbol -> local variable
        for n, (i, ndim, dtype, axes, expanded, dense) in enumerate(self.tensors):
            a = f"a{i}"
            env[f"D{i}"] = dtype
            lines += [f"    {a} = args[{i}]",
                      f"    if type({a}) not in PLAIN or {a}.dtype != D{i} or {a}.dim() != {ndim} "
                      f"or {a}.layout is not STRIDED or {a}.is_nested:",
                      "        return None"]
            lines += ([f"    device = {a}.device"] if n == 0 else
                      [f"    if {a}.device != device:", "        return None"])
            if axes:
                lines.append(f"    s = {a}.shape")
            for axis, name, factor, static in axes:
                size = f"s[{axis}]" if factor == 1 else f"s[{axis}] * {factor}"
                if name is None:
                    lines += [f"    if {size} != {static}:", "        return None"]
                elif name in bound:
                    lines += [f"    if {size} != {bound[name]}:", "        return None"]
                else:
                    bound[name] = f"v{len(bound)}"
                    lines.append(f"    {bound[name]} = {size}")
            for axis in expanded:  # (an expanded broadcast's stride 0: the full check names another)
                lines += [f"    if s[{axis}] > 1 and {a}.stride({axis}):", "        return None"]
            if dense:  # (an empty tensor is "contiguous" whatever its strides: the full check decides)
                lines += [f"    if not {a}.is_contiguous() or not {a}.numel():", "        return None"]
        for k, (i, name, dtype) in enumerate(self.scalars):
            env[f"S{k}"] = _SCALAR_TYPES[dtype.category]
            lines += [f"    v = args[{i}]", f"    if type(v) not in S{k}:", "        return None"]
            if dtype.is_integral and not dtype.is_boolean:  # (beyond its range: the full check names it)
                lo, hi = int_range(dtype)
                lines += [f"    if not {lo} <= v < {hi}:", "        return None"]
            elif dtype.category > 1:  # a float or complex scalar holds a value of its type (_bind_scalar)
                lines += ["    if type(v) is int and not -0x8000000000000000 <= v < 0x8000000000000000:",
                          "        return None"]
                if dtype is DataType.Double:  # (scalar_conversion's `float`, inline: the common case)
                    lines += ["    if type(v) is int:", "        v = float(v)"]
                else:
                    env[f"C{k}"] = scalar_conversion(dtype)
                    lines.append(f"    v = C{k}(v)")
            if name in bound:
                lines += [f"    if {bound[name]} != v:", "        return None"]
            else:
                bound[name] = f"v{len(bound)}"
                lines.append(f"    {bound[name]} = v")
        lines.append("    return {" + ", ".join(f"{name!r}: {var}" for name, var in bound.items()) + "}")
        exec(compile("\n".join(lines), f"<fuser bind of {len(self.tensors)} tensors>", "exec"), env)
        return env["fast"]

    def bind(self, args: Sequence[Any], metas: bool = False) -> BindingTable:
        """`metas`: meta tensors stand for the tensors (a compile ahead of a call)."""
        values = self._fast(args) if self._fast is not None else None
        if values is None:  # the full check: it raises the error naming the input
            return bind_inputs(self.fusion, args, metas)
        try:
            for fn, i, axis, factor in self.checks:
                if fn(values) != args[i].shape[axis] * factor:
                    return bind_inputs(self.fusion, args, metas)
            for fa, fb in self.constraints:
                if fa(values) != fb(values):
                    return bind_inputs(self.fusion, args, metas)
            for fn in self.sizes:
                v = fn(values)
                if not 0 <= v < _INT64_END or v != int(v):  # (nan fails the first; past int64: named there)
                    return bind_inputs(self.fusion, args, metas)
            for fn, rule in self.finite:
                if breaks(fn(values), rule):
                    return bind_inputs(self.fusion, args, metas)
            for fa, fb in self.divisible:
                d = fb(values)
                if d and fa(values) % d:
                    return bind_inputs(self.fusion, args, metas)
        except (ArithmeticError, ValueError):  # (a division by zero): the full check names it
            return bind_inputs(self.fusion, args, metas)
        return BindingTable(values, self.sources)


_SCALAR_TYPES = {0: (bool,), 1: (int,), 2: (int, float), 3: (int, float, complex)}


def _dense_declared(tv: TensorView):
    """True: declared fully contiguous in logical order (is_contiguous() decides); False:
    nothing declared contiguous (no check); None: a mixed layout (the full check runs)."""
    dom = tv.domain
    pairs = [(a, c) for a, c in zip(dom.maybe_allocation, dom.contiguity) if not a.is_reduction]
    flags = [c for a, c in pairs if c is not None]
    if not any(flags):
        return False
    # a dim without a flag that is not of size 1 (nvFuser's expanded broadcast) is left out of
    # the stride chain, which is_contiguous() would count
    loose = any(c is None and not (a.is_broadcast and a.expanded_extent is None) for a, c in pairs)
    if all(flags) and dom.allocation is None and not loose:
        return True
    return None
