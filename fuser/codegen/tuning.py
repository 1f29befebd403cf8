"""Kernels that compile slowly compile in the background on the GPU while a quicker form runs.

Launch forms. A bucket seen for the first time (autotune.py) compiled all its launch forms side
by side and timed them before its first launch: at 4096x32768 six forms, most of a forward
definition's 0.8-1.0 s first call. Now the first call runs the default form (the heuristics'
pick), which alone compiles then (`TuningLaunch`). From the bucket's second call (of any shape
in it) the other forms compile in background threads (through the compile worker,
compile_pool.py, waiting for a free slot rather than competing with the caller for the GIL),
and the first call after they are done times every form on its own inputs and keeps the
fastest, remembered on disk as before (a form that fails there is passed over; the default's
failure is raised). Until then calls run the default form, whose results may differ from the
chosen form's in rounding (another order of summing) but not in what they compute. A launch
whose bucket another launch of the same kernels has tuned takes that choice at its next call.

Shared-row kernels. A shared-row launch (launches.py `SharedRowLaunch`) whose kernel is neither
in memory nor in Triton's disk cache compiles it in the background from its first call (0.5-1 s)
and runs its two-kernel form meanwhile, in its default forms (`untimed`).

CUDA graphs. Background compiles do not load their kernels onto the GPU (a module load while
another thread captures a graph would spoil the capture): the first launch does, on the
caller's thread. A call made while its stream captures a graph never times, starts no
compile and does not switch from a stand-in: what it captures keeps running what it ran, and a
form a graph captured is kept alive with its workspaces.

`finish_tuning()` starts what waits for a second call and waits for every background compile; a
benchmark calls it, then the function once more (the call that times), before timing.
`FUSER_BACKGROUND_COMPILE=0`: the first call compiles (and times) everything it runs, as before.
A process forked while compiles were under way compiles what it needs at its launches.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from typing import Callable, Optional, Sequence

import torch

from .. import timing
from . import autotune, compile_pool, parallel_compile
from ..dump import env_switch
from .ahead import CompileJobs
from .background import DaemonQueue, set_on_thread
from .wrapper import Wrapper

# targets whose launch forms compile in the background (tests add the interpreter)
BACKGROUND_TARGETS = ("cuda",)

_local = threading.local()  # .untimed: launches prepared now take their default forms


def in_background(target: str) -> bool:
    """Whether kernels on `target` may compile in the background (FUSER_BACKGROUND_COMPILE=0:
    each call compiles what it runs)."""
    return (target in BACKGROUND_TARGETS and parallel_compile.enabled()
            and env_switch("FUSER_BACKGROUND_COMPILE", True))


def untimed():
    """Within (on this thread): launches are prepared in their default form where no choice is
    remembered, nothing timed or compiled for later (a stand-in's, which runs a few calls)."""
    return set_on_thread(_local, "untimed", True)


def timing_forms() -> bool:
    """False within `untimed`."""
    return not getattr(_local, "untimed", False)


def capturing(device: torch.device) -> bool:
    """Whether this thread's current stream on `device` is capturing a CUDA graph."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


class _Batches:
    """The background compile jobs of the process (a DaemonQueue of at most
    max(2, compile_pool.worker_count()) threads), submitted in batches, each batch's event set
    when its jobs are done (or dropped: no thread could start, and the launches that need the
    kernels compile them)."""

    def __init__(self) -> None:
        self.queue = DaemonQueue("fuser-background-compile", self._run,
                                 lambda: max(2, compile_pool.worker_count()), self._dropped)
        self.lock = threading.Lock()  # (of the batches' counts)
        self.events: "weakref.WeakSet[threading.Event]" = weakref.WeakSet()  # of the batches not done

    def submit(self, jobs: Sequence[Callable[[], None]], device: torch.device) -> threading.Event:
        done = threading.Event()
        if not jobs:
            done.set()
            return done
        parallel_compile.start_triton_driver()  # here: its lazy start is not meant for two threads at once
        batch = [len(jobs), done]
        with self.lock:
            self.events.add(done)
        self.queue.put([(job, device, batch) for job in jobs])
        return done

    def _run(self, item: tuple) -> None:
        job, device, batch = item
        try:
            with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext(), \
                    compile_pool.side_by_side(patient=True):
                job()  # (its errors are the launch's that needs the kernel: it compiles it again)
        finally:
            self._finish(batch, 1)

    def _dropped(self, items: list) -> None:
        for _, _, batch in items:
            self._finish(batch, 1)

    def _finish(self, batch: list, jobs: int) -> None:
        with self.lock:
            batch[0] -= jobs
            if batch[0] == 0:
                batch[1].set()
                self.events.discard(batch[1])

    def wait(self, timeout: Optional[float]) -> bool:
        """Until the queue is empty and every batch submitted so far is done (one being
        submitted or dropped on another thread: its event is waited for too)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.queue.wait(timeout):
            return False
        with self.lock:
            events = list(self.events)
        return all(event.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
                   for event in events)

    def forget_in_child(self) -> None:
        """A forked child has none of the threads: its launches compile what they need."""
        self.queue.forget_in_child()
        self.lock = threading.Lock()
        for event in list(self.events):
            event.set()
        self.events = weakref.WeakSet()


_background = _Batches()

# launches whose forms compile from their bucket's second call (or `finish_tuning`), not yet started
_deferred: "weakref.WeakSet[TuningLaunch]" = weakref.WeakSet()
_deferred_lock = threading.Lock()


def _after_fork_in_child() -> None:
    global _deferred_lock
    _deferred_lock = threading.Lock()
    _background.forget_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def compile_in_background(jobs: Sequence[Callable[[], None]], device: torch.device) -> threading.Event:
    """Run the compile jobs (each catches its own errors) in the background threads; the event
    is set when all are done."""
    return _background.submit(jobs, device)


def wait_for_compiles(timeout: Optional[float] = None) -> bool:
    """Wait until every background compile submitted so far is done (or `timeout` seconds);
    whether they are. Starts nothing."""
    return _background.wait(timeout)


def finish_tuning(timeout: Optional[float] = None) -> bool:
    """Compile now the launch forms left to compile from their bucket's second call (one launch
    a bucket), and wait until every kernel compiling in the background is compiled (or
    `timeout` seconds); whether they are. Each launch then times its forms (or leaves its
    stand-in) at its next call."""
    with _deferred_lock:
        waiting = list(_deferred)
    for launch in waiting:
        if launch.bucket.compiled is None:  # (one a bucket: the others compile at their next call)
            launch.start()
    return wait_for_compiles(timeout)


class _Bucket:
    """What the launches of one autotune key (a kernel's forms over a bucket of sizes, each
    launch one exact shape) share before a choice: their calls, and the background compile of
    the launch that started one."""

    __slots__ = ("calls", "compiled")

    def __init__(self) -> None:
        self.calls = 0
        self.compiled: Optional[threading.Event] = None


_buckets: dict[str, _Bucket] = {}


def forget_buckets() -> None:
    """Forget the calls of the buckets not yet tuned, and the launches waiting for a second call
    (tests: each starts afresh)."""
    _buckets.clear()
    with _deferred_lock:
        _deferred.clear()


class TuningLaunch(Wrapper):
    """A launch's forms (the default first), timed against each other at the first call after
    the others compiled in the background; the default runs until then. Those compiles start at
    the second call of the bucket (any launch of its key: shapes that vary from call to call
    share one), or at `finish_tuning`, not the first: a first call is often followed by other
    first calls (a training step's backward, whose kernels compile ahead in the background)
    whose kernels are needed sooner. One launch of a bucket compiles in the background at a
    time; once it is done, another launch of the bucket compiles its own forms at its next call,
    on the caller's thread (mostly found in Triton's memory), and times them then. Called, and
    read by a two-kernel launch (inner_outer._TwoLaunches), as the form it runs."""

    __slots__ = ("forms", "key", "labels", "device", "jobs", "compiled", "chosen", "lock", "bucket", "captured",
                 "__weakref__")

    def __init__(self, forms: list, key: str, labels: list[str], inputs: Sequence[torch.Tensor],
                 device: torch.device):
        self.forms, self.key, self.labels, self.device = forms, key, labels, device
        self.chosen = None
        if len(_buckets) > 1024:  # many keys: start over rather than grow
            _buckets.clear()
        self.bucket = _buckets.setdefault(key, _Bucket())
        self.captured = False  # whether a CUDA graph captured a call (its form must stay alive)
        self.lock = threading.Lock()
        jobs = CompileJobs(load=False)  # (stand-ins for the tensors: nothing is allocated or kept)
        for form in forms[1:]:
            jobs.add(form, inputs, device)
        self.jobs: Optional[list] = jobs.jobs
        self.compiled: Optional[threading.Event] = None
        with _deferred_lock:
            _deferred.add(self)

    def start(self, here: Optional[Sequence[torch.Tensor]] = None) -> None:
        """Start compiling the other forms, once. `here`: the call's inputs, to compile them on
        this thread, with the default form's kernels, done on return (unless another thread
        started them first)."""
        with self.lock:
            jobs, self.jobs = self.jobs, None
            if jobs is None:
                return
            with _deferred_lock:
                _deferred.discard(self)
            if here is None:
                self.compiled = compile_in_background(jobs, self.device)
            else:
                self.compiled = threading.Event()
            if self.bucket.compiled is None:
                self.bucket.compiled = self.compiled
        if here is not None:  # (outside the lock: a compile takes seconds)
            default = CompileJobs()
            default.add(self.forms[0], here, self.device)
            try:
                parallel_compile.compile_together([*default.jobs, *jobs])
            finally:
                self.compiled.set()

    @property
    def inner(self):
        """The form calls run now: the default until the forms are timed, then the fastest."""
        return self.chosen if self.chosen is not None else self.forms[0]

    @property
    def settled(self) -> bool:
        """Whether the form calls run is the one kept (timed and chosen)."""
        return self.chosen is not None

    def __call__(self, inputs: Sequence[torch.Tensor], device, dests=None) -> list[torch.Tensor]:
        if self.chosen is None:
            bucket = self.bucket
            bucket.calls += 1
            if capturing(device):
                self.captured = True
            elif (remembered := autotune.CHOICES.get(self.key)) is not None and 0 <= remembered < len(self.forms):
                with self.lock:  # (another launch of these kernels timed them)
                    self._keep(self.forms[remembered])
            elif self.compiled is None:
                if bucket.compiled is not None and bucket.compiled.is_set():
                    self.start(here=inputs)  # (another shape of the bucket compiled its forms)
                    if self.compiled.is_set():
                        self._choose(inputs, device)
                elif bucket.calls > 1 and bucket.compiled is None:
                    self.start()
            elif self.compiled.is_set():
                self._choose(inputs, device)
        return self.inner(inputs, device, dests)

    def _choose(self, inputs: Sequence[torch.Tensor], device) -> None:
        with self.lock:
            if self.chosen is not None:
                return
            forms = self.forms
            with timing.phase("autotune"):
                best = autotune.fastest(self.key, [lambda f=f: f(inputs, device) for f in forms], device,
                                        labels=self.labels)
            self._keep(forms[best])

    def _keep(self, form) -> None:
        """(Under the lock.) Run `form` from now on."""
        if self.chosen is None:
            self.chosen = form
            if not self.captured:  # (the others' kernels and workspaces go; a graph's stay)
                self.forms = [form]
            if _buckets.get(self.key) is self.bucket:  # (its launches to come take the choice)
                del _buckets[self.key]

    def direct_lines(self, *args, **kwargs) -> Optional[list[str]]:
        """The chosen form's inline lines (a ready call made once settled); none before."""
        return None if self.chosen is None else self.chosen.direct_lines(*args, **kwargs)

    @property
    def source(self) -> str:
        return self.inner.source

    @property
    def compiles(self) -> int:
        return self.inner.compiles
