"""Pointwise kernels that read common inputs over one loop space join into one kernel (one
launch, shared inputs read once); siblings over different loop spaces stay apart."""
import torch

import fuser
from fuser import DataType, FusionDefinition


def kernel_count(fd) -> int:
    return sum(seg.kind.value == "kernel" for seg in fd.last_segments())


def test_two_chains_reading_the_same_inputs_run_as_one_kernel(device):
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=True)
        b = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.BFloat16)
        fd.add_output(fd.ops.mul(fd.ops.exp(a), b))
        fd.add_output(fd.ops.add(fd.ops.sin(a), b))
    a = torch.randn(6, 10, device=device)
    b = torch.randn(6, 10, device=device, dtype=torch.bfloat16)
    y1, y2 = fd.execute([a, b])
    torch.testing.assert_close(y1, a.exp() * b.float())
    torch.testing.assert_close(y2, a.sin() + b.float())
    assert kernel_count(fd) == 1


def test_siblings_over_different_rows_stay_two_kernels(device):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True)
        y = fd.define_tensor(shape=[-1, -1], contiguity=True)
        w = fd.define_tensor(shape=[-1], contiguity=True)
        fd.add_output(fd.ops.mul(x, fd.ops.broadcast_in_dim(w, [x.shape()[0], x.shape()[1]], [1])))
        fd.add_output(fd.ops.add(y, fd.ops.broadcast_in_dim(w, [y.shape()[0], y.shape()[1]], [1])))
    x, y, w = torch.randn(3, 8, device=device), torch.randn(5, 8, device=device), torch.randn(8, device=device)
    o1, o2 = fd.execute([x, y, w])
    torch.testing.assert_close(o1, x * w)
    torch.testing.assert_close(o2, y + w)
    assert kernel_count(fd) == 2


def test_jit_swiglu_backward_is_one_pointwise_kernel(device):
    def swiglu(g, u):
        return torch.nn.functional.silu(g) * u
    g = torch.randn(4, 16, device=device, requires_grad=True)
    u = torch.randn(4, 16, device=device, requires_grad=True)
    f = fuser.jit(swiglu)
    out = f(g, u)
    dy = torch.randn_like(out)
    got = torch.autograd.grad(out, (g, u), dy)
    g2, u2 = (t.detach().clone().requires_grad_() for t in (g, u))
    want = torch.autograd.grad(swiglu(g2, u2), (g2, u2), dy)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    assert f.cache_info().kernels == 2  # forward and backward, one each


def test_independent_computations_of_one_shape_run_together(device):
    """Rope of q and of k share cos and sin but no axis: joined, their axes are iterated
    together (position by position) rather than as an outer product."""
    def rope_qk(q, k, cos, sin):
        def rope(x):
            return x * cos + torch.cat((-x[..., 4:], x[..., :4]), -1) * sin
        return rope(q), rope(k)
    q, k = torch.randn(2, 5, 3, 8, device=device), torch.randn(2, 5, 3, 8, device=device)
    cos, sin = torch.randn(5, 1, 8, device=device), torch.randn(5, 1, 8, device=device)
    f = fuser.jit(rope_qk)
    for got, want in zip(f(q, k, cos, sin), rope_qk(q, k, cos, sin)):
        torch.testing.assert_close(got, want)
    assert f.cache_info().kernels == 1


def test_outputs_of_other_shapes_are_not_aligned(device):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True)
        y = fd.define_tensor(shape=[-1, -1], contiguity=True)
        fd.add_output(fd.ops.exp(x))
        fd.add_output(fd.ops.sin(y))
    x, y = torch.randn(3, 8, device=device), torch.randn(4, 8, device=device)
    a, b = fd.execute([x, y])
    torch.testing.assert_close(a, x.exp())
    torch.testing.assert_close(b, y.sin())
