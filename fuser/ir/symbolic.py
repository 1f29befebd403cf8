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


# what a runtime scalar is cast to (scalarCast's second argument)
CAST_BOOL, CAST_INT, CAST_FLOAT, CAST_HALF, CAST_BFLOAT16, CAST_DOUBLE = range(6)
_CAST_NAMES = ("bool", "int64_t", "float", "half", "bfloat16", "double")


def convert_scalar(code: int, v):
    """A Python number converted as a cast to that type converts it: bool, an integer
    truncated toward zero, a float rounded to the nearest fp32, half or bf16 value (to nearest,
    ties to even; beyond the largest finite value, inf)."""
    if code == CAST_BOOL:
        return bool(v)
    if code == CAST_INT:
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"cannot cast {v} to an integer")
        return int(v)
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


def _ieee(fn, v: float) -> float:
    """`fn(v)` in IEEE doubles, where Python's math raises instead (1/0, log(0), sqrt(-1))."""
    try:
        return fn(v)
    except ZeroDivisionError:
        return math.copysign(math.inf, v)
    except OverflowError:
        return math.inf
    except ValueError:  # out of the domain (a pole's is handled by the function)
        return math.nan


def _trunc_div(a, b):
    """C's division: integers truncate toward zero (by zero raises), floats divide in IEEE."""
    if isinstance(a, float) or isinstance(b, float):
        return _true_divide(a, b)
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _true_divide(a, b) -> float:
    a, b = float(a), float(b)
    if b == 0:  # IEEE: x / +-0 is +-inf by the signs, 0 / 0 is nan
        return math.nan if a == 0 or a != a else math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _fmod(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return math.nan if b == 0 or math.isinf(a) else math.fmod(a, b)
    return a - b * _trunc_div(a, b)


def _remainder(a, b):  # with the divisor's sign, as torch.remainder
    if b == 0:
        return math.nan if isinstance(a, float) or isinstance(b, float) else a % b  # (int: raises)
    return a % b


def _pow(a, b):
    if not (isinstance(a, float) or isinstance(b, float)) and b >= 0:
        return a ** b
    a, b = float(a), float(b)
    odd = b.is_integer() and b % 2 == 1
    try:
        r = a ** b
    except ZeroDivisionError:  # 0 ** negative
        return math.copysign(math.inf, a) if odd else math.inf
    except OverflowError:
        return -math.inf if a < 0 and odd else math.inf
    return math.nan if isinstance(r, complex) else r


def _exact_int(v) -> int:
    if isinstance(v, float) and not v.is_integer():
        raise ValueError(f"{v} is not an integer")
    return int(v)


def _log(fn):  # -inf at zero, nan below
    return lambda u: -math.inf if u == 0 else fn(u)


def _as_float(fn):
    return lambda v: _ieee(fn, float(v))


def _rounding(fn):  # floor, ceil, trunc, round keep a float a float (and inf, nan as they are)
    return lambda v: float(fn(v)) if isinstance(v, float) and math.isfinite(v) else v


def _sigmoid(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-v)) if v >= 0 else math.exp(v) / (1.0 + math.exp(v))


# scalarFn's first argument: the function, by its index here (its name is the op's). Each
# computes on the bound Python values (float functions in IEEE doubles, as eager computes on
# Python floats; integer ones exactly); the result's dtype is decided where the op is defined.
SCALAR_FUNCTIONS = (
    ("reciprocal", _as_float(lambda u: 1.0 / u)),
    ("sqrt", _as_float(math.sqrt)),
    ("rsqrt", _as_float(lambda u: 1.0 / math.sqrt(u))),
    ("exp", _as_float(math.exp)),
    ("log", _as_float(_log(math.log))),
    ("exp2", _as_float(lambda u: 2.0 ** u)),
    ("expm1", _as_float(math.expm1)),
    ("log2", _as_float(_log(math.log2))),
    ("log10", _as_float(_log(math.log10))),
    ("log1p", _as_float(lambda u: -math.inf if u == -1 else math.log1p(u))),
    ("sin", _as_float(math.sin)),
    ("cos", _as_float(math.cos)),
    ("tan", _as_float(math.tan)),
    ("tanh", _as_float(math.tanh)),
    ("asin", _as_float(math.asin)),
    ("acos", _as_float(math.acos)),
    ("atan", _as_float(math.atan)),
    ("sinh", _as_float(lambda u: math.copysign(math.inf, u) if abs(u) > 711 else math.sinh(u))),
    ("cosh", _as_float(math.cosh)),
    ("asinh", _as_float(math.asinh)),
    ("acosh", _as_float(math.acosh)),
    ("atanh", _as_float(lambda u: math.copysign(math.inf, u) if abs(u) == 1 else math.atanh(u))),
    ("erf", _as_float(math.erf)),
    ("erfc", _as_float(math.erfc)),
    ("lgamma", _as_float(lambda u: math.inf if u <= 0 and u.is_integer() else math.lgamma(u))),
    ("sigmoid", _as_float(_sigmoid)),
    ("neg", lambda v: -v),
    ("abs", abs),
    ("floor", _rounding(math.floor)),
    ("ceil", _rounding(math.ceil)),
    ("trunc", _rounding(math.trunc)),
    ("round", _rounding(round)),  # half to even, as torch.round
    ("signbit", lambda v: math.copysign(1.0, v) < 0 if isinstance(v, float) else v < 0),
    ("isnan", lambda v: v != v),
    ("isinf", lambda v: isinstance(v, float) and math.isinf(v)),
    ("isfinite", lambda v: not isinstance(v, float) or math.isfinite(v)),
    ("isposinf", lambda v: v == math.inf),
    ("isneginf", lambda v: v == -math.inf),
    ("logical_not", lambda v: not v),
    ("bitwise_not", lambda v: (not v) if isinstance(v, bool) else ~v),
    ("exact_int", _exact_int),  # a floating scalar used as a size
    # binary
    ("eq", lambda a, b: a == b),
    ("ne", lambda a, b: a != b),
    ("lt", lambda a, b: a < b),
    ("le", lambda a, b: a <= b),
    ("gt", lambda a, b: a > b),
    ("ge", lambda a, b: a >= b),
    ("logical_and", lambda a, b: bool(a) and bool(b)),
    ("logical_or", lambda a, b: bool(a) or bool(b)),
    ("bitwise_and", lambda a, b: a & b),
    ("bitwise_or", lambda a, b: a | b),
    ("bitwise_xor", lambda a, b: a ^ b),
    ("div", _trunc_div),
    ("truediv", _true_divide),
    ("fmod", _fmod),
    ("mod", _fmod),  # (C's `%` of integers)
    ("remainder", _remainder),
    ("pow", _pow),
    ("atan2", lambda a, b: math.atan2(float(a), float(b))),
    ("nextafter", lambda a, b: math.nextafter(float(a), float(b))),
    ("gcd", math.gcd),
    ("bitwise_left_shift", lambda a, b: a << b),
    ("bitwise_right_shift", lambda a, b: a >> b),
    # ternary
    ("where", lambda c, a, b: a if c else b),
)
SCALAR_FUNCTION_CODES = {name: k for k, (name, _) in enumerate(SCALAR_FUNCTIONS)}


def scalar_fn(code: int, *args):
    return SCALAR_FUNCTIONS[code][1](*args)


class scalarFn(sympy.Function):
    """A function of runtime scalars (args: its SCALAR_FUNCTIONS code, the operands), computed
    when the scalars are bound, never simplified (as floatOp)."""

    @classmethod
    def eval(cls, code, *args):
        return None


def _norm_index(i: int, n: int) -> int:
    return min(max(i + n if i < 0 else i, 0), n)


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


def _fmt(e: Extent, top: bool = False) -> str:
    if e.is_Atom:
        return str(e)
    return f"( {_fmt_inner(e)} )"


def _fmt_inner(e: Extent) -> str:
    if isinstance(e, ceilDiv):
        return f"ceilDiv({_fmt(e.args[0])}, {_fmt(e.args[1])})"
    if isinstance(e, normIndex):
        return f"normIndex({_fmt(e.args[0])}, {_fmt(e.args[1])})"
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
    if isinstance(e, ceilDiv):
        return f"(-(-{_py(e.args[0])} // {_py(e.args[1])}))"
    if isinstance(e, normIndex):
        return f"_norm_index({_py(e.args[0])}, {_py(e.args[1])})"
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
    return eval(src, {"_div": _div, "_floor": _floor, "_norm_index": _norm_index, "_convert": convert_scalar,
                     "_float_op": float_op, "_scalar_fn": scalar_fn})  # noqa: S307 - source built above


def free_symbol_names(e: Extent) -> set[str]:
    return {s.name for s in e.free_symbols}
