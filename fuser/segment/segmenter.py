"""Cut a Fusion into segments. Until kernel schedulers are registered, every expr runs in one
evaluator segment through ATen."""
from __future__ import annotations

from ..ir import Fusion
from .segments import Segment, SegmentKind, segment_io


def segment_fusion(fusion: Fusion) -> list[Segment]:
    exprs = list(fusion.exprs)
    if not exprs:
        return []
    inputs, outputs = segment_io(exprs, fusion.outputs(), [])
    return [Segment(SegmentKind.evaluator, exprs, inputs, outputs, why="ATen evaluation")]
