"""A queue of work that daemon threads take in order: the process's background compiles (launch
forms and stand-ins, codegen/tuning.py; a jitted graph's fusions compiled ahead,
frontend/ahead.py). Each user keeps its own queue and its own thread limit. Also the flags a
thread sets for the work it does within a block (`set_on_thread`).

The process's exit. Python ends daemon threads where they next take the GIL once it
finalizes; one inside Triton's C++ passes (which run without the GIL) is then unwound through
C++ frames that do not let it pass, and the process aborts ("terminate called ... FATAL:
exception not rethrown", status 134): a script that ended while a launch's other forms were
compiling did. So at exit (`stop_at_exit`, before the compile worker closes) the queues take no
more items, work that checks `exiting()` skips what it has not started, and the exit waits up to
EXIT_WAIT_S for the items running to end.
"""
from __future__ import annotations

import atexit
import collections
import contextlib
import threading
import time
import weakref
from typing import Any, Callable, Iterator, Optional

from .. import timing

EXIT_WAIT_S = 60.0  # (a compile under way in Triton's C++ cannot be stopped: it ends first)
_exiting = threading.Event()
_queues: "weakref.WeakSet[DaemonQueue]" = weakref.WeakSet()


def exiting() -> bool:
    """Whether the process is exiting: background work not yet started is skipped."""
    return _exiting.is_set()


def begin_exit() -> None:
    """From now on the queues start nothing, and `exiting()` is true."""
    _exiting.set()


def stop_at_exit(timeout: float = EXIT_WAIT_S) -> bool:
    """At the process's exit: the queues drop the items not started (to their `dropped`), and
    this waits up to `timeout` seconds for the items running to end; whether they did."""
    begin_exit()
    deadline = time.monotonic() + timeout
    return all(queue.wait(max(0.0, deadline - time.monotonic())) for queue in list(_queues))


atexit.register(stop_at_exit)


@contextlib.contextmanager
def set_on_thread(local: threading.local, name: str, value: Any) -> Iterator[None]:
    """Within the block, `local.<name>` is `value` on this thread; after it, what it was before
    (None where it was not set)."""
    before = getattr(local, name, None)
    setattr(local, name, value)
    try:
        yield
    finally:
        setattr(local, name, before)


class DaemonQueue:
    """Items run by `run(item)`, in the order put, on at most `limit()` daemon threads named
    `name`; a thread ends when the queue is empty, so an idle process keeps none. A process may
    exit with items left. An exception from `run` is dropped (each item reports its own
    failure where it matters). Where no thread can be started at all, the items put are handed
    to `dropped` (their work is done where it is needed instead)."""

    def __init__(self, name: str, run: Callable[[Any], None], limit: Callable[[], int],
                 dropped: Optional[Callable[[list], None]] = None):
        self.name, self.run, self.limit, self.dropped = name, run, limit, dropped
        self.forget_in_child()
        _queues.add(self)

    def forget_in_child(self) -> None:
        """Start empty (also a forked child: the parent's threads are not there)."""
        self.lock = threading.Lock()
        self.idle = threading.Condition(self.lock)
        self.items: collections.deque = collections.deque()
        self.threads = 0

    def put(self, items: list) -> None:
        dropped = []
        with self.lock:
            self.items.extend(items)
            while not exiting() and self.threads < min(self.limit(), len(self.items)):
                try:
                    self._start_thread()
                except RuntimeError:  # (no thread to be had now: those running take the items)
                    break
                self.threads += 1
            if self.threads == 0:
                dropped = list(self.items)
                self.items.clear()
        if dropped and self.dropped is not None:
            self.dropped(dropped)

    def _start_thread(self) -> None:
        threading.Thread(target=self._take, name=self.name, daemon=True).start()

    def _take(self) -> None:
        timing.quiet()  # (the phases of the caller's thread are not these threads')
        while True:
            with self.lock:
                left = []
                if exiting():  # (the items left are dropped, as if no thread could start)
                    left = list(self.items)
                    self.items.clear()
                if not self.items:
                    self.threads -= 1
                    self.idle.notify_all()
                    break
                item = self.items.popleft()
            try:
                self.run(item)
            except BaseException:  # noqa: BLE001 - the thread must go on counting (SystemExit too)
                pass
        if left and self.dropped is not None:
            self.dropped(left)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Until every item put so far has run (or `timeout` seconds); whether they have."""
        with self.lock:
            return self.idle.wait_for(lambda: not self.items and not self.threads, timeout)
