"""nvFuser's PythonProfiler: `with PythonProfiler() as prof: fd.execute(inputs)`, then
`prof.profile` (the last execution's FusionProfile: its segments, each one's kernel or ATen
ops, scheduler and time) and `prof.profiles` (every execution's, in order). Executions inside
run their segments one by one, timed, instead of through a ready call."""
from __future__ import annotations

import threading
from typing import Optional

from ..errors import FusionDefinitionError
from ..runtime.profile import FusionProfile, KernelProfile

__all__ = ["PythonProfiler", "FusionProfile", "KernelProfile"]

_active = threading.local()  # .profiler: the innermost PythonProfiler open on this thread


def active() -> Optional["PythonProfiler"]:
    return getattr(_active, "profiler", None)


class PythonProfiler:
    def __init__(self, auto_scheduled: bool = True):
        if not auto_scheduled:
            raise FusionDefinitionError("PythonProfiler(auto_scheduled=False): fuser schedules every kernel "
                                        "itself (no manual_execute); profile fd.execute instead")
        self.profiles: list[FusionProfile] = []
        self._outer: Optional[PythonProfiler] = None

    @property
    def profile(self) -> FusionProfile:
        if not self.profiles:
            raise FusionDefinitionError("PythonProfiler: no FusionDefinition was executed inside the profiler")
        return self.profiles[-1]

    def __repr__(self) -> str:
        if not self.profiles:
            return "PythonProfiler(profiles=0)"
        last = self.profiles[-1]
        return (f"PythonProfiler(profiles={len(self.profiles)}, last: segments={last.segments}, "
                f"host_time_ms={last.host_time_ms:.3f})")

    def __enter__(self) -> "PythonProfiler":
        self._outer, _active.profiler = active(), self
        return self

    def __exit__(self, *exc) -> None:
        _active.profiler = self._outer
