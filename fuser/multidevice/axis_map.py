"""Which logical axis of an op's input becomes which logical axis of its output.

Sharding propagation, resharding detection and stream chunking all ask one question: "this
input axis is split (onto devices or streams); which output axis is that?". The answer is a
rule per Expr class in `RULES` (JAX's per-primitive tables). An op without a rule maps nothing:
sharding does not flow through it, and a sharded input is gathered before it, which is always
correct. Reduction axes count: a linear's contraction axis maps to the output's trailing
reduction axis, which is how a sharded contraction becomes a partial sum plus a collective.
"""
from __future__ import annotations

from typing import Callable

from ..ir import (BinaryOp, BroadcastOp, CastOp, CatOp, ExpandOp, Expr, IterDomain, LinearOp,
                  LoadStoreOp, MatmulOp, PadOp, PermuteOp, ReductionOp, SdpaFwdOp, SliceOp,
                  SqueezeOp, TensorView, TernaryOp, UnaryOp, VarMeanOp)
from ..ir import EmbeddingFwdOp, GatherOp, IndexSelectOp, ScatterOp, SelectOp
from ..ir import ScanOp, SdpaBwdOp, SortOp, TopKOp
from ..ir import GroupedMmOp, ScaledMmOp
from .communication import Communication

Pairs = list[tuple[IterDomain, IterDomain]]
RULES: dict[type, Callable[[Expr, TensorView, TensorView], Pairs]] = {}


def rule(*classes):
    def register(fn):
        for cls in classes:
            RULES[cls] = fn
        return fn
    return register


def axis_pairs(expr: Expr, inp: TensorView, out: TensorView) -> Pairs:
    """(input logical axis, output logical axis) pairs for `inp` -> `out` of `expr`."""
    fn = RULES.get(type(expr))
    if fn is None or not any(v is inp for v in expr.inputs):
        return []
    return fn(expr, inp, out)


def mapped_output_axis(expr: Expr, inp: TensorView, out: TensorView, d: IterDomain):
    for a, b in axis_pairs(expr, inp, out):
        if a is d:
            return b
    return None


def mapped_input_axis(expr: Expr, inp: TensorView, out: TensorView, d: IterDomain):
    for a, b in axis_pairs(expr, inp, out):
        if b is d:
            return a
    return None


def _positional(a: list[IterDomain], b: list[IterDomain]) -> Pairs:
    return list(zip(a, b)) if len(a) == len(b) else []


@rule(UnaryOp, BinaryOp, TernaryOp, CastOp, LoadStoreOp, ExpandOp, Communication)
def _elementwise(e, inp, out):
    return _positional(inp.domain.no_reductions(), out.domain.no_reductions())


@rule(ReductionOp, VarMeanOp)
def _reduction(e, inp, out):
    # the output's logical domain lists every input axis, the reduced ones as reduction axes
    return _positional(inp.domain.no_reductions(), out.domain.logical)


@rule(BroadcastOp)
def _broadcast(e: BroadcastOp, inp, out):
    kept = [d for d, new in zip(out.domain.no_reductions(), e.is_broadcast) if not new]
    return _positional(inp.domain.no_reductions(), kept)


@rule(SqueezeOp)
def _squeeze(e: SqueezeOp, inp, out):
    kept = [d for k, d in enumerate(inp.domain.no_reductions()) if k not in set(e.dims)]
    return _positional(kept, out.domain.no_reductions())


@rule(PermuteOp)
def _permute(e: PermuteOp, inp, out):
    ins = inp.domain.no_reductions()
    return [(ins[src], o) for src, o in zip(e.dims, out.domain.no_reductions())]


@rule(SliceOp, PadOp)
def _same_extents(e, inp, out):
    # only axes the op leaves whole keep their sharding
    return [(a, b) for a, b in _positional(inp.domain.no_reductions(), out.domain.no_reductions())
            if a.extent == b.extent]


@rule(CatOp)
def _cat(e: CatOp, inp, out):
    return [(a, b) for k, (a, b) in enumerate(_positional(inp.domain.no_reductions(),
                                                         out.domain.no_reductions())) if k != e.dim]


@rule(LinearOp)
def _linear(e: LinearOp, inp, out):
    o = out.domain.logical  # [..., (N), rK]
    x, w = e.inputs[0], e.inputs[1]
    if inp is x:
        xs = x.domain.no_reductions()
        return list(zip(xs[:-1], o)) + [(xs[-1], o[-1])]
    if inp is w:
        ws = w.domain.no_reductions()
        return [(ws[0], o[-2]), (ws[1], o[-1])] if len(ws) == 2 else [(ws[0], o[-1])]
    bias = inp.domain.no_reductions()  # [N], or a scalar-like 0-d bias
    return [(bias[0], o[-2])] if len(bias) == 1 and w.ndim == 2 else []


@rule(MatmulOp)
def _matmul(e: MatmulOp, inp, out):
    a, b = e.inputs
    o = out.domain.logical  # [batch..., (M), (N), rK]
    has_m, has_n = a.ndim >= 2, b.ndim >= 2
    n_batch = len(o) - 1 - has_m - has_n
    batch = o[:n_batch]
    ids = inp.domain.no_reductions()
    pairs = []
    if inp is a:
        pairs.append((ids[-1], o[-1]))
        if has_m:
            pairs.append((ids[-2], o[n_batch]))
        own_batch = ids[:-2] if has_m else []
    else:
        pairs.append((ids[0] if b.ndim == 1 else ids[-2], o[-1]))
        if has_n:
            pairs.append((ids[-1], o[-2]))
        own_batch = ids[:-2] if has_n else []
    for k in range(1, len(own_batch) + 1):
        pairs.append((own_batch[-k], batch[-k]))
    return pairs


@rule(SdpaFwdOp)
def _sdpa(e: SdpaFwdOp, inp, out):
    ids = inp.domain.no_reductions()  # [N*, H, L, E]
    o = out.domain.no_reductions()
    heads = e.inputs[0].ndim - 3  # the axis of H, after the batch axes
    if len(o) <= heads:  # the philox seed and offset (0-dim)
        return []
    # a causal mask reads each query row's global position: a shard of L would mask from its
    # own row 0, so L stays whole (gathered) unless the flag is known to be off
    causal = getattr(e.inputs[4], "value", True) is not False
    rows = heads + 1  # the axis of L
    if not any(inp is t for t in e.inputs[:3]):  # a bias or mask, aligned right with [N*, H, L, S]
        lead = [(d, o[k]) for d, k in zip(reversed(ids[:-1]), range(heads + 1, -1, -1))
                if len(o) > k and not (causal and k == rows)]
        return [(d, od) for d, od in lead if not d.is_broadcast]
    pairs = [(ids[ax], o[ax]) for ax in range(heads + 1)]  # batch and heads shard freely
    if inp is e.inputs[0] and not causal:
        pairs.append((ids[rows], o[rows]))
    if inp is e.inputs[2] and len(o) == heads + 3:
        pairs.append((ids[heads + 2], o[heads + 2]))
    return pairs


# -- indexing: an axis maps where every tensor operand has it whole and the same, so a shard of
# the output reads shards of each; the indexed axis of the indexed tensor maps to nothing (any
# position may be read: it stays whole)


@rule(IndexSelectOp)
def _index_select(e: IndexSelectOp, inp, out):
    ids, o = inp.domain.no_reductions(), out.domain.no_reductions()
    if inp is e.inputs[0]:
        return [(d, o[k]) for k, d in enumerate(ids) if k != e.dim]
    along = [d for d in ids if not d.is_broadcast]  # the index's one axis: the output's `dim`
    return [(along[0], o[e.dim])] if len(along) == 1 else []


@rule(SelectOp)
def _select(e: SelectOp, inp, out):
    kept = [d for k, d in enumerate(inp.domain.no_reductions()) if k != e.dim]
    return _positional(kept, out.domain.no_reductions())


def _common_axes(e: Expr, out: TensorView) -> set[int]:
    """Axes other than `dim` on which every tensor operand and the output have one extent."""
    tvs = [v for v in e.inputs if isinstance(v, TensorView)] + [out]
    return {k for k in range(out.ndim) if k != e.dim
            and len({tv.domain.no_reductions()[k].extent for tv in tvs}) == 1}


@rule(GatherOp)
def _gather(e: GatherOp, inp, out):
    pairs = _positional(inp.domain.no_reductions(), out.domain.no_reductions())
    common = _common_axes(e, out)
    # the index's `dim` axis is the output's: its shards read the whole input axis
    return [(a, b) for k, (a, b) in enumerate(pairs)
            if k in common or (k == e.dim and inp is e.inputs[1])]


@rule(ScatterOp)
def _scatter(e: ScatterOp, inp, out):
    common = _common_axes(e, out)
    pairs = _positional(inp.domain.no_reductions(), out.domain.no_reductions())
    return [(a, b) for k, (a, b) in enumerate(pairs) if k in common]


@rule(EmbeddingFwdOp)
def _embedding(e: EmbeddingFwdOp, inp, out):
    o = out.domain.no_reductions()
    ids = inp.domain.no_reductions()
    if inp is e.inputs[0]:
        return _positional(ids, o[:-1])
    return [(ids[1], o[-1])]  # the weight's rows are looked up: they stay whole


@rule(ScanOp, SortOp, TopKOp)
def _along_dim(e, inp, out):
    # every axis but the scanned or sorted one, which each output element reads whole
    return [(a, b) for k, (a, b) in enumerate(_positional(inp.domain.no_reductions(),
                                                         out.domain.no_reductions())) if k != e.dim]


@rule(SdpaBwdOp)
def _sdpa_bwd(e: SdpaBwdOp, inp, out):
    # batch and heads shard freely, between any tensor operand ([N, H, L, E], a logsumexp's
    # [N, H, L]) and any gradient
    ids, o = inp.domain.no_reductions(), out.domain.no_reductions()
    return [(ids[0], o[0]), (ids[1], o[1])] if len(ids) >= 3 and len(o) == 4 else []


# -- grouped and scaled matmuls: the rows (M) and columns (N) that no group splits shard
# freely, together with the scales' matching axes; K stays whole (grouped_mm's 2-D x 2-D
# groups split it, and a scaled_mm's bias or alpha would be applied once per partial sum)


def _m_n_pairs(inp: TensorView, m: IterDomain, n: IterDomain, m_in, n_in) -> Pairs:
    ids = inp.domain.no_reductions()
    return [(ids[pos], o) for pos, o in ((m_in, m), (n_in, n))
            if pos is not None and len(ids) >= -pos and not ids[pos].is_broadcast]


@rule(GroupedMmOp)
def _grouped_mm(e: GroupedMmOp, inp, out):
    mat1, mat2 = e.inputs[0], e.inputs[1]
    o = out.domain.no_reductions()  # [g, m, n] or [m, n]
    m, n = o[-2], o[-1]
    split_n, split_m = mat1.ndim == 3, mat2.ndim == 3  # the axis the groups split, if not k
    m_pos = None if split_m else -2
    n_pos = None if split_n else -1
    if inp is mat1 or (e.has_scale and inp is e.inputs[3]):
        return _m_n_pairs(inp, m, n, m_pos, None)
    if inp is mat2 or (e.has_scale and inp is e.inputs[4]):
        return _m_n_pairs(inp, m, n, None, n_pos)
    return []


@rule(ScaledMmOp)
def _scaled_mm(e: ScaledMmOp, inp, out):
    o = out.domain.no_reductions()  # [m, n]
    if inp is e.inputs[0] or inp is e.inputs[2]:  # mat1 [m, k], scale1 [m, 1] (or one value)
        return _m_n_pairs(inp, o[0], o[1], -2, None)
    if inp is e.inputs[1] or inp is e.inputs[3]:  # mat2 [k, n], scale2 [1, n] (or one value)
        return _m_n_pairs(inp, o[0], o[1], None, -1)
    if e.has_bias and inp is e.inputs[4 + e.has_alpha]:  # bias [n]
        return _m_n_pairs(inp, o[0], o[1], None, -1)
    return []
