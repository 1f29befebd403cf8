"""FusionDefinition: the explicit frontend, mirroring nvFuser's `nvfuser_direct` Python API.

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, 8], contiguity=True, dtype=DataType.BFloat16)
        fd.add_output(fd.ops.exp(x))
    out, = fd.execute([x_tensor])

Every call is recorded, so `repr(fd)` prints Python that rebuilds the definition.
"""
from __future__ import annotations

import math
import threading
from functools import partial
from typing import Any, Optional, Sequence

from ..errors import FusionDefinitionError
from ..ir import DataType, Fusion, IterType, ParallelType, Scalar, TensorView
from ..ir.domain import TensorDomain, normalize_contiguity
from ..ops import FUSION_OPS, OPS
from ..runtime import FusionExecutorCache


class _Recorder:
    """Names values as nvFuser's repr does (`tv3`, `s1`) and formats call arguments."""

    def __init__(self, fd: "FusionDefinition"):
        self.fd = fd
        self.lines: list[tuple[int, str]] = []  # (event number, Python line)
        self.scalar_names: dict[int, str] = {}  # scalars bound to a variable by a recorded call
        self.defined: list[TensorView] = []  # tensors in the order the printed code creates them

    def name(self, v: Any) -> str:
        if isinstance(v, TensorView):
            return f"tv{v.name}"
        if isinstance(v, Scalar):
            if id(v) in self.scalar_names:
                return self.scalar_names[id(v)]
            if v.is_constant:
                return _python_literal(v.value)
            for tv in self.defined:  # an extent of a tensor the code has already made
                for k, d in enumerate(tv.domain.no_reductions()):
                    if d.extent == v.expr and not d.is_broadcast:
                        return f"tv{tv.name}.shape()[{k}]"
            raise FusionDefinitionError(f"repr: the scalar {v!r} is not reachable from the definition")
        if isinstance(v, (list, tuple)):
            inner = ", ".join(self.name(x) for x in v)
            return f"[{inner}]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k!r}: {self.name(x)}" for k, x in v.items()) + "}"
        return _python_literal(v)

    def record(self, result: Any, call: str, args: Sequence[Any], kwargs: dict) -> None:
        parts = [self.name(a) for a in args] + [f"{k}={self.name(v)}" for k, v in kwargs.items()]
        results = [] if result is None else list(result) if isinstance(result, tuple) else [result]
        for r in results:
            if isinstance(r, Scalar):
                self.scalar_names[id(r)] = f"s{len(self.scalar_names)}"
            elif isinstance(r, TensorView):
                self.defined.append(r)
        lhs = ", ".join(self.name(r) for r in results) + " = " if results else ""
        self.lines.append((self.fd.fusion.next_event(), f"{lhs}{call}({', '.join(parts)})"))

    def schedule_lines(self) -> list[tuple[int, str]]:
        """The scheduling calls made on the tensors (numbered as they were made), then the
        parallel type of each loop axis (last: parallelizing creates no IterDomains)."""
        lines = []
        for event, tv, method, args in self.fd.fusion.schedule_log:
            if method == "set_device_mesh":
                line = f"tv{tv.name}.set_device_mesh(DeviceMesh({list(args[0].devices)}))"
            elif method == "set_allocation_domain":
                positions, contiguity = args
                ids = ", ".join(f"tv{tv.name}.get_{where}_domain()[{k}]" for where, k in positions)
                line = f"tv{tv.name}.set_allocation_domain([{ids}], {contiguity!r})"
            else:
                line = f"tv{tv.name}.{method}({', '.join(repr(a) for a in args)})"
            lines.append((event, line))
        last = float("inf")
        for tv in self.defined:
            for k, d in enumerate(tv.domain.loop):
                if d.parallel_type is not ParallelType.serial:
                    lines.append((last, f"tv{tv.name}.axis({k}).parallelize(ParallelType.{d.parallel_type.name})"))
        return lines


def _python_literal(v: Any) -> str:
    """Python source for a value; non-finite floats as float('inf') (repr gives a bare name)."""
    if isinstance(v, float) and not math.isfinite(v):
        return f"float('{v}')"
    return repr(v)


class _Ops:
    """`fd.ops`: nvFuser's op names, each recorded for repr."""

    def __init__(self, fd: "FusionDefinition"):
        self._fd = fd

    def __getattr__(self, name: str):
        if name in OPS:
            fn = OPS[name]
        elif name in FUSION_OPS:
            fn = partial(FUSION_OPS[name], self._fd.fusion)
        else:
            raise AttributeError(f"fd.ops has no op named {name!r}")

        def call(*args, **kwargs):
            result = fn(*args, **kwargs)
            self._fd._recorder.record(result, f"fd.ops.{name}", args, kwargs)
            return result

        call.__name__ = name
        return call

    def __dir__(self):
        return sorted(set(OPS) | set(FUSION_OPS))


class FusionDefinition:
    def __init__(self) -> None:
        self.fusion = Fusion()
        self.ops = _Ops(self)
        self._recorder = _Recorder(self)
        self._cache: Optional[FusionExecutorCache] = None
        self._cache_lock = threading.Lock()

    def __enter__(self) -> "FusionDefinition":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None and not self.fusion.outputs():
            raise FusionDefinitionError("the definition has no outputs; call fd.add_output")

    # -- definition -------------------------------------------------------------------------

    def define_tensor(self, shape: Sequence[int], contiguity=None, dtype: DataType = DataType.Float,
                      is_cpu: bool = False, stride_order: Optional[Sequence[int]] = None) -> TensorView:
        self.fusion.check_open("define_tensor")
        shape = list(shape)
        if not isinstance(dtype, DataType):
            raise FusionDefinitionError(f"define_tensor: dtype must be a DataType, got {dtype!r}")
        f = self.fusion
        ids = []
        for k, s in enumerate(shape):
            if isinstance(s, bool) or not isinstance(s, int) or s < -1:
                raise FusionDefinitionError(
                    f"define_tensor: shape[{k}] = {s!r}; expected -1 (symbolic), 1 (broadcast) or a size >= 0")
            if s == -1:
                ids.append(f.new_id(f.new_symbol()))
            elif s == 1:
                ids.append(f.new_id(1, iter_type=IterType.Broadcast))
            else:
                ids.append(f.new_id(s))
        alloc = _allocation_order(shape, stride_order)
        if contiguity is None:
            contiguity = False
        if not isinstance(contiguity, bool):
            contiguity = list(contiguity)
            if len(contiguity) != len(shape):
                raise FusionDefinitionError(
                    f"define_tensor: contiguity has {len(contiguity)} entries for {len(shape)} dims")
            contiguity = [contiguity[k] for k in alloc]  # given per logical dim, kept per allocation dim
        alloc_ids = [ids[k] for k in alloc]
        domain = TensorDomain(logical=ids, allocation=alloc_ids if alloc != list(range(len(ids))) else None,
                              contiguity=normalize_contiguity(contiguity, alloc_ids))
        tv = f.new_tensor(domain, dtype)
        f.add_input(tv)
        kwargs = dict(shape=shape, contiguity=_logical_contiguity(tv, alloc), dtype=dtype, is_cpu=is_cpu)
        if stride_order is not None:
            kwargs["stride_order"] = list(stride_order)
        self._recorder.record(tv, "fd.define_tensor", (), kwargs)
        return tv

    def define_scalar(self, value: Any = None, dtype: Optional[DataType] = None) -> Scalar:
        from ..ops.common import python_scalar_dtype

        self.fusion.check_open("define_scalar")
        if dtype is None:
            dtype = DataType.Double if value is None else python_scalar_dtype(value)
        if not isinstance(dtype, DataType):
            raise FusionDefinitionError(f"define_scalar: dtype must be a DataType, got {dtype!r}")
        s = self.fusion.new_scalar(dtype, value=value)
        if value is None:
            self.fusion.add_input(s)
        self._recorder.record(s, "fd.define_scalar", (), dict(value=value, dtype=dtype))
        return s

    def from_pytorch(self, tensor, static_sizes: bool = False) -> TensorView:
        sizes, strides = list(tensor.shape), list(tensor.stride())
        shape = [s if (static_sizes or s == 1) else -1 for s in sizes]
        order = sorted(range(len(sizes)), key=lambda k: (-strides[k], k))
        stride_order = [0] * len(sizes)
        for rank, k in enumerate(reversed(order)):
            stride_order[k] = rank
        contiguity, expected = [None] * len(sizes), 1
        for k in reversed(order):
            if sizes[k] == 1:
                continue
            contiguity[k] = strides[k] == expected
            expected = strides[k] * sizes[k]
        return self.define_tensor(shape, contiguity, DataType.from_torch(tensor.dtype),
                                  stride_order=stride_order if order != list(range(len(sizes))) else None)

    def add_output(self, output: TensorView, alias_input: Any = None) -> None:
        if alias_input is not None:
            raise FusionDefinitionError("add_output: alias_input is not supported")
        self.fusion.add_output(output)
        self._recorder.record(None, "fd.add_output", (output,), {})

    # -- execution --------------------------------------------------------------------------

    def execute(self, inputs: Sequence[Any], device: Any = None, **_unused) -> list:
        cache = self._cache or self._make_cache("execute")
        return cache.execute(list(inputs) if isinstance(inputs, tuple) else inputs)

    def compile_ahead(self, inputs: Sequence[Any], device: Any = "cuda") -> int:
        """Compile the kernels that `execute` on inputs of these layouts would compile, before
        the data exists: `inputs` meta tensors (shapes, strides, dtypes; a storage offset for an
        input that starts that many elements past an aligned address) and the scalars,
        `device` where the real inputs will be (`"cuda"`: the current GPU). Returns once the
        kernels are compiled; may run in another thread than `execute`, which then waits for
        the compile of its layout rather than repeat it. Returns the number of compile jobs (0
        where nothing compiles ahead: Triton's interpreter, definitions over several devices
        or without tensor inputs, a layout compiled already)."""
        cache = self._cache or self._make_cache("compile_ahead")
        return cache.compile_ahead(list(inputs) if isinstance(inputs, tuple) else inputs, device)

    def _make_cache(self, verb: str) -> FusionExecutorCache:
        if not self.fusion.outputs():
            raise FusionDefinitionError(f"{verb}: the definition has no outputs")
        cache = FusionExecutorCache(self.fusion)
        with self._cache_lock:  # compile_ahead may run in another thread than execute: one cache kept
            if self._cache is None:
                self._cache = cache
                # its runtimes are compiled from the fusion as it is now
                self.fusion.final = "it was executed" if verb == "execute" else "compile_ahead was called"
        return self._cache

    @property
    def cache(self) -> Optional[FusionExecutorCache]:
        return self._cache

    def last_segments(self):
        """The segments of the last execution (kind, exprs, why they were cut)."""
        rt = self._cache.last_runtime if self._cache else None
        return list(rt.segments) if rt else []

    def last_triton_code(self) -> str:
        """The Triton source of the kernels the last execution launched."""
        rt = self._cache.last_runtime if self._cache else None
        return "\n\n".join(rt.triton_code()) if rt else ""

    # -- printing ----------------------------------------------------------------------------

    def __repr__(self) -> str:
        schedule = self._recorder.schedule_lines()
        lines = [line for _, line in sorted(self._recorder.lines + schedule, key=lambda e: e[0])]
        if schedule:
            lines = ["from fuser import ParallelType", "from fuser.multidevice import DeviceMesh"] + lines
        body = "\n".join(f"    {line}" for line in lines)
        return f"def nvfuser_fusion(fd : FusionDefinition) -> None :\n{body}\n"

    def __str__(self) -> str:
        return str(self.fusion)


def _allocation_order(shape: list, stride_order: Optional[Sequence[int]]) -> list[int]:
    """Logical dims from outermost to innermost in memory. nvFuser's stride_order[k] is the rank
    of dim k's stride: 0 the fastest-moving."""
    n = len(shape)
    if stride_order is None or len(stride_order) == 0:
        return list(range(n))
    order = list(stride_order)
    if sorted(order) != list(range(n)):
        raise FusionDefinitionError(
            f"define_tensor: stride_order {order} must be a permutation of 0..{n - 1}")
    return sorted(range(n), key=lambda k: -order[k])


def _logical_contiguity(tv: TensorView, alloc: list[int]) -> list:
    per_logical = [None] * len(alloc)
    for pos, k in enumerate(alloc):
        per_logical[k] = tv.domain.contiguity[pos]
    return per_logical
