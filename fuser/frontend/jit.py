"""`fuser.jit`: compile a function or an nn.Module with the fuser backend.

    @fuser.jit
    def block(x, w): ...

    model = fuser.jit(model)          # an nn.Module wrapper sharing the model's parameters
    block.cache_info()                # calls, graphs, fusions, compiles, kernels, fallback_ops

Sizes other than 0 and 1 are symbolic from the first call, all but a floating-point tensor's
last (`dynamic="rows"`, the default), so new batch or sequence lengths reuse the compiled
program; a new last size (a hidden size, a vocabulary) compiles once more, with it symbolic too.
Arguments fuser cannot run (sparse, nested or quantized tensors, tensors on devices other than
CPU and CUDA) raise a `FusionInputError` naming the argument, or, with `fallback="eager"`, run
the original function after a warning.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import logging
import math
import os
import re
import sys
import threading
import traceback
import types
import weakref
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
import torch.autograd.forward_ad as _forward_ad

from ..codegen import compile_pool
from ..errors import FuserError, FusionInputError, InternalError, UnsupportedError
from .backend import GraphRecord, backend_for
from .direct import MISS, DirectCall, global_module_hooks
from .frame_hook import compile_again, run_eagerly_once
from .gc_pause import GC_PAUSE, Overlapped
from .program import CURRENT_STATS

_FALLBACKS = ("error", "eager")
# the innermost torch.func transform a call runs under (None outside any: a plain call)
_functorch_transform = getattr(torch._C._functorch, "peek_interpreter_stack", lambda: None)
_DYNAMIC = (True, False, None, "rows")  # (named in the error for any other)


@dataclass(frozen=True)
class CacheInfo:
    calls: int         # calls of the jitted callable
    graphs: int        # graphs Dynamo captured (more after graph breaks or recompiles)
    fusions: int       # FusionDefinitions built from those graphs (forward and backward)
    compiles: int      # fusion runtimes segmented and compiled (one per fusion and input layout)
    kernels: int       # distinct generated kernels
    fallback_ops: int  # ATen ops with no lowering, run eagerly between fusions
    compiled: int = 0  # distinct kernels compiled: kernels alike but for names (layers) share one
    uncompiled: int = 0  # calls run as the plain function (a global module hook, a torch.func transform, ...)


class Stats:
    """What one jitted callable has run: its call count and the graphs its calls used."""

    def __init__(self) -> None:
        self.calls = 0
        self.records: dict[int, GraphRecord] = {}
        self.this_call: set[int] = set()  # the graphs run by the current call through Dynamo
        self.uncompiled = 0  # calls run as the plain function, and why the last one did
        self.uncompiled_reason: Optional[str] = None

    def ran_uncompiled(self, reason: str) -> None:
        self.uncompiled += 1
        self.uncompiled_reason = reason

    def saw(self, record: GraphRecord) -> None:
        self.this_call.add(id(record))
        if id(record) not in self.records:
            self.records[id(record)] = record

    def info(self) -> CacheInfo:
        totals = {"fusions": 0, "compiles": 0, "kernels": 0, "fallback_ops": 0}
        compiled: set[str] = set()
        for record in self.records.values():
            for program in record.programs:
                for k, v in program.counts().items():
                    totals[k] += v
                compiled |= program.kernel_names()
        return CacheInfo(calls=self.calls, graphs=len(self.records), **totals, compiled=len(compiled),
                         uncompiled=self.uncompiled)


class _DynamoSettings(Overlapped):
    """Dynamo's settings while fuser.jit goes through it. Dynamo then writes frame code without
    the two profiler hooks it calls around reading the graph's arguments on every call
    ("Pregraph bytecode" in a profile, about 1-2 us), and keeps Python floats the function reads
    as constants guarded by value: traced as 0-dim tensors they would cut fusions on the GPU, so
    the backend would ask for a second trace with them specialized anyway
    (`_restart_with_floats_specialized`; the second trace cost 25-90 ms of a jit rmsnorm's
    first call on the development CPU). Dynamo's config is global (`Overlapped`): a
    `torch.compile` traced in another thread while a fuser.jit call is in flight sees these
    settings too (its floats specialized: more recompiles, the same results). Dynamo is imported
    on first use, not with fuser."""

    def __init__(self, settings: dict) -> None:
        super().__init__()
        self.settings = settings

    def set(self) -> None:
        config = torch._dynamo.config
        self.saved = {name: getattr(config, name) for name in self.settings if hasattr(config, name)}
        for name in self.saved:
            setattr(config, name, self.settings[name])

    def put_back(self) -> None:
        for name, value in self.saved.items():
            setattr(torch._dynamo.config, name, value)


# (and guards on submodules' hook dicts: a hook added to a submodule after the first call was
# skipped, its old trace reused, where Dynamo's default leaves those guards out; and the fake
# modes' weak references to the real tensors traced dropped at the end of each compile, as
# Dynamo does for registered backends but not for a backend object as fuser.jit's: each
# parameter kept two or three, and `module.half()` with
# `torch.__future__.set_swap_module_params_on_conversion(True)` refused to swap it)
_DYNAMO_SETTINGS = _DynamoSettings({"record_runtime_overhead": False, "specialize_float": True,
                                    "skip_nnmodule_hook_guards": False,
                                    "invalidate_compile_context_weakrefs": True})
# Where every size is symbolic (dynamic=True, and "rows" but for the first trace's row lengths),
# no automatic dynamic shapes either: a size it marks dynamic (one that changed since an earlier
# trace of the same code, a new row length) gets a symbol of its own where dynamic=True's
# duck sizing gives equal sizes one symbol. A cross entropy traced after a first call at other
# sizes then had its targets' count and its logits' rows as two symbols, and fuser, unable to
# prove them equal, gathered the targets' logits through ATen in kernels apart: 2262 us a
# forward and backward at [8, 1024, 32000] on an H100, where its first trace takes 669.
_DUCK_SIZES = _DynamoSettings({"automatic_dynamic_shapes": False})


class _QuietMetaFailures(Overlapped):
    """While fuser.jit traces, torch's fake-tensor log keeps quiet about an op that fails on the
    traced tensors (a traceback at ERROR level, written before Dynamo raises): the call then
    runs the function eagerly, which raises the op's own error (`JitFunction._eager_verdict`)."""

    def set(self) -> None:
        logging.getLogger("torch._subclasses.fake_tensor").addFilter(_not_a_meta_failure)

    def put_back(self) -> None:
        logging.getLogger("torch._subclasses.fake_tensor").removeFilter(_not_a_meta_failure)


def _not_a_meta_failure(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("failed while attempting to run meta")


_QUIET_META_FAILURES = _QuietMetaFailures()
_NO_PAUSE = contextlib.nullcontext()


class _WhileCompiling:
    """Dynamo's frame callback for a jitted function, with fuser's settings around it: Dynamo
    calls it only where a frame has no compiled entry that fits (a compile), so its settings
    (`_DYNAMO_SETTINGS`, the duck sizes, the meta-failure filter, the collector's pause) cost a
    call nothing once compiled: set around every call, they made a call through Dynamo of a
    one-matmul function 54 us on the development CPU, 21 us without (torch.compile's 16). It
    looks as Dynamo's own callback does to the code that walks callbacks to their backend
    (`_torchdynamo_orig_backend`)."""

    def __init__(self, inner: Callable, owner: "JitFunction"):
        self.inner, self.owner = inner, weakref.ref(owner)  # (the owner holds this: no cycle)
        self._torchdynamo_orig_backend = getattr(inner, "_torchdynamo_orig_backend", inner)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        owner = self.owner()
        if owner is not None and args and getattr(args[0], "f_code", None) in owner._uncompiled_codes:
            once = run_eagerly_once()  # (a frame whose trace failed where it runs: not traced again)
            if once is not None:
                return once
        sizes = owner._sizes if owner is not None else _NO_PAUSE
        with _DYNAMO_SETTINGS, sizes, GC_PAUSE, _QUIET_META_FAILURES:
            try:
                return self.inner(*args, **kwargs)
            except Exception as e:
                once = None if owner is None else owner._uncompiled_once(args[0] if args else None, e)
                if once is not None:
                    return once
                del e, owner  # (the error's traceback keeps this frame: no cycle through them)
                raise

    def __getattr__(self, name: str) -> Any:  # (anything else Dynamo asks of its callback)
        inner = self.__dict__.get("inner")
        if inner is None:  # (an object being copied has no attributes yet)
            raise AttributeError(name)
        return getattr(inner, name)


def _compiled_frame(owner: "JitFunction", dynamic: "Optional[bool]") -> Callable:
    """`torch.compile(owner._frame, backend=fuser, dynamic=dynamic)`, its frame callback
    wrapped in `_WhileCompiling` (a torch without the callback where it is looked for gets
    the plain one, the settings then applying to Dynamo's defaults: correct, slower to trace).
    A frame bound to a module (`_own_frame`) is compiled as its function, then bound: Dynamo
    would run a method with no source file through its shared `wrap_inline` frame."""
    context = torch._dynamo.optimize(backend=backend_for(), dynamic=dynamic)
    inner = getattr(context, "callback", None)
    if callable(inner) and not isinstance(inner, _WhileCompiling):
        context.callback = _WhileCompiling(inner, owner)
    frame = owner._frame
    if isinstance(frame, types.MethodType):
        return types.MethodType(context(frame.__func__), frame.__self__)
    return context(frame)


class JitFunction:
    """A function compiled with fuser; call it like the function."""

    def __init__(self, fn: Callable, dynamic: "Optional[bool] | str" = "rows", fallback: str = "error",
                 **options: Any):
        if fallback not in _FALLBACKS:
            raise FusionInputError(f"fuser.jit: fallback must be one of {_FALLBACKS}, got {fallback!r}")
        if not (dynamic is None or isinstance(dynamic, bool) or dynamic == "rows"):
            raise FusionInputError(f"fuser.jit: dynamic must be one of {_DYNAMIC}, got {dynamic!r}")
        if options:  # (none is taken yet: a misspelt keyword would otherwise do nothing, silently)
            raise FusionInputError(f"fuser.jit: unknown option {', '.join(map(repr, options))}; it takes "
                                   f"dynamic= and fallback=")
        self._fn = fn
        self._fallback = fallback
        self._stats = Stats()
        self._failed = False  # fuser failed and fallback="eager": the function runs eagerly
        self._rows = dynamic == "rows"  # (each row length static in the first trace: _fix_row_lengths)
        self._traced = False  # a call went through Dynamo (and so may have left a graph)
        # calls through Dynamo racing in several threads take turns: Dynamo checks its cache
        # before its compile lock, so each traced its own copy of a new shape, and 8 of them
        # filled its recompile limit (a later row length then ran eagerly for good). Steady
        # calls take the direct path, without it. Reentrant: a jitted function may call itself
        self._tracing = threading.RLock()
        _JITTED.add(self)
        self._dynamic = dynamic
        self._frame = _own_frame(fn) if _frame_shared(fn) else fn  # (what Dynamo compiles)
        self._entry_code = _entry_code(self._frame)  # (None where unknown: every frame counts as it)
        self._ran_uncompiled: list = []  # (code, reason, fuser's failure): this call's frames run as they are
        self._uncompiled_codes: set = set()  # frames run as they are at each call (fallback="eager")
        self._sizes = _DUCK_SIZES if self._rows or dynamic is True else contextlib.nullcontext()
        self._compiled = _compiled_frame(self, True if self._rows else dynamic)
        self._direct = DirectCall(self._frame)
        functools.update_wrapper(self, fn, updated=())
        # the function inside, as torch.compile's wrappers name it: torch.compiler.disable(jitted)
        # runs it eagerly, and torch._dynamo.explain(jitted) explains it
        self._torchdynamo_orig_callable = fn
        self._torchdynamo_wrapper_id = id(self)

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:  # (the function may take a `self` keyword)
        if _compiling_here():
            # called from a function Dynamo traces (another jitted or compiled function): the
            # function's ops join that trace, rather than break it at fuser's own call path
            return self._fn(*args, **kwargs)
        return self._call(self._stats, args, kwargs)

    def _call(self, stats: Stats, args: tuple, kwargs: dict, direct: bool = True) -> Any:
        """A call counted in `stats`; `direct=False` (`fuser.explain`) takes the path through
        Dynamo's frame even where a remembered entry would do, so that the graphs it runs are
        counted in `stats` too."""
        stats.calls += 1
        uncompiled = _uncompiled_reason() or _negative_zero(args, kwargs)
        if uncompiled is not None:
            stats.ran_uncompiled(uncompiled)
            return self._fn(*args, **kwargs)
        # the remembered entry's guards cover every argument (a tensor's dispatch keys say
        # whether it is sparse, quantized or on another device; a nested one makes them raise)
        if direct and self._direct.remembered and not self._failed:
            # no CURRENT_STATS here: the remembered entry's graphs were counted on the call
            # through Dynamo that remembered it
            try:
                out = self._direct(args, kwargs)
            except Exception as e:  # as on the path through Dynamo
                if untraceable_argument(self._fn, args, kwargs) is None:
                    return self._failure(e, args, kwargs, _wrote(stats, direct=True))
                out = MISS  # (a nested tensor's strides break the guards' check): named below
            if out is not MISS:
                return out
        problem = untraceable_argument(self._fn, args, kwargs)
        if problem is not None:
            if self._fallback == "eager":
                warnings.warn(f"fuser.jit: {problem}; running {_name(self._fn)} eagerly", stacklevel=3)
                stats.ran_uncompiled(f"{problem} (fallback=\"eager\")")
                return self._fn(*args, **kwargs)
            raise FusionInputError(f"{_name(self._fn)}: {problem}")
        if self._failed:
            stats.ran_uncompiled(_AFTER_FAILURE)
            return self._fn(*args, **kwargs)
        # calls racing in several threads take turns from here: each checks whether the function
        # was traced, and marks its row lengths, after the one before it traced (marked before,
        # racing first calls each traced their own, until Dynamo's recompile limit)
        with self._tracing:
            return self._through_dynamo(stats, args, kwargs)

    def _through_dynamo(self, stats: Stats, args: tuple, kwargs: dict) -> Any:
        first = not self._traced
        if first and compile_pool.worker_count() and any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
            compile_pool.start()  # the compile workers start while Dynamo traces
        token = CURRENT_STATS.set(stats)
        # (a call of its own inside, reentrant: its graphs are the outer call's too, its frames not)
        outer_graphs, outer_frames = stats.this_call, self._ran_uncompiled
        stats.this_call, self._ran_uncompiled = set(), []
        marked = _fix_row_lengths(args, kwargs) if self._rows and first else ()
        try:
            # Dynamo's settings apply while it compiles a frame (`_WhileCompiling`); a first
            # call's collector waits until its first run, fuser's compile included, is done
            with GC_PAUSE if first else _NO_PAUSE:
                out = self._compiled(*args, **kwargs)
            self._traced = True
            self._direct.remember(len(stats.this_call))
            self._report_uncompiled(self._ran_uncompiled)
            return out
        except Exception as e:
            _unmark(marked)  # (before a retry: it traces the arguments as they came)
            marked = ()
            if not _raised_while_compiling(e):
                for code in _user_codes(e):
                    # Dynamo skips for good a frame it traced no graph from, here one that
                    # raised (an input check's ValueError), which left later calls uncompiled
                    compile_again(code)
            return self._failure(e, args, kwargs, _wrote(stats, direct=False))
        finally:
            _unmark(marked)
            CURRENT_STATS.reset(token)
            stats.this_call, self._ran_uncompiled = outer_graphs | stats.this_call, outer_frames

    def _uncompiled_once(self, frame: Any, e: Exception) -> Any:
        """Where Dynamo failed on a frame after a graph break (or a callee's frame): the frame
        callback's return that runs that frame as it is, once. The call's earlier graphs ran,
        so the call cannot run again, and an error of the user's is then raised as eager raises
        it (what follows is `_report_uncompiled`'s). None for the function's first frame (its
        failure is the call's: `_failure`)."""
        code = getattr(frame, "f_code", None)
        if code is None or code is self._entry_code:
            return None
        failure = _backend_failure(e)
        fuser_failed = self._fallback == "eager" and isinstance(failure, FuserError)
        if not (fuser_failed or _op_failed_while_tracing(e)):
            return None
        once = run_eagerly_once()
        if once is not None:
            self._ran_uncompiled.append((code, _reason(failure or e), fuser_failed))
        return once

    def _report_uncompiled(self, ran: list) -> None:
        """After a call that ran frames uncompiled (`_uncompiled_once`) and raised nothing of the
        user's: fuser failing on one, with fallback="eager", runs the function eagerly from now
        on; a trace failing where eager runs the frame raises an UnsupportedError as on the
        function's first frame (its effects made, the result dropped), or with fallback="eager"
        that frame runs uncompiled from now on, not traced again at each call."""
        for code, reason, fuser_failed in ran:
            part = _frame_label(code, _name(self._fn))
            if fuser_failed:
                self._failed = True
                warnings.warn(f"fuser.jit: compiling {part} failed ({reason}); it ran uncompiled, and the "
                              f"function runs eagerly from now on", stacklevel=4)
            elif self._fallback == "eager":
                self._uncompiled_codes.add(code)
                warnings.warn(f"fuser.jit: tracing {part} failed ({reason}); it runs uncompiled from now on",
                              stacklevel=4)
            else:
                raise UnsupportedError(
                    f"{_name(self._fn)}: tracing {part} failed where eager PyTorch runs it: {reason}. That part "
                    f"ran uncompiled, once (the call's effects are made; its result is dropped); use "
                    f"fuser.jit(fn, fallback=\"eager\") to run it uncompiled")

    def _failure(self, e: Exception, args: tuple, kwargs: dict, wrote: bool) -> Any:
        """A call that raised `e`: the function's own error is raised as eager PyTorch raises
        it; fuser's failure is raised as a FuserError, or with fallback="eager" the function
        runs eagerly from now on. `wrote`: a graph this call ran writes its inputs in place, so
        that the call cannot run again (the writes would apply twice)."""
        if _op_failed_while_tracing(e):
            return self._eager_verdict(e, args, kwargs, wrote=wrote)
        failure = _backend_failure(e)
        if failure is None and not isinstance(e, FuserError):
            raise e
        failure = e if failure is None else failure
        # (no retry where the call wrote: the writes would apply twice)
        if not wrote and self._rows and not self._traced and _CONCRETE_SIZES in str(failure):
            # torch's backward of some ops (affine_grid's) cannot take a size static beside
            # symbolic ones: traced again without the row lengths' static marks, from now on
            self._rows = False
            return self._call(self._stats, args, kwargs)
        if not wrote and self._dynamic is not False and _STATIC_SIZES_ONLY in str(failure):
            # torch's backward of some ops (bicubic interpolation with antialias) takes no
            # symbolic size: traced with static sizes from now on (a new shape traces again)
            self._rows, self._dynamic = False, False
            self._sizes = contextlib.nullcontext()
            self._compiled = _compiled_frame(self, False)
            return self._call(self._stats, args, kwargs)
        if "NYI SymInt equality" in str(failure) and self._fallback != "eager":  # (torch's own limit:
            # torch.compile(dynamic=True) meets it)
            raise UnsupportedError(
                f"{_name(self._fn)}: its gradient goes through an op with an int argument traced as a "
                f"symbol (`x ** p`, p an int argument), which torch's AOTAutograd cannot differentiate "
                f"(\"NYI SymInt equality\"); pass the number as a float, or use fuser.jit(fn, dynamic=False)") from e
        if not isinstance(failure, FuserError):
            # torch's own error while compiling the graph (AOTAutograd tracing the function's
            # ops: a backward that refuses a gradient's shape): eager tells whether the
            # function's inputs are at fault
            return self._eager_verdict(failure, args, kwargs, InternalError, wrote)
        if self._fallback == "eager" and wrote:
            self._failed = True
            failure.add_note(_NOT_AGAIN.format(name=_name(self._fn)))
        elif self._fallback == "eager":
            warnings.warn(f"fuser.jit: {_name(self._fn)} failed in fuser ({failure}); running "
                          f"it eagerly from now on", stacklevel=4)
            self._failed = True
            return self._fn(*args, **kwargs)
        raise failure from (e if failure is not e else None)

    def _eager_verdict(self, e: Exception, args: tuple, kwargs: dict, error: type = UnsupportedError,
                       wrote: bool = False) -> Any:
        """An op failed on the traced tensors (Dynamo's fake tensors, sizes as symbols), or
        torch failed compiling the graph: the function runs eagerly, once, so that an error of
        its own (shapes that do not broadcast, `mean` of an int tensor) is raised as eager
        raises it, with the real sizes. Where eager runs it, the failure was the tracer's or
        fuser's: with fallback="eager" its result is returned and later calls run eagerly;
        else `error` says so. With fallback="error" it runs on copies of the tensor arguments,
        the random state put back after, so that a failed call changes nothing a caller
        passed (an update in place would apply twice where the caller then runs it itself; a
        module's own state is not copied). So it runs on copies too where graphs of this call
        wrote its inputs (`wrote`): fallback="eager" then raises, and later calls run eagerly."""
        keep = self._fallback == "eager" and not wrote  # (its result is returned: the real call)
        # (copied together: arguments sharing memory, a cache and a view of it, share their copies')
        run_args, run_kwargs = (args, kwargs) if keep else _copies((args, kwargs))
        try:
            with contextlib.nullcontext() if keep else _random_state_kept(args, kwargs):
                out = self._fn(*run_args, **run_kwargs)
        except Exception as own:
            raise own from None
        reason = _reason(e)
        doing = "tracing" if error is UnsupportedError else "compiling"
        if self._fallback == "eager" and wrote:
            self._failed = True
            raise error(f"{_name(self._fn)}: {doing} failed where eager PyTorch runs the function on these "
                        f"arguments: {reason}. " + _NOT_AGAIN.format(name=_name(self._fn))) from e
        if self._fallback == "eager":
            warnings.warn(f"fuser.jit: {doing} {_name(self._fn)} failed ({reason}); running it eagerly from now on",
                          stacklevel=4)
            self._failed = True
            return out
        if error is InternalError and "modified by an inplace operation" in reason:
            # (AOTAutograd traces the backward with the forward: autograd's version check fires
            # at that trace, where eager's forward runs and only its backward() would raise)
            raise UnsupportedError(
                f"{_name(self._fn)}: it writes in place to a value its own backward needs (autograd's "
                f"warning above shows the op that saved it), so its gradient cannot be computed: eager "
                f"PyTorch runs this forward and raises at backward(). Call it under torch.no_grad() "
                f"where no gradient is wanted, or write that value out of place (y = y + 1 for "
                f"y.add_(1)); autograd: {reason}") from e
        if error is InternalError and "returned an invalid gradient" in reason:
            raise UnsupportedError(
                f"{_name(self._fn)}: torch's own backward of an op here fails for these arguments (a "
                f"backward() in eager would raise the same), and AOTAutograd traces the backward "
                f"with the forward. Call it under torch.no_grad() or detach that op's input where no "
                f"gradient is wanted, or use fuser.jit(fn, fallback=\"eager\"); torch: {reason}") from e
        if error is InternalError and "data-dependent" in reason:
            raise UnsupportedError(
                f"{_name(self._fn)}: torch's AOTAutograd cannot trace it with a size that depends on "
                f"tensor values (an unbacked size, from capture_dynamic_output_shape_ops or "
                f"capture_scalar_outputs): turn those settings off, so that Dynamo breaks the graph "
                f"there, or use fuser.jit(fn, fallback=\"eager\"); torch: {reason}") from e
        raise error(f"{_name(self._fn)}: {doing} failed where eager PyTorch runs the function on "
                    f"these arguments (it ran eagerly once, to tell): {reason}") from e

    def cache_info(self) -> CacheInfo:
        return self._stats.info()

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if isinstance(self._fn, staticmethod):  # (`@fuser.jit` above `@staticmethod`: bound to nothing)
            return self
        return self if obj is None else types.MethodType(self, obj)

    def __deepcopy__(self, memo: dict) -> "JitFunction":
        return self  # (as a function is: a module holding one as an attribute copies)

    def __reduce__(self) -> str:
        # pickled by name, as a function is: a decorated module-level function
        return self.__qualname__

    def __repr__(self) -> str:
        return f"fuser.jit({_name(self._fn)})"


def _uncompiled_reason() -> Optional[str]:
    """Why a call now runs the plain function, uncompiled, whatever fuser.jit's options (None
    where nothing stops it compiling)."""
    if global_module_hooks():
        # a global module hook (`register_module_forward_hook`) runs at every module call:
        # Dynamo's trace skips the submodules' calls of it and fires the outer module's from
        # each of its wrappers (a Linear's output hook lost, the model's run three times)
        return "a global module hook is registered (torch.nn.modules.module.register_module_*_hook)"
    if _forward_ad._current_level >= 0:
        # inside torch.autograd.forward_ad.dual_level: Dynamo's guards do not see a tangent,
        # and fuser's kernels read only the primal, so the tangents would be lost silently
        return "it was called inside torch.autograd.forward_ad.dual_level (forward-mode AD)"
    if _functorch_transform() is not None:
        # under a torch.func transform (vmap, grad, jacrev; functional_call in vmap for an
        # ensemble): functorch runs the function op by op anyway, and Dynamo, tracing it
        # there, marked its code to run uncompiled for good (every later plain call, of
        # every instance of a module's class, ran eagerly)
        return "it was called under a torch.func transform (vmap, grad, jacrev, ...)"
    return None


def _negative_zero(args: tuple, kwargs: dict) -> Optional[str]:
    """Why a call with a float argument of -0.0 runs uncompiled: fuser.jit specializes floats,
    and Dynamo's guard for one (`k == -0.0`) passes 0.0 as well, so each zero reused the other's
    graph (copysign(x, k), x / k of the other sign). With no graph ever traced at -0.0, a 0.0
    never meets one, and a -0.0 runs as eager."""
    for values in (args, kwargs.values()) if kwargs else (args,):
        for a in values:
            if type(a) is float and a == 0.0 and math.copysign(1.0, a) < 0:
                return "a float argument is -0.0 (Dynamo's guard for a float does not tell it from 0.0)"
    return None


_AFTER_FAILURE = "fuser failed on an earlier call (fallback=\"eager\")"


class JitModule(torch.nn.Module):
    """An nn.Module compiled with fuser. Parameters, buffers and attributes are the wrapped
    module's own: reading or setting one through the jitted module reads or sets the wrapped
    module's, and `state_dict()` has the wrapped module's keys, also inside a model that holds
    the jitted module (a state dict saved from either loads into either); `named_parameters()`
    names them under `_orig_mod.`, as torch.compile's modules do. `forward` runs the compiled
    program. A copy (`copy.deepcopy`, an EMA model's) or a pickle (`torch.save`) is the wrapped
    module's, jitted with the same options: its compiled programs are made again, not copied."""

    def __init__(self, module: torch.nn.Module, **jit_options: Any):
        super().__init__()
        self._orig_mod = module
        self.__dict__["_jit_options"] = jit_options
        self.__dict__["_jit"] = JitFunction(module, **jit_options)  # not a submodule
        # the module inside, as torch.compile's modules (and JitFunction) name it: torch.compiler.
        # disable(jitted) runs it eagerly, where the lookup, passed on to the wrapped module,
        # found none and the compiled program ran; plain attributes, not a second submodule
        self.__dict__["_torchdynamo_orig_callable"] = module
        self.__dict__["_torchdynamo_wrapper_id"] = id(self)
        # the wrapped module's keys, wherever a state dict is taken or loaded from
        self.register_state_dict_post_hook(_strip_wrapped_prefix)
        self.register_load_state_dict_pre_hook(_add_wrapped_prefix)
        self.register_load_state_dict_post_hook(_report_wrapped_keys)

    def __reduce__(self) -> tuple:
        own = (_strip_wrapped_prefix, _add_wrapped_prefix, _report_wrapped_keys)  # (made again)
        hooks = {name: {k: h for k, h in getattr(self, name).items() if getattr(h, "hook", h) not in own}
                 for name in _MODULE_HOOKS}
        state = {"hooks": hooks, "full_backward": self._is_full_backward_hook}
        return _jit_module, (self._orig_mod, self._jit_options), state

    def __setstate__(self, state: dict) -> None:
        """The hooks registered on the jitted module itself, into its copy."""
        for name, hooks in state["hooks"].items():
            getattr(self, name).update(hooks)
        self.__dict__["_is_full_backward_hook"] = state["full_backward"]

    # added through the jitted module, to the wrapped one, whose forward reads them
    def register_buffer(self, name: str, tensor: Optional[torch.Tensor], persistent: bool = True) -> None:
        self._orig_mod.register_buffer(name, tensor, persistent)

    def register_parameter(self, name: str, param: Optional[torch.nn.Parameter]) -> None:
        self._orig_mod.register_parameter(name, param)

    def add_module(self, name: str, module: Optional[torch.nn.Module]) -> None:
        self._orig_mod.add_module(name, module)

    def register_module(self, name: str, module: Optional[torch.nn.Module]) -> None:
        self._orig_mod.register_module(name, module)

    def forward(self, /, *args: Any, **kwargs: Any) -> Any:
        return self._jit(*args, **kwargs)

    def _call_impl(self, /, *args: Any, **kwargs: Any) -> Any:
        """nn.Module's call, but while global module hooks are registered: the wrapped module's
        call then runs them (uncompiled, `JitFunction._call`) once for each module, as in eager,
        so the wrapper runs only its own hooks around that call (`_call_with_own_hooks`);
        nn.Module's call of the wrapper ran the global ones a second time around it (a hook
        `out - 5` subtracted 10)."""
        if not global_module_hooks():
            return super()._call_impl(*args, **kwargs)
        if not (self._forward_hooks or self._forward_pre_hooks or self._backward_hooks or self._backward_pre_hooks):
            return self._orig_mod(*args, **kwargs)
        return _call_with_own_hooks(self, args, kwargs)

    def cache_info(self) -> CacheInfo:
        return self._jit.cache_info()

    @property
    def training(self) -> bool:
        """The wrapped module's mode (`jm.training = False` stops its dropout, as `jm.eval()`)."""
        wrapped = self.__dict__.get("_modules", {}).get("_orig_mod")
        return True if wrapped is None else wrapped.training

    @training.setter
    def training(self, mode: bool) -> None:
        wrapped = self.__dict__.get("_modules", {}).get("_orig_mod")
        if wrapped is not None:  # (nn.Module.__init__ sets it before the module is wrapped)
            wrapped.training = mode

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["_orig_mod"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        if self._own(name):
            super().__setattr__(name, value)
        else:  # (an attribute the wrapped forward reads: a scale, a parameter swapped in)
            setattr(self._modules["_orig_mod"], name, value)

    def __delattr__(self, name: str) -> None:
        if self._own(name):
            super().__delattr__(name)
        else:
            delattr(self._modules["_orig_mod"], name)

    def _own(self, name: str) -> bool:
        """The wrapper's attributes: nn.Module's state (training, hooks), methods, the wrapped
        module itself."""
        return name == "_orig_mod" or name in self.__dict__ or hasattr(type(self), name) \
            or "_modules" not in self.__dict__

    def __repr__(self) -> str:
        return f"fuser.jit({self._orig_mod!r})"


def _call_with_own_hooks(module: JitModule, args: tuple, kwargs: dict) -> Any:
    """`module`'s call running only the hooks registered on the wrapper itself, in nn.Module's
    order (forward pre-hooks, full backward and backward pre-hooks, forward hooks; on an error,
    the always-called forward hooks not yet run), around the wrapped module's call, which runs
    the global ones. The wrapper's pre-hooks thus run before the global pre-hooks, where on the
    wrapped module itself they would run after them."""
    if module._backward_hooks and not module._is_full_backward_hook:
        raise UnsupportedError(
            f"fuser.jit({_name(module._orig_mod)}): a backward hook registered with register_backward_hook (not full) cannot run "
            f"on the jitted module while a global module hook is registered; use "
            f"register_full_backward_hook, or register it on the wrapped module (`._orig_mod`)")
    result, ran = None, set()
    try:
        args, kwargs = _run_forward_pre_hooks(module, args, kwargs)
        backward = None
        if module._backward_hooks or module._backward_pre_hooks:
            backward = torch.utils.hooks.BackwardHook(module, list(module._backward_hooks.values()),
                                                      list(module._backward_pre_hooks.values()))
            args = backward.setup_input_hook(args)
        result = module._orig_mod(*args, **kwargs)
        for hook_id in module._forward_hooks:
            ran.add(hook_id)
            result = _run_forward_hook(module, hook_id, args, kwargs, result)
        return result if backward is None else backward.setup_output_hook(result)
    except Exception:
        for hook_id in module._forward_hooks:
            if hook_id in module._forward_hooks_always_called and hook_id not in ran:
                try:  # (as nn.Module's call: a failing one warns, the forward's error is raised)
                    result = _run_forward_hook(module, hook_id, args, kwargs, result)
                except Exception as e:
                    warnings.warn(f"module forward hook with always_call=True raised an exception that was "
                                  f"silenced as another error was raised in forward: {e}", stacklevel=3)
        raise


def _run_forward_hook(module: JitModule, hook_id: int, args: tuple, kwargs: dict, result: Any) -> Any:
    """`result` after `module`'s forward hook `hook_id` (what it returns, where not None)."""
    hook = module._forward_hooks[hook_id]
    if hook_id in module._forward_hooks_with_kwargs:
        out = hook(module, args, kwargs, result)
    else:
        out = hook(module, args, result)
    return result if out is None else out


def _run_forward_pre_hooks(module: JitModule, args: tuple, kwargs: dict) -> tuple:
    """(args, kwargs) after `module`'s own forward pre-hooks, each given what the one before
    returned, as nn.Module's call runs them."""
    for hook_id, hook in module._forward_pre_hooks.items():
        if hook_id in module._forward_pre_hooks_with_kwargs:
            out = hook(module, args, kwargs)
            if out is not None:
                if not (isinstance(out, tuple) and len(out) == 2):
                    raise RuntimeError(f"forward pre-hook must return None or a tuple of (new_args, new_kwargs), "
                                       f"but got {out}.")
                args, kwargs = out
        else:
            out = hook(module, args)
            if out is not None:
                args = out if isinstance(out, tuple) else (out,)
    return args, kwargs


# nn.Module's hooks, each an ordered dict: those of a jitted module go with its copies
_MODULE_HOOKS = ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks",
                 "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_backward_pre_hooks", "_state_dict_hooks",
                 "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks")


def _strip_wrapped_prefix(module: JitModule, state_dict: dict, prefix: str, local_metadata: Any) -> None:
    """A state dict's keys under a JitModule as the wrapped module's: `prefix + "_orig_mod."`
    becomes `prefix` (in place, keeping the order)."""
    inner = prefix + "_orig_mod."
    for key in [k for k in state_dict if k.startswith(inner)]:
        state_dict[prefix + key[len(inner):]] = state_dict.pop(key)


def _add_wrapped_prefix(module: JitModule, state_dict: dict, prefix: str, local_metadata: Any, strict: bool,
                        missing_keys: list, unexpected_keys: list, error_msgs: list) -> None:
    """The inverse for loading: the wrapped module's keys under `prefix` move under
    `prefix + "_orig_mod."`, where nn.Module's loader looks for them. Where the load reports
    them (`_report_wrapped_keys`, this load's post-hook) is kept on the module meanwhile."""
    inner = prefix + "_orig_mod."
    for key in [k for k in state_dict if k.startswith(prefix) and not k.startswith(inner)]:
        state_dict[inner + key[len(prefix):]] = state_dict.pop(key)
    module.__dict__["_loading"] = (prefix, error_msgs, len(error_msgs))


def _report_wrapped_keys(module: JitModule, incompatible_keys: Any) -> None:
    """The missing and unexpected keys of a load (`strict=False`'s result, `strict=True`'s
    error) and the errors of its wrapped module's parameters (a size mismatch) under the
    wrapped module's keys, as `state_dict()` gives them: `prefix + "_orig_mod."` becomes
    `prefix` (the keys `_add_wrapped_prefix` moved there). The post-hook of the load whose
    pre-hook ran last: a module's load is not nested in another of its own."""
    loading = module.__dict__.pop("_loading", None)
    if loading is None:
        return
    prefix, error_msgs, first = loading
    inner = prefix + "_orig_mod."
    for keys in (incompatible_keys.missing_keys, incompatible_keys.unexpected_keys):
        keys[:] = [prefix + k[len(inner):] if k.startswith(inner) else k for k in keys]
    # (a key where it starts: not a nested module's own `_orig_mod.`, a torch.compile'd one's)
    at_key = re.compile(r"(?<![\w.])" + re.escape(inner))
    error_msgs[first:] = [at_key.sub(lambda _: prefix, m) for m in error_msgs[first:]]


def _jit_module(module: torch.nn.Module, options: dict) -> JitModule:
    """A pickled or copied JitModule made again (`JitModule.__reduce__`)."""
    return JitModule(module, **options)


def jit(fn: Any = None, *example_inputs: Any, dynamic: "Optional[bool] | str" = "rows", fallback: str = "error",
        **options: Any):
    """Compile `fn` (a function or an nn.Module) with fuser. Usable as `@fuser.jit`,
    `@fuser.jit(fallback="eager")` and `fuser.jit(model)`.

    dynamic: "rows" (default) makes every size other than 0 and 1 symbolic from the first call
      but the last of each floating-point tensor (a row's length: the hidden size, the
      vocabulary), which is symbolic from the first call with another; True makes every size
      symbolic from the first call (Dynamo and AOTAutograd then trace with symbolic row
      lengths: a first call 10-30% longer on the development CPU); None lets Dynamo specialize
      first and generalize on a second shape; False specializes.
    fallback: "error" (default) raises a FusionInputError naming an argument fuser cannot run;
      "eager" warns and runs the original function instead.
    """
    if example_inputs:  # (torch.compile(f, backend=fuser.jit) calls it with a graph and its inputs)
        raise FusionInputError("fuser.jit takes one function or module; as torch.compile's backend, "
                               "pass backend=\"fuser\" (torch.compile(f, backend=\"fuser\")), not fuser.jit")
    if fn is None:
        return lambda f: jit(f, dynamic=dynamic, fallback=fallback, **options)
    if isinstance(fn, (JitFunction, JitModule)):
        return fn
    if isinstance(fn, torch.nn.Module):
        return JitModule(fn, dynamic=dynamic, fallback=fallback, **options)
    if not callable(fn):
        raise FusionInputError(f"fuser.jit expects a function or an nn.Module, got {type(fn).__name__}")
    return JitFunction(fn, dynamic=dynamic, fallback=fallback, **options)


# ---------------------------------------------------------------------------------------------
# dynamic="rows": each row length fixed in the first trace


def _compiling_here() -> bool:
    """Whether this thread is inside a compile: Dynamo tracing the caller (it folds
    `is_dynamo_compiling()` to True), or a trace of another kind (torch.export's non-strict
    one). Not `torch.compiler.is_compiling()` alone: that flag is one global, set while any
    thread's Dynamo compiles a frame, and calls in other threads ran the function eagerly,
    unfused and uncounted, for as long as that compile took. (The global flag first: off, as
    on every call outside a compile, it is the one check; Dynamo folds both flags to True.)"""
    return torch.compiler.is_compiling() and (
        torch.compiler.is_dynamo_compiling() or torch._guards.TracingContext.try_get() is not None)


def _unseen_by_function_modes(check: Callable) -> Callable:
    """`check` (fuser's reads of its arguments: layouts, devices, dims) run with torch functions
    disabled under a user's TorchFunctionMode, which would see them as calls the user's code
    never made."""
    @functools.wraps(check)
    def unseen(*args, **kwargs):
        if torch._C._is_torch_function_mode_enabled():
            with torch._C.DisableTorchFunction():
                return check(*args, **kwargs)
        return check(*args, **kwargs)
    return unseen


@_unseen_by_function_modes
def _fix_row_lengths(args: tuple, kwargs: dict) -> list:
    """Mark each floating-point tensor argument's last size static for Dynamo (the length of
    its rows: a hidden size, a vocabulary), leaving its other sizes symbolic (dynamic=True's
    duck-sized symbols, so that equal sizes stay one symbol). Returns what `_unmark` needs to
    take the marks off the tensors again once the call is done, leaving the caller's tensors
    as they came; a later trace (a new row length: a guard fails) then has them all symbolic."""
    if _compiling_here():  # (inside another compile: its own shapes apply)
        return []
    from torch.utils._pytree import tree_leaves

    leaves = tree_leaves((args, kwargs))
    if any(isinstance(t, torch.Tensor) and getattr(t, "_dynamo_dynamic_indices", None) for t in leaves):
        # the caller marked sizes dynamic (mark_dynamic): traced as dynamic=True traces, with no
        # static row length that Dynamo would find duck-sized with a marked size and refuse
        return []
    marked = []
    for t in leaves:
        if not isinstance(t, torch.Tensor) or t.dim() == 0 or not (t.is_floating_point() or t.is_complex()):
            continue
        # (copies of the sets: mark_static adds to a set the caller's own marks made)
        before = {k: set(v) if isinstance(v, set) else v for k, v in t.__dict__.items()}
        try:
            torch._dynamo.mark_static(t, t.dim() - 1)
        except Exception:  # (a hint: a tensor Dynamo will not mark is traced as dynamic=True would)
            pass
        changed = {k: before.get(k, _ABSENT) for k, v in t.__dict__.items() if _changed(before.get(k, _ABSENT), v)}
        if changed:
            marked.append((t, changed))
    return marked


_ABSENT = object()


def _changed(before: Any, now: Any) -> bool:
    """(A set compared by value: `before` holds a copy of it.)"""
    return before != now if isinstance(now, set) and isinstance(before, set) else before is not now


def _unmark(marked: list) -> None:
    for t, changed in marked:
        for name, value in changed.items():
            if value is _ABSENT:
                t.__dict__.pop(name, None)
            else:
                t.__dict__[name] = value


# ---------------------------------------------------------------------------------------------
# Arguments fuser cannot run


_DEVICES = ("cpu", "cuda")


@_unseen_by_function_modes
def untraceable_argument(fn: Callable, args: tuple, kwargs: dict) -> Optional[str]:
    """A sentence naming the first argument fuser cannot trace or run, or None."""
    if not kwargs and all(type(a) is torch.Tensor and _plain_tensor(a) for a in args):
        return None  # the common case, checked without walking anything
    for name, value in _named_arguments(fn, args, kwargs):
        found = _find_problem(value, name)
        if found is not None:
            return found
    return None


def _named_arguments(fn: Callable, args: tuple, kwargs: dict):
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        bound = inspect.signature(target).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return [(f"argument {k}", a) for k, a in enumerate(args)] + \
            [(f"argument {k!r}", v) for k, v in kwargs.items()]
    out = []
    for name, value in bound.arguments.items():
        kind = bound.signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            out += [(f"{name}[{k}]", v) for k, v in enumerate(value)]
        elif kind is inspect.Parameter.VAR_KEYWORD:
            out += [(f"{name}[{k!r}]", v) for k, v in value.items()]
        else:
            out.append((f"argument {name!r}", value))
    return out


def _find_problem(value: Any, where: str, depth: int = 0) -> Optional[str]:
    if isinstance(value, torch.Tensor):
        why = _tensor_problem(value)
        return None if why is None else f"{where} is {why}, which fuser cannot trace"
    if isinstance(value, (types.GeneratorType, types.CoroutineType)):
        return f"{where} is a {type(value).__name__}, which tracing would consume"
    if depth > 8:
        return None
    if isinstance(value, (list, tuple)):
        for k, v in enumerate(value):
            found = _find_problem(v, f"{where}[{k}]", depth + 1)
            if found:
                return found
    elif isinstance(value, dict):
        for k, v in value.items():
            found = _find_problem(v, f"{where}[{k!r}]", depth + 1)
            if found:
                return found
    return None


def _plain_tensor(t: torch.Tensor) -> bool:
    """A dense tensor on the CPU or a CUDA device (the test of the common case, cheaper than
    `_tensor_problem`)."""
    return t.layout is torch.strided and not t.is_quantized and not t.is_nested and (t.is_cuda or t.is_cpu)


def _tensor_problem(t: torch.Tensor) -> Optional[str]:
    if t.layout is not torch.strided:
        return f"a tensor with layout {t.layout}"
    if t.is_nested:
        return "a nested tensor"
    if t.is_quantized:
        return "a quantized tensor"
    if t.device.type not in _DEVICES:
        return f"a tensor on device {t.device} (fuser runs on cpu and cuda)"
    return None


def _backend_failure(e: Exception) -> Optional[Exception]:
    """The error inside a failed compile by fuser's backend, or None for other errors (the
    user's own, raised as eager PyTorch would)."""
    try:
        from torch._dynamo.exc import BackendCompilerFailed
    except ImportError:  # pragma: no cover
        return None
    if isinstance(e, BackendCompilerFailed):
        return getattr(e, "inner_exception", None) or e
    return None


def _copies(tree: Any) -> Any:
    """`tree` with each tensor copied as it lies in memory, so that a write raises as it
    would on the original: its strides kept (an expanded tensor's elements still one) and
    the memory tensors share still shared (one clone of the span of each storage they use,
    each rebuilt over it at its own offset); a leaf stays a leaf (an in-place write to one
    that requires grad raises as it would), a tensor computed by autograd stays one."""
    from torch.utils._pytree import tree_leaves, tree_map

    sharing: dict = {}
    for t in tree_leaves(tree):
        if _copied_as_laid_out(t):
            sharing.setdefault(_storage_key(t), []).append(t)
    spans = {key: _span_clone(tensors) for key, tensors in sharing.items()}

    def copy(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        if not _copied_as_laid_out(t):
            return t.detach().clone().requires_grad_(t.requires_grad) if t.is_leaf else t.clone()
        start, span = spans[_storage_key(t)]
        offset = t.storage_offset() - start
        if not t.is_leaf:  # (a view of the span cloned from it: autograd's history kept)
            return span.as_strided(t.size(), t.stride(), offset)
        rebuilt = torch.empty(0, dtype=t.dtype, device=t.device)
        return rebuilt.set_(span.untyped_storage(), offset, t.size(), t.stride()).requires_grad_(t.requires_grad)
    return tree_map(copy, tree)


def _copied_as_laid_out(t: Any) -> bool:
    """A tensor `_copies` rebuilds over a clone of its storage: a plain strided one with
    elements (a subclass, or a conjugate or negative view, is cloned as it reads)."""
    return isinstance(t, torch.Tensor) and type(t) in (torch.Tensor, torch.nn.Parameter) \
        and t.layout is torch.strided and t.numel() > 0 and not t.is_conj() and not t.is_neg()


def _storage_key(t: torch.Tensor) -> tuple:
    return t.device, t.dtype, t.untyped_storage().data_ptr()


def _span_clone(tensors: list) -> tuple:
    """(start, a 1-d clone of the elements from `start` on) covering every element of
    `tensors`, which share one storage; cloned through one computed by autograd where there
    is one, so that its copy stays one."""
    start = min(t.storage_offset() for t in tensors)
    end = max(t.storage_offset() + sum((n - 1) * s for n, s in zip(t.size(), t.stride())) + 1 for t in tensors)
    source = next((t for t in tensors if not t.is_leaf), tensors[0])
    flat = source.as_strided((end - start,), (1,), start)
    return start, (flat.detach() if source.is_leaf else flat).clone()


def _random_state_kept(args: tuple, kwargs: dict):
    """torch's random state (the CPU's and that of each GPU the arguments are on) put back on leaving."""
    from torch.utils._pytree import tree_leaves

    devices = sorted({t.device.index or 0 for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)
                      and t.is_cuda})
    return torch.random.fork_rng(devices=devices)


def _op_failed_while_tracing(e: Exception) -> bool:
    """Whether `e` is Dynamo's report of an op that raised on the traced tensors: a
    RuntimeError comes wrapped, in a TorchRuntimeError, or in an InternalTorchDynamoError where
    Dynamo ran the op itself (a custom autograd.Function's forward: `ctx.mark_dirty` of a leaf
    that requires grad), its cause then raised by torch's op code, not Dynamo's; an IndexError
    (`x[7]`, an index past a size) passes through as the fake tensor raised it, its message
    naming symbols (`size s77`; the user's own IndexError, a list's, is raised as it is,
    without running the function again). An IndexError raised while the compiled program runs
    (an ATen op's, a position past the end on the real tensors) is no tracing failure: the
    program's in-place writes before it have run, as eager's have, so that running the
    function again would apply them twice."""
    try:
        from torch._dynamo.exc import InternalTorchDynamoError, TorchRuntimeError
    except ImportError:  # pragma: no cover
        return False
    if isinstance(e, InternalTorchDynamoError):
        wrapped = e.__cause__ or e.__context__  # (Dynamo rewraps it `from None`: the context)
        return isinstance(wrapped, RuntimeError) and not isinstance(wrapped, FuserError) \
            and _raised_in_torch_op(wrapped)
    return isinstance(e, TorchRuntimeError) or (isinstance(e, IndexError) and _raised_while_compiling(e) and (
        _SYMBOL.search(str(e)) is not None or _raised_in_torch_op(e)))


def _raised_while_compiling(e: BaseException) -> bool:
    """Whether `e` was raised while Dynamo compiled a frame (its traceback passes through the
    frame callback, `_WhileCompiling`'s, or Dynamo's own where a torch has none to wrap), not
    while a compiled program ran."""
    tb = e.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code is _WhileCompiling.__call__.__code__ or code.co_filename == _CONVERT_FRAME:
            return True
        tb = tb.tb_next
    return False


def _raised_in_torch_op(e: BaseException) -> bool:
    """Whether `e` was raised by torch's op code (a reference, decomposition or meta function:
    `x.sum(dim=3)`'s dim out of range), not by Dynamo running the user's own code."""
    frames = traceback.extract_tb(e.__traceback__)
    if not frames:
        return False
    torch_dir = os.path.dirname(torch.__file__) + os.sep
    innermost = frames[-1].filename
    return innermost.startswith(torch_dir) and not innermost[len(torch_dir):].startswith("_dynamo")


def _frame_label(code: Any, name: str) -> str:
    """A frame Dynamo compiled for a call, as a user knows it: a resume function (Dynamo's
    `torch_dynamo_resume_in_f_at_20`) as the part after the graph break at its line."""
    resumed = _RESUME.fullmatch(code.co_name)
    if resumed is not None:
        return f"the part of {name} after its graph break at line {resumed.group(1)}"
    return f"{code.co_name} (called by {name})"


_RESUME = re.compile(r"torch_dynamo_resume_in_.*_at_(\d+)")


def _reason(e: BaseException) -> str:
    """The line of Dynamo's or torch's message that says what failed."""
    lines = [line.strip() for line in str(e).split("\n") if line.strip()]
    return next((line[len("Explanation: "):] for line in lines if line.startswith("Explanation: ")),
                lines[0] if lines else type(e).__name__)


def _user_codes(e: BaseException) -> list:
    """The code objects of the frames `e` passed through outside torch and fuser."""
    codes, tb = [], e.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if not code.co_filename.startswith(_NOT_USERS):
            codes.append(code)
        tb = tb.tb_next
    return codes


def _entry_code(frame: Any) -> Any:
    """The code object of the first frame Dynamo compiles for `frame` (a function's, a
    method's, a module's forward); None where there is none to find."""
    target = frame.__func__ if isinstance(frame, types.MethodType) else frame
    if isinstance(target, torch.nn.Module):
        target = type(target).forward
    return getattr(target, "__code__", None)


def _wrote(stats: Stats, direct: bool) -> bool:
    """Whether a graph the failed call ran writes an input in place: one the call through
    Dynamo ran, or on the direct path any of the function's graphs (its call ran some)."""
    ran = stats.records if direct else stats.this_call
    return any(stats.records[k].writes_inputs for k in ran if k in stats.records)


_NOT_AGAIN = ("fuser.jit(fallback=\"eager\") did not run {name} again eagerly: graphs of this call had "
              "already written its inputs in place, and running it again would apply those writes twice. "
              "Later calls run eagerly.")
_NOT_USERS = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(os.path.dirname(__file__)) + os.sep)
_CONVERT_FRAME = os.path.join(os.path.dirname(torch.__file__), "_dynamo", "convert_frame.py")
_CONCRETE_SIZES = "SymIntArrayRef expected to contain only concrete integers"
_STATIC_SIZES_ONLY = "Expected IntList but got GenericList"  # (torch's assert, a symbolic size in an int list)
_SYMBOL = re.compile(r"\b[su]\d+\b")  # a size symbol of Dynamo's (s77), or an unbacked one (u0)
# every jitted callable, for the fork handler: a child forked while another thread held one's
# lock (a DataLoader worker started during a first call) would wait on it for good
_JITTED: "weakref.WeakSet[JitFunction]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for jitted in list(_JITTED):
        jitted._tracing = threading.RLock()
    # Dynamo's own: held by a parent's thread tracing at the fork (that thread is not in the
    # child), a worker's first trace (a DataLoader worker's set_num_threads(1) misses the
    # parent's entries) waited on it for good
    convert_frame = sys.modules.get("torch._dynamo.convert_frame")
    if convert_frame is not None and hasattr(convert_frame, "compile_lock"):
        convert_frame.compile_lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _frame_shared(fn: Any) -> bool:
    """Whether torch.compile would run `fn` through a frame it shares with other callables
    (`wrap_inline`'s): a module of torch's own (nn.LayerNorm), a builtin (torch.exp), a
    function of torch's it puts in its graph whole (F.mish), any callable without code of its
    own (a functools.partial). Dynamo's cache and recompile limit are kept per code object, so
    every such callable jitted in a process shared one budget of 8 traces, and the ninth ran
    eagerly for good."""
    if isinstance(fn, type):  # (a class: torch.compile compiles its __call__ in place)
        return False
    try:
        from torch._dynamo import trace_rules
        if isinstance(fn, torch.nn.Module):
            return bool(trace_rules.check(fn.forward))
        return _wrapped_inline(fn, trace_rules)
    except (ImportError, AttributeError):  # pragma: no cover - another torch's internals
        return False


def _wrapped_inline(fn: Callable, trace_rules: Any) -> bool:
    """torch.compile's own test for a callable it runs through `wrap_inline`'s frame
    (`_TorchDynamoContext.__call__`): one that is not a Python function and has no source file
    (a builtin, a method of Tensor's, a partial, an object with `__call__`), one Dynamo skips, one
    it traces as a single op of its graph (a TorchInGraphFunctionVariable), or one it has a
    polyfill for."""
    from torch._dynamo.variables import TorchInGraphFunctionVariable

    try:
        source_file = inspect.getsourcefile(fn)
    except TypeError:
        source_file = None
    if source_file is None and not inspect.isfunction(fn):
        return True
    rule = trace_rules.lookup(fn)
    in_graph = isinstance(rule, type) and issubclass(rule, TorchInGraphFunctionVariable)
    polyfilled = getattr(trace_rules, "is_polyfilled_callable", None)  # (a torch without polyfills: none)
    return in_graph or bool(trace_rules.check(fn)) or (polyfilled is not None and bool(polyfilled(fn)))


_FRAMES = itertools.count()
_NOT_IN_A_NAME = re.compile(r"\W")  # (a qualified name's dots)


def _own_frame(fn: Any) -> Callable:
    """A frame of `fn`'s own (see `_frame_shared`): a function of a code object of its own that
    calls `fn` with the parameters and defaults (the same objects) of a module's forward or of
    a Python function (F.mish), so that a repeat call takes the direct path (`DirectCall` reads
    the frame's arguments by name), and named as that forward or function: a call Python
    refuses raises eager's TypeError, word for word. A module's frame is a forward bound to it
    that calls the module (its hooks included; `self` counted as in the forward); another
    callable's calls it as a global of the frame's own (Dynamo guards it, as it guarded
    `wrap_inline`'s closure). The others (a builtin, a partial, a bound method: Python words
    their refusals by the callee, a method's `self` counted) and a forward or function with
    *args, **kwargs or keyword-only parameters get `(*args, **kwargs)`, which only Dynamo's
    path takes."""
    module = isinstance(fn, torch.nn.Module)
    called = fn.forward if module else fn
    label = getattr(fn, "__qualname__", None) or type(fn).__name__  # (a module's: its class)
    name = f"fuser_jit_{_NOT_IN_A_NAME.sub('_', label)}_{next(_FRAMES)}"
    bound = ["self"] if module else []
    if module:
        parameters = _positional_parameters(called)
    else:  # (a function's own code: a decorator's (*args, **kwargs), not the signature it copied)
        parameters = _positional_parameters(fn, follow_wrapped=False) if type(fn) is types.FunctionType else None
    if parameters is None:
        listed, passed, defaults = [*bound, "*args", "**kwargs"], ["*args", "**kwargs"], None
    else:
        passed = [p.name for p in parameters]
        listed = [*bound, *passed]
        positional_only = sum(p.kind is inspect.Parameter.POSITIONAL_ONLY for p in parameters)
        if positional_only:
            listed.insert(len(bound) + positional_only, "/")
        defaults = tuple(p.default for p in parameters if p.default is not inspect.Parameter.empty) or None
    source = f"def {name}({', '.join(listed)}):\n    return self({', '.join(passed)})"
    env: dict = {} if module else {"self": fn}
    exec(compile(source, f"<{name}>", "exec"), env)
    frame = env[name]
    frame.__defaults__ = defaults
    frame.__qualname__ = getattr(called, "__qualname__", None) or name
    return types.MethodType(frame, fn) if module else frame


def _positional_parameters(fn: Callable, follow_wrapped: bool = True) -> "Optional[list[inspect.Parameter]]":
    """The parameters of `fn` (a bound forward, a function), all positional (positional-only or
    not); None where it has others (*args, **kwargs, keyword-only), a parameter named `self`
    (the name the frame calls `fn` by), or no signature to read."""
    try:
        parameters = list(inspect.signature(fn, follow_wrapped=follow_wrapped).parameters.values())
    except (TypeError, ValueError):
        return None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind not in positional or p.name == "self" for p in parameters):
        return None
    return parameters


def _name(fn: Any) -> str:
    if isinstance(fn, torch.nn.Module):
        return type(fn).__name__
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
