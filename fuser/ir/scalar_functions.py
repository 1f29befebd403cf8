"""What ops on scalars only compute when their inputs are bound (symbolic.scalarFn's functions):
floats in IEEE doubles, as eager computes on Python floats, where Python's math would raise
(1 / 0.0, log(0.0), sqrt(-1.0)); integers exactly, with C's truncating division."""
from __future__ import annotations

import cmath
import math


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
    if not (isinstance(a, float) or isinstance(b, float)):
        if b >= 0:
            return a ** b
        # integers: the exact power truncated toward zero (a scalar of an integer type holds it),
        # and 0 for 0 ** negative, as eager's pow of 0-dim integer tensors
        return 1 if a == 1 or (a == -1 and b % 2 == 0) else -1 if a == -1 else 0
    a, b = float(a), float(b)
    odd = b.is_integer() and b % 2 == 1
    try:
        r = a ** b
    except ZeroDivisionError:  # 0 ** negative
        return math.copysign(math.inf, a) if odd else math.inf
    except OverflowError:
        return -math.inf if a < 0 and odd else math.inf
    return math.nan if isinstance(r, complex) else r


# Shifts as eager's of 0-dim integer tensors: a count outside [0, 64) shifts every bit out,
# where Python refuses a negative one (an Int32 count in [32, 64) leaves a value past its range)
_SHIFT_BITS = 64


def _left_shift(a: int, b: int) -> int:
    return a << b if 0 <= b < _SHIFT_BITS else 0


def _right_shift(a: int, b: int) -> int:  # (Python's >> is arithmetic: a negative value keeps -1)
    return a >> b if 0 <= b < _SHIFT_BITS else -1 if a < 0 else 0


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


def _silu(v: float) -> float:  # x / (1 + e^-x), as eager's (-inf gives nan, e^-x overflowing to inf)
    return v / (1.0 + _ieee(math.exp, -v))


def _relu(v):  # nan and -0.0 stay as they are (eager's); an integer stays an integer
    return type(v)(0) if v < 0 else v


def _sign(v):  # (0 < v) - (v < 0), as eager's: nan gives 0; a bool stays a bool, an int an int
    if isinstance(v, bool):
        return v
    s = (0 < v) - (v < 0)
    return float(s) if isinstance(v, float) else s


def _frac(v: float) -> float:  # v - trunc(v): inf gives nan, as eager's
    return v - math.trunc(v) if math.isfinite(v) else math.nan


# erfinv and erfcinv (Python's math has neither): Giles's single-precision approximation
# ("Approximating the erfinv function", 2010), polished by Newton's method in doubles. Near
# +-1 (erfinv) or in the tails (erfcinv) the residual is taken of erfc in logs, where erf's
# rounding near 1 would hide the last bits; 1 - v and 2 - x are exact in those ranges.
_GILES_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                  -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_GILES_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
               -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _giles(v: float, w: float) -> float:
    """erfinv(v) to about single precision, w being -log((1 - v)(1 + v))."""
    coefficients, w = (_GILES_CENTRAL, w - 2.5) if w < 5.0 else (_GILES_TAIL, math.sqrt(w) - 3.0)
    p = 0.0
    for c in coefficients:
        p = c + p * w
    return p * v


def _erfinv(v: float) -> float:
    if not -1.0 <= v <= 1.0:  # (nan included)
        return math.nan
    if abs(v) == 1.0:
        return math.copysign(math.inf, v)
    if abs(v) > 0.5:
        return math.copysign(_erfc_tail(1.0 - abs(v)), v)
    y = _giles(v, -math.log1p(-v * v))
    for _ in range(3):
        y -= (math.erf(y) - v) / (_TWO_OVER_SQRT_PI * math.exp(-y * y))
    return y


def _erfcinv(x: float) -> float:
    """The y with erfc(y) = x, as eager's -ndtri(x / 2) / sqrt(2) (ops take it from ATen)."""
    if not 0.0 <= x <= 2.0:
        return math.nan
    if x / 2 == 0.0 or x == 2.0:  # (the least subnormal too, whose half ndtri takes as 0)
        return math.copysign(math.inf, 1.0 - x)
    if 0.5 <= x <= 1.5:
        return _erfinv(1.0 - x)
    return -_erfc_tail(2.0 - x) if x > 1.0 else _erfc_tail(x)


def _erfcx(y: float, erfc_y: float) -> float:
    """erfc(y) e^(y^2), the ratio of erfc to its derivative's magnitude (times 2 / sqrt(pi)); past
    e^(-y^2)'s range, its asymptotic series (within 1e-6 there: enough for a Newton step)."""
    g = math.exp(-y * y)
    return erfc_y / g if g > 1e-300 else (1.0 - 0.5 / (y * y)) / (y * math.sqrt(math.pi))


def _erfc_tail(x: float) -> float:
    """The y > 0 with erfc(y) = x, for 0 < x < 0.5: Newton on log(erfc(y)) - log(x)."""
    w = -math.log(x * (2.0 - x))
    if w < 25.0:
        y = _giles(1.0 - x, w)
    else:  # (past the approximation's range) from x ~ e^(-y^2) / (y sqrt(pi))
        y = math.sqrt(w)
        for _ in range(2):
            y = math.sqrt(w - math.log(y * math.sqrt(math.pi)))
    for _ in range(6):
        e = math.erfc(y)
        if e == 0.0:  # (past erfc's range: x is subnormal)
            break
        step = (math.log(x) - math.log(e)) * _erfcx(y, e) / _TWO_OVER_SQRT_PI
        y -= step
        if abs(step) <= 1e-16 * y:
            break
    return y


def _clamp(v, low, high):  # nan in any gives nan, as eager's; low above high gives high
    if v != v or low != low or high != high:
        return math.nan
    return min(max(v, low), high)


def _lerp(start, end, weight):  # eager's form, exact at both ends (complex weights by magnitude)
    if abs(weight) < 0.5:
        return start + weight * (end - start)
    return end - (end - start) * (1 - weight)


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
    ("silu", _as_float(_silu)),
    ("erfinv", _as_float(_erfinv)),
    ("erfcinv", _as_float(_erfcinv)),
    ("frac", _frac),
    ("relu", _relu),
    ("sign", _sign),
    ("neg", lambda v: -v),
    ("abs", abs),
    ("floor", _rounding(math.floor)),
    ("ceil", _rounding(math.ceil)),
    ("trunc", _rounding(math.trunc)),
    ("round", _rounding(round)),  # half to even, as torch.round
    ("signbit", lambda v: math.copysign(1.0, v) < 0 if isinstance(v, float) else v < 0),
    ("isnan", lambda v: v != v),
    ("isinf", lambda v: isinstance(v, (float, complex)) and cmath.isinf(v)),
    ("isfinite", lambda v: not isinstance(v, (float, complex)) or cmath.isfinite(v)),
    ("isreal", lambda v: not isinstance(v, complex) or v.imag == 0),  # (nan's imag is not real)
    ("real", lambda v: v.real),
    ("imag", lambda v: v.imag),
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
    ("bitwise_left_shift", _left_shift),
    ("bitwise_right_shift", _right_shift),
    # ternary
    ("where", lambda c, a, b: a if c else b),
    ("clamp", _clamp),
    ("lerp", _lerp),
)
SCALAR_FUNCTION_CODES = {name: k for k, (name, _) in enumerate(SCALAR_FUNCTIONS)}


def scalar_fn(code: int, *args):
    return SCALAR_FUNCTIONS[code][1](*args)
