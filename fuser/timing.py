"""Phase timer for compile-time measurements (scripts/compile_time.py).

Off unless `FUSER_PHASE_TIMES=1` is set (or `enable()` is called): then `phase(name)` costs one
global read and returns a shared no-op context. When on, each phase accumulates its *own* time:
entering a nested phase pauses the enclosing one, so the phases of one call add up to its wall
time and nothing is counted twice. Wrap a whole call in an outer phase ("other") to get what
no inner phase covers.

Only for the compile path (definition, passes, segmentation, code generation, kernel loading,
first launch), never for the per-call hot path. The totals are process-wide, each thread's
phases nested apart; threads that compile in the background (frontend/ahead.py) time nothing
(`quiet`), so that the phases of a call add up to no more than its time.
"""
from __future__ import annotations

import contextlib
import threading
import time

from .dump import env_switch

_enabled = env_switch("FUSER_PHASE_TIMES", False)
_totals: dict[str, float] = {}
_counts: dict[str, int] = {}
_local = threading.local()  # .stack: the thread's open phases, innermost last
_OFF = contextlib.nullcontext()


class _Phase:
    __slots__ = ("name", "start")

    def __init__(self, name: str):
        self.name = name
        self.start = 0.0

    def __enter__(self) -> "_Phase":
        now = time.perf_counter()
        stack = _thread_stack()
        if stack:
            outer = stack[-1]
            _totals[outer.name] = _totals.get(outer.name, 0.0) + now - outer.start
        self.start = now
        stack.append(self)
        return self

    def __exit__(self, *exc) -> None:
        now = time.perf_counter()
        stack = _thread_stack()
        stack.pop()
        _totals[self.name] = _totals.get(self.name, 0.0) + now - self.start
        _counts[self.name] = _counts.get(self.name, 0) + 1
        if stack:
            stack[-1].start = now


def _thread_stack() -> list:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def phase(name: str):
    """`with phase("codegen"): ...` adds the block's own time to the phase `name`."""
    return _Phase(name) if _enabled and not getattr(_local, "quiet", False) else _OFF


def quiet() -> None:
    """This thread's phases are not timed from now on (a background thread's)."""
    _local.quiet = True


def enable(on: bool = True) -> None:
    global _enabled
    _enabled = on


def enabled() -> bool:
    return _enabled


def reset() -> None:
    _totals.clear()
    _counts.clear()


def totals() -> dict[str, float]:
    """Seconds of own time per phase since the last reset."""
    return dict(_totals)


def counts() -> dict[str, int]:
    """How many times each phase was entered since the last reset."""
    return dict(_counts)
