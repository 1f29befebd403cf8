"""The CUDA stream and event calls of a host program, in one place.

A stream loop runs iteration `i` on stream `i % len(pool)` of a pool made once per process
(per device and pool size) and reused by every execution; `torch.cuda.Stream()` is never
called on the hot path. Ordering between streams uses events, also reused: one set per thread
and device, so two threads running the same program never re-record each other's events
between a record and the wait that reads it. The compiled host program (`plan.py`) calls only
the methods below, so a test can pass an object with the same methods and read back every
stream operation an execution would issue on the GPU.
"""
from __future__ import annotations

import threading

import torch

from ..dump import env_int

MAX_STREAMS = env_int("FUSER_MAX_STREAMS", 8)


class CudaStreams:
    """Streams and events of one CUDA device."""

    def __init__(self, device: torch.device):
        self.device = device
        self.index = device.index if device.index is not None else torch.cuda.current_device()

    def enter(self):
        """Before an execution: the caller's current device, when it is not this one (else None)."""
        previous = torch.cuda.current_device()
        return previous if previous != self.index else None

    def leave(self, previous) -> None:
        torch.cuda.set_device(previous)

    def current(self):
        return torch.cuda.current_stream(self.index)

    def set(self, stream) -> None:
        torch.cuda.set_stream(stream)

    def pool(self, count: int) -> list:
        key = (self.index, count)
        pool = _POOLS.get(key)
        if pool is None:
            with torch.cuda.device(self.index):
                pool = [torch.cuda.Stream() for _ in range(count)]
            _POOLS[key] = pool
        return pool

    def events(self, count: int) -> list:
        """`count` events of this thread on this device, the same ones on every call."""
        per_thread = getattr(_EVENTS, "lists", None)
        if per_thread is None:
            per_thread = _EVENTS.lists = {}
        key = (self.index, count)
        found = per_thread.get(key)
        if found is None:
            found = per_thread[key] = [torch.cuda.Event() for _ in range(count)]
        return found

    @staticmethod
    def record(event, stream) -> None:
        """`event` marks the work queued on `stream` so far."""
        event.record(stream)

    @staticmethod
    def wait_event(stream, event) -> None:
        """`stream` runs nothing more until the work `event` marks is done (the host never waits)."""
        stream.wait_event(event)


_POOLS: dict[tuple, list] = {}  # CUDA streams are reused across executions, never recreated
_EVENTS = threading.local()


def streams_for(device: torch.device):
    """The stream calls for `device`; None where there are no streams (the loop runs in order)."""
    return CudaStreams(device) if device.type == "cuda" else None
