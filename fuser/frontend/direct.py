"""A repeat call of a jitted function without Dynamo's per-call Python layers.

Every call of a `torch.compile`d function runs Dynamo's wrapper: it installs the frame callback,
patches configuration, checks tracing state, and only then does CPython evaluate the frame,
find a cache entry whose guards pass and run that entry's transformed bytecode. On a small
launch-bound function this costs several times fuser's own work (about 40 us of a 60 us call on
the development CPU).

`DirectCall` remembers the cache entry Dynamo used last for a function and, on the next call,
evaluates that entry's guards itself (the same C++ guard manager Dynamo calls, which covers the
arguments, the globals and closure values the function read, grad mode and the other global
state) and runs the entry's transformed code as a function. Keyword arguments are placed by
name as Python would (Dynamo's guards read the frame's locals, however they were passed).
Anything it cannot vouch for goes through Dynamo as before: a keyword Python would refuse, a
guard that fails, an entry Dynamo invalidated or
replaced, reassigned defaults, transformed code that resumes after a graph break (the resumed frames must be compiled
too), a non-default compiler stance, tracing in progress, or a torch whose internals differ.

The transformed code calls the compiled graph and a few of Dynamo's helpers (reading sizes,
profiler marks) through `torch._dynamo.disable` wrappers, which switch the frame callback off
and on again around each call (a few microseconds each). With no callback installed, which
`__call__` checks, they do nothing else, so the remembered code calls the wrapped functions
themselves, under names of its own.
"""
from __future__ import annotations

import itertools
import types
import weakref
from typing import Any, Callable, Optional

import torch
from torch.nn.modules import module as nn_module

# internals of torch._dynamo, imported with the first DirectCall (importing Dynamo takes most of
# a second, which `import fuser` should not pay); None when this torch lacks them
_entries = _callback = _eval_frame = None
_DISABLE_DYNAMO_CODE = None


def _load_dynamo_internals() -> bool:
    global _entries, _callback, _eval_frame, _DISABLE_DYNAMO_CODE
    if _entries is None:
        try:
            from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list, get_eval_frame_callback
            from torch._dynamo import eval_frame
            from torch._dynamo.utils import call_size

            eval_frame._stance.stance  # noqa: B018 - present since torch 2.6
            _DISABLE_DYNAMO_CODE = call_size.__code__  # the code of torch._disable_dynamo wrappers
            _entries, _callback, _eval_frame = _debug_get_cache_entry_list, get_eval_frame_callback, eval_frame
        except (ImportError, AttributeError):  # pragma: no cover - depends on the torch version
            return False
    return True


MISS = object()  # the call was not made: go through Dynamo

_UTILS_GLOBAL = "__import_torch_dot__dynamo_dot_utils"  # Dynamo's name for torch._dynamo.utils

_CO_VARARGS, _CO_VARKEYWORDS = 0x04, 0x08


def _plain_function(fn: Any) -> bool:
    if type(fn) is not types.FunctionType or not _load_dynamo_internals():
        return False
    code = fn.__code__
    return not (code.co_flags & (_CO_VARARGS | _CO_VARKEYWORDS) or code.co_kwonlyargcount)


def global_module_hooks() -> bool:
    """Whether any global module hook is registered (`register_module_forward_hook` and its
    kin; the forward hooks' kwargs and always-called flags mark entries of the forward dict):
    every module call runs them, its submodules' too."""
    return bool(nn_module._global_forward_hooks or nn_module._global_forward_pre_hooks
                or nn_module._global_backward_hooks or nn_module._global_backward_pre_hooks)


def _hooks_free(module: torch.nn.Module) -> bool:
    """Whether calling `module` runs nothing but its forward: no hooks of its own and no global
    module hooks."""
    return not (module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                or module._backward_pre_hooks or global_module_hooks())


_MODULE_CALLS = tuple((name, getattr(torch.nn.Module, name)) for name in ("__call__", "_wrapped_call_impl", "_call_impl")
                      if hasattr(torch.nn.Module, name))


def _plain_call(module: torch.nn.Module) -> bool:
    """Whether calling `module` goes straight to its forward, as `nn.Module`'s call does: its
    class overrides none of the call's methods (a `__call__` counting steps before
    `super().__call__`), and `module.compile()` has not set a compiled call."""
    cls = type(module)
    return getattr(module, "_compiled_call_impl", None) is None \
        and all(getattr(cls, name) is impl for name, impl in _MODULE_CALLS)


class DirectCall:
    """The last Dynamo cache entry of one plain function (or of an nn.Module's forward, whose
    frame is the one Dynamo compiles for a module, or of a function bound to a module: the
    frame of its own fuser gives one of torch's modules), callable without Dynamo."""

    def __init__(self, fn: Callable):
        # a module: its class's forward, called with the module as `self`, while the module
        # has no hooks (Module.__call__ runs those around forward, outside Dynamo's frame). A
        # function bound to a module (jit.py `_own_frame`) calls the module inside the frame,
        # hooks included, which Dynamo's guards cover; the same checks send such calls through
        # Dynamo all the same (rare calls, and the guards' cover of them is Dynamo's to keep)
        self.module, fn = _module_and_function(fn)
        # (the class forward the module's call runs: a reassigned one is another frame's)
        self.forward = None if self.module is None else type(self.module).forward
        self.usable = _plain_function(fn)
        self.fn = fn
        # (Dynamo's CacheEntry, its guard manager when remembered (Dynamo swaps it to
        # invalidate), the entry's code as a function, the defaults it was made with): one
        # tuple, assigned at once, so that a call in another thread never pairs the guards of
        # one entry with the code of another
        self.remembered: tuple = ()
        self.hits = 0
        if self.usable:
            self._adopt_code()
            # the names this call put in the function's globals: dropped when this object goes
            # (the module's globals would keep each compiled graph alive), not before: another
            # thread may be running a remembered entry's code
            self._prefix = f"__fuser_direct{next(_NUMBERS)}"
            self._installed: list[str] = []
            weakref.finalize(self, _drop_names, fn.__globals__, self._installed)

    def _adopt_code(self) -> None:
        """Reads the function's code: at first, and where it was replaced (`fn.__code__ = ...`,
        as IPython's autoreload replaces an edited function's)."""
        code = self.code = self.fn.__code__
        self.names = code.co_varnames[:code.co_argcount]
        self._all_locals = _locals_of_full_call(self.fn)

    @property
    def entry(self) -> Any:
        """The entry remembered last; None where none is."""
        return self.remembered[0][0] if self.remembered else None

    def __call__(self, args: tuple, kwargs: Optional[dict] = None) -> Any:
        remembered = self.remembered
        if not remembered:
            return MISS
        found = _entries(self.code)
        # reassigned defaults are arguments Dynamo has not seen (and `run` does not have); a
        # replaced code is another function
        defaults = self.fn.__defaults__
        if not found or self.fn.__code__ is not self.code:
            return MISS
        if _callback() not in (None, False) or _eval_frame._stance.stance != "default" \
                or torch._guards.TracingContext.try_get() is not None:
            return MISS
        if self.module is not None:
            module = self.module
            # Module.__call__ calls `module.forward`: an instance attribute (a patched forward)
            # or a reassigned class forward is not the frame whose entry is remembered
            if "forward" in module.__dict__ or type(module).forward is not self.forward or not _plain_call(module):
                return MISS
            if not _hooks_free(module) or torch._C._get_tracing_state() is not None:
                return MISS  # Module.__call__ would run hooks, or trace for torch.jit
            args = (module, *args)
        if kwargs:
            args = self._placed(args, kwargs, defaults or ())
            if args is None:  # (Python's TypeError, raised through Dynamo)
                return MISS
        local = self._locals(args, defaults or ())
        if local is None:
            return MISS
        # the remembered entries still in Dynamo's list, their guards as remembered (Dynamo
        # swaps a guard manager to invalidate it): the first whose guards pass runs, as any
        # entry whose guards pass is one Dynamo could run for these arguments
        for entry, guards, run, entry_defaults in remembered:
            if entry_defaults is defaults and (entry is found[0] or entry in found) \
                    and entry.guard_manager is guards and guards.check(local):
                self.hits += 1
                return run(*args)
        return MISS

    def _placed(self, args: tuple, kwargs: dict, defaults: tuple) -> Optional[tuple]:
        """Every argument by position, the keywords placed by name and the defaults filled in
        between; None for a call Python would refuse (an unknown or repeated keyword, a
        positional-only one, a required argument missing)."""
        names, n = self.names, len(args)
        first_default = len(names) - len(defaults)
        placed, used = list(args), 0
        for k in range(n, len(names)):
            name = names[k]
            if name in kwargs:
                if k < self.code.co_posonlyargcount:
                    return None
                placed.append(kwargs[name])
                used += 1
            elif k >= first_default:
                placed.append(defaults[k - first_default])
            else:
                return None
        return tuple(placed) if used == len(kwargs) else None

    def _locals(self, args: tuple, defaults: tuple) -> Optional[dict]:
        """The frame's locals at entry, as Dynamo's guards read them: the arguments (defaults
        filled in) and the closure's values."""
        n, names = len(args), self.names
        if n == len(names):
            try:
                return self._all_locals(args)
            except ValueError:  # an empty cell
                return None
        if n > len(names) or n < len(names) - len(defaults):
            return None
        local = dict(zip(names, args))
        if n < len(names):
            local.update(zip(names[n:], defaults[len(defaults) - (len(names) - n):]))
        closure = self.fn.__closure__
        if closure:
            try:
                local.update(zip(self.code.co_freevars, (c.cell_contents for c in closure)))
            except ValueError:  # an empty cell
                return None
        return local

    def remember(self, graphs_run: int = 0) -> None:
        """After a call through Dynamo that ran `graphs_run` compiled graphs: remember the
        entry it ran (its list is most recently used first), first among the few remembered
        (calls alternating between two dtypes each take the direct path), unless the
        transformed code resumes in a frame Dynamo must compile, or a frame it calls ran graphs
        of its own (a graph break inside a call that ends the function, `return opt.step()`,
        leaves the call in the transformed code with no resume function: called without
        Dynamo's callback, that frame would run eagerly)."""
        if not self.usable:
            return
        if self.fn.__code__ is not self.code:
            self.remembered = ()
            if not _plain_function(self.fn):
                return
            self._adopt_code()
        try:
            found = _entries(self.code)
            if not found:
                self.remembered = ()
                return
            entry, defaults = found[0], self.fn.__defaults__
            # those still valid: in Dynamo's list, their guards and the defaults as remembered
            kept = tuple(known for known in self.remembered if known[0] in found
                         and known[0].guard_manager is known[1] and known[3] is defaults)
            same = next((known for known in kept if known[0] is entry), None)
            if same is not None:
                self.remembered = (same, *(known for known in kept if known is not same))
                return
            code = entry.code
            own_graphs = sum(name.startswith("__compiled_fn") for name in code.co_names) if code is not None else 0
            if code is None or any(name.startswith("__resume_at") for name in code.co_names) \
                    or code.co_freevars != self.code.co_freevars or graphs_run > own_graphs:
                self.remembered = kept
                return
            code = _without_disable_wrappers(code, self.fn.__globals__, self._prefix, self._installed)
            run = types.FunctionType(code, self.fn.__globals__, self.fn.__name__, defaults, self.fn.__closure__)
            self.remembered = ((entry, entry.guard_manager, run, defaults), *kept)[:_REMEMBERED]
        except (AttributeError, TypeError, ValueError):  # another torch's internals
            self.usable = False
            self.remembered = ()


def _module_and_function(fn: Callable) -> tuple[Optional[torch.nn.Module], Any]:
    """The module a frame is called with as `self` (None for a plain function), and the
    frame's function."""
    if isinstance(fn, torch.nn.Module):
        return fn, type(fn).forward
    if isinstance(fn, types.MethodType) and isinstance(fn.__self__, torch.nn.Module):
        return fn.__self__, fn.__func__
    return None, fn


def _locals_of_full_call(fn: types.FunctionType) -> Callable[[tuple], dict]:
    """`DirectCall._locals` of a call that passes every argument, as one generated dict
    display: the arguments by name, then each closure cell's current contents."""
    code, cells = fn.__code__, fn.__closure__ or ()
    names = code.co_varnames[:code.co_argcount]
    items = [f"{name!r}: args[{k}]" for k, name in enumerate(names)]
    items += [f"{name!r}: cells[{k}].cell_contents" for k, name in enumerate(code.co_freevars)]
    source = f"def all_locals(args):\n    return {{{', '.join(items)}}}"
    env = {"cells": cells}
    exec(compile(source, f"<fuser locals of {fn.__qualname__}>", "exec"), env)
    return env["all_locals"]


def _unwrapped(value: Any) -> Any:
    """The function inside a `torch._dynamo.disable` or `torch._disable_dynamo` wrapper."""
    orig = getattr(value, "_torchdynamo_orig_callable", None)  # torch._dynamo.disable(fn)
    if orig is not None:
        return orig
    code = getattr(value, "__code__", None)
    if code is not None and code is _DISABLE_DYNAMO_CODE and hasattr(value, "__wrapped__"):
        return value.__wrapped__  # torch._disable_dynamo(fn)
    return value


class _UnwrappedUtils:
    """torch._dynamo.utils with its disable-wrapped helpers unwrapped."""

    def __init__(self, module: Any):
        self._module = module

    def __getattr__(self, name: str) -> Any:
        value = _unwrapped(getattr(self._module, name))
        setattr(self, name, value)
        return value


_NUMBERS = itertools.count()
_REMEMBERED = 4  # entries a DirectCall keeps: a miss checks each one's guards before Dynamo's


def _drop_names(globals_: dict, installed: list) -> None:
    """Removes from `globals_` the names a DirectCall installed."""
    for name in installed:
        globals_.pop(name, None)
    installed.clear()


def _without_disable_wrappers(code: types.CodeType, globals_: dict, prefix: str, installed: list) -> types.CodeType:
    """`code` reading the compiled graph and Dynamo's helpers from globals of its own that hold
    them unwrapped (the same objects, minus the wrappers); their names go to `installed`."""
    names = list(code.co_names)
    for k, name in enumerate(names):
        if name.startswith("__compiled_fn") and name in globals_:
            target = _unwrapped(globals_[name])
        elif name == _UTILS_GLOBAL and name in globals_:
            target = _UnwrappedUtils(globals_[name])
        else:
            continue
        alias = f"{prefix}{name}"
        if alias not in globals_:
            installed.append(alias)
        globals_[alias] = target
        names[k] = alias
    return code.replace(co_names=tuple(names))
