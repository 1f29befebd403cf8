"""What `fuser.jit` saves for the backward: softmax and log-softmax are decomposed, so the
backward recomputes the probabilities from the (half-precision) input and two per-row values
(the max and the log of the sum, frontend/softmax_backward.py) instead of reading fp32
probabilities the forward wrote."""
import torch
import torch.nn.functional as F

import fuser
from fuser.frontend.backend import backend_for

from .jit_helpers import check_forward_backward


def _saved_by_forward(jitted):
    record = backend_for().records[-1]
    forward = next(p for p in record.programs if p.kind == "forward")
    out = next(n for n in forward.plan.graph.graph.nodes if n.op == "output")
    values = [a.meta.get("val") for a in out.args[0] if hasattr(a, "meta")]
    return [v for v in values if isinstance(v, torch.Tensor)], record


def softmax(x):
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def cross_entropy(logits, target):
    return F.cross_entropy(logits.float(), target)


def test_softmax_backward_recomputes_from_the_input():
    jitted = fuser.jit(softmax)
    x = torch.randn(12, 40, dtype=torch.bfloat16, requires_grad=True)
    check_forward_backward(softmax, jitted, (x,))
    saved, record = _saved_by_forward(jitted)
    # the output itself, then what the backward reads: the bf16 input and two [rows, 1] values
    full = [v for v in saved[1:] if v.dim() == 2 and v.shape[1] != 1]
    assert [v.dtype for v in full] == [torch.bfloat16], saved
    per_row = [v for v in saved[1:] if v.dim() == 2 and v.shape[1] == 1]
    assert [v.dtype for v in per_row] == [torch.float32] * 2, saved
    backward = next(p for p in record.programs if p.kind == "backward")
    assert backward.counts()["kernels"] == 1


def test_cross_entropy_backward_is_one_kernel():
    jitted = fuser.jit(cross_entropy)
    logits = torch.randn(10, 33, dtype=torch.bfloat16, requires_grad=True)
    target = torch.randint(0, 33, (10,))
    check_forward_backward(cross_entropy, jitted, (logits, target))
    saved, record = _saved_by_forward(jitted)
    assert not any(v.dtype == torch.float32 and v.dim() == 2 and v.shape[1] != 1 for v in saved), saved
    backward = next(p for p in record.programs if p.kind == "backward")
    assert backward.counts()["fallback_ops"] == 0
    assert backward.counts()["kernels"] == 1
