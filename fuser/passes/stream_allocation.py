"""Allocate stream-loop intermediates one chunk at a time.

A tensor produced inside a stream loop and read only inside that same loop never exists whole:
its allocation domain becomes stream-parallel (the stream leaf first), so the sharding math
gives one chunk for it, and the host program allocates that chunk in each iteration. Tensors
a loop produces for later exprs or as fusion outputs keep their full allocation: the host
program allocates them before the loop, and each iteration writes its chunk of them.
"""
from __future__ import annotations

from ..ir import Fusion, TensorView
from ..multidevice.sharding import stream_leaf
from ..multidevice.transform import set_stream_allocation
from .schedule_stream_loops import stream_loops


def stream_allocation(fusion: Fusion) -> Fusion:
    outputs = {id(o) for o in fusion.outputs()}
    consumers: dict[int, list] = {}
    for e in fusion.exprs:
        for v in e.inputs:
            consumers.setdefault(id(v), []).append(e)
    for group in stream_loops(fusion.exprs):
        if not isinstance(group, list):
            continue
        members = {id(e) for e in group}
        for e in group:
            for o in e.outputs:
                if not isinstance(o, TensorView) or id(o) in outputs or stream_leaf(o) is None:
                    continue
                users = consumers.get(id(o), [])
                if users and all(id(c) in members for c in users):
                    set_stream_allocation(o)
    return fusion
