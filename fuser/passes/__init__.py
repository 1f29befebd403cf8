"""Pre-segmentation passes: each a function Fusion -> Fusion, one per file, run in the order of
`pre_segmentation_passes()`. They rewrite the fusion they are given; `run_passes` hands them a
clone, so the user's definition is never changed. A fusion with no mesh and no device or stream
axis needs none of them and is returned as it is (the single-device path stays as it was).

`FUSER_DUMP=preseg_passes` prints the fusion after each pass (`FUSER_DUMP=<pass name>` after
one of them).
"""
from __future__ import annotations

from typing import Callable

from ..dump import dump_flags, register_dump_names
from ..ir import Fusion
from ..multidevice.sharding import is_distributed
from ..timing import phase
from .decompose_reshardings import decompose_reshardings
from .propagate_shardings import propagate_shardings
from .schedule_stream_loops import schedule_stream_loops
from .stream_allocation import stream_allocation
from .validate_shardings import validate_meshes, validate_shardings

Pass = Callable[[Fusion], Fusion]


def pre_segmentation_passes() -> list[Pass]:
    """The passes in the order they run."""
    return [validate_shardings, propagate_shardings, validate_meshes, decompose_reshardings,
            schedule_stream_loops, stream_allocation]


register_dump_names(p.__name__ for p in pre_segmentation_passes())  # (FUSER_DUMP=propagate_shardings)


def needs_passes(fusion: Fusion) -> bool:
    return any(is_distributed(tv) for tv in fusion.tensors())


def run_passes(fusion: Fusion) -> Fusion:
    with phase("passes"):
        return _run_passes(fusion)


def _run_passes(fusion: Fusion) -> Fusion:
    if not needs_passes(fusion):
        return fusion
    flags = dump_flags()
    fusion = fusion.clone()
    for p in pre_segmentation_passes():
        fusion = p(fusion)
        if "preseg_passes" in flags or p.__name__ in flags:
            print(f"=== Fusion after {p.__name__} ===\n{fusion}\n{fusion.print_transforms()}")
    return fusion


__all__ = ["pre_segmentation_passes", "run_passes", "needs_passes", "propagate_shardings",
           "decompose_reshardings", "schedule_stream_loops", "stream_allocation",
           "validate_shardings"]
