"""Compiling kernels side by side in worker processes.

Kernels compiled side by side in threads (parallel_compile.py) overlap only in part: Triton's
front end, which walks the kernel's Python source (0.1-0.8 s a kernel on the H200 machine), and
much of the rest hold the GIL. On two cores, four compiles in four threads took 0.46 s against
0.55 s one after the other. A worker (compile_worker.py) is a Python process that imports
Triton only; it compiles a kernel into Triton's disk cache, and the thread that asked then
compiles it as before and finds it there (a cache hit: the binary is read and loaded).

What is sent is what Triton would compile: its JIT cache hook (`knobs.runtime.jit_cache_hook`),
called by `JITFunction.run(..., warmup=True)` before it compiles, hands over the launch's
specialization, and answering True makes Triton skip the compile. Nothing a worker makes is
trusted beyond Triton's own cache key: a worker that fails, dies, times out or compiled under
another key (the environment changed) leaves the compile to the asking process, as before.

Workers start (`start`) when a runtime is first planned for a GPU, a jitted function is first
traced on GPU tensors (Dynamo's tracing then hides their start), or fuser loads its first GPU
kernel. They take compiles run side by side (`compile_together` with two or more jobs) once one
of them is ready; until then those stay in the process. A kernel already in Triton's disk cache
is read here, not sent. Only Triton 3.6, whose hook and specialization format this follows.

Off unless `FUSER_COMPILE_WORKERS` names their number. On the H200 machine (2026-12-02,
`scripts/compile_time.py`, cold first calls, eight workers against none) they took the jit
LayerNorm backward at 4096x32768 from 4078 to 2686 ms, whose forward times eight forms after
Dynamo has traced; but starting eight Pythons that import Triton slowed the process's own work
while they started: Dynamo's trace 803 -> 1193 ms, the definitions' cold first calls 293-411 ->
423-480 ms at 16384x4096, warm first calls +30-50 ms.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import queue
import select
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

from .compile_worker import ENV_PREFIXES, in_disk_cache, launch_source, write_frame

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
         "start_s": 0.0, "in_process": 0}  # the slowest worker's start; compiles kept while none was ready


def worker_count() -> int:
    """FUSER_COMPILE_WORKERS, default 0: off (see the module's note on the H200 machine)."""
    asked = os.environ.get("FUSER_COMPILE_WORKERS", "")
    return int(asked) if asked.isdigit() else 0


def available() -> bool:
    if worker_count() == 0 or os.environ.get("FUSER_PARALLEL_COMPILE", "1") == "0":
        return False
    try:
        import triton
    except ImportError:
        return False
    return triton.__version__.startswith("3.6.")


class _Worker:
    def __init__(self, env: dict):
        code = ("import sys, runpy\n"
                "if sys.path and sys.path[0] in ('', '.'): sys.path.pop(0)\n"
                f"runpy.run_path({str(WORKER)!r}, run_name='__main__')\n")
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, close_fds=True)
        self.ready: Optional[bool] = None
        self.spawned = time.perf_counter()

    def _read(self, timeout: float):
        """One reply frame, or None (closed, timed out)."""
        fd = self.proc.stdout.fileno()
        chunks, need, header = [], 4, None
        deadline = time.monotonic() + timeout
        while need:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, need)
            if not chunk:
                return None
            chunks.append(chunk)
            need -= len(chunk)
            if not need and header is None:
                (need,) = struct.unpack("<I", b"".join(chunks))
                header, chunks = need, []
        return pickle.loads(b"".join(chunks))

    def wait_ready(self) -> bool:
        if self.ready is None:
            reply = self._read(READY_TIMEOUT_S)
            self.ready = bool(reply and reply.get("ready"))
            with _lock:
                STATS["start_s"] = max(STATS["start_s"], time.perf_counter() - self.spawned)
        return self.ready

    def request(self, payload: dict) -> Optional[dict]:
        if not self.wait_ready():
            return None
        try:
            write_frame(self.proc.stdin, payload)
        except OSError:
            self.ready = False
            return None
        reply = self._read(REPLY_TIMEOUT_S)
        if reply is None:  # died or hung: not used again
            self.ready = False
            self.close()
        return reply

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.stdin.close()
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=2)
        if self.proc.poll() is None:
            self.proc.kill()


class Pool:
    """Workers started by a background thread, each handed out once it has said it is ready.
    Until the first one is, compiles stay in the asking process: a worker takes a few hundred
    milliseconds to start (Python and Triton's imports), about one compile's time, so the first
    launch of a process gains nothing by waiting for it."""

    def __init__(self, size: int):
        import triton

        self.pid = os.getpid()
        env = dict(os.environ)
        # the worker finds this Triton first, whatever the process's path was made of
        home = str(Path(triton.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join([home] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        self.size = size
        self.workers: list[_Worker] = []
        self.idle: queue.Queue = queue.Queue()
        self.any_ready = threading.Event()
        self.started = False  # every worker ready or given up
        threading.Thread(target=self._start, args=(env,), name="fuser-compile-workers", daemon=True).start()

    def _start(self, env: dict) -> None:
        for _ in range(self.size):
            try:
                self.workers.append(_Worker(env))
            except Exception:  # noqa: BLE001 - fewer workers (none: compiles stay in the process)
                break
        waiting = list(self.workers)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while waiting and time.monotonic() < deadline:
            readable = select.select([w.proc.stdout.fileno() for w in waiting], [], [], 0.5)[0]
            for w in [w for w in waiting if w.proc.stdout.fileno() in readable]:
                waiting.remove(w)
                if w.wait_ready():  # (its ready frame is there to read)
                    self.idle.put(w)
                    self.any_ready.set()
        for w in waiting:  # never said it was ready
            w.ready = False
            w.close()
        self.started = True

    def acquire(self) -> Optional[_Worker]:
        """An idle ready worker, waiting while the ready ones are busy; None while none has
        started (the caller compiles it itself) or once none is usable."""
        while True:
            if not self.any_ready.is_set():
                return None
            try:
                return self.idle.get(timeout=0.2)
            except queue.Empty:
                if not self.usable():
                    return None

    def release(self, w: _Worker) -> None:
        if w.ready is not False:  # a dead worker is not handed out again
            self.idle.put(w)

    def usable(self) -> bool:
        return not self.started or any(w.ready is not False for w in self.workers)

    def close(self) -> None:
        if os.getpid() != self.pid:  # a forked child's copy: the workers are its parent's
            return
        for w in self.workers:
            w.close()


def start() -> None:
    """Start the workers (once per process, in the background: nothing waits for them here)."""
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
            except Exception:  # noqa: BLE001 - no workers: compiles stay in the process
                return None
            atexit.register(_pool.close)
    return _pool if _pool.usable() else None


@contextlib.contextmanager
def side_by_side():
    """Within: compiles (`compile_first`) may go to a worker."""
    before = getattr(_local, "side_by_side", False)
    _local.side_by_side = True
    try:
        yield
    finally:
        _local.side_by_side = before


def compile_first(fn, args: list, kwargs: dict, grid) -> Optional[str]:
    """Have a worker compile what `fn.run(*args, grid=grid, warmup=True, **kwargs)` will (the
    caller then runs it and finds the kernel in Triton's cache; `record_hit` says whether it
    did). The compiled kernel's cache hash, or None: nothing was sent (outside `side_by_side`,
    a kernel not loaded by fuser, no usable pool, the kernel compiled already) or the worker
    failed. Never raises."""
    origin = getattr(fn, "fuser_origin", None)
    if origin is None or not getattr(_local, "side_by_side", False):
        return None
    pool = _get_pool()
    if pool is None:
        return None
    try:
        request = _request(fn, args, kwargs, grid, origin)
    except Exception:  # noqa: BLE001 - Triton compiles it in this process
        return None
    if request is None:
        return None
    w = pool.acquire()
    if w is None:
        with _lock:
            STATS["in_process"] += 1
        return None
    try:
        reply = w.request(request)
    finally:
        pool.release(w)
    with _lock:
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


def _request(fn, args, kwargs, grid, origin) -> Optional[dict]:
    """The worker's request for this launch: Triton's specialization, caught by its JIT cache
    hook instead of compiling. None where Triton has the kernel in memory already."""
    from triton import knobs
    from triton.runtime import driver

    _install_hook()
    _local.capturing, _local.captured = fn, None
    try:
        fn.run(*args, grid=grid, warmup=True, **kwargs)
    finally:
        _local.capturing = None
    captured = _local.captured
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
