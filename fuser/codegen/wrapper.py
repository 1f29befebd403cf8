"""A launch that runs another launch's kernels (a form chosen among several, codegen/tuning.py; a
shared-row kernel with a fallback, launch.py): what a compile-ahead pass (codegen/ahead.py), a
two-kernel launch (inner_outer._TwoLaunches) and the autotuner read of it is its inner launch's."""
from __future__ import annotations

from typing import Callable


class Wrapper:
    """Subclasses say which launch is `inner` now."""

    __slots__ = ()

    @property
    def inner(self):
        raise NotImplementedError

    @property
    def cold(self) -> bool:
        return self.inner.cold

    @property
    def steps(self) -> list:
        return self.inner.steps

    @property
    def out_specs(self) -> list:
        return self.inner.out_specs

    @property
    def workspaces(self):
        return self.inner.workspaces

    @property
    def semaphores(self):
        return self.inner.semaphores

    def jobs_for(self, inputs, device) -> list[Callable[[], None]]:
        return self.inner.jobs_for(inputs, device)

    def tensors_for(self, inputs, device, dests=None) -> tuple[list, list]:
        return self.inner.tensors_for(inputs, device, dests)

    def compile_jobs(self, tensors: list) -> list[Callable[[], None]]:
        return self.inner.compile_jobs(tensors)
