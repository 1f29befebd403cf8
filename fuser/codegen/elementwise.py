"""Elementwise ops in generated kernels: constants, casts (half and bf16 rounded as eager
rounds them), unary, binary and ternary ops through the per-target math lowering, and iota. A
mixin of KernelWriter: it uses the writer's operands, bindings and super-axes."""
from __future__ import annotations

import math
import struct

from ..errors import InternalError
from ..ir import (BinaryOp, BinaryOpType, BroadcastOp, CastOp, DataType, ExpandOp, IotaOp, ReductionOp,
                  ReductionOpType, Scalar, SqueezeOp, TernaryOp, TernaryOpType, UnaryOp, TensorView,
                  UnaryOpType, Val)
from ..ops.pointwise import result_type
from ..schedulers.inner_outer import FP32_COMPUTED
from .math import binary_lowering, fp8_narrow, fp8_widen, has_absolute_lowering, unary_lowering
from .scope import Scope
from .types import FP8, STORAGE, compute_type

_ARITHMETIC = {BinaryOpType.add, BinaryOpType.sub, BinaryOpType.mul, BinaryOpType.maximum,
               BinaryOpType.minimum}


_COMPARISONS = {BinaryOpType.eq, BinaryOpType.ne, BinaryOpType.lt, BinaryOpType.le, BinaryOpType.gt,
                BinaryOpType.ge}
_HALF_WIDTH = (DataType.Half, DataType.BFloat16)  # stored in 16 bits, computed in fp32
_FP32_MIN_NORMAL = 2.0 ** -126


def _as_fp32(f: float) -> float:
    """`f` rounded to fp32 as IEEE rounds (to inf past its range), without ATen (codegen may run
    under a profiler that counts ATen calls)."""
    try:
        return struct.unpack("f", struct.pack("f", f))[0]
    except OverflowError:
        return math.copysign(math.inf, f)


def _as_half_width(f: float, dtype: DataType) -> float:
    """`f` rounded to half or bf16 as ATen converts a Python number (through fp32, to nearest
    even; inf past the range)."""
    f = _as_fp32(f)
    if f != f or math.isinf(f):
        return f
    if dtype is DataType.Half:
        try:
            return struct.unpack("e", struct.pack("e", f))[0]
        except OverflowError:
            return math.copysign(math.inf, f)
    bits = struct.unpack("I", struct.pack("f", f))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("f", struct.pack("I", bits))[0]


def _wrap_int(v: int, dtype: DataType) -> int:
    """An integer constant as the tensor's integer type holds it (two's complement wrap, as
    eager `int32_tensor + 2**40` computes)."""
    if not dtype.is_integral:
        return v
    bits = 8 * dtype.itemsize
    return (v + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))


class ElementwiseEmitter:
    def block(self, shape: str, value: str, dtype: str) -> str:
        """A block of `shape` filled with `value` (a Gluon kernel gives it its layout:
        codegen/shared_row.py)."""
        return f"tl.full({shape}, {value}, {dtype})"

    def literal(self, s: Scalar, dtype: DataType) -> str:
        v = s.value
        if dtype.is_boolean and isinstance(v, (bool, int)):
            return repr(bool(v))  # (an int1, as tl.where's condition must be: 1 is an int32)
        if isinstance(v, bool):
            v = int(v)
        if dtype.category >= 2 or isinstance(v, float):
            f = float(v)
            if dtype in FP32_COMPUTED:
                # the op computes in fp32, where eager converts the constant too; Triton would
                # type a float outside fp32's normal range (2.2e-308) as fp64 and promote the op
                f = _as_fp32(f)
            if f != f:
                return "float('nan')"
            if f in (float("inf"), float("-inf")):
                return f"float('{'-' if f < 0 else ''}inf')"
            if dtype in FP32_COMPUTED and f != 0 and abs(f) < _FP32_MIN_NORMAL:
                return self.block("[1, 1]", repr(f), "tl.float32")  # a subnormal fp32: typed explicitly
            return repr(f)
        return repr(_wrap_int(int(v), dtype))

    def emit_iota(self, scope: Scope, e: IotaOp) -> None:
        """start + step * index along the loop axis of the output (its own super-axis: the
        launcher never folds it with a neighbour)."""
        dt = e.out.dtype
        (j,) = self.super_axes_of(e.out) or [None]
        # (a [1, 1] block where the output spans no loop axis: a bare 0 would read `0.to(...)`)
        index = self.block("[1, 1]", "0", "tl.int32") if j is None else self.index_code(j)
        if j is not None:
            scope.owner_of_dim(self.super_dim[j])  # the index must be live in this scope
        _, start, step = (self.operand(scope, v, dt) for v in e.inputs)
        code = f"({start} + {step} * {index}.to({compute_type(dt)}))"
        if dt in (DataType.Half, DataType.BFloat16) or dt in FP8:  # (eager's positions are rounded to dt)
            code = self.widen(self.narrow(code, dt), dt)
        self.bind(scope, e.out, code)

    def cast_code(self, scope: Scope, v: Val, dtype: DataType) -> str:
        src = self.operand(scope, v, v.dtype)
        if dtype.is_boolean:
            return f"({src} != 0)"
        if dtype in (DataType.Half, DataType.BFloat16):
            if v.dtype.is_boolean:
                return f"{src}.to(tl.float32)"  # 0 and 1 are exact
            return self.widen(self.narrow(self.as_fp32(src, v.dtype), dtype), dtype)
        return f"{src}.to({compute_type(dtype)})"

    @staticmethod
    def as_fp32(code: str, dtype: DataType) -> str:
        """A value of compute type `dtype` in fp32: integers and fp64 reach narrower floating
        types through fp32, as eager converts them."""
        return code if compute_type(dtype) == "tl.float32" else f"{code}.to(tl.float32)"

    def emit_fp8_cast(self, scope: Scope, e: CastOp) -> None:
        """A cast to fp8: its fp8 value is bound too (`T7_fp8`), so that storing the result
        stores it rather than converting the fp32 value held for later uses a second time."""
        fp8 = f"{self.tname(e.out)}_fp8"
        scope.lines.append(f"{fp8} = {self.narrow(self.as_fp32(self.operand(scope, e.inp, e.inp.dtype), e.inp.dtype), e.dtype)}")
        scope.names[("fp8", self.key(e.out))] = fp8
        self.bind(scope, e.out, self.widen(fp8, e.dtype))

    def narrow(self, code: str, dtype: DataType) -> str:
        """An fp32 value converted to a storage type. The interpreter truncates fp32 to bf16, so
        there the rounding to nearest even is done first, as the GPU and eager do it; fp8 is
        converted as torch converts it (math.fp8_narrow)."""
        if dtype in FP8:
            return fp8_narrow(code, FP8[dtype], self.target)
        if dtype is DataType.BFloat16 and self.target == "interpreter":
            code = f"_round_bf16({code})"
        return f"{code}.to({STORAGE[dtype]})"

    def widen(self, code: str, dtype: DataType) -> str:
        """A value of storage type `dtype` (a load, a narrowed value) in its compute type."""
        if dtype in FP8:
            return fp8_widen(code, FP8[dtype], self.target)
        return f"{code}.to({compute_type(dtype)})"

    def emit_unary(self, scope: Scope, e: UnaryOp) -> None:
        out_dt = e.out.dtype
        in_dt = e.inp.dtype
        keep_int = e.kind in (UnaryOpType.floor, UnaryOpType.ceil, UnaryOpType.round,
                              UnaryOpType.trunc) and in_dt.category < 2
        if keep_int:
            self.bind(scope, e.out, self.operand(scope, e.inp, in_dt))
            return
        x = self.operand(scope, e.inp, out_dt if out_dt.category >= 2 else in_dt)
        fp32 = self.bf16_outputs and e.out.dtype in FP32_COMPUTED
        absolute = fp32 and has_absolute_lowering(e.kind, self.target) and self.absolute_accuracy_suffices(e.out)
        flush = fp32 and e.kind is UnaryOpType.exp and self.flush_suffices(e.out)
        fmt = unary_lowering(e.kind, self.target, fp32, absolute, flush)
        if fmt is None:
            raise InternalError(f"{e.kind.value} has no lowering on {self.target}")
        self.bind(scope, e.out, fmt.format(x=x))

    def absolute_accuracy_suffices(self, v: TensorView) -> bool:
        """Whether every use of `v` in this kernel adds it to (or subtracts it from) a
        constant of magnitude 1/2 or more, directly or after squaring it (v * v, used so), and
        it is no output: an absolute error of about 1e-7 in `v` is then all that shows in a
        bf16 result, however small `v` is."""
        def added_to_constant(e) -> bool:
            if not isinstance(e, BinaryOp) or e.kind not in (BinaryOpType.add, BinaryOpType.sub):
                return False
            return any(isinstance(w, Scalar) and w.is_constant and not isinstance(w.value, bool)
                       and abs(complex(w.value)) >= 0.5 for w in e.inputs)

        outputs = {id(o) for o in self.plan.outputs}
        if id(v) in outputs:
            return False
        for e in self._users(v):
            if added_to_constant(e):
                continue
            squared = isinstance(e, BinaryOp) and e.kind is BinaryOpType.mul and all(w is v for w in e.inputs)
            if not (squared and id(e.out) not in outputs and all(added_to_constant(f) for f in self._users(e.out))):
                return False
        return True

    def flush_suffices(self, v: TensorView) -> bool:
        """Whether `v` (an exp) may be computed with results below 2^-126 flushed to zero: each
        value it reaches in this kernel is made by adding, subtracting, multiplying (by no
        value grown from an exp, exp2 or pow), taking a maximum or minimum, casting, selecting
        or summing, so a flushed term changes a result by about 2^-126 times its other factors,
        as a subnormal result would show in bf16. A division could magnify it, whether by a sum
        of such terms in this kernel or by one a statistics kernel stored (exp(x) / exp(x).sum()
        over a row of -95s: 0 for 6e-6), and so could a log, a root, a comparison or a product
        with exp(b) (exp(a) * exp(b), a below -87.3: exp(a + b) may be large)."""
        exps = self._exp_origins()
        spread = {BinaryOpType.add, BinaryOpType.sub, BinaryOpType.maximum, BinaryOpType.minimum}
        pending, seen = [v], {id(v)}
        while pending:
            u = pending.pop()
            for e in self._users(u):
                if isinstance(e, BinaryOp):
                    other = e.inputs[1] if e.inputs[0] is u else e.inputs[0]
                    ok = e.kind in spread or (e.kind is BinaryOpType.mul
                                              and exps.get(id(other), frozenset()) <= {id(v)})
                elif isinstance(e, UnaryOp):
                    ok = e.kind in (UnaryOpType.neg, UnaryOpType.abs)
                elif isinstance(e, TernaryOp):
                    ok = e.kind is TernaryOpType.where and e.inputs[0] is not u
                elif isinstance(e, CastOp):
                    ok = not e.dtype.is_boolean and e.dtype.category >= 2
                elif isinstance(e, ReductionOp):
                    ok = e.kind in (ReductionOpType.sum, ReductionOpType.max, ReductionOpType.min)
                else:
                    ok = isinstance(e, (BroadcastOp, ExpandOp, SqueezeOp))
                if not ok:
                    return False
                for o in e.outputs:
                    if id(o) not in seen:
                        seen.add(id(o))
                        pending.append(o)
        return True

    def _users(self, v: Val) -> list:
        """The exprs of this kernel that read `v`."""
        return [e for e in self.plan.exprs if any(w is v for w in e.inputs)]

    def _exp_origins(self) -> dict:
        """For each value of the kernel, the exps, exp2s and pows (ids of their outputs) it is
        computed from."""
        found: dict = {}
        growing = (UnaryOpType.exp, UnaryOpType.exp2, UnaryOpType.expm1)
        for e in self.plan.exprs:  # (in order: an expr's inputs come first)
            made = frozenset().union(*(found.get(id(w), frozenset()) for w in e.inputs))
            if (isinstance(e, UnaryOp) and e.kind in growing) or (isinstance(e, BinaryOp) and e.kind is BinaryOpType.pow):
                made = made | {id(e.out)}
            for o in e.outputs:
                found[id(o)] = made
        return found

    def emit_binary(self, scope: Scope, e: BinaryOp) -> None:
        a, b = e.inputs
        compute = result_type(a, b) if e.out.dtype.is_boolean else e.out.dtype
        if e.kind in (BinaryOpType.logical_and, BinaryOpType.logical_or):
            compute = result_type(a, b)
        x, y = self.operand(scope, a, compute), self.operand(scope, b, compute)
        if e.kind in _COMPARISONS and compute in _HALF_WIDTH:
            # eager compares half and bf16 in their own type: a number, a scalar or a 0-dim
            # tensor of a wider type on the other side is converted to it first (ATen's CPU and
            # CUDA comparison kernels alike); arithmetic keeps such a number in fp32 (opmath)
            x, y = (self.rounded(v, code, compute) for v, code in ((a, x), (b, y)))
        if e.kind in (BinaryOpType.div, BinaryOpType.truediv) and compute in FP32_COMPUTED \
                and id(b) in self.plan.softmax_sums:
            # one division a row (a chunk, looped), a multiply an element: an fp32 division is
            # some 10 instructions, up to 6% of a short softmax row's time on the H200
            self.bind(scope, e.out, f"({x} * (1.0 / {y}))")
            return
        fmt = binary_lowering(e.kind, self.target, compute.is_integral)
        if fmt.startswith("_"):  # helper functions take blocks, not Python literals
            x, y = (self.block_literal(v, code, compute) for v, code in ((a, x), (b, y)))
        if compute.is_boolean and e.kind in _ARITHMETIC:
            # bool arithmetic as PyTorch does it: in integers, then nonzero is True
            x, y = (f"{self.block_literal(v, code, compute)}.to(tl.int32)" for v, code in ((a, x), (b, y)))
            self.bind(scope, e.out, f"({fmt.format(x=x, y=y)} != 0)")
            return
        self.bind(scope, e.out, fmt.format(x=x, y=y))

    def rounded(self, v: Val, code: str, dtype: DataType) -> str:
        """Operand `code` of `v`, computed in fp32, with the value rounded to `dtype` (half or
        bf16) unless `v` is a tensor of that type (a scalar declared half holds a Python
        float)."""
        if isinstance(v, TensorView) and v.dtype is dtype:
            return code
        if isinstance(v, Scalar) and v.is_constant:
            return self.literal(Scalar(-1, DataType.Float, value=_as_half_width(float(v.value), dtype)), DataType.Float)
        return f"{self.narrow(code, dtype)}.to(tl.float32)"

    def block_literal(self, v: Val, code: str, dtype: DataType) -> str:
        if isinstance(v, Scalar) and v.is_constant and not code.startswith("tl.full("):
            return self.block("[1, 1]", code, compute_type(dtype))
        return code

    def emit_ternary(self, scope: Scope, e: TernaryOp) -> None:
        dt = e.out.dtype
        a, b, c = e.inputs
        if e.kind is TernaryOpType.where:
            cond = self.operand(scope, a, DataType.Bool)
            yes, no = self.operand(scope, b, dt), self.operand(scope, c, dt)
            if all(isinstance(v, Scalar) and v.is_constant for v in (b, c)):
                yes = self.block_literal(b, yes, dt)  # (two literals select in fp32: an fp64 0.1 rounded)
            code = f"tl.where({cond}, {yes}, {no})"
        elif e.kind is TernaryOpType.clamp:
            x, lo, hi = (self.operand(scope, v, dt) for v in (a, b, c))
            nan = ", propagate_nan=tl.PropagateNan.ALL" if dt.category >= 2 else ""
            code = f"tl.minimum(tl.maximum({x}, {lo}{nan}), {hi}{nan})"
        else:  # lerp, computed as ATen does for accuracy near both ends
            s, t, w = (self.operand(scope, v, dt) for v in (a, b, c))
            # (|w| < 0.5 as ATen's: a weight of -0.5 or less with an infinite end gives NaN there)
            code = (f"tl.where(({w} < 0.5) & ({w} > -0.5), {s} + {w} * ({t} - {s}), "
                    f"{t} - ({t} - {s}) * (1.0 - {w}))")
        self.bind(scope, e.out, code)
