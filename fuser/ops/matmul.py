"""linear, matmul and scaled-dot-product attention. These never become generated kernels: the
segmenter sends them to ATen. Their outputs keep the contraction as a trailing reduction
IterDomain, as nvFuser does, so a sharded contraction can become an rfactor plus allreduce."""
from __future__ import annotations

from typing import Any, Optional

from ..errors import FusionDefinitionError
from ..ir import DataType, IterType, LinearOp, MatmulOp, SdpaBwdOp, SdpaFwdOp, TensorView, Val
from ..ir.printer import format_val
from .common import as_val, check_tensor, copy_id, fusion_of, new_tensor


def _same_float_dtype(op: str, *tvs: TensorView) -> DataType:
    dtypes = {t.dtype for t in tvs}
    if len(dtypes) != 1:
        raise FusionDefinitionError(f"{op}: operands must share a dtype, got {sorted(d.name for d in dtypes)}")
    dtype = dtypes.pop()
    if dtype.category != 2:
        raise FusionDefinitionError(f"{op}: needs floating operands, got {dtype}")
    return dtype


def linear(input: TensorView, weight: TensorView, bias: Optional[TensorView] = None) -> TensorView:
    op = "linear"
    operands = [input, weight] + ([] if bias is None else [bias])
    for name, t in zip(("input", "weight", "bias"), operands):
        check_tensor(op, t, name)
    f = fusion_of(op, *operands)
    dtype = _same_float_dtype(op, *operands)
    if input.ndim < 1 or weight.ndim not in (1, 2):
        raise FusionDefinitionError(f"{op}: input needs >= 1 dim and weight 1 or 2, got {input!r}, {weight!r}")
    x_ids, w_ids = input.domain.no_reductions(), weight.domain.no_reductions()
    k = f.unify(x_ids[-1].size, w_ids[-1].size,
                f"{op}: the last axis of input {input!r} and of weight {weight!r}")
    ids = [copy_id(f, d) for d in x_ids[:-1]]
    if weight.ndim == 2:
        ids.append(copy_id(f, w_ids[0]))
    if bias is not None:
        if bias.ndim > 1 or (weight.ndim == 1 and bias.ndim != 0):
            # (a 1-D weight gives one value a row of input: its bias is one number)
            raise FusionDefinitionError(f"{op}: bias must have at most 1 dim (0 with a 1-D weight {weight!r}), "
                                        f"got {bias!r}")
        if weight.ndim == 2 and bias.ndim == 1 and not bias.domain.no_reductions()[0].is_broadcast:
            f.unify(bias.domain.no_reductions()[0].extent, w_ids[0].extent,
                    f"{op}: bias {bias!r} and the rows of weight {weight!r}")
    ids.append(f.new_id(k, iter_type=IterType.Reduction))
    out = new_tensor(f, ids, dtype)
    inputs = (input, weight) if bias is None else (input, weight, bias)
    f.add_expr(LinearOp(inputs=inputs, outputs=(out,)))
    return out


def matmul(a: TensorView, b: TensorView) -> TensorView:
    op = "matmul"
    check_tensor(op, a, "first operand")
    check_tensor(op, b, "second operand")
    f = fusion_of(op, a, b)
    dtype = _same_float_dtype(op, a, b)
    if a.ndim < 1 or b.ndim < 1:
        raise FusionDefinitionError(f"{op}: operands need at least 1 dim, got {a!r}, {b!r}")
    a_ids, b_ids = a.domain.no_reductions(), b.domain.no_reductions()
    k_b = b_ids[0] if b.ndim == 1 else b_ids[-2]
    # .size: an expanded broadcast (the gradient of a sum, expanded) contracts its expanded size
    k = f.unify(a_ids[-1].size, k_b.size, f"{op}: contraction axis of {a!r} and {b!r}")
    batch_a = a_ids[:-2] if a.ndim >= 2 else []
    batch_b = b_ids[:-2] if b.ndim >= 2 else []
    ids = []
    for k_ in range(max(len(batch_a), len(batch_b)), 0, -1):
        da = batch_a[-k_] if k_ <= len(batch_a) else None
        db = batch_b[-k_] if k_ <= len(batch_b) else None
        # a batch axis's size: its concrete extents', and an expanded broadcast's (which holds
        # that many rows, as eager's expand does); a plain broadcast takes the other's
        sizes = [d.size for d in (da, db) if d is not None and (not d.is_broadcast or d.expanded_extent is not None)]
        if not sizes:
            ids.append(f.new_id(1, iter_type=IterType.Broadcast))
            continue
        e = sizes[0]
        for other in sizes[1:]:
            e = f.unify(e, other, f"{op}: batch axes of {a!r} and {b!r}")
        ids.append(f.new_id(e))
    if a.ndim >= 2:
        ids.append(copy_id(f, a_ids[-2]))
    if b.ndim >= 2:
        ids.append(copy_id(f, b_ids[-1]))
    ids.append(f.new_id(k, iter_type=IterType.Reduction))
    out = new_tensor(f, ids, dtype)
    f.add_expr(MatmulOp(inputs=(a, b), outputs=(out,)))
    return out


def sdpfa_fwd(query: TensorView, key: TensorView, value: TensorView, bias: Optional[TensorView] = None,
              mask: Optional[TensorView] = None, dropout_p: Any = None, is_causal: Any = None,
              scale: Any = None):
    """nvFuser's arguments, in its order. Operands are [N*, H, L, E] (one or more batch axes);
    `bias` is added to the scores and a Bool `mask` keeps the scores where True (-inf elsewhere;
    a floating mask is added), each broadcastable to [N*, H, L, S]."""
    op = "sdpfa_fwd"
    for name, t in (("query", query), ("key", key), ("value", value)):
        check_tensor(op, t, name)
        if t.ndim < 4 or t.ndim != query.ndim:
            raise FusionDefinitionError(f"{op}: {name} must be [N*, H, L, E] with the query's batch axes "
                                        f"(4 dims or more), got {t!r}")
    f = fusion_of(op, query, key, value)
    dtype = _same_float_dtype(op, query, key, value)
    q, k, v = (t.domain.no_reductions() for t in (query, key, value))
    heads = query.ndim - 3  # the axis of H; the batch axes come before it
    # .size: an expanded broadcast (a query shared by the batch) counts its expanded size
    for ax in range(heads + 1):
        f.unify(q[ax].size, k[ax].size, f"{op}: axis {ax} of query and key")
        f.unify(q[ax].size, v[ax].size, f"{op}: axis {ax} of query and value")
    f.unify(q[-1].size, k[-1].size, f"{op}: head size of query and key")
    f.unify(k[-2].size, v[-2].size, f"{op}: sequence length of key and value")
    scores = (*q[:-1], k[-2])  # [N*, H, L, S]
    additive = []
    for name, t in (("bias", bias), ("mask", mask)):
        if t is not None:
            _check_scores_operand(op, name, t, scores, bool_allowed=name == "mask")
            additive.append(t)
    out = new_tensor(f, [copy_id(f, d) for d in q[:-1]] + [copy_id(f, v[-1])], dtype)
    # (fp32 for 16- and 32-bit operands, as nvFuser's; a Double attention keeps doubles)
    lse = new_tensor(f, [copy_id(f, d) for d in q[:-1]], DataType.Double if dtype is DataType.Double else DataType.Float)
    seed = new_tensor(f, [], DataType.Int)
    offset = new_tensor(f, [], DataType.Int)
    attrs = (*_attention_flags(f, op, dropout_p, is_causal),
             as_val(f, float("nan") if scale is None else scale, op))
    f.add_expr(SdpaFwdOp(inputs=(query, key, value, *attrs, *additive), outputs=(out, lse, seed, offset),
                         has_bias=bias is not None, has_mask=mask is not None))
    return out, lse, seed, offset


def _attention_flags(f, op: str, dropout_p: Any, is_causal: Any) -> tuple[Val, Val]:
    """dropout_p and is_causal as values, checked as eager's attention checks them: a real
    probability in [0, 1) (a constant now; a scalar input's is the evaluator's) and a bool (2.5
    was read as True)."""
    p = as_val(f, 0.0 if dropout_p is None else dropout_p, op)
    if p.dtype.is_boolean or p.dtype.is_complex or (p.is_constant and not 0 <= p.value < 1):
        raise FusionDefinitionError(f"{op}: dropout_p must be a probability in [0, 1), got {format_val(p)}")
    causal = as_val(f, False if is_causal is None else is_causal, op)
    if not causal.dtype.is_boolean:
        raise FusionDefinitionError(f"{op}: is_causal must be a bool or a Bool scalar, got {format_val(causal)}")
    return p, causal


def _check_scores_operand(op: str, name: str, t: TensorView, scores: tuple, bool_allowed: bool) -> None:
    """`t` (a bias or mask) broadcasts to the scores' [N*, H, L, S], as F.scaled_dot_product_attention's
    attn_mask does: its trailing axes match the scores' or are broadcasts."""
    check_tensor(op, t, name)
    ids = t.domain.no_reductions()
    if not (t.dtype.category == 2 or (bool_allowed and t.dtype is DataType.Bool)) or len(ids) > len(scores):
        kinds = "a Bool or floating" if bool_allowed else "a floating"
        raise FusionDefinitionError(f"{op}: {name} must be {kinds} tensor of at most {len(scores)} dims "
                                    f"broadcastable to [N*, H, L, S], got {t!r}")
    for d, s in zip(reversed(ids), reversed(scores)):
        if not d.is_broadcast or d.expanded_extent is not None:  # (a plain broadcast takes any size)
            t.fusion.unify(d.size, s.size, f"{op}: {name} {t!r} against the scores [N*, H, L, S]")


def sdpfa_bwd(grad_output: TensorView, query: TensorView, key: TensorView, value: TensorView,
              output: TensorView, logsumexp: TensorView, dropout_p: Any, is_causal: Any,
              philox_seed: TensorView, philox_offset: TensorView, scale: Any):
    """(grad_query, grad_key, grad_value) of sdpfa_fwd, from its output and logsumexp; each
    gradient is shaped and typed like its operand."""
    op = "sdpfa_bwd"
    four_d = (("grad_output", grad_output), ("query", query), ("key", key), ("value", value),
              ("output", output))
    for name, t in four_d + (("logsumexp", logsumexp), ("philox_seed", philox_seed),
                             ("philox_offset", philox_offset)):
        check_tensor(op, t, name)
    for name, t in four_d:
        if t.ndim != 4:
            raise FusionDefinitionError(f"{op}: {name} must be [N, H, L, E], got {t!r}")
    if logsumexp.ndim != 3:
        raise FusionDefinitionError(f"{op}: logsumexp must be [N, H, L], got {logsumexp!r}")
    f = fusion_of(op, grad_output, query, key, value, output, logsumexp, philox_seed, philox_offset)
    made = f.definition_of(logsumexp)
    if isinstance(made, SdpaFwdOp) and (made.has_bias or made.has_mask):
        # (a logsumexp from another fusion cannot be told: docs/nvfuser.md says so)
        raise FusionDefinitionError(
            f"{op}: logsumexp {logsumexp!r} comes from an sdpfa_fwd with a "
            f"{'bias' if made.has_bias else 'mask'}, which sdpfa_bwd does not take (nvFuser's arguments): "
            f"its gradients would leave it out; differentiate that attention outside the definition")
    _same_float_dtype(op, grad_output, query, key, value, output)
    q, k, v, o, g, lse = (t.domain.no_reductions() for t in (query, key, value, output, grad_output, logsumexp))
    for ax in (0, 1):
        for name, other in (("key", k), ("value", v), ("output", o), ("grad_output", g), ("logsumexp", lse)):
            f.unify(q[ax].extent, other[ax].extent, f"{op}: axis {ax} of query and {name}")
    for name, other in (("output", o), ("grad_output", g), ("logsumexp", lse)):
        f.unify(q[2].extent, other[2].extent, f"{op}: sequence length of query and {name}")
    f.unify(q[3].extent, k[3].extent, f"{op}: head size of query and key")
    f.unify(k[2].extent, v[2].extent, f"{op}: sequence length of key and value")
    for name, other in (("output", o), ("grad_output", g)):
        f.unify(v[3].extent, other[3].extent, f"{op}: head size of value and {name}")
    grads = tuple(new_tensor(f, [copy_id(f, d) for d in t.domain.no_reductions()], t.dtype)
                  for t in (query, key, value))
    attrs = (*_attention_flags(f, op, dropout_p, is_causal),
             philox_seed, philox_offset,
             as_val(f, float("nan") if scale is None else scale, op))
    f.add_expr(SdpaBwdOp(inputs=(grad_output, query, key, value, output, logsumexp, *attrs),
                         outputs=grads))
    return grads
