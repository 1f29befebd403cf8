"""Compile jobs recorded on Triton's interpreter, which compiles nothing: a step that remembers
what it was asked to compile and what it launched (the `recorded` fixture, tests/conftest.py),
for the tests of compiling ahead (tests/runtime/test_compile_ahead*.py,
tests/frontend/test_jit_compile_ahead.py)."""
import os
import threading

import torch

from fuser.codegen import launch, steps
from fuser.runtime import ahead

events: list = []


class RecordingStep(steps._DirectStep):
    """A _DirectStep on the interpreter: `precompile` records its arguments, a launch runs
    through Triton's interpreter and records its real ones."""

    def precompile(self, args, load=True):
        events.append(("compile", self.fn, args))

    def __call__(self, args):
        events.append(("launch", self.fn, args))
        self.launch(*args, **self.kwargs)


class Gate:
    """Holds the compiles of the recording step (`hold(monkeypatch)`) until opened: `inside` is
    set once one is held. `only_pid`: hold only in that process (a forked child compiles)."""

    def __init__(self, only_pid=None):
        self.opened, self.inside, self.only_pid = threading.Event(), threading.Event(), only_pid

    def hold(self, monkeypatch) -> "Gate":
        gate = self

        class HeldStep(RecordingStep):
            def precompile(self, args, load=True):
                if gate.only_pid is None or os.getpid() == gate.only_pid:
                    gate.inside.set()
                    gate.opened.wait(30)
                super().precompile(args, load)
        monkeypatch.setattr(launch, "_Step", HeldStep)
        return self

    def open(self) -> None:
        self.opened.set()


def record(monkeypatch):
    """The `recorded` fixture's body: the interpreter made a compile-ahead target, its steps
    recording; yields the list of events ("compile" or "launch", kernel, arguments)."""
    events.clear()
    monkeypatch.setattr(ahead, "COMPILE_AHEAD_TARGETS", ("interpreter",))
    monkeypatch.setattr(launch, "_Step", RecordingStep)
    monkeypatch.setenv("FUSER_PARALLEL_COMPILE", "1")
    yield events
    events.clear()


def same_argument(planned, real) -> bool:
    if isinstance(real, torch.Tensor):
        return (isinstance(planned, steps.StandIn) and planned.dtype == real.dtype
                and planned.data_ptr() % 16 == real.data_ptr() % 16)
    return type(planned) is type(real) and planned == real


def launched_were_compiled(recorded: list, compiles: list) -> int:
    """Checks that each launch in `recorded` was among `compiles` with the same arguments;
    returns the number of launches."""
    launches = [e for e in recorded if e[0] == "launch"]
    assert launches
    for _, fn, args in launches:
        planned = [a for kind, f, a in compiles if f is fn]
        assert any(len(p) == len(args) and all(map(same_argument, p, args)) for p in planned), fn
    return len(launches)


def no_threads(monkeypatch) -> None:
    """No thread can be started for the background queues (codegen/background.py), as in a
    process that has none to spare."""
    from fuser.codegen.background import DaemonQueue

    def refuse(queue):
        raise RuntimeError("can't start new thread")
    monkeypatch.setattr(DaemonQueue, "_start_thread", refuse)


def passes_in_forked_child(check, alarm_s: int = 60) -> bool:
    """Whether `check()` returns true in a child forked now (an alarm ends a child that hangs;
    the child exits without running the parent's exit handlers)."""
    import signal

    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.alarm(alarm_s)
            code = 0 if check() else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
