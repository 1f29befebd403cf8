"""Enumerations of the IR: data types, iteration types, parallel types, memory types."""
from __future__ import annotations

import enum


class DataType(enum.Enum):
    """Element types, with nvFuser's Python names. Value: (IR spelling, torch attribute or None
    where torch has none, bytes)."""

    Double = ("double", "float64", 8)
    Float = ("float", "float32", 4)
    Half = ("__half", "float16", 2)
    BFloat16 = ("__bfloat", "bfloat16", 2)
    Int = ("int64_t", "int64", 8)
    Int32 = ("int", "int32", 4)
    Bool = ("bool", "bool", 1)
    ComplexFloat = ("std::complex<float>", "complex64", 8)
    ComplexDouble = ("std::complex<double>", "complex128", 16)
    # torch.uint64: few ATen kernels (casts, bitwise and/or/xor, mul, eq/ne, where); PyTorch
    # refuses to promote it with signed integers or bool
    UInt64 = ("uint64_t", "uint64", 8)
    # nvFuser's index type: an int64 here (tensors and scalars), after Int so that
    # from_torch(torch.int64) gives Int
    Index = ("nvfuser_index_t", "int64", 8)
    # 8-bit floats: values only pass through them (loads, stores, casts, selects); arithmetic
    # on them computes in Float (see promote_fp8 in ops/pointwise.py)
    Float8_e4m3fn = ("__e4m3", "float8_e4m3fn", 1)
    Float8_e5m2 = ("__e5m2", "float8_e5m2", 1)
    Float8_e8m0fnu = ("__e8m0", "float8_e8m0fnu", 1)
    # 4-bit floats: torch holds them only packed in pairs (float4_e2m1fn_x2, no casts), so
    # they pass through data movement alone; the unpacked type has no torch dtype at all
    Float4_e2m1fn = ("__e2m1", None, 1)
    Float4_e2m1fn_x2 = ("__e2m1_x2", "float4_e2m1fn_x2", 1)
    # "no dtype given" in nvFuser's API (reductions' dtype=DataType.Null): never a value's type
    Null = ("null_type", None, 0)

    def __call__(self) -> "DataType":
        """Itself: nvFuser's `tv.dtype()` is a method where fuser's `tv.dtype` is the type, so
        both spellings give it."""
        return self

    @property
    def ir_name(self) -> str:
        return self.value[0]

    @property
    def itemsize(self) -> int:
        return self.value[2]

    @property
    def is_floating(self) -> bool:
        return self in _FLOATING

    @property
    def is_integral(self) -> bool:
        return self in _INTEGRAL

    @property
    def is_float8(self) -> bool:
        return self in _FLOAT8

    @property
    def is_opaque(self) -> bool:
        """Values torch can store and move but not convert or compute with (packed fp4)."""
        return self in (DataType.Float4_e2m1fn, DataType.Float4_e2m1fn_x2)

    @property
    def is_complex(self) -> bool:
        return self in (DataType.ComplexFloat, DataType.ComplexDouble)

    @property
    def is_boolean(self) -> bool:
        return self is DataType.Bool

    @property
    def category(self) -> int:
        """PyTorch's promotion category: bool < integer < floating < complex."""
        if self.is_boolean:
            return 0
        if self.is_integral:
            return 1
        if self.is_floating:
            return 2
        return 3

    def to_torch(self):
        import torch  # lazily: the IR itself runs no torch code

        if self.value[1] is None:
            from ..errors import UnsupportedError

            why = ("it stands for no dtype" if self is DataType.Null else
                   "torch holds it only packed in pairs: use DataType.Float4_e2m1fn_x2")
            raise UnsupportedError(f"{self!r} has no torch dtype: {why}")
        return getattr(torch, self.value[1])

    @staticmethod
    def from_torch(torch_dtype) -> "DataType":
        name = str(torch_dtype).removeprefix("torch.")
        for dt in DataType:
            if dt.value[1] == name:
                return dt
        from ..errors import UnsupportedError

        raise UnsupportedError(f"torch dtype {torch_dtype} has no fuser DataType")

    def __repr__(self) -> str:
        return f"DataType.{self.name}"


_FLOAT8 = (DataType.Float8_e4m3fn, DataType.Float8_e5m2, DataType.Float8_e8m0fnu)
_FLOATING = (DataType.Double, DataType.Float, DataType.Half, DataType.BFloat16, *_FLOAT8,
             DataType.Float4_e2m1fn, DataType.Float4_e2m1fn_x2)
_INTEGRAL = (DataType.Int, DataType.Int32, DataType.UInt64, DataType.Index)


def int_range(dt: DataType) -> tuple[int, int]:
    """[low, high) of an integer scalar of type `dt` (Index is 64-bit)."""
    import torch

    info = torch.iinfo(dt.to_torch())
    return info.min, info.max + 1


def fits_int64(v: int) -> bool:
    """Whether a Python int is a 64-bit integer's value (what a scalar, a literal or a size holds)."""
    return -2**63 <= v < 2**63


def promote(*dtypes: DataType) -> DataType:
    """The result type of tensors of equal standing (PyTorch's rule: highest category, then the
    wider type; bf16 with half gives float)."""
    best = dtypes[0]
    for dt in dtypes[1:]:
        if dt is best:
            continue
        if dt.category != best.category:
            higher, lower = (dt, best) if dt.category > best.category else (best, dt)
            best = as_complex_of(lower) if higher is DataType.ComplexFloat else higher
        elif {dt, best} == {DataType.Half, DataType.BFloat16}:
            best = DataType.Float
        elif dt.is_float8 or best.is_float8:
            # nvFuser's rule (PyTorch promotes no fp8): with another floating type, Float
            best = DataType.Double if DataType.Double in (dt, best) else DataType.Float
        elif DataType.Index in (dt, best):
            best = DataType.Index  # (nvFuser: an index computation stays one)
        elif dt.itemsize > best.itemsize:
            best = dt
    return best


def as_complex_of(dtype: DataType) -> DataType:
    """A complex type meeting `dtype`: PyTorch keeps a double's precision (a double with
    complex64 gives complex128); every other type gives complex64."""
    return DataType.ComplexDouble if dtype is DataType.Double else DataType.ComplexFloat


def default_dtype_of_category(category: int) -> DataType:
    return (DataType.Bool, DataType.Int, DataType.Float, DataType.ComplexFloat)[category]


class IterType(enum.Enum):
    Iteration = "i"
    Reduction = "r"
    Broadcast = "b"


class ParallelType(enum.Enum):
    """How an IterDomain is executed. Names are nvFuser's Python names; values its IR spelling."""

    serial = "S"
    mesh_x = "deviceIdx.x"
    mesh_y = "deviceIdx.y"
    mesh_z = "deviceIdx.z"
    stream = "streamIdx"
    grid_x = "blockIdx.x"
    grid_y = "blockIdx.y"
    grid_z = "blockIdx.z"
    block_x = "threadIdx.x"
    block_y = "threadIdx.y"
    block_z = "threadIdx.z"
    vectorize = "V"
    unroll = "UR"
    unswitch = "US"

    @property
    def is_device(self) -> bool:
        return self in (ParallelType.mesh_x, ParallelType.mesh_y, ParallelType.mesh_z)

    @property
    def is_stream(self) -> bool:
        return self is ParallelType.stream

    def __repr__(self) -> str:
        return f"ParallelType.{self.name}"


class MemoryType(enum.Enum):
    Global = "g"
    Local = "l"
    Shared = "s"
