"""Kernels that compile slowly compile in the background on the GPU while a quicker form runs.

Launch forms. A bucket seen for the first time (autotune.py) compiled all its launch forms side
by side and timed them before its first launch: at 4096x32768 six forms, most of a forward
definition's 0.8-1.0 s first call. Now the first call runs the default form (the heuristics'
pick), which alone compiles then (`TuningLaunch`). From the second call the other forms compile
in background threads (through the compile worker, compile_pool.py, waiting for a free slot
rather than competing with the caller for the GIL), and the first call after they are done
times every form on its own inputs and keeps the fastest, remembered on disk as before. Until
then calls run the default form, whose results may differ from the chosen form's in rounding
(another order of summing) but not in what they compute.

Shared-row kernels. A shared-row launch (launch.py `_SharedRowLaunch`) whose kernel is neither
in memory nor in Triton's disk cache compiles it in the background from its first call (0.5-1 s)
and runs its two-kernel form meanwhile, in its default forms (`untimed`).

`finish_tuning()` starts what waits for a second call and waits for every background compile; a
benchmark calls it, then the function once more (the call that times), before timing. A call
made while a CUDA graph is captured never times: the form running then stays until a call
outside capture. `FUSER_BACKGROUND_COMPILE=0`: the first call compiles (and times) everything it
runs, as before.
"""
from __future__ import annotations

import contextlib
import os
import threading
import weakref
from typing import Callable, Optional, Sequence

import torch

from .. import timing
from . import autotune, compile_pool, parallel_compile
from .ahead import CompileJobs

# targets whose launch forms compile in the background (tests add the interpreter)
BACKGROUND_TARGETS = ("cuda",)

_batches = threading.Condition()
_running = [0]  # background batches not finished
_local = threading.local()  # .untimed: launches prepared now take their default forms


def in_background(target: str) -> bool:
    """Whether a launch's forms on `target` compile in the background (FUSER_BACKGROUND_COMPILE=0:
    at its first call, before it is timed)."""
    return (target in BACKGROUND_TARGETS and parallel_compile.enabled()
            and os.environ.get("FUSER_BACKGROUND_COMPILE", "1") != "0")


@contextlib.contextmanager
def untimed():
    """Within (on this thread): launches are prepared in their default form where no choice is
    remembered, nothing timed or compiled for later (a stand-in's, which runs a few calls)."""
    before = getattr(_local, "untimed", False)
    _local.untimed = True
    try:
        yield
    finally:
        _local.untimed = before


def timing_forms() -> bool:
    """False within `untimed`."""
    return not getattr(_local, "untimed", False)


def finish_tuning(timeout: Optional[float] = None) -> bool:
    """Compile now the launch forms left to compile from a launch's second call, and wait until
    every kernel compiling in the background is compiled (or `timeout` seconds); whether they
    are. Each launch then times its forms at its next call."""
    with _batches:
        waiting = list(_deferred)
    for launch in waiting:
        launch.start()
    with _batches:
        return _batches.wait_for(lambda: _running[0] == 0, timeout)


def _after_fork_in_child() -> None:
    global _batches
    _batches = threading.Condition()  # (the parent's threads are not in the child)
    _running[0] = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def compile_in_background(jobs: Sequence[Callable[[], None]], device: torch.device) -> threading.Event:
    """Run the compile jobs (each catches its own errors) side by side in daemon threads; the
    event is set when all are done."""
    done = threading.Event()
    if not jobs:
        done.set()
        return done
    parallel_compile.start_triton_driver()  # here: its lazy start is not meant for two threads at once
    with _batches:
        _running[0] += 1
    left = [len(jobs)]
    lock = threading.Lock()

    def run(job: Callable[[], None]) -> None:
        timing.quiet()
        try:
            with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext(), \
                    compile_pool.side_by_side(patient=True):
                job()
        except Exception:  # noqa: BLE001 - the launch that needs the kernel compiles it and reports
            pass
        finally:
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                done.set()
                with _batches:
                    _running[0] -= 1
                    _batches.notify_all()

    for job in jobs:
        threading.Thread(target=run, args=(job,), name="fuser-tuning", daemon=True).start()
    return done


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


# launches whose forms compile from their second call (or `finish_tuning`), not yet started
_deferred: "weakref.WeakSet[TuningLaunch]" = weakref.WeakSet()


class TuningLaunch:
    """A bucket's launch forms (the default first), timed against each other at the first call
    after the others compiled in the background; the default runs until then. Those compiles
    start at the second call (or at `finish_tuning`), not the first: a first call is often
    followed by other first calls (a training step's backward, whose kernels compile ahead in
    the background) whose kernels are needed sooner. Called, and read by a two-kernel launch
    (inner_outer._TwoLaunches), as the form it runs."""

    __slots__ = ("forms", "key", "labels", "device", "jobs", "compiled", "chosen", "lock", "calls", "__weakref__")

    def __init__(self, forms: list, key: str, labels: list[str], inputs: Sequence[torch.Tensor],
                 device: torch.device):
        self.forms, self.key, self.labels, self.device = forms, key, labels, device
        self.chosen = None
        self.calls = 0
        self.lock = threading.Lock()
        jobs = CompileJobs()  # (stand-ins for the tensors: nothing is allocated or kept)
        for form in forms[1:]:
            jobs.add(form, inputs, device)
        self.jobs: Optional[list] = jobs.jobs
        self.compiled: Optional[threading.Event] = None
        with _batches:
            _deferred.add(self)

    def start(self) -> None:
        """Start compiling the other forms, once."""
        with self.lock:
            jobs, self.jobs = self.jobs, None
            if jobs is not None:
                self.compiled = compile_in_background(jobs, self.device)
                with _batches:
                    _deferred.discard(self)

    @property
    def running(self):
        """The form calls run now: the default until the forms are timed, then the fastest."""
        return self.chosen if self.chosen is not None else self.forms[0]

    def __call__(self, inputs: Sequence[torch.Tensor], device, dests=None) -> list[torch.Tensor]:
        if self.chosen is None:
            self.calls += 1
            if self.compiled is None:
                if self.calls > 1:
                    self.start()
            elif self.compiled.is_set() and not _capturing(device):
                self._choose(inputs, device)
        return self.running(inputs, device, dests)

    def _choose(self, inputs: Sequence[torch.Tensor], device) -> None:
        with self.lock:
            if self.chosen is not None:
                return
            forms = self.forms
            with timing.phase("autotune"):
                best = autotune.fastest(self.key, [lambda f=f: f(inputs, device) for f in forms], device,
                                        labels=self.labels)
            self.chosen = forms[best]
            self.forms = [self.chosen]  # (the others' kernels and workspaces go)

    @property
    def settled(self) -> bool:
        """Whether the form calls run is the one kept (timed and chosen)."""
        return self.chosen is not None

    def direct_lines(self, *args, **kwargs) -> Optional[list[str]]:
        """The chosen form's inline lines (a ready call made once settled); none before."""
        return None if self.chosen is None else self.chosen.direct_lines(*args, **kwargs)

    @property
    def source(self) -> str:
        return self.running.source

    @property
    def compiles(self) -> int:
        return self.running.compiles

    @property
    def cold(self) -> bool:
        return self.running.cold

    @property
    def steps(self) -> list:
        return self.running.steps

    @property
    def out_specs(self) -> list:
        return self.running.out_specs

    @property
    def workspaces(self):
        return self.running.workspaces

    @property
    def semaphores(self):
        return self.running.semaphores

    def jobs_for(self, inputs, device) -> list[Callable[[], None]]:
        return self.running.jobs_for(inputs, device)

    def tensors_for(self, inputs, device, dests=None) -> tuple[list, list]:
        return self.running.tensors_for(inputs, device, dests)

    def compile_jobs(self, tensors: list) -> list[Callable[[], None]]:
        return self.running.compile_jobs(tensors)
