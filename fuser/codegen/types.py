"""Triton types of the IR's data types: the type values compute in (floating types in fp32,
fp64 kept) and the type they are stored as."""
from __future__ import annotations

from ..errors import InternalError
from ..ir import DataType

COMPUTE = {DataType.Float: "tl.float32", DataType.Half: "tl.float32", DataType.BFloat16: "tl.float32",
           DataType.Double: "tl.float64", DataType.Int: "tl.int64", DataType.Int32: "tl.int32",
           DataType.Bool: "tl.int1", DataType.Index: "tl.int64",
           DataType.Float8_e4m3fn: "tl.float32", DataType.Float8_e5m2: "tl.float32"}
STORAGE = {DataType.Float: "tl.float32", DataType.Half: "tl.float16", DataType.BFloat16: "tl.bfloat16",
           DataType.Double: "tl.float64", DataType.Int: "tl.int64", DataType.Int32: "tl.int32",
           DataType.Bool: "tl.int1", DataType.Index: "tl.int64",
           DataType.Float8_e4m3fn: "tl.float8e4nv", DataType.Float8_e5m2: "tl.float8e5"}
# the fp8 types kernels convert through math.fp8_narrow / fp8_widen (no Triton type for e8m0fnu:
# it stays in evaluator segments, like UInt64, whose few ATen ops are all it has)
FP8 = {DataType.Float8_e4m3fn: "e4m3", DataType.Float8_e5m2: "e5m2"}


def compute_type(dt: DataType) -> str:
    if dt not in COMPUTE:
        raise InternalError(f"no kernel compute type for {dt}")
    return COMPUTE[dt]
