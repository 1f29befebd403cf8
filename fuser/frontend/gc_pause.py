"""Python's cyclic garbage collector paused while fuser compiles.

A first call through Dynamo, AOTAutograd and fuser's planning makes many objects (fake tensors,
FX nodes, sympy expressions) while the process already holds many (torch's modules, a model),
so the collector runs often, and its full passes walk all of them: about 900 passes, 0.8 s of a
16-layer model's first forward and backward on the development CPU. Paused for the compile,
the garbage waits for one pass after it: that first forward and backward took 3.62-3.65 s
before, 3.34-3.38 s after (the train_block model 2.88-2.89 -> 2.68-2.70 s), peak memory 9 MB
higher.

The collector's switch is process-wide: calls in several threads overlap, and it comes back on
when the last of them leaves, and only if it was on when the first came in (`Overlapped`, which
fuser.jit's Dynamo settings use too).
"""
from __future__ import annotations

import gc
import os
import threading
import weakref

_SETTINGS: "weakref.WeakSet[Overlapped]" = weakref.WeakSet()  # for the fork handler below


class Overlapped:
    """A process-wide setting held for calls that may overlap in several threads: set when the
    first enters, put back when the last leaves (a plain set-and-restore per call would put
    back another call's value, or leave the setting changed)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        _SETTINGS.add(self)

    def set(self) -> None:
        raise NotImplementedError

    def put_back(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> None:
        with self.lock:
            if self.depth == 0:
                self.set()
            self.depth += 1

    def __exit__(self, *exc) -> None:
        with self.lock:
            if self.depth == 0:  # (entered before a fork, whose child put the setting back)
                return
            self.depth -= 1
            if self.depth == 0:
                self.put_back()


class GcPause(Overlapped):
    def set(self) -> None:
        self.was_enabled = gc.isenabled()
        gc.disable()

    def put_back(self) -> None:
        if self.was_enabled:
            gc.enable()


GC_PAUSE = GcPause()


def _after_fork_in_child() -> None:
    """A process forked while calls held a setting (a DataLoader worker started while another
    thread compiles): those calls are in threads the child does not have, and would never
    leave it, so the child puts each setting back (its collector stayed off for good)."""
    for setting in list(_SETTINGS):
        setting.lock = threading.Lock()
        if setting.depth:
            setting.depth = 0
            setting.put_back()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
