"""Compiling the kernels of one launch side by side at its first call.

A launch of several kernels (a split reduction's partial and combine kernels, a norm backward's
row pass and combine) compiles each at its first launch, one after the other: Triton's passes,
ptxas, and the C compiler that builds each signature's launcher, 0.5-0.7 s a kernel cold on the
H200 machine. Before the first launch every kernel's arguments exist (outputs and workspaces
are allocated first), so each kernel can be compiled ahead, in threads: ptxas and the C
compiler run as subprocesses and Triton's passes run in C++. The launches that follow find
the kernels compiled. A compile that fails here is left to the launch, which reports it as
it always did. `FUSER_PARALLEL_COMPILE=0` turns this off; `FUSER_COMPILE_THREADS` sets the
number of threads (default: the processor count, at most 8).

A runtime's first call compiles the kernels of all its launches the same way, before the first
of them runs (`FusionRuntime.compile_ahead`). Within one launch of two parts (inner_outer.TwoKernels)
the second part's preparation may compile and time its forms (codegen/autotune.py) before the first
part's kernel has compiled: `joined_by` lets that kernel join the forms' batch (where the forms
are timed at the first call: without a GPU's background compiles, codegen/tuning.py).
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import os
import threading
from typing import Callable, Iterator, Optional, Sequence

from . import compile_pool
from ..dump import env_int, env_switch
from .background import set_on_thread

_pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
_lock = threading.Lock()
_joining = threading.local()  # .make: the jobs maker of the innermost `joined_by` block, until used


def _after_fork_in_child() -> None:
    """A forked child has the parent's pool object but not its threads: it starts its own."""
    global _pool, _lock
    _pool, _lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def enabled() -> bool:
    return env_switch("FUSER_PARALLEL_COMPILE", True)


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(_workers(), thread_name_prefix="fuser-compile")
        return _pool


def _workers() -> int:
    """FUSER_COMPILE_THREADS where it is a positive number, else the processor count, at most 8."""
    return env_int("FUSER_COMPILE_THREADS", max(2, min(8, os.cpu_count() or 2)))


@contextlib.contextmanager
def joined_by(make_jobs: Optional[Callable[[], Sequence[Callable[[], None]]]]) -> Iterator[None]:
    """Within the block, the first `compile_together` on this thread also runs the jobs that
    `make_jobs()` returns, made only then. A kernel that would compile alone at its first launch
    (a two-part launch's first part) so compiles beside the forms an autotuner compiles before
    timing them. Jobs no batch took are not made (their kernels compile as they would have).
    None: no jobs of its own (an enclosing block's still join)."""
    if make_jobs is None:
        yield
        return
    with set_on_thread(_joining, "make", make_jobs):
        yield


def compile_together(jobs: Sequence[Callable[[], None]]) -> None:
    """Run the compile jobs (each catches its own errors) side by side, with those of an
    enclosing `joined_by` block not yet run; return when all are done. Fewer than two jobs run
    here, in order."""
    make = getattr(_joining, "make", None)
    if make is not None:
        _joining.make = None
        try:
            jobs = [*jobs, *make()]
        except Exception:  # noqa: BLE001 - (allocating their tensors) left to the launch, which meets it
            pass
    if len(jobs) < 2 or not enabled():
        for job in jobs:
            job()
        return
    start_triton_driver()  # here: its lazy start is not meant to run in two threads at once
    patient = compile_pool.patient()  # (the caller compiles in the background: so do the jobs)
    for future in [_executor().submit(_side_by_side, job, patient) for job in jobs]:
        future.result()


def _side_by_side(job: Callable[[], None], patient: bool) -> None:
    with compile_pool.side_by_side(patient):  # its Triton compile may go to the worker
        job()


def start_triton_driver() -> None:
    try:
        from triton.runtime import driver

        driver.active.get_current_device()
    except Exception:  # noqa: BLE001 - another Triton, or no GPU: a compile starts it itself
        pass
