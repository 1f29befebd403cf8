"""Extents as sympy expressions: symbols, ceilDiv, nvFuser-style printing and fast evaluation.

Symbols are created by a Fusion (`Fusion.new_symbol`), never here: there is no module-level
table of symbols, so two fusions can never see each other's bindings.
"""
from __future__ import annotations

import functools
import math
import struct
from typing import Callable, Mapping, Union

import sympy

from .scalar_functions import SCALAR_FUNCTIONS, scalar_fn

Extent = sympy.Expr
ExtentLike = Union[int, sympy.Expr]


class ceilDiv(sympy.Function):
    """Integer division rounding up, as nvFuser's `ceilDiv(a, b)`."""

    is_integer = True

    @classmethod
    def eval(cls, a, b):
        if b == 1:
            return a
        if a.is_Integer and b.is_Integer:
            if b == 0:
                raise ZeroDivisionError("ceilDiv by zero")
            return sympy.Integer(-(-int(a) // int(b)))
        if a == 0:
            return sympy.Integer(0)
        return None


class normIndex(sympy.Function):
    """A slice bound as PyTorch reads it: negative counts from the end, then clamped to
    [0, extent]. Used for bounds only known at execution (scalar inputs)."""

    is_integer = True
    is_nonnegative = True  # clamped into [0, extent]

    @classmethod
    def eval(cls, index, extent):
        if index.is_Integer and extent.is_Integer:
            i, n = int(index), int(extent)
            return sympy.Integer(min(max(i + n if i < 0 else i, 0), n))
        if index == extent or index == 0:  # x[:n] and x[0:] of an extent n (never negative)
            return index
        return None


class sliceLen(sympy.Function):
    """The length of `x[start:stop]` on an axis of `extent` (args: the raw bounds, the extent):
    max(normIndex(stop) - normIndex(start), 0). One function of the raw bounds, so the extent
    appears once: a chain of slices grows linearly, where the difference of two normIndex
    terms held the extent twice and doubled per slice. Integer bounds become closed forms."""

    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, start, stop, extent):
        if start.is_Integer and stop.is_Integer and extent.is_Integer:
            return sympy.Integer(_slice_len(int(start), int(stop), int(extent)))
        if stop == extent:
            return tailLen(start, extent)
        if not (start.is_Integer and stop.is_Integer):
            return None
        a, b = int(start), int(stop)
        if (a >= 0) == (b >= 0) and b <= a:
            return sympy.Integer(0)
        if a >= 0 and b >= 0:  # min(b, n) - min(a, n)
            return sympy.Min(b, extent) if a == 0 else sympy.Min(b - a, sympy.Max(extent - a, 0))
        if a < 0 and b < 0:  # max(n + b, 0) - max(n + a, 0)
            return sympy.Min(b - a, sympy.Max(extent + b, 0))
        if a >= 0:  # b < 0: max(n + b, 0) - min(a, n)
            return sympy.Max(extent + b - a, 0)
        return None  # a < 0 <= b: max(min(b, n) - max(n + a, 0), 0) holds n twice


class tailLen(sympy.Function):
    """The length of `x[start:]` on an axis of `extent`: extent - normIndex(start, extent),
    the extent held once (see sliceLen)."""

    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, start, extent):
        if not start.is_Integer:
            return None
        a = int(start)  # n - a clamped at 0, or the last -a of n
        if extent.is_Integer:
            return sympy.Integer(_tail_len(a, int(extent)))
        if a > 0 and isinstance(extent, sympy.Max) and len(extent.args) == 2 and 0 in extent.args:
            extent = extent.args[0] if extent.args[1] == 0 else extent.args[1]  # x[1:][1:]: max(n - 2, 0)
        return extent if a == 0 else sympy.Max(extent - a, 0) if a > 0 else sympy.Min(-a, extent)


# what a runtime scalar is cast to (scalarCast's second argument; new codes go last, so that
# the others keep their numbers)
CAST_BOOL, CAST_INT, CAST_FLOAT, CAST_HALF, CAST_BFLOAT16, CAST_DOUBLE, CAST_INT32, CAST_UINT64 = range(8)
_CAST_NAMES = ("bool", "int64_t", "float", "half", "bfloat16", "double", "int", "uint64_t")
# the integer types' (bits, signed)
_INTEGER_CASTS = {CAST_INT: (64, True), CAST_INT32: (32, True), CAST_UINT64: (64, False)}


def convert_scalar(code: int, v):
    """A Python number converted as a cast to that type converts it: bool, an integer type
    (see _to_integer), a float rounded to the nearest fp32, half or bf16 value (to nearest,
    ties to even; beyond the largest finite value, inf)."""
    if isinstance(v, complex) and code != CAST_BOOL:
        v = v.real  # (a cast of a complex number to a real type keeps its real part, as torch's)
    if code == CAST_BOOL:
        return bool(v)
    if code in _INTEGER_CASTS:
        return _to_integer(v, *_INTEGER_CASTS[code])
    v = float(v)
    if code == CAST_DOUBLE or not math.isfinite(v):
        return v
    fmt = "e" if code == CAST_HALF else "f"
    try:
        (r,) = struct.unpack(fmt, struct.pack(fmt, v))
    except OverflowError:
        return math.copysign(math.inf, v)
    if code == CAST_BFLOAT16:  # from the fp32 value, as torch converts
        (bits,) = struct.unpack("<I", struct.pack("<f", r))
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        (r,) = struct.unpack("<f", struct.pack("<I", bits))
    return r


def _to_integer(v, bits: int, signed: bool) -> int:
    """`v` cast to an integer type of `bits` bits, as torch converts it: an integer wraps
    (two's complement: int32 of 2**31 + 5 is -2**31 + 5, uint64 of -1 is 2**64 - 1), so that a
    scalar has the value a kernel's argument of that type has; a float is truncated toward
    zero, and one the type cannot hold is an error (eager's conversion of it is undefined: x86
    gives int32 of 3e9 as -2**31, a GPU saturates). A float reaches an unsigned type through
    int64, as eager's does (uint64 of -1.0 is 2**64 - 1)."""
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"cannot cast {v} to an integer")
        low, high = (-2**(bits - 1), 2**(bits - 1)) if signed else (-2**63, 2**64)
        if not low <= int(v) < high:
            raise ValueError(f"{v} is out of the range of a{'' if signed else 'n unsigned'} {bits}-bit integer")
    elif not -2**63 <= v < 2**64:  # (an exact integer past a 64-bit type's: no type held it)
        raise ValueError(f"{v} is out of the range of a 64-bit integer")
    v = int(v) % (1 << bits)
    return v - (1 << bits) if signed and v >> (bits - 1) else v


class scalarCast(sympy.Function):
    """A runtime scalar cast to another dtype (args: the value, one of the CAST_ codes): its
    value is converted when the scalar is bound, as eager converts it, never simplified."""

    @classmethod
    def eval(cls, x, code):
        if x.is_Number and x.is_finite:
            v = convert_scalar(int(code), int(x) if x.is_Integer else float(x))
            return sympy.Integer(int(v)) if isinstance(v, (bool, int)) else sympy.Float(v)
        return None


# floatOp's first argument: the operation
FLOAT_ADD, FLOAT_SUB, FLOAT_MUL, FLOAT_MAX, FLOAT_MIN = range(5)
_FLOAT_SIGNS = (" + ", " - ", " * ")


def float_op(code: int, a, b) -> float:
    """IEEE double arithmetic, as eager computes on Python floats (nan propagates through max
    and min, as torch.maximum's)."""
    a, b = float(a), float(b)
    if code == FLOAT_ADD:
        return a + b
    if code == FLOAT_SUB:
        return a - b
    if code == FLOAT_MUL:
        return a * b
    if a != a or b != b:
        return math.nan
    return max(a, b) if code == FLOAT_MAX else min(a, b)


class floatOp(sympy.Function):
    """Arithmetic on floating runtime scalars (args: the FLOAT_ code, the operands), computed
    in IEEE doubles when the scalars are bound and never simplified: sympy's exact algebra
    would turn s - s into 0 for s = nan, or drop a + 0.0 that turns -0.0 into 0.0."""

    @classmethod
    def eval(cls, code, a, b):
        return None


class scalarFn(sympy.Function):
    """A function of runtime scalars (args: its SCALAR_FUNCTIONS code, the operands), computed
    when the scalars are bound, never simplified (as floatOp)."""

    @classmethod
    def eval(cls, code, *args):
        return None


def _norm_index(i: int, n: int) -> int:
    return min(max(i + n if i < 0 else i, 0), n)


def _slice_len(start: int, stop: int, n: int) -> int:
    return max(_norm_index(stop, n) - _norm_index(start, n), 0)


def _tail_len(start: int, n: int) -> int:
    return n - _norm_index(start, n)


def as_extent(value: ExtentLike) -> Extent:
    if isinstance(value, sympy.Basic):
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"an extent must be an int or a sympy expression, got {value!r}")
    return sympy.Integer(value)


def make_symbol(name: str, integer: bool = True, nonnegative: bool = True) -> sympy.Symbol:
    """Extents are non-negative integers; scalar inputs may be any integer (or real)."""
    if integer:
        return sympy.Symbol(name, integer=True, nonnegative=nonnegative) if nonnegative else \
            sympy.Symbol(name, integer=True)
    return sympy.Symbol(name, real=True)


def is_static(e: Extent) -> bool:
    return isinstance(e, sympy.Integer)


def is_symbol(e: Extent) -> bool:
    return isinstance(e, sympy.Symbol)


# ---------------------------------------------------------------------------------------------
# Printing in nvFuser's notation: `i0`, `8`, `( ceilDiv(i0, 3) )`, `( i0 * i2 )`.


def format_extent(e: Extent) -> str:
    """An extent as nvFuser prints it inside `{...}`: atoms bare, derived values in `( ... )`."""
    return _fmt(e, top=True)


@functools.lru_cache(maxsize=8192)
def _fmt(e: Extent, top: bool = False) -> str:
    # (memoized: an expression that holds one subexpression twice, a chain of slices by scalar
    # starts say, printed it once per path, doubling the work per slice)
    if isinstance(e, sympy.Float):
        # sympy writes 15 digits; a double those lose (2.0**53 + 2) prints all of its own, since
        # the printed IR is the structural hash's key
        text = str(e)
        return text if float(text) == float(e) or e != e else repr(float(e))
    if e.is_Atom:
        return str(e)
    return f"( {_fmt_inner(e)} )"


def _fmt_inner(e: Extent) -> str:
    if isinstance(e, ceilDiv):
        return f"ceilDiv({_fmt(e.args[0])}, {_fmt(e.args[1])})"
    if isinstance(e, normIndex):
        return f"normIndex({_fmt(e.args[0])}, {_fmt(e.args[1])})"
    if isinstance(e, sliceLen):
        return f"sliceLen({_fmt(e.args[0])}, {_fmt(e.args[1])}, {_fmt(e.args[2])})"
    if isinstance(e, tailLen):
        return f"tailLen({_fmt(e.args[0])}, {_fmt(e.args[1])})"
    if isinstance(e, scalarCast):
        return f"({_CAST_NAMES[int(e.args[1])]})({_fmt(e.args[0])})"
    if isinstance(e, scalarFn):
        return f"{SCALAR_FUNCTIONS[int(e.args[0])][0]}({', '.join(_fmt(a) for a in e.args[1:])})"
    if isinstance(e, floatOp):
        code, a, b = int(e.args[0]), _fmt(e.args[1]), _fmt(e.args[2])
        return f"{a}{_FLOAT_SIGNS[code]}{b}" if code < len(_FLOAT_SIGNS) else \
            f"{'fmax' if code == FLOAT_MAX else 'fmin'}({a}, {b})"
    if isinstance(e, sympy.Add):
        # positive symbolic terms first, then constants, then subtracted terms: ( i0 + 1 - i2 )
        terms = sorted(e.args, key=lambda t: (t.could_extract_minus_sign(), t.is_Number,
                                              sympy.default_sort_key(t)))
        out = _fmt(terms[0]) if not terms[0].could_extract_minus_sign() else f"-{_fmt(-terms[0])}"
        for t in terms[1:]:
            if t.could_extract_minus_sign():
                out += f" - {_fmt(-t)}"
            else:
                out += f" + {_fmt(t)}"
        return out
    if isinstance(e, sympy.Mul):
        num, den = sympy.fraction(e)
        if den != 1:
            return f"{_fmt(num)} / {_fmt(den)}"
        coeff, rest = e.as_coeff_Mul()
        if coeff == -1:
            return f"-{_fmt(rest)}"
        factors = sorted(e.args, key=lambda t: (t.is_Number, sympy.default_sort_key(t)))
        return " * ".join(_fmt(f) for f in factors)
    if isinstance(e, sympy.floor) and isinstance(e.args[0], sympy.Mul):
        num, den = sympy.fraction(e.args[0])
        return f"{_fmt(num)} / {_fmt(den)}"
    if isinstance(e, sympy.Mod):
        return f"{_fmt(e.args[0])} % {_fmt(e.args[1])}"
    if isinstance(e, (sympy.Max, sympy.Min)):
        name = "max" if isinstance(e, sympy.Max) else "min"
        out = _fmt(e.args[0])
        for a in e.args[1:]:
            out = f"{name}({out}, {_fmt(a)})"
        return out
    if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:
        return " * ".join([_fmt(e.base)] * int(e.exp))
    return str(e)


# ---------------------------------------------------------------------------------------------
# Evaluation: each distinct expression is compiled once to a Python lambda over a dict of
# symbol values, so executions never walk sympy trees.


def _py(e: Extent) -> str:
    if isinstance(e, sympy.Integer):
        return str(int(e))
    if isinstance(e, sympy.Rational):
        return f"({int(e.p)} / {int(e.q)})"
    if isinstance(e, sympy.Float):
        return repr(float(e))
    if e is sympy.nan or e is sympy.oo or e is sympy.S.NegativeInfinity:
        return f"float({str(float(e))!r})"
    if isinstance(e, sympy.Symbol):
        return f"env[{e.name!r}]"
    if e is sympy.true or e is sympy.false:  # a Bool constant's value
        return str(bool(e))
    if e is sympy.I:  # (a complex constant's imaginary unit)
        return "1j"
    if isinstance(e, ceilDiv):
        return f"(-(-{_py(e.args[0])} // {_py(e.args[1])}))"
    if isinstance(e, normIndex):
        return f"_norm_index({_py(e.args[0])}, {_py(e.args[1])})"
    if isinstance(e, sliceLen):
        return f"_slice_len({_py(e.args[0])}, {_py(e.args[1])}, {_py(e.args[2])})"
    if isinstance(e, tailLen):
        return f"_tail_len({_py(e.args[0])}, {_py(e.args[1])})"
    if isinstance(e, scalarCast):
        return f"_convert({int(e.args[1])}, {_py(e.args[0])})"
    if isinstance(e, floatOp):
        return f"_float_op({int(e.args[0])}, {_py(e.args[1])}, {_py(e.args[2])})"
    if isinstance(e, scalarFn):
        return f"_scalar_fn({int(e.args[0])}, {', '.join(_py(a) for a in e.args[1:])})"
    if isinstance(e, sympy.Add):
        return "(" + " + ".join(_py(a) for a in e.args) + ")"
    if isinstance(e, sympy.Mul):
        num, den = sympy.fraction(e)
        if den != 1:
            return f"_div({_py(num)}, {_py(den)})"
        return "(" + " * ".join(_py(a) for a in e.args) + ")"
    if isinstance(e, sympy.Pow):
        return f"({_py(e.base)} ** {_py(e.exp)})"
    if isinstance(e, sympy.floor):
        return f"_floor({_py(e.args[0])})"
    if isinstance(e, sympy.Mod):
        return f"({_py(e.args[0])} % {_py(e.args[1])})"
    if isinstance(e, sympy.Abs):
        return f"abs({_py(e.args[0])})"
    if isinstance(e, sympy.Max):
        return "max(" + ", ".join(_py(a) for a in e.args) + ")"
    if isinstance(e, sympy.Min):
        return "min(" + ", ".join(_py(a) for a in e.args) + ")"
    raise NotImplementedError(f"cannot evaluate extent expression {e}")


def _div(a, b):
    # exact integer division stays integral; otherwise a true quotient (floor applied by caller)
    if isinstance(a, int) and isinstance(b, int) and b != 0 and a % b == 0:
        return a // b
    return a / b


def _floor(x):
    return x if isinstance(x, int) else int(x // 1)


@functools.lru_cache(maxsize=4096)
def compile_extent(e: Extent) -> Callable[[Mapping[str, int]], int]:
    """A fast evaluator of `e`; raises KeyError naming a symbol that has no value."""
    if isinstance(e, sympy.Integer):
        value = int(e)
        return lambda env: value
    src = f"lambda env: {_py(e)}"
    return eval(src, {"_div": _div, "_floor": _floor, "_norm_index": _norm_index, "_slice_len": _slice_len,
                     "_tail_len": _tail_len, "_convert": convert_scalar,
                     "_float_op": float_op, "_scalar_fn": scalar_fn})  # noqa: S307 - source built above


def free_symbol_names(e: Extent) -> set[str]:
    return {s.name for s in e.free_symbols}
