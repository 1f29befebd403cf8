"""The suite written as FusionDefinitions: fuser's column until `fuser.jit` captures the plain
eager functions itself.

Forward rows are one definition each. Backward rows are autograd Functions whose backward runs
one definition of the gradient formulas; for norms it computes dx (row sums) and the weight and
bias gradients (column sums) together, which fuser runs as one inner-outer kernel reading x and
dy once, plus the small combine step of its partial column sums. Each definition is built once
per kernel name and serves every size.
"""
from __future__ import annotations

import functools
import math
from typing import Callable, Optional

import torch

from fuser import DataType, FusionDefinition

F32, BF16 = DataType.Float, DataType.BFloat16
RMS_EPS, LN_EPS = 1e-6, 1e-5


def _mat(fd, dtype=BF16):
    return fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=dtype)


def _row(fd, dtype=BF16):
    return fd.define_tensor(shape=[-1], contiguity=True, dtype=dtype)


def _f(fd, t):
    return fd.ops.cast(t, F32)


def _rstd_rms(fd, xf, n):
    ms = fd.ops.div(fd.ops.sum(fd.ops.mul(xf, xf), [-1], True), n)
    return fd.ops.rsqrt(fd.ops.add(ms, RMS_EPS))


@functools.cache
def rmsnorm_fwd():
    with FusionDefinition() as fd:
        x, w = _mat(fd), _row(fd)
        xf = _f(fd, x)
        y = fd.ops.mul(fd.ops.mul(xf, _rstd_rms(fd, xf, x.shape()[1])), _f(fd, w))
        fd.add_output(fd.ops.cast(y, BF16))
    return fd


@functools.cache
def layernorm_fwd():
    with FusionDefinition() as fd:
        x, w, b = _mat(fd), _row(fd), _row(fd)
        xf = _f(fd, x)
        var, mean = fd.ops.var_mean(xf, [-1], 0, True)
        y = fd.ops.mul(fd.ops.sub(xf, mean), fd.ops.rsqrt(fd.ops.add(var, LN_EPS)))
        fd.add_output(fd.ops.cast(fd.ops.add(fd.ops.mul(y, _f(fd, w)), _f(fd, b)), BF16))
    return fd


@functools.cache
def softmax_fwd():
    with FusionDefinition() as fd:
        x = _mat(fd)
        xf = _f(fd, x)
        e = fd.ops.exp(fd.ops.sub(xf, fd.ops.max(xf, [-1], True)))
        fd.add_output(fd.ops.cast(fd.ops.div(e, fd.ops.sum(e, [-1], True)), BF16))
    return fd


def _gelu(fd, h):
    """0.5 h (1 + tanh(z)) as h sigmoid(2 z), the form fuser.jit lowers F.gelu to."""
    k = 2.0 * math.sqrt(2.0 / math.pi)
    inner2 = fd.ops.mul(fd.ops.add(h, fd.ops.mul(fd.ops.mul(fd.ops.mul(h, h), h), 0.044715)), k)
    return fd.ops.mul(h, fd.ops.sigmoid(inner2))


@functools.cache
def gelu_bias_fwd():
    with FusionDefinition() as fd:
        x, b = _mat(fd), _row(fd)
        h = _f(fd, fd.ops.cast(fd.ops.add(_f(fd, x), _f(fd, b)), BF16))  # eager rounds x + b
        fd.add_output(fd.ops.cast(_gelu(fd, h), BF16))
    return fd


@functools.cache
def add_rmsnorm_fwd():
    with FusionDefinition() as fd:
        x, r, w = _mat(fd), _mat(fd), _row(fd)
        h = fd.ops.cast(fd.ops.add(_f(fd, x), _f(fd, r)), BF16)
        hf = _f(fd, h)
        y = fd.ops.mul(fd.ops.mul(hf, _rstd_rms(fd, hf, x.shape()[1])), _f(fd, w))
        fd.add_output(fd.ops.cast(y, BF16))
        fd.add_output(h)
    return fd


@functools.cache
def colsum_fwd():
    with FusionDefinition() as fd:
        x = _mat(fd)
        fd.add_output(fd.ops.sum(_f(fd, x), [0]))
    return fd


# -- backward definitions ---------------------------------------------------------------------


@functools.cache
def rmsnorm_bwd():
    """dx = rstd * (g - xhat * mean(g * xhat)) with g = dy * w, and dw = sum_rows(dy * xhat)."""
    with FusionDefinition() as fd:
        x, w, dy = _mat(fd), _row(fd), _mat(fd)
        n = x.shape()[1]
        xf, dyf = _f(fd, x), _f(fd, dy)
        rstd = _rstd_rms(fd, xf, n)
        xhat = fd.ops.mul(xf, rstd)
        g = fd.ops.mul(dyf, _f(fd, w))
        proj = fd.ops.div(fd.ops.sum(fd.ops.mul(g, xhat), [-1], True), n)
        dx = fd.ops.mul(rstd, fd.ops.sub(g, fd.ops.mul(xhat, proj)))
        fd.add_output(fd.ops.cast(dx, BF16))
        fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.mul(dyf, xhat), [0]), BF16))
    return fd


@functools.cache
def layernorm_bwd():
    """dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w, dw = sum_rows(dy * xhat)
    and db = sum_rows(dy); mean and rstd recomputed from x."""
    with FusionDefinition() as fd:
        x, w, dy = _mat(fd), _row(fd), _mat(fd)
        n = x.shape()[1]
        xf, dyf = _f(fd, x), _f(fd, dy)
        var, mean = fd.ops.var_mean(xf, [-1], 0, True)
        rstd = fd.ops.rsqrt(fd.ops.add(var, LN_EPS))
        xhat = fd.ops.mul(fd.ops.sub(xf, mean), rstd)
        g = fd.ops.mul(dyf, _f(fd, w))
        mg = fd.ops.div(fd.ops.sum(g, [-1], True), n)
        proj = fd.ops.div(fd.ops.sum(fd.ops.mul(g, xhat), [-1], True), n)
        dx = fd.ops.mul(rstd, fd.ops.sub(fd.ops.sub(g, mg), fd.ops.mul(xhat, proj)))
        fd.add_output(fd.ops.cast(dx, BF16))
        fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.mul(dyf, xhat), [0]), BF16))
        fd.add_output(fd.ops.cast(fd.ops.sum(dyf, [0]), BF16))
    return fd


@functools.cache
def softmax_dx():
    with FusionDefinition() as fd:
        y, dy = _mat(fd), _mat(fd)
        yf, dyf = _f(fd, y), _f(fd, dy)
        dot = fd.ops.sum(fd.ops.mul(dyf, yf), [-1], True)
        fd.add_output(fd.ops.cast(fd.ops.mul(yf, fd.ops.sub(dyf, dot)), BF16))
    return fd


def _gelu_grad(fd, x, dy):
    """dy * gelu'(x), tanh form, in fp32."""
    xf = _f(fd, x)
    k = math.sqrt(2.0 / math.pi)
    x2 = fd.ops.mul(xf, xf)
    t = fd.ops.tanh(fd.ops.mul(fd.ops.add(xf, fd.ops.mul(fd.ops.mul(x2, xf), 0.044715)), k))
    dt = fd.ops.mul(fd.ops.sub(1.0, fd.ops.mul(t, t)), fd.ops.mul(fd.ops.add(fd.ops.mul(x2, 3 * 0.044715), 1.0), k))
    grad = fd.ops.add(fd.ops.mul(fd.ops.add(t, 1.0), 0.5), fd.ops.mul(fd.ops.mul(xf, 0.5), dt))
    return fd.ops.mul(_f(fd, dy), grad)


@functools.cache
def gelu_dx():
    with FusionDefinition() as fd:
        x, dy = _mat(fd), _mat(fd)
        fd.add_output(fd.ops.cast(_gelu_grad(fd, x, dy), BF16))
    return fd


@functools.cache
def gelu_dx_bias_grad():
    """A GELU's input gradient (bf16) and its bias's gradient (the column sums, fp32): the
    backward of a linear layer's bias and activation (not a suite row)."""
    with FusionDefinition() as fd:
        x, dy = _mat(fd), _mat(fd)
        dz = _gelu_grad(fd, x, dy)
        fd.add_output(fd.ops.cast(dz, BF16))
        fd.add_output(fd.ops.sum(dz, [0]))
    return fd


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return rmsnorm_fwd().execute([x, w])[0]

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        dx, dw = rmsnorm_bwd().execute([x, w, dy.contiguous()])
        return dx, dw


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        return layernorm_fwd().execute([x, w, b])[0]

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        dx, dw, db = layernorm_bwd().execute([x, w, dy.contiguous()])
        return dx, dw, db


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        (y,) = softmax_fwd().execute([x])
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        return softmax_dx().execute([y, dy.contiguous()])[0]


class _Gelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.nn.functional.gelu(x, approximate="tanh")

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return gelu_dx().execute([x, dy.contiguous()])[0]


def _forward(build):
    def run(*args):
        outs = build().execute(list(args))
        return outs[0] if len(outs) == 1 else tuple(outs)
    return run


IMPLEMENTATIONS: dict[str, Callable] = {
    "rmsnorm_fwd": _forward(rmsnorm_fwd),
    "layernorm_fwd": _forward(layernorm_fwd),
    "softmax_fwd": _forward(softmax_fwd),
    "gelu_bias_fwd": _forward(gelu_bias_fwd),
    "add_rmsnorm_fwd": _forward(add_rmsnorm_fwd),
    "colsum_fwd": _forward(colsum_fwd),
    "rmsnorm_bwd": _RMSNorm.apply,
    "layernorm_bwd": _LayerNorm.apply,
    "softmax_bwd": _Softmax.apply,
    "gelu_bwd": _Gelu.apply,
}


def implementation(kernel: str) -> Optional[Callable]:
    return IMPLEMENTATIONS.get(kernel)
