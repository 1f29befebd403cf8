"""Matrix products. They become the IR's `linear` and `matmul`, which run through ATen (cuBLAS)
inside the fusion, between the generated kernels of their producers and consumers."""
from __future__ import annotations

import math

import torch

from ...ir import DataType, PermuteOp
from . import Kind, LoweringError, register

aten = torch.ops.aten


@register(aten.mm.default, aten.bmm.default, aten.matmul.default, aten.mv.default,
          aten.dot.default, kind=Kind.matmul)
def _matmul(b, node, x, y):
    return b.fd.ops.matmul(x, y)


@register(aten.linear.default, kind=Kind.matmul)
def _linear(b, node, x, weight, bias=None):
    return b.fd.ops.linear(x, weight, bias)


@register(aten.addmm.default, kind=Kind.matmul)
def _addmm(b, node, bias, x, y, *, beta=1, alpha=1):
    """`bias + x @ y` is `linear(x, y.T, bias)`: one GEMM with the bias in its epilogue, as
    `F.linear` runs it (the usual form of a decomposed nn.Linear, `y` being a weight's `t()`)."""
    ops = b.fd.ops
    if (beta == 1 and alpha == 1 and bias.ndim == 1 and x.ndim == 2 and y.ndim == 2
            and not bias.domain.no_reductions()[0].is_broadcast):
        # y.T: the weight itself where y is its transpose (no pair of permutes for ATen to run)
        made = y.fusion.definition_of(y)
        weight = made.inputs[0] if isinstance(made, PermuteOp) and tuple(made.dims) == (1, 0) else None
        return ops.linear(x, weight if weight is not None else ops.permute(y, [1, 0]), bias)
    out = ops.matmul(x, y)
    if alpha != 1:
        out = ops.mul(out, alpha)
    if beta == 0:
        return out
    return ops.add(out, bias if beta == 1 else ops.mul(bias, beta))


@register(aten._grouped_mm.default, kind=Kind.matmul)
def _grouped_mm(b, node, x, y, offs=None, bias=None, out_dtype=None):
    if offs is None or bias is not None:
        raise LoweringError("_grouped_mm without offsets (a batched 3-D x 3-D product) or with a bias")
    out = b.fd.ops.grouped_mm(x, y, offs)
    return out if out_dtype is None else b.fd.ops.cast(out, DataType.from_torch(out_dtype))


@register(aten._scaled_mm.default, kind=Kind.matmul)
def _scaled_mm(b, node, x, y, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
               use_fast_accum=False):
    """(x * scale_a) @ (y * scale_b) + bias, of `out_dtype` (default x's); use_fast_accum is
    a precision hint that the ATen segment does without."""
    if scale_result is not None:
        raise LoweringError("_scaled_mm with scale_result (the scale of an fp8 output)")
    shapes = [tuple(a.meta["val"].shape) for a in node.args[2:4]]
    per_tensor = all(math.prod(s) == 1 for s in shapes)
    x_rows, y_cols = node.args[0].meta["val"].shape[0], node.args[1].meta["val"].shape[1]
    if not per_tensor and shapes != [(x_rows, 1), (1, y_cols)]:
        # (a per-row scale beside a per-tensor one: torch refuses the mix, whose error is eager's)
        raise LoweringError(f"_scaled_mm with scales of shapes {shapes[0]} and {shapes[1]}: torch takes both "
                            f"per tensor or per row and per column")
    dtype = x.dtype if out_dtype is None else DataType.from_torch(out_dtype)
    return b.fd.ops.scaled_mm(x, y, scale_a, scale_b, bias=bias, dtype=dtype)[0]
