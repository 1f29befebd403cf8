"""Seed the random ops a definition leaves unseeded (RNGOp without rng_seed and rng_offset).

Such an op draws fresh numbers in every execution, from PyTorch's generator (so that
torch.manual_seed makes runs reproducible). The fusion gets one more input, last: a 0-dim
int64 seed tensor that the executor draws for each execution on the execution's device
(evaluate/philox.py `draw_seed`: no sync on a GPU; kernels read it from memory, so a new seed
neither recompiles nor re-plans a launch). Each unseeded op reads it with an offset of its own,
k * 2^40, so that several in one fusion draw from disjoint counters (outputs below 2^40
elements).
"""
from __future__ import annotations

from dataclasses import replace

from ..ir import DataType, Fusion, RNGOp, tensor_domain

_OFFSET_STEP = 1 << 40


def needs_seed(fusion: Fusion) -> bool:
    return any(isinstance(e, RNGOp) and not e.seeded for e in fusion.exprs)


def seed_random_ops(fusion: Fusion) -> Fusion:
    """`fusion` itself where every random op is seeded; else a clone with the seed input."""
    if not needs_seed(fusion):
        return fusion
    fusion = fusion.clone()
    seed = fusion.new_tensor(tensor_domain([]), DataType.Int)
    fusion.add_input(seed)
    count = 0
    for k, e in enumerate(fusion.exprs):
        if isinstance(e, RNGOp) and not e.seeded:
            offset = fusion.new_scalar(DataType.Int, value=count * _OFFSET_STEP)
            fusion.exprs[k] = replace(e, inputs=e.inputs + (seed, offset))
            count += 1
    return fusion
