"""Compiling kernels side by side in processes of their own.

Kernels compiled side by side in threads (parallel_compile.py) overlap only in part: Triton's
front end, which walks the kernel's Python source (0.1-0.8 s a kernel on the H200 machine), and
much of the rest hold the GIL. On two cores, four compiles in four threads took 0.46 s against
0.55 s one after the other. The compile worker (compile_worker.py) is one Python process that
imports Triton only and forks a child for each compile: the child compiles the kernel into
Triton's disk cache, and the thread that asked then compiles it as before and finds it there (a
cache hit: the binary is read and loaded). One process starts (Python, Triton's imports and a
warm-up compile, once), and each compile costs a fork: compiles run side by side up to
FUSER_COMPILE_WORKERS at once.

What is sent is what Triton would compile: its JIT cache hook (`knobs.runtime.jit_cache_hook`),
called by `JITFunction.run(..., warmup=True)` before it compiles, hands over the launch's
specialization, and answering True makes Triton skip the compile. Nothing a child makes is
trusted beyond Triton's own cache key: a child that fails, dies or times out, a worker that
does not start, or a kernel compiled under another key (the environment changed) leaves the
compile to the asking process, as before.

The worker starts (`start`) when a runtime is first planned for a GPU, a jitted function is
first traced on GPU tensors (Dynamo's tracing then hides its start), or fuser loads its first
GPU kernel. It takes compiles run side by side (`compile_together` with two or more jobs) once
it is ready and while it has a free slot; otherwise they stay in the process (waiting for it
lost: on the H200 machine it started in 0.37-0.58 s, and a definition's first batch of forms,
waiting for it, took 1.6 s at 4096x32768 against 1.1 s in threads). A kernel already in
Triton's disk cache is read here, not sent. Only Triton 3.6, whose hook and specialization format this follows.

On by default with a GPU (FUSER_COMPILE_WORKERS=0: off). Cold first calls on the H200 machine
(2026-12-02, `scripts/compile_time.py`, 8 at once against none, one host): the jit LayerNorm
backward at 4096x32768 3.6 -> 2.3 s, where Dynamo's trace hides the worker's start; the jit
RMSNorm forward at 16384x4096 did not move (1.06 and 1.09 s).

The worker runs in a session of its own and ignores SIGINT (a Ctrl-C or a notebook's interrupt
is for the user's process); a child past its request's deadline is killed and answered for; a
process forked from this one drops its copy of the worker and starts its own if it compiles.
"""
from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

from ..dump import env_int, env_switch
from .background import begin_exit, exiting, stop_at_exit
from .compile_worker import ENV_PREFIXES, in_disk_cache, launch_source, read_frame, write_frame

WORKER = Path(__file__).with_name("compile_worker.py")
REPLY_TIMEOUT_S = 300.0  # a compile that takes longer is left to the process
READY_TIMEOUT_S = 60.0

_lock = threading.Lock()
_pool: Optional["Pool"] = None
_local = threading.local()
_hook_installed = False
_previous_hook = None
# what the workers did: kernels compiled, failures, kernels the process then did not find,
# compile seconds and each compile stage's seconds, summed;
STATS = {"compiled": 0, "failed": 0, "missed": 0, "seconds": 0.0, "stages": {},
         "start_s": 0.0, "in_process": 0}  # the worker's start; compiles kept while it was not ready or busy


def _after_fork_in_child() -> None:
    """A child forked from this process starts a worker of its own if it compiles: it closes
    its copy of the parent's worker's stdin (else the parent's exit would not end that
    worker) and takes a fresh lock (the parent's reader thread may hold this one)."""
    global _lock
    _lock = threading.Lock()
    if _pool is not None:
        _pool.forget_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def worker_count() -> int:
    """FUSER_COMPILE_WORKERS: how many compiles the worker runs at once (0: no worker); by
    default this process's share of the processors (torchrun's LOCAL_WORLD_SIZE processes
    share them), at most 8, and none below 4 (they would only share the process's cores)."""
    local = os.environ.get("LOCAL_WORLD_SIZE", "")
    cpus = _processors() // (int(local) if local.isdigit() and int(local) > 0 else 1)
    return env_int("FUSER_COMPILE_WORKERS", min(8, cpus) if cpus >= 4 else 0, minimum=0)


def _processors() -> int:
    """The processors this process may run on (a container's or a job's share)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def available() -> bool:
    if worker_count() == 0 or not env_switch("FUSER_PARALLEL_COMPILE", True):
        return False
    try:
        import triton
    except ImportError:
        return False
    return triton.__version__.startswith("3.6.")


class Pool:
    """The worker process and the replies of its children, read by a background thread; up
    to `size` requests at once (more are answered BUSY). After it failed, requests get None;
    `compile_first` sends none before it is ready. Either way the asking process compiles."""

    BUSY = {"busy": True}  # request's answer while every slot is taken

    def __init__(self, size: int, env: Optional[dict] = None):
        self.pid = os.getpid()
        if env is None:
            import triton

            env = dict(os.environ)
            # the worker finds this Triton first, whatever the process's path was made of
            home = str(Path(triton.__file__).resolve().parent.parent)
            env["PYTHONPATH"] = os.pathsep.join([home] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        code = ("import sys, runpy\n"
                "if sys.path and sys.path[0] in ('', '.'): sys.path.pop(0)\n"
                f"runpy.run_path({str(WORKER)!r}, run_name='__main__')\n")
        self.spawned = time.perf_counter()
        # a session of its own: a Ctrl-C (or Jupyter's interrupt of the process group) stops
        # the user's work, not the worker
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, close_fds=True, start_new_session=True)
        self.ready = threading.Event()  # set once the worker said it is ready, or failed
        self.alive = True
        self.slots = threading.BoundedSemaphore(max(1, size))
        self._pending: dict[int, list] = {}  # request id -> [event, reply]
        self._ids = itertools.count()
        self._write = threading.Lock()
        threading.Thread(target=self._read_replies, name="fuser-compile-replies", daemon=True).start()

    def _read_replies(self) -> None:
        """The first frame says the worker is ready; then each reply goes to its request. Any
        unreadable frame (or the thread's end) ends the worker's use."""
        fd = self.proc.stdout.fileno()
        try:
            poller = select.poll()  # (select.select refuses descriptors from 1024 on)
            poller.register(fd, select.POLLIN)
            first = read_frame(fd) if poller.poll(READY_TIMEOUT_S * 1000) else None
            if not (isinstance(first, dict) and first.get("ready")):
                return
            with _lock:
                STATS["start_s"] = time.perf_counter() - self.spawned
            self.ready.set()
            while True:
                reply = read_frame(fd)
                if not isinstance(reply, dict):
                    return
                with _lock:
                    box = self._pending.pop(reply.get("id"), None)
                if box is not None:
                    box[1] = reply
                    box[0].set()
        except Exception:  # noqa: BLE001 - a broken stream: no worker from now on
            pass
        finally:
            self._fail()

    def _fail(self) -> None:
        """Not used again: waiting requests get no reply (their compile stays in the process)."""
        self.alive = False
        self.ready.set()
        self.release_waiting()
        self.close()

    def wait_ready(self, timeout: float) -> bool:
        return self.ready.wait(max(0.0, timeout)) and self.alive

    def request(self, payload: dict, slot_wait_s: float = 0.0) -> Optional[dict]:
        """The reply of a child compiling `payload`; BUSY while every slot is taken (after
        `slot_wait_s`: the caller compiles rather than waits longer); None: no worker, or no
        reply in time (the worker kills a child past its deadline and answers for it; the wait
        here allows a few seconds more)."""
        if not self.slots.acquire(timeout=max(0.0, slot_wait_s)):  # (0: does not wait)
            return Pool.BUSY
        try:
            if not self.alive or exiting():
                return None
            box = [threading.Event(), None]
            with _lock:
                request_id = next(self._ids)
                self._pending[request_id] = box
            try:
                with self._write:
                    write_frame(self.proc.stdin, dict(payload, id=request_id, deadline_s=REPLY_TIMEOUT_S))
            except (OSError, ValueError):
                self._fail()
                return None
            if not box[0].wait(REPLY_TIMEOUT_S + 10):
                with _lock:
                    self._pending.pop(request_id, None)
            return box[1]
        finally:
            self.slots.release()

    def release_waiting(self) -> None:
        """The requests waiting for a reply get none (the process exits)."""
        with _lock:
            boxes, self._pending = list(self._pending.values()), {}
        for box in boxes:
            box[0].set()

    def usable(self) -> bool:
        return self.alive

    def close(self) -> None:
        if os.getpid() != self.pid:  # a forked child's copy: the worker is its parent's
            return
        with contextlib.suppress(Exception):
            self.proc.stdin.close()  # the worker ends its children and exits
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=2)
        if self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self.proc.kill()
                self.proc.wait(timeout=2)

    def forget_in_child(self) -> None:
        """In a child forked from this process: close the copy of the worker's stdin (the
        worker sees its end when the parent closes it) and never use this pool."""
        self.alive = False
        with contextlib.suppress(Exception):
            os.close(self.proc.stdin.fileno())


def _close_at_exit(pool: Pool) -> None:
    """The process's exit (registered after background.py's, so run before it): the background
    threads waiting for a reply stop waiting (they compile nothing more, `exiting`), those in a
    compile end it, then the worker goes."""
    begin_exit()
    pool.release_waiting()
    stop_at_exit()
    pool.close()


def start() -> None:
    """Start the worker (once per process, in the background: nothing waits for it here)."""
    if worker_count() > 0:
        _get_pool()


def _get_pool() -> Optional[Pool]:
    global _pool
    if _pool is not None and _pool.pid == os.getpid():
        return _pool if _pool.usable() else None
    if not available():
        return None
    with _lock:
        if _pool is None or _pool.pid != os.getpid():
            try:
                _pool = Pool(worker_count())
            except Exception:  # noqa: BLE001 - no worker: compiles stay in the process
                return None
            atexit.register(_close_at_exit, _pool)
    return _pool if _pool.usable() else None


@contextlib.contextmanager
def side_by_side(patient: bool = False):
    """Within: compiles (`compile_first`) may go to the worker. `patient` (a thread compiling
    ahead in the background, frontend/ahead.py): wait for the worker's start and for a free slot
    (up to PATIENT_S) rather than compile here, where the compile's Python would compete with
    the process's own."""
    before = getattr(_local, "side_by_side", False), getattr(_local, "patient", False)
    _local.side_by_side, _local.patient = True, patient
    try:
        yield
    finally:
        _local.side_by_side, _local.patient = before


PATIENT_S = 10.0


def patient() -> bool:
    """Whether this thread compiles in the background (`side_by_side(patient=True)`)."""
    return getattr(_local, "patient", False)


def compile_first(fn, args: list, kwargs: dict, grid) -> Optional[str]:
    """Have a worker compile what `fn.run(*args, grid=grid, warmup=True, **kwargs)` will (the
    caller then runs it and finds the kernel in Triton's cache; `record_hit` says whether it
    did). The compiled kernel's cache hash, or None: nothing was sent (outside `side_by_side`,
    a kernel not loaded by fuser, no usable worker or none ready, the kernel compiled already)
    or the compile failed there. Never raises."""
    origin = getattr(fn, "fuser_origin", None)
    if origin is None or not getattr(_local, "side_by_side", False):
        return None
    pool = _get_pool()
    if pool is None:
        return None
    waits = patient()
    if not pool.wait_ready(PATIENT_S if waits else 0.0):  # (not ready yet: compiled here, see the module's note)
        with _lock:
            STATS["in_process"] += 1
        return None
    try:
        request = _request(fn, args, kwargs, grid, origin)
    except Exception:  # noqa: BLE001 - Triton compiles it in this process
        return None
    if request is None:
        return None
    reply = pool.request(request, PATIENT_S if waits else 0.0)
    with _lock:
        if reply is Pool.BUSY:
            STATS["in_process"] += 1
            return None
        if reply is None or "error" in reply:
            STATS["failed"] += 1
            return None
        STATS["compiled"] += 1
        STATS["seconds"] += reply["seconds"]
        for name, value in (reply.get("times") or {}).items():
            if name != "hit":
                STATS["stages"][name] = STATS["stages"].get(name, 0.0) + value / 1e6
    return reply["hash"]


def record_hit(sent: Optional[str], compiled) -> None:
    """Count a kernel a worker compiled that the process then compiled under another key."""
    if sent is not None and getattr(compiled, "hash", sent) != sent:
        with _lock:
            STATS["missed"] += 1


def _specialization(fn, args, kwargs, grid):
    """Triton's specialization of this launch, caught by its JIT cache hook instead of
    compiling; None where Triton has the kernel in memory already."""
    _install_hook()
    _local.capturing, _local.captured = fn, None
    try:
        fn.run(*args, grid=grid, warmup=True, **kwargs)
    finally:
        _local.capturing = None
    return _local.captured


def compiled_already(fn, args: list, kwargs: dict, grid) -> bool:
    """Whether Triton has this launch's kernel (a kernel fuser loaded) in memory or in its disk
    cache: a compile of it would be quick. False where that cannot be told. Never raises."""
    origin = getattr(fn, "fuser_origin", None)
    if origin is None:
        return False
    try:
        from triton.runtime import driver

        captured = _specialization(fn, args, kwargs, grid)
        if captured is None:
            return True
        target = driver.active.get_current_target()
        src, options = launch_source(fn, origin[3], captured, target)
        return in_disk_cache(src, options, target)
    except Exception:  # noqa: BLE001 - another Triton: taken as not compiled
        return False


def _request(fn, args, kwargs, grid, origin) -> Optional[dict]:
    """The worker's request for this launch: Triton's specialization, caught by its JIT cache
    hook instead of compiling. None where Triton has the kernel in memory already."""
    from triton import knobs
    from triton.runtime import driver

    captured = _specialization(fn, args, kwargs, grid)
    if captured is None:
        return None
    target = driver.active.get_current_target()
    path, module, name, language, scalars = origin
    src, options = launch_source(fn, language, captured, target)
    if in_disk_cache(src, options, target):  # (a warm process: reading it is quicker here)
        return None
    from .compile import triton_key_now
    return {"path": path, "module": module, "name": name, "language": language, "do_not_specialize": scalars,
            "specialization": captured, "target": (target.backend, target.arch, target.warp_size),
            "cache_dir": knobs.cache.dir, "triton_key": triton_key_now(),
            "env": {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)}}


def _install_hook() -> None:
    """Triton's JIT cache hook, once: it hands this thread's launch to `_request` and skips
    the compile; every other call goes to the hook installed before, if any."""
    global _hook_installed, _previous_hook
    if _hook_installed:
        return
    from triton import knobs

    with _lock:
        if _hook_installed:
            return
        _previous_hook = knobs.runtime.jit_cache_hook

        def hook(**kw):
            target = getattr(_local, "capturing", None)
            info = kw.get("fn")
            if target is not None and getattr(info, "jit_function", None) is target:
                _local.captured = kw["compile"]["specialization_data"]
                return True
            return _previous_hook(**kw) if _previous_hook is not None else None

        knobs.runtime.jit_cache_hook = hook
        _hook_installed = True
