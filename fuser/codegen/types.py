"""Triton types of the IR's data types: the type values compute in (floating types in fp32,
fp64 kept) and the type they are stored as."""
from __future__ import annotations

from ..errors import InternalError
from ..ir import DataType

COMPUTE = {DataType.Float: "tl.float32", DataType.Half: "tl.float32", DataType.BFloat16: "tl.float32",
           DataType.Double: "tl.float64", DataType.Int: "tl.int64", DataType.Int32: "tl.int32",
           DataType.Bool: "tl.int1"}
STORAGE = {DataType.Float: "tl.float32", DataType.Half: "tl.float16", DataType.BFloat16: "tl.bfloat16",
           DataType.Double: "tl.float64", DataType.Int: "tl.int64", DataType.Int32: "tl.int32",
           DataType.Bool: "tl.int1"}


def compute_type(dt: DataType) -> str:
    if dt not in COMPUTE:
        raise InternalError(f"no kernel compute type for {dt}")
    return COMPUTE[dt]
