"""0-dim computations (a scale of sqrt(d) with a symbolic d) join their consumer's kernel
(segmenter `absorb_scalar_groups`) instead of running as one ATen call each."""
import math

import torch

import fuser
from fuser import DataType, FusionDefinition


def test_a_scale_computed_from_an_extent_runs_in_the_consumer_kernel(device):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True)
        d = fd.ops.full([], x.shape()[1], DataType.Float)
        scale = fd.ops.cast(fd.ops.sqrt(fd.ops.cast(d, DataType.Double)), DataType.Float)
        y = fd.ops.div(x, fd.ops.broadcast_in_dim(scale, [x.shape()[0], x.shape()[1]], []))
        fd.add_output(fd.ops.exp(y))
        fd.add_output(scale)  # the 0-dim value is an output too
    x = torch.randn(5, 12, device=device)
    y, s = fd.execute([x])
    torch.testing.assert_close(y, (x / math.sqrt(12)).exp())
    torch.testing.assert_close(s, torch.tensor(math.sqrt(12), device=device))
    assert [seg.kind.value for seg in fd.last_segments()] == ["kernel"], \
        "\n".join(seg.why for seg in fd.last_segments())


def test_jit_attention_scores_scaled_by_a_symbolic_head_dim(device):
    def scores(q, k):
        return torch.softmax((q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1]), dim=-1)
    f = fuser.jit(scores)
    for d in (8, 16):  # the head dim is symbolic from the second size on
        q, k = torch.randn(2, 5, d, device=device), torch.randn(2, 5, d, device=device)
        torch.testing.assert_close(f(q, k), scores(q, k))
    report = str(fuser.explain(scores, q, k))
    assert "no loop axes" not in report, report
