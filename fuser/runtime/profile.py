"""Per-segment timing of one execution, for nvFuser's PythonProfiler (frontend/profiler.py):
a mark as each segment starts and one after the last, as CUDA events on the current stream
(a GPU) or wall-clock times (Triton's interpreter and ATen on the CPU run synchronously)."""
from __future__ import annotations

import itertools
import re
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from ..segment import Segment

_FUSION_IDS = itertools.count()


@dataclass
class KernelProfile:
    """One segment of an execution: `name` the generated kernel's (`fuser_...`) or the ATen
    ops an evaluator segment runs; `scheduler` the kernel's template (pointwise,
    inner_reduction, ...) or "expr_eval"; `time_ms` from its start to the next segment's on
    the stream (a first execution's includes its compiles)."""

    name: str
    segment_id: int
    scheduler: str
    time_ms: float


@dataclass
class FusionProfile:
    fusion_id: int  # one per executor cache, in the order they were first profiled
    segments: int
    kernel_profiles: list[KernelProfile] = field(default_factory=list)
    host_time_ms: float = 0.0  # the whole execute, on the host
    kernel_time_ms: float = 0.0  # the segments' times, summed


def fusion_id_of(cache: Any) -> int:
    fid = getattr(cache, "_profile_id", None)
    if fid is None:
        fid = cache._profile_id = next(_FUSION_IDS)
    return fid


class SegmentTimer:
    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.device = device
        self.marks: list[tuple[Optional[Segment], Any, Any]] = []  # (segment, its launcher, the time)

    def mark(self, seg: Optional[Segment], launcher: Any) -> None:
        """`seg` starts now (None: the last one ended)."""
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record(torch.cuda.current_stream(self.device))  # (the fusion's device, not the current one)
            self.marks.append((seg, launcher, ev))
        else:
            self.marks.append((seg, launcher, time.perf_counter()))

    def kernel_profiles(self) -> list[KernelProfile]:
        if self.cuda and self.marks:
            self.marks[-1][2].synchronize()
        out = []
        for k, ((seg, launcher, t0), (_, _, t1)) in enumerate(zip(self.marks, self.marks[1:])):
            ms = t0.elapsed_time(t1) if self.cuda else (t1 - t0) * 1e3
            out.append(KernelProfile(_name(seg, launcher), k, _scheduler(seg, launcher), ms))
        return out


def _name(seg: Segment, launcher: Any) -> str:
    source = getattr(launcher, "last_source", None) if launcher is not None else None
    found = re.search(r"^def (fuser_\w+)\(", source or "", re.M)
    if found:
        return found[1]
    ops = dict.fromkeys(type(e).__name__.removesuffix("Op") for e in seg.exprs)
    return "aten: " + ", ".join(ops)


def _scheduler(seg: Segment, launcher: Any) -> str:
    template = getattr(getattr(seg.params, "template", None), "value", None)
    if launcher is not None and template is not None:
        return str(template)
    return "expr_eval"
