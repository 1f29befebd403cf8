"""FusionExecutorCache: one compiled runtime per input signature of a definition.

The signature holds what changes the compiled program: dtypes, ranks, stride order, which dims
are size 1, the device, and the kind of each scalar. Sizes are not in it: symbolic extents are
bound afresh in every execution's own binding table.
"""
from __future__ import annotations

import threading
from typing import Any, Sequence

import torch

from ..evaluate.binding import BindingTable, bind_inputs, tensor_device
from ..evaluate.evaluator import EvalContext, Environment, run_exprs
from ..ir import Fusion
from ..segment import Segment, segment_fusion


def signature(args: Sequence[Any]) -> tuple:
    key = []
    for a in args:
        if isinstance(a, torch.Tensor):
            strides = a.stride()
            order = tuple(sorted(range(a.dim()), key=lambda k: (-strides[k], k)))
            key.append((a.dtype, a.dim(), order, tuple(s == 1 for s in a.shape), a.device))
        else:
            key.append(type(a))
    return tuple(key)


class FusionRuntime:
    """The segments of one fusion for one input signature, and how to run them."""

    def __init__(self, fusion: Fusion):
        self.fusion = fusion
        self.segments: list[Segment] = segment_fusion(fusion)

    def run(self, args: Sequence[Any], table: BindingTable) -> list[torch.Tensor]:
        device = tensor_device(args) or torch.device("cpu")
        env = Environment(EvalContext(table, device))
        for val, arg in zip(self.fusion.inputs(), args):
            env[val] = arg
        for seg in self.segments:
            run_exprs(seg.exprs, env)
        return [env[o] for o in self.fusion.outputs()]


class FusionExecutorCache:
    def __init__(self, fusion: Fusion):
        self.fusion = fusion
        self._runtimes: dict[tuple, FusionRuntime] = {}
        self._lock = threading.Lock()
        self.last_runtime: FusionRuntime | None = None

    @property
    def num_runtimes(self) -> int:
        return len(self._runtimes)

    def execute(self, args: Sequence[Any]) -> list[torch.Tensor]:
        table = bind_inputs(self.fusion, args)  # validates every input before any work
        key = signature(args)
        runtime = self._runtimes.get(key)
        if runtime is None:
            with self._lock:
                runtime = self._runtimes.get(key)
                if runtime is None:
                    runtime = FusionRuntime(self.fusion)
                    self._runtimes[key] = runtime
        self.last_runtime = runtime
        return runtime.run(args, table)
