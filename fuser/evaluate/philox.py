"""Counter-based random numbers in ATen, bit for bit those of generated kernels.

Generated kernels draw with Triton's philox4x32-10 (triton.language.random): the key is the
64-bit seed, the counter the 64-bit `offset + i`, i the element's row-major index in the
output. This module computes the same numbers with int64 tensor arithmetic (torch has no
uint32 arithmetic), so the evaluator and the kernels agree exactly, on any device, on meta
tensors too. The seed may be a Python int or a 0-dim int64 tensor (a seed drawn on the device
per execution, read without a sync).

The two-value transforms the kernels emit are spelled here once more, in the same operations
and precisions: `uniform_float` as Triton's `uint_to_uniform_float` (fp32), `uniform_double`
two words' 53 bits for a double output, `standard_normal`
as the Box-Muller of `tl.randn` with its transcendental part in fp64, rounded once to fp32
(fp64 log, sqrt and cos of different libraries agree to far below fp32's rounding, which fp32
ones need not).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import torch

_MASK32 = 0xFFFFFFFF
_ROUND_A, _ROUND_B = 0xD2511F53, 0xCD9E8D57
_KEY_A, _KEY_B = 0x9E3779B9, 0xBB67AE85
# Triton's fp32 scale of a 31-bit integer onto [0, 1): the largest with (2^31 - 1) * scale < 1
UNIFORM_SCALE = 4.6566127342e-10
# tl.randn's floor of the first uniform (log(0) avoided)
NORMAL_MIN_UNIFORM = 1.0e-7
TWO_PI = 6.283185307179586


def _mulhilo(a: int, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """High and low 32 bits of the 64-bit product of the constant `a` and uint32 values `b`
    (held in int64): the product overflows int64, so `b` is taken in 16-bit halves."""
    hi_part = a * (b >> 16)  # < 2^48
    lo_part = a * (b & 0xFFFF)  # < 2^48
    high = (hi_part + (lo_part >> 16)) >> 16
    low = (((hi_part & 0xFFFF) << 16) + lo_part) & _MASK32
    return high, low


def philox(seed: Any, counter: torch.Tensor, rounds: int = 10) -> list[torch.Tensor]:
    """The four uint32 words (in int64 tensors) of philox4x32 for key `seed` (64 bits: low word
    first) and state (counter low, counter high, 0, 0), as triton.language.random.randint4x."""
    seed = torch.as_tensor(seed, dtype=torch.int64, device=counter.device)
    k0, k1 = seed & _MASK32, (seed >> 32) & _MASK32
    c0, c1 = counter & _MASK32, (counter >> 32) & _MASK32
    c2 = c3 = torch.zeros_like(counter)
    for _ in range(rounds):
        hi_b, lo_b = _mulhilo(_ROUND_B, c2)
        hi_a, lo_a = _mulhilo(_ROUND_A, c0)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0, k1 = (k0 + _KEY_A) & _MASK32, (k1 + _KEY_B) & _MASK32
    return [c0, c1, c2, c3]


def uniform_float(word: torch.Tensor) -> torch.Tensor:
    """A uint32 word (in int64) as fp32 in [0, 1), as Triton's uint_to_uniform_float: the word
    read as int32, its bits flipped where negative, times UNIFORM_SCALE, in fp32."""
    signed = torch.where(word >= 2**31, word - 2**32, word)
    positive = torch.where(signed < 0, -signed - 1, signed)  # (~x of a negative int32)
    return positive.to(torch.float32) * torch.tensor(UNIFORM_SCALE, dtype=torch.float32, device=word.device)


# a double's uniform: 27 and 26 bits of two words, scaled onto [0, 1) (53 bits, every double
# k * 2^-53 reachable); Box-Muller's first one floored at the smallest, 2^-53
DOUBLE_HIGH_SHIFT, DOUBLE_LOW_SHIFT, DOUBLE_SCALE = 5, 6, 2.0 ** -53


def uniform_double(high: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
    """Two uint32 words (in int64) as an fp64 in [0, 1) of 53 random bits, as the kernels
    compute it (codegen/random.py)."""
    bits = (high >> DOUBLE_HIGH_SHIFT) * 2 ** (32 - DOUBLE_LOW_SHIFT) + (low >> DOUBLE_LOW_SHIFT)
    return bits.to(torch.float64) * DOUBLE_SCALE


def standard_normal_double(words: Sequence[torch.Tensor]) -> torch.Tensor:
    """N(0, 1) in fp64 from four uint32 words: Box-Muller on two 53-bit uniforms."""
    u1 = torch.clamp(uniform_double(words[0], words[1]), min=DOUBLE_SCALE)
    return _box_muller(u1, uniform_double(words[2], words[3]))


def _box_muller(u1: torch.Tensor, u2: torch.Tensor) -> torch.Tensor:
    """sqrt(-2 log u1) cos(2 pi u2) of two fp64 uniforms, u1 > 0."""
    return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(TWO_PI * u2)


def standard_normal(w0: torch.Tensor, w1: torch.Tensor) -> torch.Tensor:
    """N(0, 1) in fp64 from two uint32 words: Box-Muller on their uniforms (the first floored
    at NORMAL_MIN_UNIFORM in fp32, as tl.randn does)."""
    floor = torch.tensor(NORMAL_MIN_UNIFORM, dtype=torch.float32, device=w0.device)
    u1 = torch.maximum(uniform_float(w0), floor).to(torch.float64)
    return _box_muller(u1, uniform_float(w1).to(torch.float64))


def row_major_counters(shape: Sequence[int], offset: Any, device) -> torch.Tensor:
    """offset + the row-major index of each element of `shape`, int64."""
    n = math.prod(shape)
    index = torch.arange(n, dtype=torch.int64, device=device).reshape(tuple(shape))
    return index + torch.as_tensor(offset, dtype=torch.int64, device=device)


def draw_seed(device) -> torch.Tensor:
    """A fresh 64-bit seed from PyTorch's default generator for `device` (torch.manual_seed
    makes the draws reproducible), as a 0-dim int64 tensor there: drawn on a GPU without a
    sync, and read by kernels from memory."""
    return torch.randint(-2**63, 2**63 - 1, (), dtype=torch.int64, device=device)


def random_tensor(kind: str, shape: Sequence[int], params: tuple, seed: Any, offset: Any,
                  dtype: torch.dtype, device) -> torch.Tensor:
    """A tensor of `shape` and `dtype` whose element i is drawn from counter `offset + i`
    (row-major): uniform in [a, b) or normal with mean a and standard deviation b, computed
    in fp32 as the kernels compute it, then rounded once; a double output from 53-bit uniforms. (0, 1)
    parameters, given as constants, skip the affine step (`standard`), as the kernels do."""
    a, b, standard = params
    words = philox(seed, row_major_counters(shape, offset, device))
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    if compute == torch.float64:  # (53 random bits a uniform, as a double holds)
        value = uniform_double(words[0], words[1]) if kind == "uniform" else standard_normal_double(words)
    else:
        value = uniform_float(words[0]) if kind == "uniform" else standard_normal(words[0], words[1])
    value = value.to(compute)
    if not standard:
        a, b = (torch.tensor(float(v), dtype=compute, device=device) for v in (a, b))
        value = a + (b - a) * value if kind == "uniform" else a + b * value
    value = value.to(dtype)
    if kind == "uniform" and (dtype in (torch.float16, torch.bfloat16) or not standard):
        # a draw rounded up to the upper bound is the lower bound, as eager's GPU uniform does
        upper, lower = (1.0, 0.0) if standard else (b.to(dtype), a.to(dtype))
        value = torch.where(value == upper, lower, value)
    return value
