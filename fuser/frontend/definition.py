"""FusionDefinition: the explicit frontend, mirroring nvFuser's `nvfuser_direct` Python API.

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, 8], contiguity=True, dtype=DataType.BFloat16)
        fd.add_output(fd.ops.exp(x))
    out, = fd.execute([x_tensor])

Every call is recorded, so `repr(fd)` prints Python that rebuilds the definition.
"""
from __future__ import annotations

import copy
import inspect
import threading
from functools import partial
from typing import Any, Optional, Sequence

import torch

from ..errors import FusionDefinitionError, FusionInputError, UnsupportedError
from ..ir import DataType, Fusion, IterType, ParallelType, Scalar, TensorView
from ..ir.domain import IterDomain, TensorDomain, normalize_contiguity
from ..ir.types import fits_int64, int_range
from ..ops import FUSION_OPS, OPS
from ..ops.common import building, value_dtype
from ..runtime import FusionExecutorCache
from ..runtime.in_place import write_back
from .allocation_order import infer_allocation_order
from .frame_hook import set_eval_frame as _set_eval_frame
from .profiler import active as active_profiler
from .repro import describe_inputs, python_literal, repro_script
from .validate import check_outputs


class _Recorder:
    """Names values as nvFuser's repr does (`tv3`, `s1`) and formats call arguments."""

    def __init__(self, fd: "FusionDefinition"):
        self.fd = fd
        self.lines: list[tuple[int, str]] = []  # (event number, Python line)
        self.scalar_names: dict[int, str] = {}  # scalars bound to a variable by a recorded call
        self._scalar_count = 0
        self.defined: list[TensorView] = []  # tensors in the order the printed code creates them

    def name(self, v: Any) -> str:
        if isinstance(v, TensorView):
            return f"tv{v.name}"
        if isinstance(v, Scalar):
            if id(v) in self.scalar_names:
                return self.scalar_names[id(v)]
            if v.is_constant:
                return python_literal(v.value)
            for tv in self.defined:  # an extent of a tensor the code has already made
                for k, d in enumerate(tv.domain.no_reductions()):
                    if d.size == v.expr and not (d.is_broadcast and d.expanded_extent is None):
                        return f"tv{tv.name}.shape()[{k}]"
            raise FusionDefinitionError(f"repr: the scalar {v!r} is not reachable from the definition")
        if isinstance(v, (list, tuple)):
            inner = ", ".join(self.name(x) for x in v)
            return f"[{inner}]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k!r}: {self.name(x)}" for k, x in v.items()) + "}"
        return python_literal(v)

    def record(self, result: Any, call: str, args: Sequence[Any], kwargs: dict) -> None:
        parts = [self.name(a) for a in args] + [f"{k}={self.name(v)}" for k, v in kwargs.items()]
        results = [] if result is None else list(result) if isinstance(result, (tuple, list)) else [result]
        for r in results:
            if isinstance(r, Scalar):
                # (a count, not len(scalar_names): fd.ops.shape may name a scalar again)
                self.scalar_names[id(r)] = f"s{self._scalar_count}"
                self._scalar_count += 1
            elif isinstance(r, TensorView):
                self.defined.append(r)
        # (a None among the results, as scaled_mm's absent quantized outputs, binds `_`)
        lhs = ", ".join("_" if r is None else self.name(r) for r in results) + " = " if results else ""
        if isinstance(result, list):  # (fd.ops.shape: a list, maybe empty, unpacked as one)
            lhs = f"[{lhs.removesuffix(' = ')}] = "
        self.lines.append((self.fd.fusion.next_event(), f"{lhs}{call}({', '.join(parts)})"))

    def schedule_lines(self) -> list[tuple[int, str]]:
        """The scheduling calls made on the tensors (numbered as they were made), then the
        parallel type of each loop axis (last: parallelizing creates no IterDomains)."""
        lines = []
        for event, tv, method, args in self.fd.fusion.schedule_log:
            if method == "set_device_mesh":
                line = f"tv{tv.name}.set_device_mesh(DeviceMesh({args[0].as_list()}))"
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
            # a logical axis parallelized, then split or merged away from the loop (its halves
            # inherit the type; the axis keeps it, as the printed IR shows)
            loop = {id(d) for d in tv.domain.loop}
            for k, d in enumerate(tv.domain.logical):
                if d.parallel_type is not ParallelType.serial and id(d) not in loop:
                    lines.append((last, f"tv{tv.name}.get_logical_domain()[{k}].parallelize("
                                        f"ParallelType.{d.parallel_type.name})"))
        return lines


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
            if kwargs and not _NV_KEYWORDS.keys().isdisjoint(kwargs):
                args, kwargs = _positional_keywords(name, fn, args, kwargs)
            fusion = self._fd.fusion
            _check_call(name, fn, args, kwargs, fusion)
            with building(fusion), fusion.all_or_nothing():  # (ops of Python numbers alone: its constants)
                result = fn(*args, **kwargs)
            self._fd._recorder.record(result, f"fd.ops.{name}", args, kwargs)
            return result

        call.__name__ = name
        return call

    def __dir__(self):
        return sorted(set(OPS) | set(FUSION_OPS))

    def __repr__(self) -> str:
        return f"<fd.ops: {len(self.__dir__())} ops, dir(fd.ops) lists them>"


# nvfuser_direct's names of an op's leading operands (`fd.ops.cast(arg=t, dtype=...)`,
# `fd.ops.matmul(arg1=a, arg2=b)`), with the position each stands for
_NV_KEYWORDS = {"arg": 0, "arg1": 0, "arg2": 1}


# execute's keywords of nvfuser_direct (auto_schedule) and of nvFuser's older frontend (its
# debugging options), accepted and ignored: fuser has no such modes
_NV_EXECUTE_OPTIONS = frozenset({"auto_schedule", "override_user_schedule", "capture_debug_output", "print_repro",
                                 "profile", "_enable_options", "_disable_options"})

_SIGNATURES: dict[str, inspect.Signature] = {}


def _signature(name: str, fn) -> inspect.Signature:
    """fd.ops.<name>'s parameters (once an op: a partial's signature is rebuilt each time)."""
    sig = _SIGNATURES.get(name)
    if sig is None:
        sig = _SIGNATURES[name] = inspect.signature(fn)
    return sig


def _check_call(name: str, fn, args: tuple, kwargs: dict, fusion: Fusion) -> None:
    """The call's arguments against the op's parameters, and its operands against the
    definition: `fd.ops.add(a)` would otherwise raise Python's TypeError naming an internal
    function, and another definition's tensor would be recorded in this one's repr."""
    sig = _signature(name, fn)
    try:
        sig.bind(*args, **kwargs)
    except TypeError as e:
        plain = sig.replace(parameters=[p.replace(annotation=p.empty) for p in sig.parameters.values()],
                            return_annotation=sig.empty)
        raise FusionDefinitionError(f"fd.ops.{name}{plain}: {e}") from None
    for v in _operands(list(args) + list(kwargs.values())):
        if v.fusion is not fusion:
            raise FusionDefinitionError(f"fd.ops.{name}: the operand {v!r} belongs to another FusionDefinition; "
                                        f"use that definition's fd.ops, or define it in this one")


def _operands(values: Sequence[Any]):
    for v in values:
        if isinstance(v, (TensorView, Scalar)):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from _operands(v)


def _positional_keywords(name: str, fn, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """nvFuser's keywords for leading operands as positional arguments, where fuser's op names
    that parameter otherwise (`tv`, `x`, `a`)."""
    params = _signature(name, fn).parameters
    args, kwargs = list(args), dict(kwargs)
    for key in sorted((k for k in kwargs if k in _NV_KEYWORDS and k not in params), key=_NV_KEYWORDS.get):
        if len(args) != _NV_KEYWORDS[key]:
            raise FusionDefinitionError(f"fd.ops.{name}: {key}= given beside {len(args)} positional "
                                        f"operand(s); it is operand {_NV_KEYWORDS[key]}")
        args.append(kwargs.pop(key))
    return tuple(args), kwargs


class FusionDefinition:
    def __init__(self) -> None:
        self.fusion = Fusion()
        self.ops = _Ops(self)
        self._recorder = _Recorder(self)
        self._repro_inputs: Optional[list[str]] = None  # (execute(save_repro_inputs=True))
        self._cache: Optional[FusionExecutorCache] = None
        self._cache_lock = threading.Lock()
        self._with_raised: Optional[str] = None  # the error that left the with-block, if one did
        # per output as added: (the tensor, the input it is written into or None); positions
        # are kept, not identities, should a pass rewrite the fusion's outputs
        self._outputs: list[tuple[TensorView, Optional[TensorView]]] = []
        # define_vector: (its first input's position, its size), in definition order (a
        # define_vector(0) shares its position with the input after it)
        self._vectors: list[tuple[int, int]] = []
        self._cpu_scalars: set[int] = set()  # positions of define_tensor(shape=[], is_cpu=True) inputs
        # an aliased input was an inference tensor: callers that go to the executor cache
        # directly (frontend/program.py) check each call, as `execute` does, from then on
        self.writes_inference = False
        # the outputs' layouts are to be inferred when the fusion is finalized: set by the
        # with-block (a definition made without one, fuser.jit's, lays its outputs out itself)
        self._layouts_pending = False

    def __enter__(self) -> "FusionDefinition":
        self._layouts_pending = True
        return self

    def __deepcopy__(self, memo: dict) -> "FusionDefinition":
        # shared, as a function is: it holds no tensors, and a module holding one (an EMA
        # model's copy) must copy (its lock and recorder did not)
        return self

    def __reduce__(self):
        raise FusionDefinitionError("a FusionDefinition cannot be pickled; pickle repr(fd), the Python "
                                    "that rebuilds it, and exec that instead")

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:  # (what the block defined is not the computation meant)
            self._with_raised = f"{exc_type.__name__}: {exc}"
        if exc_type is None and not self.fusion.outputs():
            raise FusionDefinitionError("the definition has no outputs; call fd.add_output")
        if exc_type is None:
            self._infer_layouts()

    def _infer_layouts(self) -> None:
        """nvFuser's finalize: outputs without a layout of their own take their inputs', once,
        when the block closes or at the first execute or compile_ahead inside it, whichever
        comes first (a fusion compiled without them would keep row-major outputs for good)."""
        with self._cache_lock:  # (compile_ahead in another thread may get here as execute does)
            if self._layouts_pending and self.fusion.final is None:
                infer_allocation_order(self.fusion, keep=[tv for tv, target in self._outputs if target is not None])
            self._layouts_pending = False

    # -- definition -------------------------------------------------------------------------

    def define_tensor(self, shape: Optional[Sequence[int]] = None, contiguity=None,
                      dtype: DataType = DataType.Float, is_cpu: bool = False,
                      stride_order: Optional[Sequence[int]] = None, *, sizes: Optional[Sequence[int]] = None,
                      strides: Optional[Sequence[int]] = None, static_sizes: bool = False) -> TensorView:
        """nvFuser's two forms: `shape` (-1 symbolic, 1 broadcast, or a size), `contiguity` (one
        flag, or one entry per dim in allocation order, outermost first: None for a broadcast or
        expanded dim) and `stride_order` (dim k's stride rank, 0 the fastest); or `sizes` and
        `strides` of an example tensor, from which those are derived as `from_pytorch` does."""
        self.fusion.check_open("define_tensor")
        if sizes is not None or strides is not None:
            if shape is not None or sizes is None or strides is None:
                raise FusionDefinitionError(
                    "define_tensor: give either shape (with contiguity and stride_order) or both sizes and strides")
            shape, contiguity, stride_order = _from_sizes(list(sizes), list(strides), static_sizes)
        if shape is None:
            raise FusionDefinitionError("define_tensor: shape is required")
        if not isinstance(shape, (list, tuple)):
            raise FusionDefinitionError(f"define_tensor: shape must be a list of sizes (-1 symbolic, 1 broadcast), "
                                        f"got {shape!r}")
        shape = list(shape)
        dtype = value_dtype("define_tensor", dtype)
        f = self.fusion
        for k, s in enumerate(shape):
            if isinstance(s, bool) or not isinstance(s, int) or s < -1:
                raise FusionDefinitionError(
                    f"define_tensor: shape[{k}] = {s!r}; expected -1 (symbolic), 1 (broadcast) or a size >= 0")
        alloc = _allocation_order(shape, stride_order)
        if contiguity is None:
            contiguity = False
        if not isinstance(contiguity, (bool, list, tuple)):
            raise FusionDefinitionError(f"define_tensor: contiguity must be a bool, None or a list of them "
                                        f"(one a dim), got {contiguity!r}")
        if not isinstance(contiguity, bool):
            contiguity = list(contiguity)  # (nvFuser's order: the allocation's, outermost first)
            if len(contiguity) != len(shape):
                raise FusionDefinitionError(
                    f"define_tensor: contiguity has {len(contiguity)} entries for {len(shape)} dims")
        expanded = _expanded_dims(shape, contiguity, alloc)
        ids = [_input_id(f, s, k in expanded) for k, s in enumerate(shape)]
        alloc_ids = [ids[k] for k in alloc]
        domain = TensorDomain(logical=ids, allocation=alloc_ids if alloc != list(range(len(ids))) else None,
                              contiguity=normalize_contiguity(contiguity, alloc_ids, "define_tensor"))
        if is_cpu and shape:
            raise FusionDefinitionError(f"define_tensor: is_cpu=True declares a CPU scalar tensor (shape []), "
                                        f"got shape {shape!r}; a CPU tensor of more dims runs on the CPU, "
                                        f"declared with is_cpu=False")
        tv = f.new_tensor(domain, dtype)
        f.add_input(tv)
        if is_cpu:
            self._cpu_scalars.add(len(f.inputs()) - 1)
        kwargs = dict(shape=shape, contiguity=list(tv.domain.contiguity), dtype=dtype, is_cpu=is_cpu)
        if stride_order is not None and alloc != list(range(len(shape))):
            kwargs["stride_order"] = list(stride_order)
        self._recorder.record(tv, "fd.define_tensor", (), kwargs)
        return tv

    def define_vector(self, size: int) -> list[Scalar]:
        """`size` Int scalar inputs, as nvFuser's define_vector: a shape given at execution
        (`fd.execute([t, [6, 4]])`; a list or tuple argument is spread over its scalars)."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise FusionDefinitionError(f"define_vector: size must be an int >= 0, got {size!r}")
        first = len(self.fusion.inputs())
        scalars = [self.define_scalar(None, DataType.Int) for _ in range(size)]
        self._vectors.append((first, size))  # (execute names a list of another length)
        return scalars

    def define_scalar(self, value: Any = None, dtype: Optional[DataType] = None) -> Scalar:
        from ..ops.common import given_dtype, python_scalar_dtype

        self.fusion.check_open("define_scalar")
        if isinstance(value, DataType) and dtype is None:  # nvFuser's define_scalar(DataType.Int)
            value, dtype = None, value
        dtype = given_dtype("define_scalar", dtype)  # (DataType.Null: none given, as None)
        if dtype is None:
            dtype = DataType.Double if value is None else python_scalar_dtype(value)
        if dtype.is_float8 or dtype.is_opaque:
            raise UnsupportedError(f"define_scalar: scalars of {dtype!r} are not supported; "
                                   f"define a tensor, or a Float scalar and cast after")
        if value is not None:
            value = _as_scalar_of(value, dtype)
        s = self.fusion.new_scalar(dtype, value=value)
        if value is None:
            self.fusion.add_input(s)
        self._recorder.record(s, "fd.define_scalar", (), dict(value=value, dtype=dtype))
        return s

    def from_pytorch(self, tensor, static_sizes: bool = False) -> TensorView:
        return self.define_tensor(sizes=list(tensor.shape), strides=list(tensor.stride()),
                                  dtype=DataType.from_torch(tensor.dtype), static_sizes=static_sizes,
                                  is_cpu=tensor.is_cpu and tensor.dim() == 0)

    def add_output(self, output: TensorView, alias_input: Optional[TensorView] = None) -> None:
        """An output; with `alias_input`, nvFuser's in-place update: the value is written into
        that input tensor at execution and is not returned (an output that is the same tensor
        as an aliased one returns that input)."""
        if alias_input is not None:
            self._check_alias(output, alias_input)
            if any(o is output and a is not None for o, a in self._outputs):
                # (one value into a second input: a copy of its own, as nvFuser writes each alias)
                output = self.ops.set(output)
        self.fusion.add_output(output)
        self._outputs.append((output, alias_input))
        self._recorder.record(None, "fd.add_output", (output,),
                              {} if alias_input is None else {"alias_input": alias_input})

    def _check_alias(self, output: TensorView, alias_input: Any) -> None:
        inputs = self.fusion.inputs()
        if not isinstance(alias_input, TensorView) or not any(alias_input is v for v in inputs):
            raise FusionDefinitionError(f"add_output: alias_input must be a tensor input of the definition, "
                                        f"got {alias_input!r}")
        if any(a is alias_input for _, a in self._outputs):
            raise FusionDefinitionError(f"add_output: input {alias_input!r} is already the alias of an output")
        if output.dtype is not alias_input.dtype:
            raise FusionDefinitionError(f"add_output: output {output!r} of dtype {output.dtype} cannot be written "
                                        f"into input {alias_input!r} of dtype {alias_input.dtype}")
        out_ids, in_ids = output.domain.no_reductions(), alias_input.domain.no_reductions()
        if len(out_ids) != len(in_ids):
            raise FusionDefinitionError(f"add_output: output {output!r} has {len(out_ids)} dims, its alias "
                                        f"input {alias_input!r} {len(in_ids)}")
        # all or nothing: an axis refused must not leave the axes before it unified (the
        # definition goes on, and later inputs of other sizes there would conflict)
        with self.fusion.all_or_nothing():
            for k, (a, b) in enumerate(zip(out_ids, in_ids)):
                if not (a.is_broadcast and b.is_broadcast and a.expanded_extent is None):
                    # (an expanded output axis is written at its expanded size)
                    self.fusion.unify(a.size, b.size, f"add_output: axis {k} of output {output!r} and of "
                                                      f"its alias input {alias_input!r}")

    # -- execution --------------------------------------------------------------------------

    def execute(self, inputs: Sequence[Any], device: Any = None, *, save_repro_inputs: bool = False,
                **options) -> list:
        """Runs the definition on `inputs` (tensors and scalars in the order they were defined;
        a list or tuple stands for as many scalars, those of a define_vector).
        `save_repro_inputs`: remember the inputs' layouts for `last_repro_script()`.

        Called inside a function that `torch.compile` or `fuser.jit` compiles, the call breaks
        Dynamo's graph and runs as plain Python: Dynamo cannot trace the frame hook below, and
        with the hook off nothing under the call is compiled (traced into fuser's runtime, and
        on the CPU into Triton's interpreter, Dynamo failed with an internal error)."""
        if not isinstance(inputs, (list, tuple)):
            raise FusionInputError(f"execute expects a list of inputs, got {type(inputs).__name__}")
        if options.get("auto_schedule", True) is not True:
            raise FusionDefinitionError("execute(auto_schedule=False): fuser has no user schedules; every "
                                        "fusion is scheduled automatically")
        unknown = sorted(set(options) - _NV_EXECUTE_OPTIONS)
        if unknown:
            raise FusionInputError(f"execute: no keyword {unknown[0]!r}; it takes device, save_repro_inputs and "
                                   f"nvFuser's debugging options, accepted and ignored: "
                                   f"{', '.join(sorted(_NV_EXECUTE_OPTIONS))}")
        target = _execution_device(device, inputs, bool(self._cpu_scalars))
        hook = _set_eval_frame(None)
        # outside autograd, as nvFuser's kernels run: an ATen segment (a matmul) recorded a
        # graph on an input needing grad where a kernel's output had none, and writing an
        # output's alias into a leaf parameter raised autograd's in-place error
        grad = torch.is_grad_enabled()
        if grad:
            torch._C._set_grad_enabled(False)
        try:
            cache = self._cache or self._make_cache("execute")
            if save_repro_inputs:
                self._repro_inputs = describe_inputs(inputs)
            if self._takes_scalars:  # (known once the cache is made: the definition is final then)
                inputs = _spread_vectors(inputs, self.fusion, self._vectors)
            given = inputs  # (an alias of a CPU scalar is written into the caller's tensor)
            if self._alias_at:  # (before anything runs: a kernel may write another alias in place)
                self._check_writable(inputs)
            if self._cpu_scalars:
                inputs = _cpu_scalars_moved(inputs, self._cpu_scalars)
            if isinstance(inputs, tuple):
                inputs = list(inputs)
            profiler = active_profiler()
            if profiler is None:
                outs = cache.execute(inputs)
            else:
                outs, profile = cache.execute_profiled(inputs)
                profiler.profiles.append(profile)
            if target is not None and not any(isinstance(a, torch.Tensor) for a in inputs):
                # (no tensor says where: computed on the CPU, as without `device`, then moved)
                outs = [o.to(target) for o in outs]
            return self._visible(outs, given) if self._alias_at else outs
        finally:
            if grad:
                torch._C._set_grad_enabled(True)
            _set_eval_frame(hook)

    def _aliased(self) -> dict[int, TensorView]:
        """id(output tensor) -> the input an alias writes it into."""
        return {id(tv): target for tv, target in self._outputs if target is not None}

    def _check_writable(self, inputs: list) -> None:
        """Refuses an aliased input that is expanded, or an inference tensor outside inference
        mode (eager's in-place ops refuse it), before any kernel writes another alias."""
        for k, target in self._alias_at.values():
            dst = inputs[k] if k < len(inputs) else None
            if not isinstance(dst, torch.Tensor):
                continue
            if 0 in dst.stride() and dst.numel() and any(st == 0 and n > 1 for n, st in zip(dst.shape, dst.stride())):
                raise FusionInputError(f"input {k} ({target!r}) is written in place (an output's alias) but "
                                       f"is expanded: stride 0 on an axis of size > 1, one element for many; "
                                       f"pass a dense tensor")
            if dst.is_inference():
                self.writes_inference = True
                if not torch.is_inference_mode_enabled():
                    raise FusionInputError(f"input {k} ({target!r}) is written in place (an output's alias) but "
                                           f"is an inference tensor, which only torch.inference_mode() may write "
                                           f"in place; execute inside it, or pass a clone")

    def _visible(self, outs: list, inputs: list) -> list:
        """Writes aliased outputs into their inputs; returns the outputs not hidden by an alias."""
        aliased, written = self._alias_at, {}
        bumped, dsts, values = [], [], []
        for (tv, _), value in zip(self._outputs, outs):
            alias = aliased.get(id(tv))
            if alias is not None and id(tv) not in written:
                position, target = alias
                dst = inputs[position]
                if value is dst:  # (its kernel wrote it there: runtime/in_place.py)
                    bumped.append(dst)
                elif dst.data_ptr() != value.data_ptr() or dst.stride() != value.stride():
                    if value.shape != dst.shape:  # (copy_ would broadcast a shard into every row)
                        raise FusionDefinitionError(
                            f"add_output: output {tv!r} is written into input {position} ({target!r}), "
                            f"but its shape here is {tuple(value.shape)} and the input's {tuple(dst.shape)}: an "
                            f"aliased output must be sharded across the device mesh as its input is")
                    if _overlaps(dst, value):  # (a view of the input itself, a transpose say)
                        value = value.clone()
                    dsts.append(dst)
                    values.append(value)
                written[id(tv)] = dst
        write_back(bumped, dsts, values)
        return [written.get(id(tv), value) for (tv, target), value in zip(self._outputs, outs) if target is None]

    def validate(self, inputs: Sequence[Any], reference_outputs: Optional[Sequence[Any]] = None,
                 device: Any = None, **kwargs) -> list:
        """Executes, then checks the outputs against `reference_outputs`, or, without them,
        against fuser's ATen evaluation of the same definition (the oracle its kernels are
        tested against), with tolerances by dtype and reduction size. A mismatch raises a
        ValidationError naming the output and the largest error."""
        inputs = _spread_vectors(inputs, self.fusion, self._vectors)
        before = inputs
        if reference_outputs is None and self._aliased():  # (the outputs are checked, not the updates)
            before = [_layout_copy(t) for t in inputs]
        drawn_from = _rng_states()
        outs = self.execute(inputs, device=device, **kwargs)
        if reference_outputs is None:
            # the reference draws the seed the execution drew (a random op without rng_seed)
            after = _rng_states()
            _set_rng_states(drawn_from)
            try:
                reference_outputs = self._reference(before)
            finally:
                _set_rng_states(after)
        check_outputs(self.fusion, outs, list(reference_outputs), inputs)
        return outs

    def _reference(self, inputs: list) -> list:
        # the aliases write into the copies the reference reads, as `execute` writes into its
        # inputs: an output that is a view of a written input (a permute) then shows the
        # written values in both, as nvFuser's view outputs do
        reference = FusionExecutorCache(self.fusion, use_kernels=False)
        copies = [_layout_copy(t) for t in inputs]
        return self._visible(reference.execute(copies), copies)

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

    def validate_definition(self) -> tuple[bool, Optional[str]]:
        """nvfuser_direct's check before a first execute: (True, None) for a definition that
        can run, else (False, why). It raises nothing; `execute` raises the reason as a
        FusionDefinitionError."""
        problem = self._definition_problem()
        return problem is None, problem

    def _definition_problem(self) -> Optional[str]:
        if self._with_raised is not None:
            return (f"the definition's with-block raised ({self._with_raised}), so it holds part of the "
                    f"computation; define it again")
        if not self.fusion.outputs():
            return "the definition has no outputs (it is empty); call fd.add_output"
        return None

    def _make_cache(self, verb: str) -> FusionExecutorCache:
        problem = self._definition_problem()
        if problem is not None:
            raise FusionDefinitionError(f"{verb}: {problem}")
        self._infer_layouts()  # (before the cache: it compiles the fusion as it is now)
        return self._install(FusionExecutorCache(self.fusion, aliases=self._alias_positions()), verb, replace=False)

    def _alias_positions(self) -> dict[int, int]:
        """{output position: input position} of the aliased outputs."""
        where = {id(v): k for k, v in enumerate(self.fusion.inputs())}
        return {k: where[id(target)] for k, (_, target) in enumerate(self._outputs) if target is not None}

    def _install(self, cache: FusionExecutorCache, verb: str, replace: bool) -> FusionExecutorCache:
        # what each execute asks of the definition, fixed from here on
        where = {id(v): k for k, v in enumerate(self.fusion.inputs())}
        # id(output tensor) -> (position, tensor) of the input an alias writes it into
        self._alias_at = {i: (where[id(target)], target) for i, target in self._aliased().items()}
        self._takes_scalars = bool(self._vectors) or any(isinstance(v, Scalar) for v in self.fusion.inputs())
        with self._cache_lock:  # compile_ahead may run in another thread than execute: one cache kept
            if self._cache is None or replace:
                self._cache = cache
                # its runtimes are compiled from the fusion as it is now
                self.fusion.final = "it was executed" if verb == "execute" else f"{verb} was called"
        return self._cache

    @property
    def cache(self) -> Optional[FusionExecutorCache]:
        return self._cache

    # nvFuser's names for the executor cache: `fd.fec = lru.cache_compile(fd.fusion)` makes this
    # definition execute through a cache shared with structurally equal ones (fusion_cache.py)
    @property
    def fec(self) -> Optional[FusionExecutorCache]:
        return self._cache

    @fec.setter
    def fec(self, cache: FusionExecutorCache) -> None:
        if not isinstance(cache, FusionExecutorCache):
            raise FusionDefinitionError(f"fd.fec: expected a FusionExecutorCache (LRUCache.cache_compile's "
                                        f"result), got {type(cache).__name__}")
        if cache.fusion is not self.fusion and cache.fusion.structural_hash() != self.fusion.structural_hash():
            raise FusionDefinitionError("fd.fec: the cache was compiled for another fusion than this definition's")
        if cache.aliases and cache.aliases != self._alias_positions():
            # (its kernels write those outputs into their inputs: runtime/in_place.py)
            raise FusionDefinitionError(f"fd.fec: the cache writes outputs into inputs {cache.aliases} "
                                        f"(output position: input position), this definition "
                                        f"{self._alias_positions() or 'none'}")
        self._install(cache, "cache_compile", replace=True)

    @property
    def _fusion(self) -> Fusion:
        return self.fusion

    @_fusion.deleter
    def _fusion(self) -> None:
        """nvFuser drops its own copy once an LRUCache holds the fusion (`del fd._fusion`);
        fuser's definition keeps it: its outputs and aliases are read from it."""

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

    def repro_script_for(self, inputs: Optional[Sequence[Any]] = None) -> str:
        """A standalone script that defines this fusion and, given `inputs`, executes it on
        fresh random tensors of their sizes, strides, dtypes and devices (for a bug report)."""
        return repro_script(repr(self), None if inputs is None else describe_inputs(inputs))

    def last_repro_script(self) -> str:
        """repro_script_for the inputs of the last `execute(inputs, save_repro_inputs=True)`."""
        if self._repro_inputs is None:
            raise FusionDefinitionError("fd.last_repro_script() cannot provide a repro because "
                                        "fd.execute(inputs, save_repro_inputs=True) was not executed")
        return repro_script(repr(self), self._repro_inputs)


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors may share memory (their storages' byte ranges meet)."""
    if a.numel() == 0 or b.numel() == 0 or a.device != b.device:
        return False
    try:
        sa, sb = a.untyped_storage(), b.untyped_storage()
    except (RuntimeError, NotImplementedError):  # (a tensor without storage: no overlap to fear)
        return False
    return sa.data_ptr() == sb.data_ptr()


def _as_scalar_of(value: Any, dtype: DataType) -> Any:
    """A defined scalar's value as its dtype holds it, as nvFuser converts a Val's value when
    it is made: `define_scalar(3.7, DataType.Int)` is 3 (truncated), `(0.5, DataType.Bool)`
    True (a cast's conversion, `python_value`). A float stays a double whatever the floating
    dtype, as nvFuser keeps it."""
    from ..ops.pointwise import python_value

    if isinstance(value, complex) and not dtype.is_complex:
        raise FusionDefinitionError(f"define_scalar: the complex value {value!r} cannot be a {dtype!r} "
                                    f"scalar; give a complex dtype, or pass its real part")
    if type(value) is int and not dtype.is_floating and not dtype.is_complex and not fits_int64(value):
        raise FusionDefinitionError(f"define_scalar: the integer {value} does not fit in 64 bits, so no "
                                    f"{dtype!r} scalar holds it (eager refuses it too)")
    low, high = int_range(dtype) if dtype.is_integral and dtype is not DataType.UInt64 else (None, None)
    if type(value) is int and low is not None and not low <= value < high:
        # (a kernel's literal would wrap it where the host's value would not: one scalar, two
        # values; eager's torch.tensor(value, dtype=...) refuses it)
        raise FusionDefinitionError(f"define_scalar: the integer {value} is out of the range of a {dtype!r} "
                                    f"scalar, [{low}, {high - 1}] (eager refuses it too); give a wider dtype")
    try:
        return float(value) if dtype.is_floating else python_value(value, dtype)
    except (OverflowError, ValueError) as err:  # (inf or nan as an integer)
        raise FusionDefinitionError(f"define_scalar: {value!r} has no {dtype!r} value; integers are "
                                    f"finite ({err})") from None
    except TypeError:
        raise FusionDefinitionError(f"define_scalar: {value!r} ({type(value).__name__}) is not a number "
                                    f"of {dtype!r}") from None


def _expanded_dims(shape: list, contiguity, alloc: list[int]) -> set[int]:
    """nvFuser's getExpanded: the logical dims declared expanded broadcasts (stride 0), those
    whose contiguity (given in allocation order) is None and whose size is not 1."""
    if isinstance(contiguity, bool):
        return set()
    return {k for k, c in zip(alloc, contiguity) if c is None and shape[k] != 1}


def _input_id(f: Fusion, size: int, expanded: bool) -> IterDomain:
    """An input dim of define_tensor's `size`: -1 symbolic, 1 a broadcast, another a static
    extent; an expanded dim is a broadcast (extent 1) of that expanded extent, which the
    input's size binds at execution, as nvFuser's TensorViewBuilder makes it."""
    extent = f.new_symbol() if size == -1 else size
    if expanded:
        return f.new_id(1, iter_type=IterType.Broadcast, expanded_extent=extent)
    if size == 1:
        return f.new_id(1, iter_type=IterType.Broadcast)
    return f.new_id(extent)


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


def _rng_states() -> tuple:
    """PyTorch's generators' states: the CPU's, and the GPUs' where CUDA is in use."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    return torch.random.get_rng_state(), cuda


def _set_rng_states(states: tuple) -> None:
    cpu, cuda = states
    torch.random.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


def _layout_copy(value: Any) -> Any:
    """A tensor's copy with its sizes and strides (`clone` makes an expanded tensor dense, which
    its definition may refuse); anything else as it is."""
    return copy.deepcopy(value.detach()) if isinstance(value, torch.Tensor) else value


def _spread_vectors(inputs: Any, fusion: Fusion, vectors: list[tuple[int, int]]) -> Any:
    """Execution arguments with a list or tuple given where the definition has a define_vector
    (`vectors`: (its first input's position, its size), in order; its length is checked) or
    expects a scalar spread into that many scalars; anything else is left for the binder to
    check (and report)."""
    if not isinstance(inputs, (list, tuple)) or not any(isinstance(a, (list, tuple)) for a in inputs):
        return inputs
    declared = fusion.inputs()
    pending: dict[int, list[int]] = {}  # position -> sizes of the vectors there not yet given
    for first, size in vectors:
        pending.setdefault(first, []).append(size)
    out: list = []
    for a in inputs:
        sizes = pending.get(len(out))
        if isinstance(a, (list, tuple)) and sizes:
            size = sizes.pop(0)
            if len(a) != size:
                raise FusionInputError(f"input {len(out)}: a define_vector({size}) takes a list of {size} values, "
                                       f"got {len(a)}: {list(a)!r}")
            out.extend(a)
        elif isinstance(a, (list, tuple)) and len(out) < len(declared) and isinstance(declared[len(out)], Scalar):
            out.extend(a)
        else:
            out.append(a)
    return out


def _cpu_scalars_moved(inputs: list, positions: set[int]) -> list:
    """nvFuser's CPU scalar tensors (define_tensor(shape=[], is_cpu=True)) given beside tensors
    on a GPU, copied there: its kernels read device memory."""
    device = next((a.device for k, a in enumerate(inputs) if k not in positions and isinstance(a, torch.Tensor)), None)
    if device is None or device.type == "cpu":
        return inputs
    out = list(inputs)
    for k in positions:
        a = out[k] if k < len(out) else None
        if isinstance(a, torch.Tensor) and a.device.type == "cpu" and a.dim() == 0:
            out[k] = a.to(device, non_blocking=True)
    return out


def compute_tensor_descriptor(sizes: Sequence[int], strides: Sequence[int]) -> tuple[list, list[int]]:
    """nvFuser's descriptor of a strided layout: (contiguity in allocation order, stride_order).

    Dims of stride 0 keep their place; the others are ordered by decreasing stride (ties in dim
    order). A dim of stride 0 or size 1 is a broadcast (contiguity None); another is contiguous
    when its stride is the next non-broadcast dim's extent in memory (1 for the innermost)."""
    sizes, strides = list(sizes), list(strides)
    if len(sizes) != len(strides):
        raise FusionDefinitionError(
            f"compute_tensor_descriptor: {len(sizes)} sizes but {len(strides)} strides")
    if any(st < 0 for st in strides):
        raise FusionDefinitionError(f"compute_tensor_descriptor: negative strides {strides} are not supported")
    order = sorted((k for k in range(len(sizes)) if strides[k] != 0), key=lambda k: -strides[k])
    for k in range(len(sizes)):  # (in increasing k, each at its own position)
        if strides[k] == 0:
            order.insert(k, k)
    rank = len(sizes)
    stride_order = [0] * rank
    for pos, k in enumerate(order):
        stride_order[k] = rank - 1 - pos
    contiguity: list = [None] * rank
    expected = 1
    for pos in reversed(range(rank)):
        k = order[pos]
        if strides[k] == 0 or sizes[k] == 1:
            continue
        contiguity[pos] = bool(strides[k] == expected)
        expected = strides[k] * sizes[k]
    return contiguity, stride_order


def _from_sizes(sizes: list, strides: list, static_sizes: bool) -> tuple[list, list, Optional[list]]:
    """define_tensor's (shape, contiguity, stride_order) for a tensor of these sizes and strides."""
    contiguity, stride_order = compute_tensor_descriptor(sizes, strides)
    shape = [s if (static_sizes or s == 1) else -1 for s in sizes]
    return shape, contiguity, stride_order


def _execution_device(device: Any, inputs: Sequence[Any], cpu_scalars: bool = False) -> Optional[torch.device]:
    """`execute`'s `device` (nvFuser's: an index of a CUDA device, or a device) as a torch device,
    None where not given. A fusion runs where its tensor inputs are: a device they are not on,
    or one this machine lacks, is a `FusionInputError` naming it."""
    if device is None:
        return None
    try:
        target = torch.device("cuda", device) if isinstance(device, int) and not isinstance(device, bool) \
            else torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise FusionInputError(f"execute: device={device!r} is not a device: expected a CUDA device's index, a "
                               f"string such as 'cuda:0' or 'cpu', or a torch.device") from None
    if target.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (target.index or 0) >= count:
            raise FusionInputError(f"execute: device={device!r}, but this machine has {count} CUDA device(s)")
        if target.index is None:  # (as a tensor's device reads)
            target = torch.device("cuda", torch.cuda.current_device())
    elif target.type == "cpu":
        target = torch.device("cpu")  # ('cpu:0' is the CPU, as a tensor's device reads 'cpu')
    for k, a in enumerate(inputs):
        if cpu_scalars and isinstance(a, torch.Tensor) and a.device.type == "cpu" and a.dim() == 0:
            continue  # (a CPU scalar tensor, copied where the others are)
        if isinstance(a, torch.Tensor) and a.device != target:
            raise FusionInputError(f"execute: device={device!r}, but input {k} is on {a.device}: a fusion runs "
                                   f"where its tensor inputs are")
    return target
