"""Slice, pad and cat inside pointwise kernels (codegen/resize.py): a value before a resize is
read at the shifted index, pad and cat select with tl.where. Each case runs as one kernel (no
ATen segment) and matches eager on fresh random data."""
import math

import pytest
import torch
import torch.nn.functional as F

import fuser
from fuser import DataType, FusionDefinition
from fuser.segment.segments import SegmentKind


def kinds(fd) -> list[str]:
    return [s.kind.value for s in fd.last_segments()]


def one_kernel(fd) -> None:
    assert kinds(fd) == ["kernel"], "\n".join(s.why for s in fd.last_segments())


def rope_fd(dtype=DataType.Float):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1, -1], contiguity=True, dtype=dtype)
        cos = fd.define_tensor(shape=[-1, 1, -1], contiguity=True, dtype=dtype)
        sin = fd.define_tensor(shape=[-1, 1, -1], contiguity=True, dtype=dtype)
        half = fd.define_scalar(dtype=DataType.Int)  # the caller passes d // 2
        d = x.shape()[3]
        first = fd.ops.slice(x, [0, 0, 0, 0], [x.shape()[0], x.shape()[1], x.shape()[2], half])
        second = fd.ops.slice(x, [0, 0, 0, half], [x.shape()[0], x.shape()[1], x.shape()[2], d])
        rotated = fd.ops.cat([fd.ops.neg(second), first], 3)
        c, s = (fd.ops.broadcast_in_dim(t, [x.shape()[0], x.shape()[1], 1, x.shape()[3]], [1, 2, 3])
                for t in (cos, sin))
        y = fd.ops.add(fd.ops.mul(x, c), fd.ops.mul(rotated, s))
        fd.add_output(fd.ops.cast(y, dtype))
    return fd


def rope_eager(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_is_one_kernel_and_matches_eager(dtype, device):
    fd = rope_fd(DataType.from_torch(dtype))
    for b, s, h, d in [(2, 5, 3, 16), (1, 7, 2, 8)]:  # a new size reuses the definition
        x = torch.randn(b, s, h, d, device=device, dtype=dtype)
        cos, sin = (torch.randn(s, 1, d, device=device, dtype=dtype) for _ in range(2))
        (y,) = fd.execute([x, cos, sin, d // 2])
        ref = rope_eager(x.float(), cos.float(), sin.float()).to(dtype)
        tol = 1e-6 if dtype == torch.float32 else 1e-2
        torch.testing.assert_close(y, ref, rtol=tol, atol=tol)
        one_kernel(fd)
    assert "tl.where(" in fd.last_triton_code()


def test_pad_of_a_computed_value_fills_outside_and_keeps_special_values(device):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True)
        e = fd.ops.exp(x)
        p = fd.ops.pad(e, [2, 3, 1, 0], -math.inf)  # last dim 2 left, 3 right; rows 1 before
        fd.add_output(fd.ops.mul(p, 2.0))
    x = torch.randn(4, 6, device=device)
    x[1, 2] = math.nan
    x[2, 0] = math.inf
    (y,) = fd.execute([x])
    ref = F.pad(x.exp(), (2, 3, 1, 0), value=-math.inf) * 2.0
    torch.testing.assert_close(y, ref, equal_nan=True)
    one_kernel(fd)


def test_pad_value_from_a_scalar_input(device):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True)
        v = fd.define_scalar(dtype=DataType.Float)
        fd.add_output(fd.ops.add(fd.ops.pad(x, [1, 1], v), 1.0))
    x = torch.randn(3, 5, device=device)
    for value in (0.5, -2.25):
        (y,) = fd.execute([x, value])
        torch.testing.assert_close(y, F.pad(x, (1, 1), value=value) + 1.0)
    one_kernel(fd)


def test_cat_of_three_dtypes_along_rows_and_columns(device):
    for dim in (0, 1):
        with FusionDefinition() as fd:
            a = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.BFloat16)
            b = fd.define_tensor(shape=[-1, -1], contiguity=True)
            c = fd.define_tensor(shape=[-1, -1], contiguity=True)
            fd.add_output(fd.ops.sin(fd.ops.cat([a, fd.ops.mul(b, 3.0), c], dim)))
        shapes = [(3, 4), (5, 4), (2, 4)] if dim == 0 else [(3, 2), (3, 7), (3, 1)]
        a, b, c = (torch.randn(*s, device=device) for s in shapes)
        a = a.to(torch.bfloat16)
        (y,) = fd.execute([a, b, c])
        torch.testing.assert_close(y, torch.cat([a.float(), b * 3.0, c], dim).sin())
        one_kernel(fd)


def test_cat_with_an_empty_input_and_a_size_1_broadcast_input(device):
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=True)
        e = fd.define_tensor(shape=[-1, -1], contiguity=True)
        one = fd.define_tensor(shape=[1, -1], contiguity=True)  # a broadcast row
        fd.add_output(fd.ops.add(fd.ops.cat([a, e, one], 0), 1.0))
    a, e, one = torch.randn(3, 5, device=device), torch.randn(0, 5, device=device), torch.randn(1, 5, device=device)
    (y,) = fd.execute([a, e, one])
    torch.testing.assert_close(y, torch.cat([a, e, one], 0) + 1.0)
    one_kernel(fd)


def test_strided_slice_with_bounds_from_scalar_inputs(device):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True)
        lo = fd.define_scalar(dtype=DataType.Int)
        hi = fd.define_scalar(dtype=DataType.Int)
        s = fd.ops.slice(x, [0, lo], [x.shape()[0], hi], [1, 2])
        fd.add_output(fd.ops.add(fd.ops.cat([s, fd.ops.neg(s)], 1), 0.5))
    x = torch.randn(4, 13, device=device)
    for lo, hi in [(1, 12), (0, 13), (-9, -1), (3, 100)]:
        (y,) = fd.execute([x, lo, hi])
        s = x[:, lo:hi:2]
        torch.testing.assert_close(y, torch.cat([s, -s], 1) + 0.5)
        one_kernel(fd)


def test_integer_cat_stays_exact(device):
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Int32)
        b = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Int32)
        fd.add_output(fd.ops.mul(fd.ops.cat([a, fd.ops.pad(b, [2, 0], 7)], 0), 3))
    a = torch.randint(-1000, 1000, (5,), device=device, dtype=torch.int32)
    b = torch.randint(-1000, 1000, (4,), device=device, dtype=torch.int32)
    (y,) = fd.execute([a, b])
    assert torch.equal(y, torch.cat([a, F.pad(b, (2, 0), value=7)]) * 3)
    one_kernel(fd)


def test_outputs_at_two_extents_are_cut_and_correct(device):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True)
        y = fd.ops.mul(x, 2.0)
        fd.add_output(y)
        fd.add_output(fd.ops.pad(fd.ops.exp(y), [1, 1]))
    x = torch.randn(3, 4, device=device)
    y, z = fd.execute([x])
    torch.testing.assert_close(y, x * 2.0)
    torch.testing.assert_close(z, F.pad((x * 2.0).exp(), (1, 1)))
    assert kinds(fd).count("kernel") == 2


def test_a_reduction_after_a_slice_is_correct(device):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True)
        s = fd.ops.slice(x, [0, 1], [x.shape()[0], x.shape()[1]])
        fd.add_output(fd.ops.sum(fd.ops.exp(s), [1]))
    x = torch.randn(5, 9, device=device)
    (y,) = fd.execute([x])
    torch.testing.assert_close(y, x[:, 1:].exp().sum(1))
    assert any(s.kind is SegmentKind.kernel for s in fd.last_segments())


def test_jit_rope_forward_and_backward_run_as_two_kernels(device):
    x = torch.randn(2, 6, 3, 16, device=device, requires_grad=True)
    angles = torch.randn(6, 1, 8, device=device)
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    f = fuser.jit(rope_eager)
    y = f(x, cos, sin)
    g = torch.randn_like(y)
    (gx,) = torch.autograd.grad(y, x, g)
    x2 = x.detach().clone().requires_grad_()
    y2 = rope_eager(x2, cos, sin)
    (gx2,) = torch.autograd.grad(y2, x2, g)
    torch.testing.assert_close(y, y2)
    torch.testing.assert_close(gx, gx2)
    info = f.cache_info()
    assert (info.kernels, info.fallback_ops) == (2, 0), info


def test_jit_pad_and_cat(device):
    def fn(x, y):
        return torch.cat([F.pad(x.sigmoid(), (1, 2)), y * 2], dim=0).relu()
    x, y = torch.randn(3, 5, device=device), torch.randn(2, 8, device=device)
    f = fuser.jit(fn)
    torch.testing.assert_close(f(x, y), fn(x, y))
    assert f.cache_info().kernels == 1


def test_pad_of_a_size_1_broadcast_axis_is_indexed_on_its_own(device):
    """The padded axis links to no input axis (a broadcast of size 1), yet its index chooses
    the fill: it must not fold with its neighbour (fuzz seed 2354 read i3 * 5 as one index)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, 1], contiguity=False)
        fd.add_output(fd.ops.pad(fd.ops.exp(x), [1, 3], 1.5))
    x = torch.randn(3, 1, 1, device=device).expand(3, 7, 1)  # stride 0 on both inner axes
    (y,) = fd.execute([x])
    torch.testing.assert_close(y, F.pad(x.exp(), (1, 3), value=1.5))
    one_kernel(fd)


def test_qk_norm_then_rope_is_one_kernel(device):
    """A per-head RMSNorm followed by rope (qk-norm models): the cat reads normalized values,
    whose row statistic is computed once for the whole row, not per shifted view."""
    def qk_norm_rope(q, w, cos, sin):
        qf = q.float()
        normed = (qf * torch.rsqrt(qf.pow(2).mean(-1, keepdim=True) + 1e-6) * w).to(q.dtype)
        return rope_eager(normed, cos, sin)
    q = torch.randn(2, 5, 3, 16, device=device, dtype=torch.bfloat16)
    w = torch.randn(16, device=device, dtype=torch.bfloat16)
    cos, sin = (torch.randn(5, 1, 16, device=device, dtype=torch.bfloat16) for _ in range(2))
    f = fuser.jit(qk_norm_rope)
    torch.testing.assert_close(f(q, w, cos, sin), qk_norm_rope(q, w, cos, sin), rtol=2e-2, atol=2e-2)
    assert f.cache_info().kernels == 1


def test_a_row_maximum_read_through_a_pad_covers_the_row(device):
    """The max of an all-negative row, padded after: the row is shorter than the padded loop
    axis, so the reduction keeps a kernel of its own (iterated over the padded extent, its
    masked lanes would have added zeros)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True)
        m = fd.ops.max(x, [1], True)
        fd.add_output(fd.ops.pad(fd.ops.sub(x, m), [2, 1], 9.0))
    x = -torch.rand(4, 7, device=device) - 1.0
    (y,) = fd.execute([x])
    torch.testing.assert_close(y, F.pad(x - x.amax(1, keepdim=True), (2, 1), value=9.0))
    assert kinds(fd) == ["kernel", "kernel"]


def test_softmax_of_a_concatenation_and_of_a_slice(device):
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=True)
        b = fd.define_tensor(shape=[-1, -1], contiguity=True)
        c = fd.ops.cat([a, fd.ops.exp(b)], 1)
        m = fd.ops.max(c, [1], True)
        e = fd.ops.exp(fd.ops.sub(c, m))
        fd.add_output(fd.ops.div(e, fd.ops.sum(e, [1], True)))
    a, b = torch.randn(3, 5, device=device), torch.randn(3, 4, device=device)
    (y,) = fd.execute([a, b])
    torch.testing.assert_close(y, torch.softmax(torch.cat([a, b.exp()], 1), 1))
    one_kernel(fd)


def test_a_slice_of_rows_beside_a_row_reduction_stays_correct(device):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True)
        s = fd.ops.slice(x, [1, 0], [x.shape()[0], x.shape()[1]])
        fd.add_output(fd.ops.sum(fd.ops.pad(fd.ops.exp(s), [1, 1], 0.5), [1]))
    x = torch.randn(5, 6, device=device)
    (y,) = fd.execute([x])
    torch.testing.assert_close(y, F.pad(x[1:].exp(), (1, 1), value=0.5).sum(1))


def test_jit_qk_norm_rope_backward_fuses_the_rope_gradient_into_the_norm_gradient(device):
    """The example's qk-norm piece: the backward's slice_scatter pieces have extents equal to
    the head dim only through a constraint binding checks (d - d // 2 + d // 2), still one loop
    axis, so the rope gradient and the norm's row gradient share one kernel (the weight's
    column sum is a second; forward one)."""
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).parents[2] / "examples" / "llama_pieces.py"
    spec = importlib.util.spec_from_file_location("llama_pieces", path)
    pieces = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pieces)
    fn, args = pieces.make_inputs(device, torch.float32, small=True)["qk_norm_rope"]
    f = fuser.jit(fn)
    got = pieces.forward_backward(f, pieces.leaf_copies(args))
    want = pieces.forward_backward(fn, pieces.leaf_copies(args))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert f.cache_info().kernels == 3, f.cache_info()


def test_a_softmax_of_a_cat_over_rows_too_long_for_registers_runs_through_aten(device):
    """Shifted views need the whole row in one block; beyond the persistent limit (here past
    Triton's largest block, 2**20) the segment runs through ATen instead of failing to compile."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True)
        y = fd.define_tensor(shape=[-1, -1], contiguity=True)
        c = fd.ops.cat([x, y], 1)
        e = fd.ops.exp(fd.ops.sub(c, fd.ops.max(c, [1], True)))
        fd.add_output(fd.ops.div(e, fd.ops.sum(e, [1], True)))
    x, y = torch.randn(1, 600_000, device=device), torch.randn(1, 600_000, device=device)
    (out,) = fd.execute([x, y])
    torch.testing.assert_close(out, torch.cat([x, y], 1).softmax(1))
