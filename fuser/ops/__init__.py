"""Op builders: each checks its operands, derives the output's extents and dtype, and appends
one Expr to the operands' Fusion. `OPS` maps nvFuser's `fd.ops.*` names to builders."""
from functools import partial

from ..ir import BinaryOpType, ReductionOpType, TernaryOpType, UnaryOpType
from . import composite as _comp
from . import grouped_mm as _gmm
from . import indexing as _idx
from . import math as _math
from . import matmul as _mm
from . import metadata as _meta
from . import pointwise as _pw
from . import random as _random
from . import reduction as _red
from . import scan_sort as _scan
from . import shape as _shape

OPS = {}
for _k in UnaryOpType:
    OPS[_k.name] = partial(_pw.unary, _k)
for _k in BinaryOpType:
    OPS[_k.name] = partial(_pw.binary, _k)
for _k in TernaryOpType:
    OPS[_k.name] = partial(_pw.ternary, _k)
for _k in ReductionOpType:
    OPS[_k.name] = partial(_red.reduce, _k)
OPS.update(
    cast=_pw.cast, var=_red.var, var_mean=_red.var_mean,
    broadcast=_shape.broadcast, broadcast_in_dim=_shape.broadcast_in_dim, expand=_shape.expand,
    squeeze=_shape.squeeze, reshape=_shape.reshape, permute=_shape.permute, slice=_shape.slice,
    pad=_shape.pad, cat=_shape.cat, set=_shape.set, segment_set=_shape.segment_set,
    linear=_mm.linear, matmul=_mm.matmul, sdpfa_fwd=_mm.sdpfa_fwd,
    sdpfa_bwd=_mm.sdpfa_bwd,
)
# scans, sorting, topk (ATen evaluator segments); `sort` is a fuser extension (torch.sort)
OPS.update(
    cumsum=_scan.cumsum, cumprod=_scan.cumprod, cummax=_scan.cummax, cummin=_scan.cummin,
    argsort=_scan.argsort, sort=_scan.sort, topk=_scan.topk,
)
# composites of other ops (fused kernels) and tensor metadata
OPS.update(
    triu=_comp.triu, welford=_comp.welford,
    shape=_meta.shape, size=_meta.size, stride_order=_meta.stride_order,
)
OPS.update(  # indexing: ATen evaluator segments
    index_select=_idx.index_select, select=_idx.select, gather=_idx.gather,
    take_along_axis=_idx.take_along_axis, scatter=_idx.scatter, embedding_fwd=_idx.embedding_fwd,
)
OPS.update(addcmul=_math.addcmul, threshold=_math.threshold, real=_math.real, imag=_math.imag)
# grouped (MoE) and scaled (fp8) matmuls: ATen evaluator segments
OPS.update(grouped_mm=_gmm.grouped_mm, scaled_mm=_gmm.scaled_mm)
# ops that create tensors from nothing take the fusion first; the frontend binds it
FUSION_OPS = {"full": _shape.full, "iota": _shape.iota}
# random numbers (ops/random.py)
OPS.update(rand_like=_random.rand_like, randn_like=_random.randn_like)
FUSION_OPS.update(uniform=_random.uniform, normal=_random.normal)
