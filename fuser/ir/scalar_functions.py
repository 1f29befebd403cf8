"""What ops on scalars only compute when their inputs are bound (symbolic.scalarFn's functions):
floats in IEEE doubles, as eager computes on Python floats, where Python's math would raise
(1 / 0.0, log(0.0), sqrt(-1.0)); integers exactly, with C's truncating division."""
from __future__ import annotations

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
        # integers: the exact power truncated toward zero (a scalar of an integer type holds it)
        if a == 0:
            raise ZeroDivisionError("0 to a negative integer power")
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
