"""Math lowering per target, in one place.

Two targets: "cuda" (compiled Triton; libdevice available) and "interpreter" (Triton's
interpreter on CPU tensors; no extern functions, so libdevice functions are written with
`tl` builtins). A None entry means the op has no lowering on that target: the segmenter keeps
it in an evaluator segment. Each entry is a format string over the operand code `{x}` (and
`{y}` for binary ops), evaluated in fp32 (or fp64) compute types.
"""
from __future__ import annotations

import functools
import re
from typing import Optional

from ..ir import BinaryOpType, DataType, UnaryOpType

CUDA, INTERPRETER = "cuda", "interpreter"
U, B = UnaryOpType, BinaryOpType

_COMMON_UNARY = {
    U.abs: "tl.abs({x})", U.neg: "(-{x})", U.exp: "tl.exp({x})", U.exp2: "tl.exp2({x})",
    U.log: "tl.log({x})", U.log2: "tl.log2({x})", U.sqrt: "tl.sqrt({x})", U.rsqrt: "tl.rsqrt({x})",
    U.reciprocal: "(1.0 / {x})", U.sin: "tl.sin({x})", U.cos: "tl.cos({x})",
    U.sigmoid: "(1.0 / (1.0 + tl.exp(-{x})))", U.relu: "tl.where({x} < 0, 0, {x})",
    U.silu: "({x} / (1.0 + tl.exp(-{x})))", U.erf: "tl.math.erf({x})",
    U.floor: "tl.floor({x})", U.ceil: "tl.ceil({x})",
    U.sign: "tl.where({x} > 0, 1, tl.where({x} < 0, -1, 0)).to({x}.dtype)",
    U.isnan: "({x} != {x})", U.isinf: "(tl.abs({x}) == float('inf'))",
    U.isfinite: "(tl.abs({x}) < float('inf'))", U.logical_not: "({x} == 0)",
    U.bitwise_not: "(~{x})",
}

_UNARY = {
    CUDA: {
        **_COMMON_UNARY,
        U.tanh: "libdevice.tanh({x})", U.log1p: "libdevice.log1p({x})",
        U.expm1: "libdevice.expm1({x})", U.round: "libdevice.rint({x})",
        U.trunc: "libdevice.trunc({x})", U.tan: "libdevice.tan({x})",
        U.log10: "libdevice.log10({x})",
    },
    INTERPRETER: {
        **_COMMON_UNARY,
        U.tanh: "_tanh({x})",
        # log(u) * x / (u - 1) keeps log1p accurate for tiny x (Goldberg's trick)
        U.log1p: "_log1p({x})", U.expm1: "_expm1({x})", U.round: "_rint({x})",
        U.trunc: "tl.where({x} < 0, tl.ceil({x}), tl.floor({x}))",
        U.tan: "(tl.sin({x}) / tl.cos({x}))", U.log10: "(tl.log2({x}) * 0.30102999566398120)",
    },
}

# the inverse trigonometric and hyperbolic functions, special functions and float classes
# (ops/math.py's group): libdevice on CUDA; on the interpreter tl formulas accurate to a few ulp
# in fp32 (measured against fp64 over dense grids: atan 2.7, asin 3.9, acos 3.6, sinh 2.4,
# cosh 1.8, asinh 2.4, acosh 2.8, atanh 2.9), None where there is no robust one (erfc's tail,
# erfinv, erfcinv, lgamma: those stay in ATen on CPU)
_MATH_COMMON_UNARY = {
    U.signbit: "_signbit({x})", U.isneginf: "({x} == float('-inf'))",
    U.isposinf: "({x} == float('inf'))", U.isreal: "(({x} == {x}) | ({x} != {x}))",
}
_UNARY[CUDA].update({
    **_MATH_COMMON_UNARY,
    **{k: f"libdevice.{k.value}({{x}})" for k in (U.acos, U.acosh, U.asin, U.asinh, U.atan, U.atanh,
                                                U.cosh, U.sinh, U.erfc, U.erfinv, U.erfcinv, U.lgamma)},
    U.frac: "({x} - libdevice.trunc({x}))",
})
_UNARY[INTERPRETER].update({
    **_MATH_COMMON_UNARY,
    U.atan: "_atan({x})", U.asin: "_atan({x} / tl.sqrt((1.0 - {x}) * (1.0 + {x})))",
    U.acos: "(2.0 * _atan(tl.sqrt((1.0 - {x}) / (1.0 + {x}))))",
    U.sinh: "_sinh({x})", U.cosh: "_cosh({x})", U.asinh: "_asinh({x})", U.acosh: "_acosh({x})",
    U.atanh: "_atanh({x})", U.frac: "({x} - tl.where({x} < 0, tl.ceil({x}), tl.floor({x})))",
    U.erfc: None, U.erfinv: None, U.erfcinv: None, U.lgamma: None,
})
# the interpreter's atan (and asin, acos) is a polynomial for fp32, its pow exp2(b log2 |a|)
# (tens of ulp off at fp64: 7.0 ** 3.0 was 343.00000000000017): fp64 stays in ATen there
_FP32_ONLY = {CUDA: frozenset(), INTERPRETER: frozenset({U.atan, U.asin, U.acos, B.pow})}

_COMMON_BINARY = {
    B.add: "({x} + {y})", B.sub: "({x} - {y})", B.mul: "({x} * {y})", B.div: "({x} / {y})",
    B.maximum: "tl.maximum({x}, {y}, propagate_nan=tl.PropagateNan.ALL)",
    B.minimum: "tl.minimum({x}, {y}, propagate_nan=tl.PropagateNan.ALL)",
    B.fmod: "({x} % {y})", B.remainder: "_remainder({x}, {y})",
    B.eq: "({x} == {y})", B.ne: "({x} != {y})", B.lt: "({x} < {y})", B.le: "({x} <= {y})",
    B.gt: "({x} > {y})", B.ge: "({x} >= {y})",
    B.logical_and: "(({x} != 0) & ({y} != 0))", B.logical_or: "(({x} != 0) | ({y} != 0))",
    B.bitwise_and: "({x} & {y})", B.bitwise_or: "({x} | {y})", B.bitwise_xor: "({x} ^ {y})",
}

_BINARY = {
    CUDA: {**_COMMON_BINARY, B.pow: "libdevice.pow({x}, {y})", B.atan2: "libdevice.atan2({x}, {y})"},
    INTERPRETER: {**_COMMON_BINARY, B.pow: "_pow({x}, {y})", B.atan2: None},
}
# div of integers (nvFuser's C division, truncating; Triton's // on integers truncates too),
# mod (C's %, integers only), shifts as eager shifts (a shift outside [0, bits) shifts
# everything out, where LLVM's would be undefined), Euclid's gcd
_MATH_COMMON_BINARY = {
    B.truediv: "({x} / {y})", B.mod: "({x} % {y})", B.gcd: "_gcd({x}, {y})",
    B.bitwise_left_shift: "_shl({x}, {y})", B.bitwise_right_shift: "_shr({x}, {y})",
    B.logical_right_shift: "_lshr({x}, {y})",
}
_BINARY[CUDA].update({**_MATH_COMMON_BINARY, B.nextafter: "libdevice.nextafter({x}, {y})"})
_BINARY[INTERPRETER].update({**_MATH_COMMON_BINARY, B.nextafter: "_nextafter({x}, {y})"})
_INTEGER_BINARY = {B.div: "({x} // {y})"}  # the lowering where the operands are integers
# a half or bf16 nextafter steps in its own type, which kernels hold in fp32: ATen runs those
_FP32_FP64_ONLY_BINARY = frozenset({B.nextafter})

# helpers the interpreter lowerings call; emitted into every kernel module that needs them
HELPERS = '''
@triton.jit
def _remainder(a, b):
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


@triton.jit
def _log1p(x):
    u = 1.0 + x
    res = tl.where(u == 1.0, x, tl.log(u) * (x / (u - 1.0)))
    return tl.where(u == float('inf'), u, res)


@triton.jit
def _expm1(x):
    u = tl.exp(x)
    um1 = u - 1.0
    res = tl.where(u == 1.0, x, tl.where(um1 == -1.0, -1.0, um1 * (x / tl.log(u))))
    return tl.where(u == float('inf'), u, res)


@triton.jit
def _rint(x):
    # halves to even, from |x|'s floor and fraction, both exact (x + 0.5 is not: it makes odd
    # integers from 2^23 in fp32 and 2^52 in fp64 even, and 0.49999997 + 0.5 is 1.0 in fp32);
    # magnitudes that large have no fraction and come back unchanged (inf too: its fraction is NaN)
    a = tl.abs(x)
    r = tl.floor(a)
    d = a - r
    r = tl.where((d > 0.5) | ((d == 0.5) & (r % 2 != 0)), r + 1.0, r)
    return tl.where(x < 0, -r, tl.where(x == 0, x, r))  # round(-0.3) is -0.0, as rint gives


@triton.jit
def _pow(a, b):
    # in fp64 (the interpreter has it): in fp32, exp2(log2) misses x ** 1 and x ** 2 by an ulp
    mag = tl.exp2(b.to(tl.float64) * tl.log2(tl.abs(a).to(tl.float64))).to(a.dtype)
    b_int = tl.floor(b) == b
    b_odd = b_int & (tl.abs(b % 2.0) == 1.0)
    neg = _signbit(a) & (a == a)  # (-0.0 too: (-0.0) ** -1 is -inf)
    res = tl.where(neg & b_odd, -mag, mag)
    res = tl.where((a < 0) & (~b_int) & (a != float('-inf')), float('nan'), res)  # (-inf) ** 2.5 is inf
    # C99's exact cases: 1 ** anything (nan too) and (-1) ** +-inf are 1, as x ** 0 is
    return tl.where((b == 0) | (a == 1.0) | ((a == -1.0) & (tl.abs(b) == float('inf'))), 1.0, res)


@triton.jit
def _round_bf16(x):
    # fp32 rounded to the nearest bf16 (ties to even), still held in fp32; NaN kept
    bits = x.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return tl.where(x != x, x, bits.to(tl.float32, bitcast=True))


@triton.jit
def _to_e4m3(x, SATURATE: tl.constexpr):
    # fp32 to float8_e4m3fn as torch converts it: the hardware's cvt.rn.satfinite rounds to
    # nearest even and turns inf and overflow into +-448, which torch does too where it
    # saturates (SATURATE); where it does not, past 464 (rounding up to the NaN code) is NaN.
    # NaN keeps its sign, as in torch.
    r = x.to(tl.float8e4nv).to(tl.uint8, bitcast=True)
    bits = x.to(tl.uint32, bitcast=True)
    a = bits & 0x7FFFFFFF
    if SATURATE:
        nan = a > 0x7F800000
    else:
        nan = a > 0x43E80000
    r = tl.where(nan, ((bits >> 24) & 0x80).to(tl.uint8) | 0x7F, r)
    return r.to(tl.float8e4nv, bitcast=True)


@triton.jit
def _to_e5m2(x):
    # fp32 to float8_e5m2 as torch converts it: cvt.rn.satfinite rounds to nearest even but
    # turns inf and overflow into +-57344, where torch gives inf from 61440 (which rounds up
    # past 57344) on; NaN keeps its sign
    r = x.to(tl.float8e5).to(tl.uint8, bitcast=True)
    bits = x.to(tl.uint32, bitcast=True)
    a = bits & 0x7FFFFFFF
    sign = ((bits >> 24) & 0x80).to(tl.uint8)
    r = tl.where(a >= 0x47700000, sign | 0x7C, r)
    r = tl.where(a > 0x7F800000, sign | 0x7F, r)
    return r.to(tl.float8e5, bitcast=True)


@triton.jit
def _to_e4m3_emulated(x, SATURATE: tl.constexpr):
    # the interpreter truncates to fp8 and wraps past its range: torch's conversion in integer
    # steps. Below 2^-6 (subnormal) adding 2^14 rounds to the 2^-9 steps; above, the exponent is
    # rebiased and the 20 dropped mantissa bits rounded to nearest even.
    bits = x.to(tl.uint32, bitcast=True)
    a = bits & 0x7FFFFFFF
    sub = (a.to(tl.float32, bitcast=True) + 16384.0).to(tl.uint32, bitcast=True) - (141 << 23)
    normal = (a - (120 << 23) + 0x7FFFF + ((a >> 20) & 1)) >> 20
    r = tl.where(a < (121 << 23), sub, normal)
    if SATURATE:
        r = tl.where(a > 0x7F800000, 0x7F, tl.where((a >= (1087 << 20)) | (r == 0x7F), 0x7E, r))
    else:
        r = tl.where(a >= (1087 << 20), 0x7F, r)
    r = r | ((bits >> 24) & 0x80)
    return r.to(tl.uint8).to(tl.float8e4nv, bitcast=True)


@triton.jit
def _to_e5m2_emulated(x):
    # as _to_e4m3_emulated: subnormals below 2^-14 in steps of 2^-16; 65536 and above (and inf)
    # is inf, NaN is NaN; rounding from 61440 up reaches the inf code by itself
    bits = x.to(tl.uint32, bitcast=True)
    a = bits & 0x7FFFFFFF
    sub = (a.to(tl.float32, bitcast=True) + 128.0).to(tl.uint32, bitcast=True) - (134 << 23)
    normal = (a - (112 << 23) + 0xFFFFF + ((a >> 21) & 1)) >> 21
    r = tl.where(a < (113 << 23), sub, normal)
    r = tl.where(a >= (143 << 23), tl.where(a > 0x7F800000, 0x7F, 0x7C), r)
    r = r | ((bits >> 24) & 0x80)
    return r.to(tl.uint8).to(tl.float8e5, bitcast=True)


@triton.jit
def _from_fp8_emulated(x):
    # the interpreter converts fp8 codes exactly but for the special ones, which it reads as
    # numbers (e4m3fn's NaN as 480, e5m2's inf and NaN as 65536 and up): those made from bits
    b = x.to(tl.uint8, bitcast=True).to(tl.uint32)
    sign = (b & 0x80) << 24
    if x.dtype == tl.float8e4nv:
        special = (b & 0x7F) == 0x7F
        code = sign | 0x7FC00000
    else:
        special = (b & 0x7C) == 0x7C
        code = sign | tl.where((b & 0x3) == 0, 0x7F800000, 0x7FC00000)
    return tl.where(special, code.to(tl.float32, bitcast=True), x.to(tl.float32))


@triton.jit
def _exp_flush(x):
    # exp whose results below 2^-126 are flushed to zero: ex2.approx.ftz.f32 alone, where
    # tl.exp's ex2.approx.f32 costs a compare and two multiplies more (kept subnormals)
    if x.dtype == tl.float32:
        return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [x * 1.4426950408889634],
                                         dtype=tl.float32, is_pure=True, pack=1)
    else:
        return tl.exp(x)


@triton.jit
def _exp_flush_emulated(x):
    # the interpreter's flushing exp (no inline assembly there), so CPU tests see the flush
    r = tl.exp(x)
    if x.dtype == tl.float32:
        r = tl.where(r < 1.1754943508222875e-38, 0.0, r)
    return r


@triton.jit
def _tanh(x):
    # (1 - e) / (1 + e) with e = exp(-2|x|) <= 1: never overflows, absolute error about 1e-7
    # (fast division and exp on CUDA); below |x| = 1/16, where 1 - e cancels, the odd series to
    # x^5 (relative error under 1e-8; in fp64 to x^13)
    ax = tl.abs(x)
    e = tl.exp(-2.0 * ax)
    t = (1.0 - e) / (1.0 + e)
    x2 = x * x
    if x.dtype == tl.float64:
        # (the interpreter's fp64) the series to x^13, each coefficient an fp64 quotient of
        # exact integers (a float literal would be rounded to fp32): relative error ~1e-16
        one = x2 * 0.0 + 1.0
        p = one * 21844.0 / 6081075.0
        p = x2 * p - one * 1382.0 / 155925.0
        p = x2 * p + one * 62.0 / 2835.0
        p = x2 * p - one * 17.0 / 315.0
        p = x2 * p + one * 2.0 / 15.0
        p = x2 * p - one / 3.0
        series = x * (1.0 + x2 * p)
    else:
        series = x * (1.0 + x2 * (-0.333333343 + x2 * 0.133333340))
    return tl.where(ax < 0.0625, series, tl.where(x < 0, -t, t))


@triton.jit
def _tanh_near_one(x):
    # 1 - 2 / (1 + exp(2x)): absolute error about 1e-7 (exp overflows to inf where the result
    # is 1), but near 0 only absolutely accurate; for a tanh only added to a constant of size
    # about 1 (GELU's 1 + tanh and 1 - tanh^2), where that is all that shows
    return 1.0 - 2.0 / (1.0 + tl.exp(2.0 * x))


@triton.jit
def _max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _min_nan(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _welford_combine(mean1, m2_1, n1, mean2, m2_2, n2):
    n = n1 + n2
    w = tl.where(n == 0, 0.0, n2 / tl.where(n == 0, 1.0, n))
    delta = mean2 - mean1
    mean = mean1 + delta * w
    m2 = m2_1 + m2_2 + delta * delta * n1 * w
    # an empty side keeps the other as it is (as ATen's combine): with a mean past the square
    # root of the type's largest value, delta * delta overflows and inf * 0 was NaN
    mean = tl.where(n2 == 0, mean1, tl.where(n1 == 0, mean2, mean))
    m2 = tl.where(n2 == 0, m2_1, tl.where(n1 == 0, m2_2, m2))
    return mean, m2, n


@triton.jit
def _welford_mean(mean, m2, n):
    # ATen's Welford mean turns NaN once an inf meets another element (delta = x - inf), and
    # such a row always has a NaN m2: so a NaN m2 over more than one element makes the mean
    # NaN, whatever the order (ATen keeps inf for one position a row, which its reduction
    # order picks: the last element on CPU, another on CUDA)
    return tl.where((m2 != m2) & (n > 1), float('nan'), mean)


@triton.jit
def _argmax_pair(v1, i1, v2, i2):
    # the larger value (NaN the largest), or the earlier position of equal ones (codegen/online_arg.py)
    nan1 = v1 != v1
    nan2 = v2 != v2
    tie = (v1 == v2) | (nan1 & nan2)
    second = (v2 > v1) | (nan2 & ~nan1) | (tie & (i2 < i1))
    return tl.where(second, v2, v1), tl.where(second, i2, i1)


@triton.jit
def _argmin_pair(v1, i1, v2, i2):
    # the smaller value (NaN the smallest), or the earlier position of equal ones
    nan1 = v1 != v1
    nan2 = v2 != v2
    tie = (v1 == v2) | (nan1 & nan2)
    second = (v2 < v1) | (nan2 & ~nan1) | (tie & (i2 < i1))
    return tl.where(second, v2, v1), tl.where(second, i2, i1)


@triton.jit
def _sum_pair(a0, b0, a1, b1):
    # two sums in one tl.reduce: one set of cross-warp steps for both
    return a0 + a1, b0 + b1


@triton.jit
def _atan(x):
    # Cephes' atanf: reduced to |t| <= tan(pi/8) around 0, pi/4 or pi/2, then an odd
    # polynomial; within 2.7 ulp of atan in fp32 (atan(+-inf) is +-pi/2, NaN stays)
    ax = tl.abs(x)
    big = ax > 2.414213562373095
    mid = (ax > 0.4142135623730950) & (~big)
    t = tl.where(big, -1.0 / ax, tl.where(mid, (ax - 1.0) / (ax + 1.0), ax))
    base = tl.where(big, 1.5707963267948966, tl.where(mid, 0.7853981633974483, 0.0))
    z = t * t
    r = base + ((((0.0805374449538 * z - 0.138776856032) * z + 0.199777106478) * z - 0.333329491539) * z * t + t)
    return tl.where(x < 0, -r, tl.where(x == 0, x, r))  # (-0.0 kept: asin's too)


@triton.jit
def _sinh(x):
    # (e + e / (e + 1)) / 2 with e = expm1(|x|): no cancellation near 0; past |x| = 20 (where
    # the e^-|x| term is below an fp64 ulp) exp(|x| / 2)^2 / 2, finite up to fp32's 89.4
    ax = tl.abs(x)
    e = _expm1(ax)
    h = tl.exp(0.5 * ax)
    r = tl.where(ax > 20.0, (0.5 * h) * h, 0.5 * (e + e / (e + 1.0)))
    return tl.where(x < 0, -r, tl.where(x == 0, x, r))  # (-0.0 kept)


@triton.jit
def _cosh(x):
    ax = tl.abs(x)
    e = tl.exp(ax)
    h = tl.exp(0.5 * ax)
    return tl.where(ax > 20.0, (0.5 * h) * h, 0.5 * e + 0.5 / e)


@triton.jit
def _asinh(x):
    # log1p(a + a^2 / (1 + sqrt(1 + a^2))) = log(a + sqrt(1 + a^2)) without cancellation near
    # 0; past 2^28 (where a^2 would overflow and 1 + a^2 is a^2) log(2a)
    ax = tl.abs(x)
    r = tl.where(ax > 268435456.0, tl.log(ax) + 0.6931471805599453,
                 _log1p(ax + ax * ax / (1.0 + tl.sqrt(1.0 + ax * ax))))
    return tl.where(x < 0, -r, tl.where(x == 0, x, r))  # (-0.0 kept)


@triton.jit
def _acosh(x):
    # log1p(t + sqrt(2t + t^2)), t = x - 1 (exact near 1); past 2^28 log(2x); x < 1 is NaN
    # (selected: below -1, 2t + t^2 turns positive and the formula gives a number)
    t = x - 1.0
    r = tl.where(x > 268435456.0, tl.log(x) + 0.6931471805599453, _log1p(t + tl.sqrt(2.0 * t + t * t)))
    return tl.where(x < 1.0, float('nan'), r)


@triton.jit
def _atanh(x):
    # log1p(2a / (1 - a)) / 2: +-inf at +-1, NaN beyond
    ax = tl.abs(x)
    r = 0.5 * _log1p(2.0 * ax / (1.0 - ax))
    return tl.where(x < 0, -r, tl.where(x == 0, x, r))


@triton.jit
def _signbit(x):
    # the sign bit itself: set for -0.0 and for a NaN with it set, as eager's signbit
    if x.dtype == tl.float64:
        return x.to(tl.int64, bitcast=True) < 0
    elif x.dtype == tl.float32:
        return x.to(tl.int32, bitcast=True) < 0
    else:
        return x < 0


@triton.jit
def _nextafter(x, y):
    if x.dtype == tl.float64:
        return _nextafter_bits(x, y, tl.int64)
    else:
        return _nextafter_bits(x, y, tl.int32)


@triton.jit
def _nextafter_bits(x, y, itype: tl.constexpr):
    # IEEE floats are sign and magnitude: one more in the bits is the next value away from
    # zero, one less the next towards it (max float + 1 is inf); from +-0 the smallest
    # subnormal of y's sign; x == y gives y (nextafter(0.0, -0.0) is -0.0); NaN stays
    bits = x.to(itype, bitcast=True)
    away = (y > x) == (x > 0)
    r = (bits + tl.where(away, 1, -1).to(itype)).to(x.dtype, bitcast=True)
    tiny = tl.full(x.shape, 1, itype).to(x.dtype, bitcast=True)
    r = tl.where(x == 0, tl.where(y > 0, tiny, -tiny), r)
    r = tl.where(x == y, y, r)
    return tl.where((x != x) | (y != y), x + y, r)


@triton.jit
def _gcd(a, b):
    # Euclid's algorithm on |a|, |b| (eager's), looped until every lane's divisor is 0: at most
    # 46 steps for int32, 92 for int64 (consecutive Fibonacci numbers)
    a = tl.abs(a)
    b = tl.abs(b)
    while tl.max((b != 0).to(tl.int32)) != 0:
        nonzero = b != 0
        r = a % tl.where(nonzero, b, 1)
        a = tl.where(nonzero, b, a)
        b = tl.where(nonzero, r, 0)
    return a


@triton.jit
def _shl(a, b):
    bits: tl.constexpr = a.dtype.primitive_bitwidth
    out = (b < 0) | (b >= bits)
    return tl.where(out, 0, a << tl.where(out, 0, b))


@triton.jit
def _shr(a, b):
    bits: tl.constexpr = a.dtype.primitive_bitwidth
    return a >> tl.where((b < 0) | (b >= bits), bits - 1, b)


@triton.jit
def _lshr(a, b):
    # the bits shifted as unsigned (zeros come in); a shift outside [0, bits) gives 0
    bits: tl.constexpr = a.dtype.primitive_bitwidth
    out = (b < 0) | (b >= bits)
    s = tl.where(out, 0, b)
    if a.dtype == tl.int64:
        r = (a.to(tl.uint64, bitcast=True) >> s.to(tl.uint64)).to(tl.int64, bitcast=True)
    else:
        r = (a.to(tl.uint32, bitcast=True) >> s.to(tl.uint32)).to(tl.int32, bitcast=True)
    return tl.where(out, 0, r)
'''


# Lowerings for kernels whose outputs are all bf16, cheaper than libdevice's and accurate to a
# small fraction of a bf16 unit in the last place (2^-8 relative). libdevice's accurate tanh
# makes GELU compute-bound on an H200: 0.64 of copy bandwidth forward against 0.93 with the
# hardware's tanh.approx.f32 (benchmarks/sweep_pointwise.py); but that one's absolute error
# (up to 5e-4) ruins 1 + tanh(x) in GELU's negative tail, so `_tanh` is exp-based instead.
#
# exp in them flushes results below 2^-126 (the smallest normal float) to zero, as CUDA's fast
# math does, where no use can magnify the difference (it is then about what a bf16 subnormal
# would show): one MUFU.EX2 where tl.exp adds a compare and two multiplies. On an H200 a
# softmax backward kernel recomputing exp(x - max) went from 0.88 of copy to 0.98 with it
# (223.5 to 199.9 us, 2026-12-02), but that one divides by the saved sum, so it keeps tl.exp;
# the cross entropy backward, which only scales exp(x - lse), went 0.98 -> 1.03 (suite run 24).
EXP_FLUSH = {CUDA: "_exp_flush", INTERPRETER: "_exp_flush_emulated"}


def _sigmoid_silu(exp: str) -> dict:
    # they add exp(-x) to 1, which a flushed term cannot change: always flushed
    return {U.sigmoid: f"(1.0 / (1.0 + {exp}(-{{x}})))", U.silu: f"({{x}} / (1.0 + {exp}(-{{x}})))"}


_BF16_UNARY = {
    CUDA: {U.tanh: "_tanh({x})", **_sigmoid_silu(EXP_FLUSH[CUDA])},
    INTERPRETER: _sigmoid_silu(EXP_FLUSH[INTERPRETER]),
}
# a bare exp: only where the kernel's uses cannot magnify a flushed term (`flush` below,
# ElementwiseEmitter.flush_suffices; log(sum(exp(x))) over a row of -95s would be -inf)
_FLUSH_UNARY = {target: {U.exp: exp + "({x})"} for target, exp in EXP_FLUSH.items()}
# A tanh whose result is only added to a constant of size about 1 (directly, or squared first:
# see ElementwiseEmitter.absolute_accuracy_suffices) needs no relative accuracy near 0: GELU's
# forward and backward. Without `_tanh`'s series and selects there, the bf16 GELU backward,
# compute-bound on an H200, went from 0.88-0.92 of copy to 0.98-1.01 (eager 0.93-0.97;
# benchmarks/sweep_tanh.py, 2026-12-01). The interpreter takes it too, so CPU tests check it.
_ABSOLUTE_UNARY = {
    CUDA: {U.tanh: "_tanh_near_one({x})"},
    INTERPRETER: {U.tanh: "_tanh_near_one({x})"},
}


def _split_helpers(source: str) -> dict[str, str]:
    blocks = ["@triton.jit" + b for b in source.split("@triton.jit")[1:]]
    return {re.match(r"\s*def (\w+)", b[len("@triton.jit"):]).group(1): b.rstrip() for b in blocks}


_HELPER_BLOCKS = _split_helpers(HELPERS)
HELPER_NAMES = frozenset(_HELPER_BLOCKS)  # the helper functions a kernel's module may define


def helpers_for(code: str) -> str:
    """The helper functions `code` names (called, or passed to tl.reduce), and those they name:
    `triton.jit` reads the source of every function a module defines when it loads it."""
    wanted: list[str] = []
    pending = [code]
    while pending:
        text = pending.pop()
        for name, block in _HELPER_BLOCKS.items():
            if name not in wanted and re.search(rf"\b{name}\b", text):
                wanted.append(name)
                pending.append(block)
    return "\n\n\n".join(_HELPER_BLOCKS[n] for n in _HELPER_BLOCKS if n in wanted)


def unary_lowering(kind: UnaryOpType, target: str, bf16_outputs: bool = False,
                   absolute: bool = False, flush: bool = False) -> Optional[str]:
    """The lowering of a unary op in fp32 (or fp64) compute; `bf16_outputs`: every output of
    the kernel is bf16, which allows the approximations of `_BF16_UNARY`; `absolute`: also,
    the result is only added to constants of size about 1 (`_ABSOLUTE_UNARY`); `flush`: also,
    a result flushed to zero below 2^-126 cannot be magnified by its uses."""
    if bf16_outputs and absolute and kind in _ABSOLUTE_UNARY[target]:
        return _ABSOLUTE_UNARY[target][kind]
    if bf16_outputs and flush and kind in _FLUSH_UNARY[target]:
        return _FLUSH_UNARY[target][kind]
    if bf16_outputs and kind in _BF16_UNARY[target]:
        return _BF16_UNARY[target][kind]
    return _UNARY[target].get(kind)


def has_absolute_lowering(kind: UnaryOpType, target: str) -> bool:
    """Whether `kind` has a cheaper lowering where only absolute accuracy is needed."""
    return kind in _ABSOLUTE_UNARY[target]


def binary_lowering(kind: BinaryOpType, target: str, integral: bool = False) -> Optional[str]:
    """The lowering of a binary op; `integral`: its operands are integers."""
    if integral and kind in _INTEGER_BINARY:
        return _INTEGER_BINARY[kind]
    return _BINARY[target].get(kind)


# fp8 conversions: (to fp8, from fp8) per target, as format strings over `{x}`; {sat}: whether
# torch saturates e4m3fn's overflow (torch_saturates_e4m3)
_FP8 = {
    (CUDA, "e4m3"): ("_to_e4m3({x}, {sat})", "{x}.to(tl.float32)"),
    (CUDA, "e5m2"): ("_to_e5m2({x})", "{x}.to(tl.float32)"),
    (INTERPRETER, "e4m3"): ("_to_e4m3_emulated({x}, {sat})", "_from_fp8_emulated({x})"),
    (INTERPRETER, "e5m2"): ("_to_e5m2_emulated({x})", "_from_fp8_emulated({x})"),
}


@functools.cache
def torch_saturates_e4m3() -> bool:
    """Whether this torch turns an fp32 beyond float8_e4m3fn's range into +-448 (recent
    releases) rather than NaN (earlier ones): the kernels follow the torch they run with."""
    import torch

    code = torch.tensor([1e4]).to(torch.float8_e4m3fn).view(torch.uint8).item()
    return code == 0x7E


def fp8_narrow(code: str, fp8: str, target: str) -> str:
    """An fp32 value converted to fp8 ("e4m3" or "e5m2") as torch converts it."""
    sat = torch_saturates_e4m3() if fp8 == "e4m3" else False
    return _FP8[target, fp8][0].format(x=code, sat=sat)


def fp8_widen(code: str, fp8: str, target: str) -> str:
    """An fp8 value converted to fp32 (exactly)."""
    return _FP8[target, fp8][1].format(x=code)


def lowering_accepts(kind, target: str, dtype: DataType) -> bool:
    """Whether the lowering of `kind` on `target` computes a `dtype` result as eager does."""
    if kind in _FP32_ONLY[target] and dtype is DataType.Double:
        return False
    if kind in _FP32_FP64_ONLY_BINARY:
        return dtype in (DataType.Float, DataType.Double)
    return True
