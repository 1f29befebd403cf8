"""Indexing through `fuser.jit`: embedding, index_select, gather and scatter become the IR's
indexing ops, ATen evaluator segments inside one fusion with their pointwise neighbours in
kernels, forward and backward against eager autograd."""
import torch
import torch.nn.functional as F

import fuser

from .jit_helpers import assert_close_to_eager, check_forward_backward
from .test_jit_plan import _programs


def _forward_segments(jitted):
    """(forward program's counts, the kinds and ops of its fusion's segments)."""
    (fwd,) = [p for p in _programs(jitted) if p.kind in ("forward", "inference")]
    segments = [(s.kind.value, [e.op_name for e in s.exprs])
                for step in fwd.fusion_steps for s in step.fd.last_segments()]
    return fwd.counts(), segments


def embed_and_scale(index, weight):
    return F.embedding(index, weight) * 2.0 + 1.0


def gather_softmax(x, index):
    g = torch.gather(x, 1, index)
    e = torch.exp(g - g.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def test_embedding_forward_backward():
    jitted = fuser.jit(embed_and_scale)
    args = (torch.randint(0, 10, (3, 5)), torch.randn(10, 4, requires_grad=True))
    check_forward_backward(embed_and_scale, jitted, args)
    counts, segments = _forward_segments(jitted)
    assert counts["fallback_ops"] == 0 and counts["fusions"] == 1, counts
    assert segments[0] == ("evaluator", ["EmbeddingFwdOp"]) and segments[1][0] == "kernel", segments


def test_gather_softmax_forward_backward_at_two_sizes():
    jitted = fuser.jit(gather_softmax, dynamic=True)  # (both sizes symbolic from the first call)
    for rows, cols, k in ((4, 6, 3), (5, 9, 4)):
        args = (torch.randn(rows, cols, requires_grad=True), torch.randint(0, cols, (rows, k)))
        check_forward_backward(gather_softmax, jitted, args)
    counts, segments = _forward_segments(jitted)
    assert counts["fallback_ops"] == 0, counts
    assert segments[0] == ("evaluator", ["GatherOp"]) and segments[1][0] == "kernel", segments
    assert jitted.cache_info().graphs == 1


def test_index_select_and_scatter_in_one_fusion():
    def f(x, index, rows, src):
        picked = torch.exp(torch.index_select(x, 0, rows)) + 1.0
        return torch.scatter(picked, 1, index, src) * 3.0, torch.scatter(x, 1, index[:1], 0.5) - x

    jitted = fuser.jit(f)
    x, src = torch.randn(6, 5), torch.randn(4, 2)
    index = torch.rand(4, 5).argsort(1)[:, :2].contiguous()
    rows = torch.tensor([5, 0, 2, 2])
    for got, want in zip(jitted(x, index, rows, src), f(x, index, rows, src)):
        assert_close_to_eager(got, want)
    counts, segments = _forward_segments(jitted)
    assert counts["fallback_ops"] == 0 and counts["fusions"] == 1, counts
    ops = [op for _, exprs in segments for op in exprs]
    assert {"IndexSelectOp", "ScatterOp"} <= set(ops), segments
