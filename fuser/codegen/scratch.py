"""Memory a prepared launch keeps between its calls: the zeroed semaphores of a split reduction run in one kernel (codegen/split_kernel.py)
and of the shared-row kernel's pair form (its exchanged words: codegen/shared_row_pair.py), and the
workspaces of split and inner-outer reductions (in their accumulators' types), one set for each stream and thread
(`stream_key`, computed once a call by the launch). Kernels of one stream never overlap, so a
call may reuse what the stream's previous call used; another stream's kernels could run at the
same time and get their own. Inside a CUDA-graph capture (a graph may replay on any stream,
beside eager launches) a call gets memory of its own."""
from __future__ import annotations

import math
import threading
from typing import Optional

import torch

from .steps import current_device, raw_stream

# whether the current stream is capturing a CUDA graph: the C function that
# torch.cuda.is_current_stream_capturing wraps (a Python layer less on every launch)
_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", torch.cuda.is_current_stream_capturing)


def stream_key(device: torch.device) -> Optional[tuple]:
    """The stream a launch on `device` runs on now and the calling thread, as a key; None while
    a CUDA graph is being captured. The thread is part of it: a launch of two kernels (an
    inner-outer pass, then its combine) issued by two threads on one stream interleaves, and
    CUDA's per-thread default stream has one handle (2) for a different stream in each thread."""
    if device.type != "cuda":
        return (device.type, device.index, 0, threading.get_ident())
    if _capturing():
        return None
    index = device.index if device.index is not None else current_device()
    return ("cuda", index, raw_stream(index), threading.get_ident())


class Semaphores:
    """Zeroed int32 counters a kernel leaves zero for the next launch of its stream: a split
    reduction's run in one kernel, one a column block (codegen/split_kernel.py), and the pair
    form's exchanged words (codegen/shared_row_pair.py)."""

    __slots__ = ("count", "by_stream", "captured")

    def __init__(self, count: int):
        self.count = count
        self.by_stream: dict[tuple, torch.Tensor] = {}
        # kept alive for the CUDA graphs that use them (a graph's replays write them; one small
        # tensor a capture, never freed: a program that captures in a loop keeps them all)
        self.captured: list[torch.Tensor] = []

    def get(self, device: torch.device, key: Optional[tuple]) -> torch.Tensor:
        """The counters for `key` (from `stream_key`)."""
        if key is None:  # their zeroing is captured too
            self.captured.append(torch.zeros(self.count, dtype=torch.int32, device=device))
            return self.captured[-1]
        found = self.by_stream.get(key)
        if found is None:
            found = self.by_stream[key] = torch.zeros(self.count, dtype=torch.int32, device=device)
        return found


# The most workspace bytes that all launches together keep between calls; past it a launch
# allocates its workspaces at each call. An allocation costs the host about 5 us on the GPU
# machine (2026-12-01), a sizeable part of a call whose kernels take 40-100 us.
KEPT_WORKSPACE_BYTES = 256 << 20
_kept_bytes = 0
_kept_lock = threading.Lock()


class Workspaces:
    """A launch's workspaces ((shape, dtype) each), kept for each stream and thread within
    KEPT_WORKSPACE_BYTES; their content is not kept (each call writes before it reads)."""

    __slots__ = ("specs", "nbytes", "by_stream")

    def __init__(self, specs: list[tuple[tuple, torch.dtype]]):
        self.specs = specs
        self.nbytes = sum(math.prod(shape) * dtype.itemsize for shape, dtype in specs)
        self.by_stream: dict[tuple, list[torch.Tensor]] = {}

    def get(self, device: torch.device, key: Optional[tuple]) -> list[torch.Tensor]:
        """The workspaces for `key` (from `stream_key`)."""
        found = self.by_stream.get(key) if key is not None else None
        if found is None:
            found = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in self.specs]
            if key is not None and _reserve(self.nbytes):
                self.by_stream[key] = found
        return found

    def __del__(self) -> None:
        _release(self.nbytes * len(self.by_stream))


def _reserve(nbytes: int) -> bool:
    global _kept_bytes
    with _kept_lock:
        if _kept_bytes + nbytes > KEPT_WORKSPACE_BYTES:
            return False
        _kept_bytes += nbytes
        return True


def _release(nbytes: int) -> None:
    global _kept_bytes
    with _kept_lock:
        _kept_bytes -= nbytes


def kept_workspace_bytes() -> int:
    return _kept_bytes
