"""The Communication expr: one collective over the devices of a mesh axis.

The resharding pass (`passes/decompose_reshardings.py`) rewrites every expr whose inputs and
output are sharded differently into local compute plus exactly one Communication. Its axes are
positions among the logical non-reduction axes, so they index the local tensors directly.
The host program runs it through the Communicator (`communicator.py`).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional

from ..ir import DeviceMesh, Expr, ParallelType, ReductionOpType


class Collective(enum.Enum):
    """What a Communication does; values are the names the host program prints."""

    allgather = "Allgather"  # sharded on in_axis -> replicated
    allreduce = "Allreduce"  # partial sums (a reduction over a device axis) -> replicated
    reduce_scatter = "ReduceScatter"  # partial sums -> sharded on out_axis
    all_to_all = "AllToAll"  # sharded on in_axis -> sharded on out_axis
    shard = "Shard"  # replicated -> sharded on out_axis: a local slice, nothing sent
    # sharded on in_axis -> one stream chunk of that axis, replicated: inside a stream loop,
    # iteration j broadcasts chunk j from the rank that holds it. The loop as a whole is the
    # allgather of in_axis, in chunks, each overlapped with the consumer of the previous one.
    broadcast = "Broadcast"

    def __str__(self) -> str:
        return self.value


@dataclass(eq=False, kw_only=True)
class Communication(Expr):
    """inputs = (local input,), outputs = (local output,)."""

    collective: Collective
    mesh: DeviceMesh
    parallel_type: ParallelType
    in_axis: Optional[int] = None
    out_axis: Optional[int] = None
    reduce: Optional[ReductionOpType] = None  # allreduce and reduce_scatter

    @property
    def op_name(self) -> str:
        return self.collective.value

    def describe(self) -> str:
        parts = [f"type={self.collective.value}", f"mesh={self.mesh!r}",
                 f"axis={self.parallel_type.value}"]
        if self.in_axis is not None:
            parts.append(f"in_axis={self.in_axis}")
        if self.out_axis is not None:
            parts.append(f"out_axis={self.out_axis}")
        if self.reduce is not None:
            parts.append(f"op={self.reduce.value}")
        return ", ".join(parts)
