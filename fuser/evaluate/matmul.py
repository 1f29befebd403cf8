"""ATen evaluation of the ops fusions leave to ATen: linear and matmul (written straight into a
stream chunk's destination where they can), scaled dot-product attention forward and backward,
grouped and scaled matmuls."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..errors import FusionInputError, UnsupportedError
from ..ir import Expr, GroupedMmOp, LinearOp, MatmulOp, ScaledMmOp, SdpaBwdOp, SdpaFwdOp
from .aten import _dt, _to
from .rules import FUNCTION_FORMS, INTO_RULES, rule


def _wide(t: torch.Tensor) -> torch.Tensor:
    """`t` in the type its math runs in: fp32 for 16-bit floats (and fp8), its own for fp32 and fp64."""
    return t if t.dtype == torch.float64 else t.float()


def _linear_call(x, w, bias=None):
    if bias is not None and w.dim() == 1:  # (F.linear refuses a bias with a 1-D weight on a 2-D input)
        return torch.matmul(x, w) + bias
    return F.linear(x, w, bias)


@rule(LinearOp)
def _linear(e: LinearOp, args, ctx):
    return [_linear_call(*args)]


@rule(MatmulOp)
def _matmul(e: MatmulOp, args, ctx):
    return [torch.matmul(*args)]


def _mm_into(a, b, d):
    """a @ b straight into `d` when both are matrices and `d` is a dense chunk of that shape
    (aten::mm itself: matmul's dispatch costs microseconds a chunk), else None."""
    if (d is None or a.dim() != 2 or b.dim() != 2 or not d.is_contiguous()
            or d.shape != (a.shape[0], b.shape[1]) or d.dtype != a.dtype or b.dtype != a.dtype):
        return None
    return [torch.mm(a, b, out=d)]


FUNCTION_FORMS.update({LinearOp: _linear_call, MatmulOp: torch.matmul})

INTO_RULES[LinearOp] = lambda e, args, ctx, dsts: (
    _mm_into(args[0], ctx.transposed(args[1]), dsts[0]) if len(args) == 2 and args[1].dim() == 2 else None)
INTO_RULES[MatmulOp] = lambda e, args, ctx, dsts: _mm_into(args[0], args[1], dsts[0])


@rule(SdpaFwdOp)
def _sdpa(e: SdpaFwdOp, args, ctx):
    q, k, v, dropout_p, is_causal, scale = args[:6]
    additive = args[6:]  # the bias and the mask, where given
    scale = None if scale is None or (isinstance(scale, float) and math.isnan(scale)) else scale
    if dropout_p:
        raise UnsupportedError("sdpfa_fwd: dropout_p > 0 is not supported by the evaluator")
    # on meta tensors standing for a GPU (a compile-ahead pass), flash's output layout (a
    # guess: flash may still refuse the shapes there); flash takes no bias
    for_gpu = q.is_cuda or (q.is_meta and ctx.stands_for is not None and ctx.stands_for.type == "cuda"
                            and q.dtype in (torch.float16, torch.bfloat16))
    if for_gpu and not additive:
        batch = q.shape[:-3]
        try:  # (flash takes one batch axis: several are flattened into it and back)
            res = torch.ops.aten._scaled_dot_product_flash_attention(
                *(t.reshape(-1, *t.shape[-3:]) for t in (q, k, v)), 0.0, bool(is_causal), False, scale=scale)
            # no dropout, so no random state: the IR's 0-dim seed and offset, whatever shape
            # this torch's flash gives them (two elements on some versions)
            zero = torch.zeros((), dtype=torch.int64, device=q.device)
            out, lse = res[0], res[1]
            if len(batch) != 1:
                out, lse = out.unflatten(0, batch), lse.unflatten(0, batch)
            return [out, lse, zero, zero.clone()]
        except RuntimeError:
            pass  # shapes or dtypes flash does not take: the math form below
    s = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    scores = torch.matmul(_wide(q), _wide(k).transpose(-2, -1)) * s
    for term in additive:  # a Bool mask keeps the scores where True, as nvFuser's
        scores = scores.masked_fill(~term, float("-inf")) if term.dtype == torch.bool else scores + _wide(term)
    if is_causal:
        L, S = q.shape[-2], k.shape[-2]
        mask = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.softmax(scores, dim=-1)
    if additive:  # a query whose keys are all masked attends to nothing (0, not NaN), as eager's SDPA
        probs = probs.masked_fill(torch.isneginf(lse).unsqueeze(-1), 0.0)
    out = torch.matmul(probs, _wide(v)).to(q.dtype)
    zero = torch.zeros((), dtype=torch.int64, device=q.device)
    return [out, lse, zero, zero.clone()]


@rule(SdpaBwdOp)
def _sdpa_bwd(e: SdpaBwdOp, args, ctx):
    """The gradients of `_sdpa` above, by the same path: flash attention's backward where the
    forward ran flash (CUDA), else the math form from the saved logsumexp, in fp32 (fp64 for doubles)."""
    grad, q, k, v, out, lse, dropout_p, is_causal, seed, offset, scale = args
    scale = None if scale is None or (isinstance(scale, float) and math.isnan(scale)) else scale
    if dropout_p:
        raise UnsupportedError("sdpfa_bwd: dropout_p > 0 is not supported by the evaluator")
    if q.is_cuda or (q.is_meta and ctx.stands_for is not None and ctx.stands_for.type == "cuda"
                     and q.dtype in (torch.float16, torch.bfloat16)):
        try:
            return list(torch.ops.aten._scaled_dot_product_flash_attention_backward(
                grad, q, k, v, out, lse, None, None, q.shape[2], k.shape[2], 0.0, bool(is_causal),
                seed, offset, scale=scale))
        except RuntimeError:
            pass  # what flash does not take: the math form below
    s = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    qf, kf, vf, gf = _wide(q), _wide(k), _wide(v), _wide(grad)
    scores = torch.matmul(qf, kf.transpose(-2, -1)) * s
    if is_causal:
        L, S = q.shape[-2], k.shape[-2]
        mask = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.exp(scores - lse.to(scores.dtype).unsqueeze(-1))
    grad_v = torch.matmul(probs.transpose(-2, -1), gf)
    grad_probs = torch.matmul(gf, vf.transpose(-2, -1))
    # d(softmax): probs * (grad_probs - rowsum(grad_out * out)), as flash computes it
    grad_scores = probs * (grad_probs - (gf * _wide(out)).sum(-1, keepdim=True))
    grad_q = torch.matmul(grad_scores, kf) * s
    grad_k = torch.matmul(grad_scores.transpose(-2, -1), qf) * s
    return [grad_q.to(q.dtype), grad_k.to(k.dtype), grad_v.to(v.dtype)]


# -- grouped and scaled matmuls (ops/grouped_mm.py) ----------------------------------------
# torch's kernels where they take the operands (torch._grouped_mm: fp32 with 16-byte aligned
# strides on the CPU, bf16 on Hopper; torch._scaled_mm: fp8); otherwise, and as the tests'
# reference, the math form: upcast to fp32 (doubles stay fp64), scale, one matmul per group, cast.


def _grouped_extent(mat1: torch.Tensor, mat2: torch.Tensor) -> int:
    """The size of the axis the groups split: k (2-D x 2-D), n (3-D x 2-D), m (2-D x 3-D)."""
    if mat1.dim() == 2 and mat2.dim() == 2:
        return mat1.shape[1]
    return mat2.shape[1] if mat1.dim() == 3 else mat1.shape[0]


def _group_ends(e: Expr, mat1, mat2, offsets) -> list[int]:
    ends = offsets.tolist()
    total = _grouped_extent(mat1, mat2)
    if any(b < a for a, b in zip([0] + ends, ends)) or (ends and ends[-1] != total):
        raise FusionInputError(
            f"grouped_mm: offsets T{e.inputs[2].name} = {ends} must be non-decreasing group ends "
            f"with the last equal to the grouped axis' size {total}")
    return ends


def _grouped_mm_reference(e: Expr, mat1, mat2, offsets, scale1=None, scale2=None) -> torch.Tensor:
    """In fp32 (fp64 for doubles), one matmul per group; a row scale (scale1) and a column scale (scale2) of a
    group multiply its product, which is the product of the dequantized operands."""
    ends = _group_ends(e, mat1, mat2, offsets)
    a, b = _wide(mat1), _wide(mat2)
    one = torch.ones((), dtype=a.dtype, device=a.device)
    s1 = one if scale1 is None else _wide(scale1)
    s2 = one if scale2 is None else _wide(scale2)
    two_d = a.dim() == 2 and b.dim() == 2
    m, n = (a.shape[-2], b.shape[-1])
    out = torch.zeros((len(ends), m, n) if two_d else (m, n), dtype=torch.promote_types(a.dtype, b.dtype),
                      device=a.device)
    for g, (lo, hi) in enumerate(zip([0] + ends[:-1], ends)):
        if two_d:  # groups split k
            out[g] = s1[g] * (a[:, lo:hi] @ b[lo:hi]) * s2[g] if scale1 is not None else a[:, lo:hi] @ b[lo:hi]
        elif a.dim() == 3:  # groups split n
            sg1, sg2 = (s1[g], s2[:, lo:hi]) if scale1 is not None else (one, one)
            out[:, lo:hi] = sg1 * (a[g] @ b[:, lo:hi]) * sg2
        else:  # groups split m
            sg1, sg2 = (s1[lo:hi], s2[g]) if scale1 is not None else (one, one)
            out[lo:hi] = sg1 * (a[lo:hi] @ b[g]) * sg2
    return out


def _grouped_mm_kernel(mat1, mat2, offsets, scale1, scale2):
    """torch's grouped kernel, or None where it refuses the operands (dtype, alignment)."""
    try:
        if scale1 is None:
            return torch._grouped_mm(mat1, mat2, offsets)
        if not mat1.is_cuda:
            return None
        # (torch's scaled kernel wants K the fastest axis of both operands, and the scales
        # without their K axis: flattened where the output has a group axis)
        a, b = mat1.contiguous(), mat2.transpose(-1, -2).contiguous().transpose(-1, -2)
        if a.dim() == 2 and b.dim() == 2:
            s1, s2 = scale1.reshape(-1), scale2.reshape(-1)
        else:
            s1, s2 = scale1.squeeze(-1), scale2.squeeze(-2)
        return torch._scaled_grouped_mm(a, b, s1, s2, offsets, out_dtype=torch.bfloat16)
    except (RuntimeError, AttributeError):
        return None


@rule(GroupedMmOp)
def _grouped_mm(e: GroupedMmOp, args, ctx):
    mat1, mat2, offsets = args[:3]
    scale1, scale2 = args[3:5] if e.has_scale else (None, None)
    out_dtype = _dt(e.out)
    if mat1.is_meta:  # the group sizes are data: only the shape is known
        return [torch.empty(ctx.shape(e.out), dtype=out_dtype, device="meta")]
    if not offsets.is_cuda:  # (checking a CUDA tensor's values would wait for the GPU)
        _group_ends(e, mat1, mat2, offsets)
    out = None
    if mat1.dtype in (torch.float32, torch.bfloat16) or scale1 is not None:
        out = _grouped_mm_kernel(mat1, mat2, offsets, scale1, scale2)
    if out is None:
        out = _grouped_mm_reference(e, mat1, mat2, offsets, scale1, scale2)
    return [_to(out, out_dtype)]


def _scaled_mm_reference(mat1, mat2, scale1, scale2, alpha, bias, beta) -> torch.Tensor:
    out = (_wide(mat1) * _wide(scale1)) @ (_wide(mat2) * _wide(scale2))
    if alpha is not None:
        out = out * _wide(alpha).reshape(())
    if bias is not None:
        out = out + _wide(bias) * (1.0 if beta is None else _wide(beta).reshape(()))
    return out


@rule(ScaledMmOp)
def _scaled_mm(e: ScaledMmOp, args, ctx):
    """torch._scaled_mm for fp8 operands (it takes no alpha or beta); otherwise, on any
    device, the reference math form: upcast to fp32, scale, matmul, add the bias, cast."""
    mat1, mat2, scale1, scale2 = args[:4]
    rest = iter(args[4:])
    alpha, bias, beta = (next(rest) if flag else None for flag in (e.has_alpha, e.has_bias, e.has_beta))
    out_dtype = _dt(e.out)
    if mat1.is_meta:
        return [torch.empty(ctx.shape(e.out), dtype=out_dtype, device="meta")]
    if mat1.element_size() == 1 and alpha is None and beta is None:
        try:
            # (it wants mat2 column-major)
            return [torch._scaled_mm(mat1.contiguous(), mat2.t().contiguous().t(), scale1, scale2,
                                     bias=bias, out_dtype=out_dtype)]
        except (RuntimeError, ValueError):
            pass  # scale shapes, bias dtype or a device it does not take: the math form
    return [_to(_scaled_mm_reference(mat1, mat2, scale1, scale2, alpha, bias, beta), out_dtype)]
