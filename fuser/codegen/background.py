"""A queue of work that daemon threads take in order: the process's background compiles (launch
forms and stand-ins, codegen/tuning.py; a jitted graph's fusions compiled ahead,
frontend/ahead.py). Each user keeps its own queue and its own thread limit. Also the flags a
thread sets for the work it does within a block (`set_on_thread`)."""
from __future__ import annotations

import collections
import contextlib
import threading
from typing import Any, Callable, Iterator, Optional

from .. import timing


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
            while self.threads < min(self.limit(), len(self.items)):
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
                if not self.items:
                    self.threads -= 1
                    self.idle.notify_all()
                    return
                item = self.items.popleft()
            try:
                self.run(item)
            except BaseException:  # noqa: BLE001 - the thread must go on counting (SystemExit too)
                pass

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Until every item put so far has run (or `timeout` seconds); whether they have."""
        with self.lock:
            return self.idle.wait_for(lambda: not self.items and not self.threads, timeout)
