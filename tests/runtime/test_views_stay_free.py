"""An output that is only a view (permute, broadcast, slice) of a kernel's input or of another of
its outputs is made by ATen, free, not written by the kernel: a linear layer's backward sums the
gradient over rows for the bias and multiplies its transposed view for the weight; in one kernel
with the sum, the transposed view was a second copy of the gradient."""
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

import fuser
from fuser import DataType, FusionDefinition


def test_a_transposed_view_beside_a_column_sum_is_not_written():
    with FusionDefinition() as fd:
        g = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.sum(g, [0]))
        fd.add_output(fd.ops.permute(g, [1, 0]))
    g = torch.randn(300, 40, generator=torch.Generator().manual_seed(0))
    total, gt = fd.execute([g])
    torch.testing.assert_close(total, g.sum(0), rtol=1e-5, atol=1e-4)
    assert torch.equal(gt, g.t()) and gt.data_ptr() == g.data_ptr()  # a view, as eager's
    kernels = [s for s in fd.last_segments() if s.kind.name == "kernel"]
    assert len(kernels) == 1 and len(kernels[0].outputs) == 1
    assert "only views" in " ".join(s.why for s in fd.last_segments() if s.kind.name == "evaluator")


def test_a_view_of_a_computed_output_is_not_written_twice():
    """y = relu(x) and y.t(), both outputs: the kernel writes y once; y.t() is its view."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        y = fd.ops.relu(x)
        fd.add_output(y)
        fd.add_output(fd.ops.permute(y, [1, 0]))
    x = torch.randn(30, 20, generator=torch.Generator().manual_seed(1))
    y, yt = fd.execute([x])
    assert torch.equal(y, torch.relu(x)) and torch.equal(yt, y.t()) and yt.data_ptr() == y.data_ptr()


class _MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(32, 96), nn.Linear(96, 32)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


def test_mlp_backward_writes_no_transposed_gradient():
    torch.manual_seed(2)
    model = _MLP()
    x = torch.randn(4, 24, 32, requires_grad=True)
    report = fuser.explain(model, x)
    backward = [f for g in report.graphs for p in g.programs if p.kind == "backward" for f in p.fusions]
    assert backward
    written = []
    for fusion in backward:
        # the tensors permutes make, and the outputs of the kernel segments
        permuted = set(re.findall(r"(T\d+)_g\w*\[[^\]]*\]\s*\n\s*= permute\(", fusion.fusion))
        assert permuted  # (the weight gradients' transposes)
        for seg in fusion.segments:
            if seg.startswith("kernel segment"):
                outputs = next(line for line in seg.splitlines() if line.startswith(" outputs:"))
                written += [t for t in re.findall(r"(T\d+)_g", outputs) if t in permuted]
    assert not written
    jitted = fuser.jit(_MLP())
    jitted.load_state_dict(model.state_dict())
    dy = torch.randn(4, 24, 32)
    (gx, *gw) = torch.autograd.grad(jitted(x), [x, *jitted.parameters()], dy)
    (wx, *ww) = torch.autograd.grad(model(x), [x, *model.parameters()], dy)
    torch.testing.assert_close(gx, wx, rtol=1e-4, atol=1e-4)
    for a, b in zip(gw, ww):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_a_chain_of_views_of_an_input_leaves_the_kernel():
    """permute(broadcast(b)) beside a sum that reads b: both views go to ATen together."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        b = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.sum(fd.ops.add(x, fd.ops.broadcast(b, [True, False])), [0]))
        fd.add_output(fd.ops.permute(fd.ops.broadcast(b, [False, True]), [1, 0]))
    g = torch.Generator().manual_seed(3)
    x, b = torch.randn(50, 7, generator=g), torch.randn(7, generator=g)
    total, bt = fd.execute([x, b])
    torch.testing.assert_close(total, (x + b).sum(0), rtol=1e-5, atol=1e-4)
    assert torch.equal(bt, b[:, None].t()) and bt.data_ptr() == b.data_ptr()
    kernels = [s for s in fd.last_segments() if s.kind.name == "kernel"]
    assert len(kernels) == 1 and len(kernels[0].outputs) == 1


def test_no_empty_segment_is_left_behind():
    """A view alone, or a view group next to a kernel: every segment has exprs."""
    with FusionDefinition() as fd:
        t = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.permute(t, [1, 0]))
        fd.add_output(fd.ops.broadcast(fd.ops.sum(t, [1]), [False, True]))
        fd.add_output(fd.ops.slice(fd.ops.permute(t, [1, 0]), [0, 0], [2, 3]))
    t = torch.randn(30, 20, generator=torch.Generator().manual_seed(4))
    a, b, c = fd.execute([t])
    assert torch.equal(a, t.t()) and torch.equal(c, t.t()[:2, :3])
    torch.testing.assert_close(b, t.sum(1)[:, None], rtol=1e-5, atol=1e-4)
    assert all(s.exprs for s in fd.last_segments())
