"""FusionExecutorCache: one compiled runtime per input signature of a definition.

The signature holds what changes the compiled program: dtypes, ranks, stride order, which dims
are size 1, the device. Sizes and scalars are not in it: symbolic extents and scalar inputs are
bound afresh in every execution's own binding table (a scalar as a value of its declared type,
whether a Python number, a numpy scalar or a 0-d tensor gave it).
"""
from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any, Callable, Collection, Optional, Sequence

import torch

from ..codegen import KernelLauncher, compile_pool, target_for
from ..codegen.inline import span_lengths
from ..dump import dump_flags, env_choice
from ..errors import FusionInputError
from ..codegen.launch import scalar_key
from ..codegen.kernel import can_emit
from ..evaluate.binding import (BindingTable, InputBinder, fits_int64, input_label, meta_input_error,
                                 tensor_device)
from ..evaluate.evaluator import EvalContext, Environment, put_tensor_inputs, run_exprs
from ..hostir import HostRuntime
from ..ir import Fusion, Scalar
from ..ir.symbolic import compile_extent
from ..multidevice.sharding import LocalSizes, local_extents
from ..evaluate.philox import draw_seed
from ..passes import run_passes
from ..passes.seed_random import seed_random_ops
from ..passes.move_reshapes import move_reshapes
from ..schedulers.plan import add_chosen_parts, plan_kernel
from ..segment import Segment, SegmentKind, segment_fusion
from . import ahead
from .in_place import argument_layouts, fitting, offered, plan_in_place
from .profile import FusionProfile, KernelProfile, SegmentTimer, fusion_id_of
from .ready import BoundCall, ReadyCall, ReadyProgram, note_source, ready_program


def signature(args: Sequence[Any], device: Optional[torch.device] = None, scalars: Collection[int] = ()) -> tuple:
    """What a runtime is made for: the device it runs on, then per input a tensor's dtype, rank,
    stride order, size-1 axes and device. `device`: the device the tensors stand for (meta
    tensors of a compile-ahead call). `scalars`: the positions of scalar inputs, which add
    nothing: binding makes each a number of its declared type, whatever number or 0-d tensor
    gave it, and the runtime reads it from the binding table (a 0-d tensor's device counts
    where it is the one the runtime runs on)."""
    key: list = [runs_on(args, device)]
    for k, a in enumerate(args):
        if k in scalars:
            key.append(None)
        elif isinstance(a, torch.Tensor):
            key.append((a.dtype, a.dim(), stride_order(a), tuple(s == 1 for s in a.shape), device or a.device))
        else:
            key.append(type(a))
    return tuple(key)


def stride_order(t: torch.Tensor) -> tuple[int, ...]:
    """The axes of `t` other than those of size 1, outer to inner: a size-1 axis's stride
    addresses nothing (a (4, 1) tensor is as contiguous with stride (1, 1) as with (1, 4))."""
    strides = t.stride()
    return tuple(sorted((k for k, size in enumerate(t.shape) if size != 1), key=lambda k: (-strides[k], k)))


def runs_on(args: Sequence[Any], device: Optional[torch.device] = None) -> torch.device:
    """The device a runtime for `args` runs on (`device`: the one meta tensors stand for)."""
    return device or tensor_device(args) or torch.device("cpu")


class FusionRuntime:
    """The segments of one fusion for one input signature, and how to run them."""

    def __init__(self, fusion: Fusion, device: torch.device, use_kernels: bool = True,
                 aliases: Optional[dict[int, int]] = None):
        if use_kernels:  # reshapes between fusible ops moved to the fusion's edges (a clone)
            fusion = move_reshapes(fusion)
        self.fusion = fusion
        self.device = device
        self.target = target_for(device)
        if use_kernels:
            target = self.target
            emittable: dict[int, bool] = {}  # per expr: asked again for every group planned

            def lowerable(e) -> bool:
                found = emittable.get(id(e))
                if found is None:
                    found = emittable[id(e)] = can_emit(e, target)
                return found
            self.segments = segment_fusion(
                fusion, lambda exprs, i, o: plan_kernel(exprs, i, o, lowerable), lowerable)
            for seg in self.segments:
                if seg.kind is SegmentKind.kernel:
                    add_chosen_parts(seg.params, lowerable)
        else:
            self.segments = segment_fusion(fusion)
        # per kernel segment, its outputs written into the inputs they alias (in_place.py)
        self.in_place = plan_in_place(fusion, self.segments, aliases) if use_kernels and aliases else {}
        self.launchers: dict[int, KernelLauncher] = {}
        # per segment, the non-constant scalars its kernel takes and their compiled values
        self.kernel_scalars: dict[int, list[tuple[int, Any]]] = {}
        for k, seg in enumerate(self.segments):
            if seg.kind is SegmentKind.kernel:
                first_out = seg.outputs[0].name if seg.outputs else k
                self.launchers[id(seg)] = KernelLauncher(seg.params, f"fuser_{_slug(seg)}_T{first_out}")
                found = {id(v): v for e in seg.exprs for v in e.inputs
                         if isinstance(v, Scalar) and not v.is_constant}
                self.kernel_scalars[id(seg)] = [(k, compile_extent(v.expr), v.expr) for k, v in found.items()]
        self.single = self._single_kernel()
        self.sizes = LocalSizes()  # what the ATen segments' outputs are checked against
        self._checked_sizes: set[tuple] = set()  # sets of sizes (values of _size_symbols) checked
        self._known_sizes: dict[tuple, KnownSizes] = {}  # per set of sizes: the sizes asked
        # the symbols extents depend on (not a float scalar that changes every call)
        self._size_symbols = sorted({s.name for tv in fusion.tensors() for e in local_extents(tv)
                                     for s in e.free_symbols})
        # compile ahead (see compile_ahead): where kernels compile, and more than one launch does
        self.compile_ahead_pending = use_kernels and ahead.wanted(self.target, len(self.launchers))
        self._ahead_lock = threading.Lock()
        # set while another thread compiles this runtime's kernels before its first call
        # (FusionExecutorCache.compile_ahead): that call waits rather than compile them twice
        self.warming: Optional[threading.Event] = None
        # the batched launches of its ready programs (runtime/batching.py), for `triton_code`
        self.batches: "weakref.WeakSet" = weakref.WeakSet()
        flags = dump_flags()
        if "fusion_ir" in flags:
            print(fusion)
        if "segments" in flags:
            print("\n\n".join(s.describe() for s in self.segments))

    def _single_kernel(self):
        """For a fusion that is one kernel reading fusion inputs and writing the fusion's
        outputs (the common case), where each kernel input and fusion output sits in the call:
        the call then skips the environment of values."""
        if len(self.segments) != 1 or self.segments[0].kind is not SegmentKind.kernel:
            return None
        seg = self.segments[0]
        inputs = self.fusion.inputs()
        position = {id(v): k for k, v in enumerate(inputs)}
        if any(id(v) not in position for v in seg.inputs):
            return None
        produced = {id(o): k for k, o in enumerate(seg.outputs)}
        outputs = []
        for o in self.fusion.outputs():
            if id(o) in produced:
                outputs.append((True, produced[id(o)]))
            elif id(o) in position:
                outputs.append((False, position[id(o)]))
            else:
                return None
        return seg, [position[id(v)] for v in seg.inputs], outputs

    def scalars_of(self, seg: Segment, table: BindingTable) -> dict[int, Any]:
        """The values of the non-constant scalars a kernel segment takes, by scalar id."""
        found = self.kernel_scalars[id(seg)]
        try:
            values = {k: f(table.values) for k, f, _ in found}
            if all(type(v) is not int or fits_int64(v) for v in values.values()):
                return values
        except (ArithmeticError, ValueError):
            pass
        # (a nan cast to an integer, a result beyond int64): the table's evaluation names it
        return {k: table.evaluate(e, "scalar") for k, _, e in found}

    def run(self, args: Sequence[Any], table: BindingTable, keep: Optional[dict] = None) -> list[torch.Tensor]:
        """The fusion's outputs for bound `args`; `keep`: a dict that gets what a ready call
        is made from: the launch of a single-kernel fusion ("launch"), or the run's environment
        of values ("env"), its sizes ("sizes") and each kernel segment's launch ("launches")."""
        warming = self.warming
        if warming is not None:
            warming.wait()
        if keep is not None and self.in_place:  # (what a ready call's in-place writes check)
            keep["layouts"], keep["lengths"] = argument_layouts(args), span_lengths(args)
        values = table.values
        if self.single is not None:
            seg, take, give = self.single
            launcher = self.launchers[id(seg)]
            scalars = self.scalars_of(seg, table)
            launched = [] if keep is not None else None
            into = self.in_place.get(id(seg))
            outs = launcher.run([args[k] for k in take], scalars, values, self.device, launched,
                                into and offered(into, args))
            if launched:
                keep["launch"] = launched[0]
            if outs is not None:
                note_source(seg, launcher.last_source)
                return [outs[k] if made else args[k] for made, k in give]
        if torch.is_autocast_enabled(self.device.type):
            # the IR fixes every dtype: ATen ops run as written, not recast by autocast
            with torch.autocast(self.device.type, enabled=False):
                return self._run_segments(args, table, keep)
        return self._run_segments(args, table, keep)

    def _run_segments(self, args: Sequence[Any], table: BindingTable, keep: Optional[dict] = None,
                      timer: Optional[SegmentTimer] = None) -> list[torch.Tensor]:
        values = table.values
        # the ATen segments' outputs are checked against the IR's sizes on the first call of
        # each set of sizes: ATen's shapes follow from its inputs' (no op here has a
        # data-dependent shape; dtypes are the signature's, autocast off), so a repeat of a
        # checked set needs no check
        sizes_key = tuple(values.get(name) for name in self._size_symbols)
        check = sizes_key not in self._checked_sizes
        sizes = self._sizes_for(sizes_key)
        env = Environment(EvalContext(table, self.device, sizes=sizes))
        used = None  # the launch each kernel segment made, for a ready program
        if keep is not None:
            keep["env"], keep["sizes"], used = env, sizes, keep.setdefault("launches", {})
        put_tensor_inputs(env, self.fusion, args)
        pending = self.compile_ahead_pending
        for index, seg in enumerate(self.segments):
            launcher = self.launchers.get(id(seg))
            if timer is not None:
                timer.mark(seg, launcher)
            if launcher is None:
                run_exprs(seg.exprs, env, check)
                continue
            scalars = self.scalars_of(seg, table)
            inputs = [env[v] for v in seg.inputs]
            if pending:  # this runtime's first kernel launch: compile every launch's kernels first
                pending = False
                self._claim_compile_ahead(index, env, table)
            launched = [] if used is not None else None
            into = self.in_place.get(id(seg))
            outs = launcher.run(inputs, scalars, values, self.device, launched,
                                into and offered(into, args))
            if launched:
                used[id(seg)] = launched[0]
            if outs is None:  # an empty loop space: nothing for a kernel to do
                run_exprs(seg.exprs, env, check)
                continue
            for o, t in zip(seg.outputs, outs):
                env[o] = t
            note_source(seg, launcher.last_source)
        if timer is not None:
            timer.mark(None, None)
        if check:
            if len(self._checked_sizes) > 1024:  # many sizes: start over rather than grow
                self._checked_sizes.clear()
            self._checked_sizes.add(sizes_key)
        return [env[o] for o in self.fusion.outputs()]

    def _sizes_for(self, sizes_key: tuple) -> "KnownSizes":
        """The tensors' local sizes for this set of sizes, kept from call to call (every extent
        is a function of the size symbols: a reshape's target sizes are evaluated once a set)."""
        known = self._known_sizes.get(sizes_key)
        if known is None:
            if len(self._known_sizes) > 64:  # many sets of sizes: start over rather than grow
                self._known_sizes.clear()
            known = self._known_sizes[sizes_key] = KnownSizes(self.sizes)
        return known

    def _claim_compile_ahead(self, start: int, env: Environment, table: BindingTable) -> None:
        with self._ahead_lock:  # another thread's first call waits, then finds the kernels compiled
            if self.compile_ahead_pending:
                self.compile_ahead_pending = False
                self.compile_ahead(start, env, table)

    def compile_ahead(self, start: int, env: Environment, table: BindingTable) -> int:
        """Compile the kernels of segments `start` on before the first of them launches
        (runtime/ahead.py); the number of compile jobs."""
        return ahead.compile_ahead(self, start, env, table)

    def compile_ahead_of_call(self, args: Sequence[Any], table: BindingTable) -> int:
        """Compile every kernel of this runtime for a call with arguments of `args`' layouts
        (meta tensors) and `table`'s sizes, before any call; the first call then compiles
        none ahead. The number of compile jobs."""
        with self._ahead_lock:
            env = Environment(EvalContext(table, self.device, sizes=self.sizes))
            put_tensor_inputs(env, self.fusion, args)
            self.compile_ahead_pending = False
            return ahead.compile_ahead(self, 0, env, table)

    def ready_call(self, kept: dict) -> "Optional[ReadyCall | ReadyProgram]":
        """After `run(args, table, kept)`: the call that repeats it for arguments of exactly
        this layout and these scalar values, skipping the binding, the segment walk and the
        launch lookup (runtime/ready.py): the launch the run made for a single-kernel fusion,
        otherwise the steps of the run (None: none is made). Made from what the run kept, not
        from lookups after it: another thread's call may clear a launcher's launches."""
        if self.single is None:
            return ready_program(self, kept["env"], kept["sizes"].known, kept["launches"], kept) if "env" in kept else None
        launch = kept.get("launch")
        if launch is None:
            return None
        seg, take, give = self.single
        into = fitting(self.in_place.get(id(seg), []), kept.get("layouts"), launch) if self.in_place else []
        return ReadyCall(self, launch, take, give, seg, self.launchers[id(seg)], into, kept.get("lengths"))

    def triton_code(self) -> list[str]:
        """The source of each kernel launched last, then of each batched kernel built."""
        batched = [b.batched.kernel_source() for b in list(self.batches) if b.batched.source]
        return [l.last_source for l in self.launchers.values() if l.last_source] + batched


class KnownSizes:
    """LocalSizes for one set of sizes (values of a runtime's size symbols), remembered: the
    tensors' sizes outside stream loops (a runtime's sizes are functions of those values).
    Keyed by tensor identity, which stays a tensor's own: the runtime's fusion keeps them."""

    __slots__ = ("sizes", "known")

    def __init__(self, sizes: LocalSizes):
        self.sizes, self.known = sizes, {}

    def __call__(self, tv, table, with_streams: bool = False, stream_index=None) -> tuple[int, ...]:
        if with_streams or stream_index is not None:
            return self.sizes(tv, table, with_streams, stream_index)
        found = self.known.get(id(tv))
        if found is None:
            found = self.known[id(tv)] = self.sizes(tv, table)
        return found


def call_key(args: Sequence[Any]) -> tuple:
    """What fixes a call's runtime and launches: each tensor's shape, strides, dtype and device
    (Parameters and other subclasses too: a Parameter's `.data` can be swapped for another
    layout), each scalar's type and value (see `scalar_key`)."""
    return tuple((a.shape, a.stride(), a.dtype, a.device) if isinstance(a, torch.Tensor) else scalar_key(a)
                 for a in args)


def _settled(kept: dict) -> bool:
    """Whether the launches a run made (`FusionRuntime.run`'s `keep`) run what they will keep
    running: not a default form whose others compile in the background, not a stand-in
    (codegen/tuning.py)."""
    launches = list(kept.get("launches", {}).values())
    if "launch" in kept:
        launches.append(kept["launch"])
    return all(getattr(launch, "settled", True) for launch in launches)


def compile_ready_key(binder: InputBinder) -> Callable[[Sequence[Any]], Optional[tuple]]:
    """`call_key` of a plain call as one straight-line function of the arguments, for finding
    a ready call before binding: the key fixes everything binding checks (shapes, strides,
    dtypes, devices, scalar values), so a key that has a ready call belongs to a call that
    was bound and checked already. Ready calls are stored and found by this key alone. None
    for calls no ready call is made for: another argument count, a tensor subclass (other than
    Parameter), another layout, a lazy negation or conjugation, anything but a Python number
    in a scalar's place (a scalar passed as a 0-dim tensor is keyed by its layout, not its
    value; a list, which no dict key can hold, is the binding's FusionInputError)."""
    env: dict[str, Any] = {"PLAIN": (torch.Tensor, torch.nn.Parameter), "NUMBER": (bool, int, float, complex),
                           "STRIDED": torch.strided, "scalar_key": scalar_key}
    tensors = {i for i, *_ in binder.tensors}
    lines = ["def ready_key(args):",
             f"    if type(args) not in (list, tuple) or len(args) != {binder.count}:",
             "        return None"]
    parts = []
    for i in range(binder.count):
        a = f"a{i}"
        lines.append(f"    {a} = args[{i}]")
        if i in tensors:
            lines += [f"    if type({a}) not in PLAIN or {a}.layout is not STRIDED or {a}.is_nested or {a}.is_neg() "
                      f"or {a}.is_conj():",
                      "        return None"]
            parts.append(f"({a}.shape, {a}.stride(), {a}.dtype, {a}.device)")
        else:
            lines += [f"    if not isinstance({a}, NUMBER):", "        return None"]
            parts.append(f"scalar_key({a})")
    lines.append(f"    return ({''.join(p + ', ' for p in parts)})")
    exec(compile("\n".join(lines), f"<fuser ready key of {binder.count} inputs>", "exec"), env)
    return env["ready_key"]


try:  # Dynamo's C++ check of tensors' layouts, as its guards use it
    from torch._C._dynamo.guards import TensorGuards
except ImportError:  # pragma: no cover - a torch without Dynamo's guards: keys only
    TensorGuards = None


class ReadyEntry:
    """A ready call with a check that a call's arguments have its key, made in one C++ call
    for the tensors (Dynamo's `TensorGuards`: type, dispatch keys (so a lazy negation or
    conjugation), dtype, device, requires_grad, sizes and strides) and a comparison per
    scalar. Computing the key and hashing it took about a microsecond a tensor; the check
    takes a tenth of that. The check may refuse arguments that have the key (a tensor that now
    requires grad, one tensor passed twice, a call under autocast or a dispatch mode when the
    entry was made outside): those find the entry by their key. Dispatch keys are compared
    under the calling thread's included and excluded keys, as Dynamo's guards compare them:
    code that excludes the Negative or Conjugate key itself sees lazy views unresolved here as
    in ATen."""

    __slots__ = ("ready", "fits")

    def __init__(self, ready, fits: Optional[Callable[[Sequence[Any]], bool]]):
        self.ready, self.fits = ready, fits


def compile_ready_check(binder: InputBinder) -> Callable[[Sequence[Any]], Optional[Callable]]:
    """A maker of `ReadyEntry.fits` for the arguments of a call that `compile_ready_key` gave a
    key: the check is generated once per definition, each entry binds its guard and scalar
    keys. The maker gives None without Dynamo's guards (or where this torch's differ)."""
    tensors = [i for i, *_ in binder.tensors]
    scalars = [i for i in range(binder.count) if i not in tensors]
    tests = [f"type(args) in SEQUENCE and len(args) == {binder.count}"]
    if tensors:
        # (Dynamo's check reads a nested tensor's strides before its dispatch keys, and its C++
        # error then ends the process; what has no is_nested is no tensor: it does not fit)
        tests.append(f"not ({' or '.join(f'args[{i}].is_nested' for i in tensors)})")
        tests.append(f"tensors_fit({''.join(f'args[{i}], ' for i in tensors)})")
    tests += [f"scalar_key(args[{i}]) == k{i}" for i in scalars]
    lines = [f"def make(tensors_fit, {''.join(f'k{i}, ' for i in scalars)}):",
             "    def fits(args):",
             "        try:",
             f"            return {' and '.join(tests)}",
             "        except AttributeError:",
             "            return False",
             "    return fits"]
    env: dict[str, Any] = {"SEQUENCE": (list, tuple), "scalar_key": scalar_key}
    exec(compile("\n".join(lines), f"<fuser ready check of {binder.count} inputs>", "exec"), env)
    make = env["make"]

    def fits_for(args: Sequence[Any]) -> Optional[Callable[[Sequence[Any]], bool]]:
        if TensorGuards is None:
            return None
        held = [args[i] for i in tensors]
        try:
            guard = TensorGuards(*held, dynamic_dims_sizes=[list(t.shape) for t in held],
                                 dynamic_dims_strides=[list(t.stride()) for t in held])
        except Exception:  # noqa: BLE001 - a private API: another torch's may differ; keys still work
            return None
        return make(guard.check, *[scalar_key(args[i]) for i in scalars])
    return fits_for


# runtimes whose kernels another thread is compiling before their first call, and caches whose
# lock compile_ahead holds while it plans one (see compile_ahead)
_WARMING: "weakref.WeakSet[FusionRuntime]" = weakref.WeakSet()
_PLANNING: "weakref.WeakSet[FusionExecutorCache]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A child forked while a thread compiled ahead has that runtime but not the thread: its
    first call must not wait for it, nor for the locks the thread held."""
    for runtime in list(_WARMING):
        runtime._ahead_lock = threading.Lock()
        runtime.compile_ahead_pending = ahead.wanted(runtime.target, len(runtime.launchers))
        if runtime.warming is not None:
            runtime.warming.set()
            runtime.warming = None
    _WARMING.clear()
    for cache in list(_PLANNING):
        cache._lock = threading.RLock()
    _PLANNING.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _resolve_lazy_views(args: Sequence[Any]) -> Sequence[Any]:
    """Tensors whose negation or conjugation is a lazy bit (`torch._neg_view`, `x.conj()` of
    a complex x) hold the other value in memory, which a kernel would read; they are
    materialized first (ATen would resolve them too). Others are passed through as they are."""
    if not any(isinstance(a, torch.Tensor) and (a.is_neg() or a.is_conj()) for a in args):
        return args
    return [a.resolve_neg().resolve_conj() if isinstance(a, torch.Tensor) else a for a in args]


def _slug(seg: Segment) -> str:
    return seg.params.template.name


class FusionExecutorCache:
    def __init__(self, fusion: Fusion, use_kernels: Optional[bool] = None, aliases: Optional[dict[int, int]] = None):
        """`aliases`: {output position: input position} of outputs a caller writes into their
        inputs (nvFuser's alias_input), which kernels may write there themselves (in_place.py)."""
        self.fusion = fusion
        self.use_kernels = use_kernels
        self.aliases = aliases or {}
        # the pre-segmentation passes; a fusion with no mesh, device or stream axis comes back
        # as it is and keeps the single-device runtime
        # random ops left unseeded read a seed drawn for each execution: one more input, last
        seeded = seed_random_ops(fusion)
        self._draws_seed = seeded is not fusion
        self.prepared = run_passes(seeded)
        self._host = self.prepared is not seeded
        self._runtimes: dict[tuple, FusionRuntime | HostRuntime] = {}
        # the runtime for each exact input layout seen (shape, strides, dtype, device): a repeat
        # call finds its runtime without computing the signature
        self._by_layout: dict[tuple, FusionRuntime | HostRuntime] = {}
        # per ready key: the entry of the ready launch of a single-kernel runtime, or of the
        # runtime (of several segments, or a host program) bound to it (the hot path of a call)
        self._ready: dict[tuple, ReadyEntry] = {}
        self._last: Optional[ReadyEntry] = None  # the entry the last call found or made
        self._binder = InputBinder(self.prepared)
        self._scalar_positions = frozenset(i for i, *_ in self._binder.scalars)
        self._ready_key = compile_ready_key(self._binder)
        self._ready_check = compile_ready_check(self._binder)
        self._lock = threading.RLock()  # (compile_ahead holds it around _runtime_for)
        self.last_runtime: FusionRuntime | HostRuntime | None = None

    @property
    def num_runtimes(self) -> int:
        return len(self._runtimes)

    def __repr__(self) -> str:
        return (f"FusionExecutorCache(inputs={len(self.fusion.inputs())}, outputs={len(self.fusion.outputs())}, "
                f"runtimes={self.num_runtimes})")

    def ready_calls(self) -> list:
        """The ready calls made so far (one per exact input layout that has one)."""
        return [entry.ready for entry in self._ready.values()]

    def runtimes(self) -> list:
        """Every runtime made so far (one per input signature)."""
        return list(self._runtimes.values())

    def kernels_enabled(self, device: torch.device) -> bool:
        if self.use_kernels is not None:
            return self.use_kernels
        if device.type == "cuda":
            return True
        if device.type != "cpu":
            return False
        return env_choice("FUSER_CPU_KERNELS", "interpreter", ("interpreter", "aten")) != "aten"

    def execute(self, args: Sequence[Any]) -> list[torch.Tensor]:
        if self._draws_seed:
            args = self._with_seed(args, draw_seed)
        entry = self._last
        if entry is not None and entry.fits is not None and entry.fits(args):  # a repeat call
            self.last_runtime = entry.ready.runtime
            return entry.ready(args)
        ready_key = self._ready_key(args)  # None: a call no ready call is made for
        entry = self._ready.get(ready_key)  # (a ready call's key was checked before)
        if entry is not None:
            self._last = entry
            self.last_runtime = entry.ready.runtime
            return entry.ready(args)
        args, table, runtime = self._bound(args)
        if not isinstance(runtime, FusionRuntime):  # a host program: bound to its plan's values
            outs = runtime.run(args, table)
            ready = BoundCall(runtime, self._binder, values_key=runtime.runner.values_key(table))
        else:
            keep = {} if ready_key is not None else None
            outs = runtime.run(args, table, keep)
            if keep is not None and not _settled(keep):
                return outs  # (its ready call, inline launches and all, is made once they settle)
            ready = keep is not None and (runtime.ready_call(keep) or BoundCall(runtime, self._binder))
        if ready_key is not None:
            if len(self._ready) > 256:
                self._ready.clear()
            self._ready[ready_key] = self._last = ReadyEntry(ready, self._ready_check(args))
        return outs

    def _bound(self, args: Sequence[Any]) -> tuple[list, BindingTable, Any]:
        """A call without a ready call: its arguments (lazy views resolved), their binding table
        (every input validated before any work) and the runtime of their layout."""
        args = _resolve_lazy_views(args)
        table = self._binder.bind(args)
        key = call_key(args)
        layout = tuple(k if isinstance(a, torch.Tensor) else type(a) for k, a in zip(key, args))
        runtime = self._by_layout.get(layout)
        if runtime is None:
            runtime = self._runtime_for(args)
            if len(self._by_layout) > 256:  # many layouts: start over rather than grow
                self._by_layout.clear()
            self._by_layout[layout] = runtime
        self.last_runtime = runtime
        return args, table, runtime

    def execute_profiled(self, args: Sequence[Any]) -> tuple[list[torch.Tensor], FusionProfile]:
        """`execute`, each segment timed (no ready call: the runtime runs its segments one by
        one), for PythonProfiler."""
        start = time.perf_counter()
        if self._draws_seed:
            args = self._with_seed(args, draw_seed)
        args, table, runtime = self._bound(args)
        if not isinstance(runtime, FusionRuntime):  # a host program (devices, streams): timed whole
            outs = runtime.run(args, table)
            device = tensor_device(args)
            if device is not None and device.type == "cuda":
                torch.cuda.synchronize(device)
            ms = (time.perf_counter() - start) * 1e3
            return outs, FusionProfile(fusion_id_of(self), 1, [KernelProfile("host program", 0, "host", ms)], ms, ms)
        if runtime.warming is not None:
            runtime.warming.wait()
        timer = SegmentTimer(runtime.device)
        with torch.autocast(runtime.device.type, enabled=False):  # (as run: the IR fixes every dtype)
            outs = runtime._run_segments(args, table, None, timer)
        kernels = timer.kernel_profiles()
        profile = FusionProfile(fusion_id_of(self), len(runtime.segments), kernels,
                                (time.perf_counter() - start) * 1e3, sum(k.time_ms for k in kernels))
        return outs, profile

    def _with_seed(self, args: Sequence[Any], seed: Callable, verb: str = "execute") -> list:
        """The arguments and the seed of this execution's random ops (passes/seed_random.py),
        made by `seed(device)`, their input last."""
        if not isinstance(args, (list, tuple)):
            raise FusionInputError(f"{verb} expects a list of inputs, got {type(args).__name__}")
        count = len(self.fusion.inputs())
        if len(args) != count:  # (counted without the seed)
            raise FusionInputError(f"the fusion has {count} inputs but {verb} got {len(args)}")
        return [*args, seed(tensor_device(args) or torch.device("cpu"))]

    def compile_ahead(self, args: Sequence[Any], device: Any) -> int:
        """Compile the kernels that a call with arguments of these layouts would compile,
        before that call: `args` the call's scalars and, for its tensors, meta tensors of their
        shapes, strides and dtypes (a storage offset stands for an address that many elements
        past an aligned one); `device` the device its tensors will be on. The call finds its
        runtime planned and its kernels compiled, and waits for a compile still under way in
        another thread. A layout guessed wrong costs that call its own compile, never a wrong
        kernel. Returns the number of compile jobs: 0 where kernels do not compile ahead
        (Triton's interpreter, a fusion over several devices) or this layout's runtime was
        made already."""
        try:
            device = torch.device(device)
        except (RuntimeError, TypeError) as err:
            raise FusionInputError(f"compile_ahead: device={device!r} is not a device ({err})") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise FusionInputError(f"compile_ahead: device={str(device)!r}, but this machine has no CUDA "
                                   f"device; pass device='cpu' (nothing compiles ahead there)")
        if device.type == "cuda" and device.index is None:  # as a real tensor's device reads
            device = torch.device("cuda", torch.cuda.current_device())
        if self._draws_seed:  # (the seed's layout)
            args = self._with_seed(args, lambda _: torch.empty((), dtype=torch.int64, device="meta"), "compile_ahead")
        table = self._binder.bind(args, metas=True)  # (bad inputs are reported wherever they go)
        if self._host or not self.kernels_enabled(device) or target_for(device) not in ahead.COMPILE_AHEAD_TARGETS:
            return 0
        if not any(isinstance(a, torch.Tensor) for a in args):
            return 0  # (its runtime's device would be `device`'s for an execute on the CPU too)
        _PLANNING.add(self)
        try:
            with self._lock:
                if signature(args, device, self._scalar_positions) in self._runtimes:
                    return 0
                runtime = self._runtime_for(args, device, warming=True)
                _WARMING.add(runtime)
        finally:
            _PLANNING.discard(self)
        try:
            return runtime.compile_ahead_of_call(args, table)
        finally:
            runtime.warming.set()
            runtime.warming = None
            _WARMING.discard(runtime)

    def _runtime_for(self, args: Sequence[Any], device: Optional[torch.device] = None, warming: bool = False):
        """`device`: the device `args` (meta tensors) stand for; `warming`: a new runtime is
        made with its `warming` event (compile_ahead's)."""
        key = signature(args, device, self._scalar_positions)
        runtime = self._runtimes.get(key)
        if runtime is None:
            with self._lock:
                runtime = self._runtimes.get(key)
                if runtime is None:
                    device = runs_on(args, device)
                    if device.type == "meta":  # (the fast binder takes any device)
                        k = next(k for k, a in enumerate(args) if isinstance(a, torch.Tensor))
                        raise meta_input_error(input_label(k, self.prepared.inputs()[k]))
                    if device.type == "cuda":
                        compile_pool.start()  # the compile workers start while this runtime is planned
                    if self._host:
                        runtime = HostRuntime(self.prepared, device, self.kernels_enabled(device))
                    else:
                        runtime = FusionRuntime(self.prepared, device, self.kernels_enabled(device), self.aliases)
                    if warming:
                        runtime.warming = threading.Event()
                    self._runtimes[key] = runtime
        return runtime
