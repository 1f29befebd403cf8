"""Values (Scalar, TensorView), the DeviceMesh a tensor lives on, and the op nodes (Expr).

Every op is an Expr dataclass with `inputs` and `outputs` tuples plus its own typed attributes;
op kinds within a family are enums, never strings. Rules per op (shape, ATen evaluation, Triton
emission, fusibility) live in registries keyed by the Expr class elsewhere.
"""
from __future__ import annotations

import enum
import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Sequence

import sympy

from ..errors import FusionDefinitionError
from .domain import IterDomain, TensorDomain, as_int
from .types import DataType, MemoryType, ParallelType

if TYPE_CHECKING:
    from .fusion import Fusion


class DeviceMesh:
    """The devices a tensor is distributed over: plain data (a tuple of ranks, 1-D or 2-D)."""

    def __init__(self, devices: Any):
        if hasattr(devices, "tolist"):
            devices = devices.tolist()
        devices = list(devices)
        if devices and isinstance(devices[0], (list, tuple)):
            if any(not isinstance(row, (list, tuple)) or len(row) != len(devices[0]) for row in devices):
                raise FusionDefinitionError(f"DeviceMesh: the rows of a 2-D mesh must have one length, "
                                            f"got {devices}")
            self.shape = (len(devices), len(devices[0]))
            flat = [int(d) for row in devices for d in row]
        else:
            self.shape = (len(devices),)
            flat = [int(d) for d in devices]
        if not flat or len(set(flat)) != len(flat):
            raise FusionDefinitionError(f"DeviceMesh needs distinct device ids, got {devices}")
        if min(flat) < 0:
            raise FusionDefinitionError(f"DeviceMesh: device ids are ranks, >= 0; got {devices}")
        self.devices: tuple[int, ...] = tuple(flat)

    @property
    def size(self) -> int:
        return len(self.devices)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def size_of(self, parallel_type: ParallelType) -> int:
        """Number of devices along a mesh axis (mesh_x is the last axis, as in nvFuser)."""
        axes = {ParallelType.mesh_x: -1, ParallelType.mesh_y: -2, ParallelType.mesh_z: -3}
        k = axes[parallel_type]
        if -k > self.ndim:
            raise FusionDefinitionError(f"{parallel_type} used on a {self.ndim}-D {self}")
        return self.shape[k]

    def rank_index(self, rank: int) -> int:
        return self.devices.index(rank)

    def __eq__(self, other) -> bool:
        return isinstance(other, DeviceMesh) and (self.shape, self.devices) == (other.shape, other.devices)

    def __hash__(self) -> int:
        return hash((self.shape, self.devices))

    def as_list(self) -> list:
        """The device ids as given: a list, or a list of rows for a 2-D mesh."""
        if self.ndim == 1:
            return list(self.devices)
        n = self.shape[1]
        return [list(self.devices[r * n:(r + 1) * n]) for r in range(self.shape[0])]

    def __repr__(self) -> str:
        if self.ndim == 1:
            return "DeviceMesh{" + " ".join(map(str, self.devices)) + "}"
        return "DeviceMesh{" + "".join("{" + " ".join(map(str, row)) + "}" for row in self.as_list()) + "}"


@dataclass(eq=False)
class Val:
    name: int
    dtype: DataType

    def is_tensor(self) -> bool:
        """nvFuser's test of a value: a TensorView, not a scalar."""
        return isinstance(self, TensorView)


@dataclass(eq=False)
class Scalar(Val):
    """A scalar: a constant, a fusion input (a symbol bound at execution) or an extent."""

    expr: sympy.Expr = None
    value: Optional[Any] = None  # the Python value of a constant
    fusion: "Fusion" = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if type(self.value).__module__ == "numpy":  # (np.float64, a float to ops: one printed constant)
            self.value = self.value.item()

    @property
    def is_constant(self) -> bool:
        return self.value is not None

    def __repr__(self) -> str:
        from .printer import format_scalar

        return format_scalar(self)


@dataclass(eq=False)
class TensorView(Val):
    domain: TensorDomain = None
    fusion: "Fusion" = field(default=None, repr=False)
    memory_type: MemoryType = MemoryType.Global
    device_mesh: Optional[DeviceMesh] = None

    # -- shape ----------------------------------------------------------------------------

    @property
    def ndim(self) -> int:
        return len(self.domain.no_reductions())

    def shape(self) -> list[Scalar]:
        """The logical extents as Scalars (usable as a `shape` argument of other ops)."""
        return [self.fusion.extent_scalar(d.size) for d in self.domain.no_reductions()]  # (an expanded one's size)

    def size(self, axis: int) -> Scalar:
        n = self.ndim
        try:
            k = None if isinstance(axis, bool) else operator.index(axis)  # (numpy's ints too)
        except TypeError:
            k = None
        if k is None or not -n <= k < n:
            raise FusionDefinitionError(f"size: axis {axis!r} is out of range for {self!r} with {n} dims "
                                        f"(expected an int, {-n} <= axis < {n})")
        return self.shape()[k]

    def get_logical_domain(self) -> list[IterDomain]:
        return list(self.domain.logical)

    def get_root_domain(self) -> list[IterDomain]:
        return list(self.domain.root or self.domain.logical)

    def get_loop_domain(self) -> list[IterDomain]:
        return list(self.domain.loop)

    def get_allocation_domain(self) -> list[IterDomain]:
        return list(self.domain.maybe_allocation)

    def has_root(self) -> bool:
        """nvFuser's test for a root domain (its logical domain derived from another, as by an
        rfactor; fuser records none for a reshape)."""
        return self.domain.root is not None

    # -- scheduling (nvFuser's TensorView API) ---------------------------------------------

    def axis(self, i: int) -> IterDomain:
        return self.domain.loop[self.domain._loop_axis(i, "axis")]

    def split(self, axis: int, factor, inner_split: bool = True) -> "TensorView":
        self.fusion.check_open("split")
        if isinstance(factor, Scalar):  # (nvFuser takes a Val: here one whose value is known)
            if not factor.is_constant or factor.dtype not in (DataType.Int, DataType.Int32, DataType.Index):
                raise FusionDefinitionError(f"split: factor {factor!r} is {_scalar_kind(factor)}; give an "
                                            f"int (or an integer scalar of a known value)")
            factor = factor.value
        # (plain ints, numpy's too, for the log that repr(fd) prints)
        axis, factor = as_int(axis, "split"), as_int(factor, "split", "factor")
        self.domain.split(self.fusion.new_id, axis, factor, inner_split)
        self.fusion.log_schedule((self, "split", (axis, factor, inner_split)))
        return self

    def inner_split(self, axis: int, factor) -> "TensorView":
        return self.split(axis, factor, inner_split=True)

    def outer_split(self, axis: int, factor) -> "TensorView":
        return self.split(axis, factor, inner_split=False)

    def merge(self, axis_o: int, axis_i: Optional[int] = None) -> "TensorView":
        self.fusion.check_open("merge")
        axis_o, axis_i = as_int(axis_o, "merge"), None if axis_i is None else as_int(axis_i, "merge")
        self.domain.merge(self.fusion.new_id, axis_o, axis_i)
        self.fusion.log_schedule((self, "merge", (axis_o,) if axis_i is None else (axis_o, axis_i)))
        return self

    def reorder(self, old_to_new: dict[int, int]) -> "TensorView":
        self.fusion.check_open("reorder")
        self.domain.reorder(old_to_new)  # (checks it: a dict of ints)
        self.fusion.log_schedule((self, "reorder", ({int(o): int(t) for o, t in old_to_new.items()},)))
        return self

    def set_allocation_domain(self, ids: Sequence[IterDomain], new_contiguity=True) -> "TensorView":
        self.fusion.check_open("set_allocation_domain")
        self.domain.set_allocation(ids, new_contiguity)  # (checks `ids` first)
        loop, logical = self.domain.loop, self.domain.logical
        positions = [("loop", next(k for k, x in enumerate(loop) if x is d)) if any(x is d for x in loop)
                     else ("logical", next((k for k, x in enumerate(logical) if x is d), -1)) for d in ids]
        self.fusion.log_schedule((self, "set_allocation_domain", (positions, new_contiguity)))
        return self

    def set_device_mesh(self, mesh: DeviceMesh) -> "TensorView":
        self.fusion.check_open("set_device_mesh")
        if not isinstance(mesh, DeviceMesh):
            raise FusionDefinitionError(f"set_device_mesh expects a DeviceMesh, got {mesh!r}")
        self.device_mesh = mesh
        self.fusion.log_schedule((self, "set_device_mesh", (mesh,)))
        return self

    def __repr__(self) -> str:
        from .printer import format_tv

        return format_tv(self)


def _scalar_kind(s: Scalar) -> str:
    """What a scalar is, for an error that needs its value when the definition is built: a
    constant of its dtype, a scalar input, a tensor's extent or a value computed at execution."""
    if s.is_constant:
        return f"a {s.dtype} scalar constant"
    inputs = {v.expr for v in s.fusion.inputs() if isinstance(v, Scalar)}
    if s.expr in inputs:
        return f"a {s.dtype} scalar input"
    if not inputs.isdisjoint(s.expr.free_symbols):
        return f"a {s.dtype} scalar computed from scalar inputs"
    owner = next((f"T{tv.name}'s extent along axis {k}" for tv in s.fusion.tensors()
                  for k, d in enumerate(tv.domain.no_reductions()) if d.size == s.expr), None)
    return f"{owner or 'computed from tensor extents'}, known only at execution"


# ---------------------------------------------------------------------------------------------
# Op kinds


class UnaryOpType(enum.Enum):
    abs = "abs"; neg = "neg"; exp = "exp"; exp2 = "exp2"; expm1 = "expm1"; log = "log"  # noqa: E702
    log2 = "log2"; log10 = "log10"; log1p = "log1p"; sqrt = "sqrt"; rsqrt = "rsqrt"  # noqa: E702
    reciprocal = "reciprocal"; sin = "sin"; cos = "cos"; tan = "tan"; tanh = "tanh"  # noqa: E702
    sigmoid = "sigmoid"; relu = "relu"; silu = "silu"; erf = "erf"; floor = "floor"  # noqa: E702
    ceil = "ceil"; round = "round"; trunc = "trunc"; sign = "sign"; isnan = "isnan"  # noqa: E702
    isinf = "isinf"; isfinite = "isfinite"; logical_not = "logical_not"  # noqa: E702
    bitwise_not = "bitwise_not"  # noqa: E702
    # inverse trigonometric and hyperbolic, special functions, float classification, complex parts
    acos = "acos"; acosh = "acosh"; asin = "asin"; asinh = "asinh"; atan = "atan"  # noqa: E702
    atanh = "atanh"; cosh = "cosh"; sinh = "sinh"; erfc = "erfc"; erfinv = "erfinv"  # noqa: E702
    erfcinv = "erfcinv"; lgamma = "lgamma"; frac = "frac"; signbit = "signbit"  # noqa: E702
    isneginf = "isneginf"; isposinf = "isposinf"; isreal = "isreal"; real = "real"  # noqa: E702
    imag = "imag"  # noqa: E702


class BinaryOpType(enum.Enum):
    add = "add"; sub = "sub"; mul = "mul"; div = "div"; pow = "pow"  # noqa: E702
    maximum = "maximum"; minimum = "minimum"; fmod = "fmod"; remainder = "remainder"  # noqa: E702
    eq = "eq"; ne = "ne"; lt = "lt"; le = "le"; gt = "gt"; ge = "ge"  # noqa: E702
    logical_and = "logical_and"; logical_or = "logical_or"  # noqa: E702
    bitwise_and = "bitwise_and"; bitwise_or = "bitwise_or"; bitwise_xor = "bitwise_xor"  # noqa: E702
    atan2 = "atan2"  # noqa: E702
    # div is C's truncating division on integers (nvFuser's), truediv always true division
    truediv = "truediv"; mod = "mod"; nextafter = "nextafter"; gcd = "gcd"  # noqa: E702
    bitwise_left_shift = "bitwise_left_shift"; bitwise_right_shift = "bitwise_right_shift"  # noqa: E702
    logical_right_shift = "logical_right_shift"  # noqa: E702


class TernaryOpType(enum.Enum):
    where = "where"
    clamp = "clamp"
    lerp = "lerp"


class ReductionOpType(enum.Enum):
    sum = "add"
    prod = "mul"
    max = "max"
    min = "min"


class LoadStoreOpType(enum.Enum):
    set = "set"
    segment_set = "segment_set"


# ---------------------------------------------------------------------------------------------
# Op nodes. `inputs` and `outputs` hold Vals; the rest are the op's attributes.


@dataclass(eq=False, kw_only=True)
class Expr:
    inputs: tuple[Val, ...]
    outputs: tuple[Val, ...]

    @property
    def out(self) -> Val:
        return self.outputs[0]

    @property
    def inp(self) -> Val:
        return self.inputs[0]

    @property
    def op_name(self) -> str:
        return type(self).__name__


@dataclass(eq=False, kw_only=True)
class UnaryOp(Expr):
    kind: UnaryOpType

    @property
    def op_name(self) -> str:
        return self.kind.value


@dataclass(eq=False, kw_only=True)
class BinaryOp(Expr):
    kind: BinaryOpType

    @property
    def op_name(self) -> str:
        return self.kind.value


@dataclass(eq=False, kw_only=True)
class TernaryOp(Expr):
    kind: TernaryOpType

    @property
    def op_name(self) -> str:
        return self.kind.value


@dataclass(eq=False, kw_only=True)
class CastOp(Expr):
    dtype: DataType


@dataclass(eq=False, kw_only=True)
class ReductionOp(Expr):
    """Reduces `axes` (of the input's logical non-reduction dims). The output keeps them as
    reduction IterDomains; keepdim is a separate BroadcastOp."""

    kind: ReductionOpType
    axes: tuple[int, ...]


@dataclass(eq=False, kw_only=True)
class VarMeanOp(Expr):
    """outputs = (var, mean) over `axes` with Bessel-style `correction`."""

    axes: tuple[int, ...]
    correction: int


@dataclass(eq=False, kw_only=True)
class BroadcastOp(Expr):
    """Inserts broadcast dims: `is_broadcast[k]` says whether output dim k is new."""

    is_broadcast: tuple[bool, ...]


@dataclass(eq=False, kw_only=True)
class ExpandOp(Expr):
    """Expands broadcast dims to the output's (expanded) extents."""


@dataclass(eq=False, kw_only=True)
class SqueezeOp(Expr):
    dims: tuple[int, ...]


@dataclass(eq=False, kw_only=True)
class ReshapeOp(Expr):
    """Reshape to the output's logical extents (row-major order of elements kept)."""


@dataclass(eq=False, kw_only=True)
class PermuteOp(Expr):
    dims: tuple[int, ...]  # output dim k is input dim dims[k]


@dataclass(eq=False, kw_only=True)
class SliceOp(Expr):
    """inputs = (tensor, start_0, stop_0, step_0, start_1, ...) with Scalar bounds."""

    @property
    def ranges(self) -> list[tuple[Scalar, Scalar, Scalar]]:
        b = self.inputs[1:]
        return [tuple(b[k:k + 3]) for k in range(0, len(b), 3)]


@dataclass(eq=False, kw_only=True)
class PadOp(Expr):
    """inputs = (tensor, value, left_last, right_last, left_second_last, ...) as torch's F.pad."""


@dataclass(eq=False, kw_only=True)
class CatOp(Expr):
    dim: int


@dataclass(eq=False, kw_only=True)
class LoadStoreOp(Expr):
    kind: LoadStoreOpType = LoadStoreOpType.set


@dataclass(eq=False, kw_only=True)
class FullOp(Expr):
    """inputs = (fill_value,); the output's extents give the shape."""


@dataclass(eq=False, kw_only=True)
class IotaOp(Expr):
    """inputs = (length, start, step)."""


@dataclass(eq=False, kw_only=True)
class LinearOp(Expr):
    """inputs = (input, weight) or (input, weight, bias); out = input @ weight.T + bias."""


@dataclass(eq=False, kw_only=True)
class MatmulOp(Expr):
    """inputs = (a, b), torch.matmul semantics."""


@dataclass(eq=False, kw_only=True)
class SdpaFwdOp(Expr):
    """inputs = (query, key, value, dropout_p, is_causal, scale), then the additive bias and mask
    where the flags say they are given; outputs = (output, log_sumexp, philox_seed, philox_offset)."""

    has_bias: bool = False
    has_mask: bool = False


# -- grouped and scaled matmuls: run through ATen (ops/grouped_mm.py) ---------------------


@dataclass(eq=False, kw_only=True)
class GroupedMmOp(Expr):
    """inputs = (mat1, mat2, offsets), then (scale1, scale2) where `has_scale`; the int32
    `offsets` end each group along the axis that the operands' ranks split (k, n or m)."""

    has_scale: bool = False


@dataclass(eq=False, kw_only=True)
class ScaledMmOp(Expr):
    """inputs = (mat1, mat2, scale1, scale2), then alpha, bias, beta where the flags say;
    out = alpha * ((mat1 * scale1) @ (mat2 * scale2)) + beta * bias."""

    has_alpha: bool = False
    has_bias: bool = False
    has_beta: bool = False


# -- indexing: run through ATen (evaluator segments), as torch's indexing ops ----------------


@dataclass(eq=False, kw_only=True)
class IndexSelectOp(Expr):
    """inputs = (lookup, index); torch.index_select along `dim`: output axis `dim` is as long as
    the index (a 1-D index, or one broadcast on every axis but `dim`)."""

    dim: int


@dataclass(eq=False, kw_only=True)
class SelectOp(Expr):
    """inputs = (tensor, index scalar); torch.select: axis `dim` is dropped."""

    dim: int


@dataclass(eq=False, kw_only=True)
class GatherOp(Expr):
    """inputs = (input, index); out[..., j, ...] = input[..., index[..., j, ...], ...] along
    `dim`, shaped as the index. torch.gather (the index no longer than the input on the other
    axes), or torch.take_along_dim where `take_along_axis` (the other axes equal, or broadcast)."""

    dim: int
    take_along_axis: bool = False


@dataclass(eq=False, kw_only=True)
class ScatterOp(Expr):
    """inputs = (self, index, src), src a tensor or a scalar; torch.scatter along `dim`: the
    output is `self` with src's values written at the index's positions."""

    dim: int


@dataclass(eq=False, kw_only=True)
class EmbeddingFwdOp(Expr):
    """inputs = (indices, weight, norm_type, scale_grad_by_freq, sparse), then padding_idx and
    max_norm where given (the flags say which); F.embedding: output = indices' shape + [dim]."""

    has_padding_idx: bool
    has_max_norm: bool


# ---------------------------------------------------------------------------------------------
# Random numbers


class RNGOpType(enum.Enum):
    uniform = "uniform"  # in [a, b)
    normal = "normal"  # mean a, standard deviation b


@dataclass(eq=False, kw_only=True)
class RNGOp(Expr):
    """Random numbers of the output's shape and dtype: inputs = (a, b) drawn fresh in every
    execution, or (a, b, seed, offset) where the definition fixes the stream. Element i (its
    row-major index in the output) is philox4x32-10 of key `seed` and counter `offset + i`,
    whatever computes it (evaluate/philox.py); an unseeded op gets a seed drawn from PyTorch's
    generator per execution (passes/seed_random.py)."""

    kind: RNGOpType

    @property
    def params(self) -> tuple[Val, Val]:
        return self.inputs[0], self.inputs[1]

    @property
    def standard(self) -> bool:
        """Constant parameters (0, 1): U[0, 1) or N(0, 1) as drawn, with no affine step."""
        return all(isinstance(v, Scalar) and v.is_constant and not isinstance(v.value, bool) and v.value == n
                   for v, n in zip(self.params, (0, 1)))

    @property
    def seeded(self) -> bool:
        return len(self.inputs) == 4

    @property
    def seed(self) -> Optional[Val]:
        return self.inputs[2] if self.seeded else None

    @property
    def offset(self) -> Optional[Val]:
        return self.inputs[3] if self.seeded else None

    @property
    def op_name(self) -> str:
        return f"rng_{self.kind.value}"


# ops whose output ATen makes as a view of their input, without copying: a kernel gains nothing
# by writing one that is not otherwise computed
VIEW_OPS = (BroadcastOp, ExpandOp, SqueezeOp, PermuteOp, SliceOp)


# -- scans, sorting, attention backward: ATen evaluator ops (not in KERNEL_OPS) ---------------


@dataclass(eq=False, kw_only=True)
class ScanOp(Expr):
    """Inclusive scan along `dim` with `op_type` (add: cumsum, mul: cumprod, maximum: cummax,
    minimum: cummin); the output has the input's shape and dtype."""

    op_type: BinaryOpType
    dim: int

    @property
    def op_name(self) -> str:
        return "scan_" + self.op_type.value


@dataclass(eq=False, kw_only=True)
class SortOp(Expr):
    """outputs = (values, indices) of sorting along `dim` (argsort keeps the indices)."""

    dim: int
    descending: bool
    stable: bool


@dataclass(eq=False, kw_only=True)
class TopKOp(Expr):
    """inputs = (tensor, k); outputs = (values, indices), `k` long along `dim`."""

    dim: int
    largest: bool
    sorted: bool


@dataclass(eq=False, kw_only=True)
class SdpaBwdOp(Expr):
    """inputs = (grad_output, query, key, value, output, logsumexp, dropout_p, is_causal,
    philox_seed, philox_offset, scale); outputs = (grad_query, grad_key, grad_value)."""
