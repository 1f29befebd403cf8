"""Random ops: rand, randn, rand_like, randn_like, bernoulli and native_dropout (what
F.dropout becomes in the graph AOTAutograd traces), lowered to fd.ops.uniform and normal,
unseeded: each execution draws fresh numbers from PyTorch's generator, as eager does (not the
same numbers: the generator is used another way). A call with its own `generator` runs
through ATen.

Dropout's mask is an output of its node, so a backward reads the mask its forward drew (the
partitioner saves it; recompute.py never copies a random node, which would draw again)."""
from __future__ import annotations

import torch

from ...ir import DataType
from . import Kind, LoweringError, register

aten = torch.ops.aten


def _no_generator(kwargs: dict) -> None:
    if kwargs.get("generator") is not None:
        raise LoweringError("a random op with its own generator")


def _floating_dtype(b, node) -> DataType:
    dtype = b.meta(node).dtype
    if not dtype.is_floating_point:
        raise LoweringError(f"random numbers of dtype {dtype}")
    if dtype.itemsize < 2:  # float8 or packed fp4: through ATen, which has no random kernel of them (eager's error)
        raise LoweringError(f"random numbers of the one-byte float {dtype}")
    return DataType.from_torch(dtype)


def _uniform_like(b, x):
    """U[0, 1) in fp32 of x's shape (the draw a mask compares against p)."""
    return b.fd.ops.uniform(0.0, 1.0, x.shape(), dtype=DataType.Float)


@register(aten.rand.default, aten.rand_like.default, kind=Kind.creation)
def _rand(b, node, *args, **kwargs):
    _no_generator(kwargs)
    return b.fd.ops.uniform(0.0, 1.0, b.out_shape(node), dtype=_floating_dtype(b, node))


@register(aten.randn.default, aten.randn_like.default, kind=Kind.creation)
def _randn(b, node, *args, **kwargs):
    _no_generator(kwargs)
    return b.fd.ops.normal(0.0, 1.0, b.out_shape(node), dtype=_floating_dtype(b, node))


@register(aten.bernoulli.p, aten.bernoulli.default)
def _bernoulli(b, node, x, p=None, **kwargs):
    """1 where a uniform draw is below the probability (p, or x's elements), in x's dtype."""
    _no_generator(kwargs)
    dtype = _floating_dtype(b, node)
    fd = b.fd
    if node.target is aten.bernoulli.default:
        # a probability outside [0, 1] (or NaN) gives NaN there, where eager raises (a kernel
        # cannot): lt would quietly make it 0 or 1
        p = fd.ops.cast(x, DataType.Float)
        draw = fd.ops.cast(fd.ops.lt(_uniform_like(b, x), p), dtype)
        return fd.ops.where(fd.ops.logical_and(fd.ops.ge(p, 0.0), fd.ops.le(p, 1.0)), draw, float("nan"))
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        raise LoweringError(f"bernoulli with probability {p!r}")
    if not 0 <= p <= 1:  # (NaN too) through ATen, which raises eager's error
        raise LoweringError(f"bernoulli with probability {p!r} outside [0, 1]")
    return fd.ops.cast(fd.ops.lt(_uniform_like(b, x), p), dtype)


@register(aten.native_dropout.default)
def _native_dropout(b, node, x, p, train):
    """(x * mask / (1 - p), mask), mask kept with probability 1 - p, as ATen's decomposition."""
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        raise LoweringError(f"dropout with probability {p!r}")
    if not 0 <= p <= 1:  # (NaN too: all NaN; 1.5 gave -0.0, -0.5 scaled by 2/3) through ATen, which raises eager's error
        raise LoweringError(f"dropout with probability {p!r} outside [0, 1]")
    if not x.dtype.is_floating:
        raise LoweringError(f"dropout of dtype {x.dtype}")
    fd = b.fd
    if train is False or p == 0:
        return fd.ops.set(x), fd.ops.full(x.shape(), True, DataType.Bool)
    mask = fd.ops.gt(_uniform_like(b, x), p)
    scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
    return fd.ops.mul(fd.ops.mul(mask, x), scale), mask
