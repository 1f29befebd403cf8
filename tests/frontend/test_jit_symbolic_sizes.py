"""Sizes Dynamo computes from symbols that the lowering computes too: torch's own Max and Min
(torch.utils._sympy.functions, not sympy's) and its FloorDiv. A rope's `x.chunk(2, -1)` over a
symbolic row length splits at `(s + 1) // 2` and `max(1, s - (s + 1) // 2)`: it ran through
ATen ("neither an input size nor computable")."""
import pytest
import torch

import fuser
from tests.helpers import make


def rotate_half(x, cos, sin):
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


@pytest.mark.parametrize("lengths", [(8, 12, 16), (8, 9, 13)], ids=["even", "odd"])
def test_a_chunk_over_a_symbolic_row_length_fuses(lengths):
    jitted = fuser.jit(rotate_half)
    for d in lengths:
        x, cos, sin = make((2, 3, d)), make((3, d)), make((3, d))
        torch.testing.assert_close(jitted(x, cos, sin), rotate_half(x, cos, sin))
    info = jitted.cache_info()
    assert info.fallback_ops == 0 and info.graphs <= 2, info
