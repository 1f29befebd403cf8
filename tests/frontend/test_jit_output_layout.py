"""Outputs of generated kernels take eager's strides: fuser.jit gives each kernel output the
layout of the traced graph's output (channels-last, transposed), and a FusionDefinition output
with an allocation domain is written in that order. A pointwise kernel walks its axes in the
output's memory order, so an input and output laid out alike stream as a contiguous pair does."""
import re

import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition


def _dense_strides_of(t: torch.Tensor) -> list:
    # strides of the axes longer than 1 (a size-1 axis's stride is arbitrary in both)
    return [(s, n) for s, n in zip(t.stride(), t.shape) if n > 1]


@pytest.mark.parametrize("layout", ["channels_last", "transposed", "permuted3d", "contiguous"])
def test_pointwise_outputs_keep_eager_strides(layout):
    g = torch.Generator().manual_seed(21)
    if layout == "channels_last":
        x = torch.randn(2, 6, 5, 3, generator=g).to(memory_format=torch.channels_last)
    elif layout == "transposed":
        x = torch.randn(7, 9, generator=g).t()
    elif layout == "permuted3d":
        x = torch.randn(4, 5, 6, generator=g).permute(2, 0, 1)
    else:
        x = torch.randn(3, 8, 5, generator=g)

    def f(x):
        return torch.relu(x * 2.0 + 1.0), torch.sigmoid(x) - x

    got, want = fuser.jit(f)(x), f(x)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e)
        assert _dense_strides_of(a) == _dense_strides_of(e), (a.stride(), e.stride())


def test_a_channels_last_result_views_as_eager_s_does():
    """`.view` after a permute needs the channels-last strides eager gives: with a row-major
    result it raised 'view size is not compatible with input tensor's size and stride'."""
    x = torch.randn(2, 4, 3, 3).to(memory_format=torch.channels_last)

    def f(x):
        y = torch.relu(x * 3.0 - 0.5)
        return y.permute(0, 2, 3, 1).view(2, -1)

    torch.testing.assert_close(fuser.jit(f)(x), f(x))


def test_channels_last_streams_as_the_contiguous_kernel():
    """Input and output alike in memory: one run, the same kernel as for contiguous tensors
    (it was a tile kernel transposing between them)."""
    def f(x):
        return x * 2.0 + 1.0

    kernels = []
    for fmt in (torch.contiguous_format, torch.channels_last):
        text = str(fuser.explain(f, torch.randn(2, 8, 4, 4).to(memory_format=fmt)))
        kernels.append(re.findall(r"def (fuser_\w+)\(", text))
    assert len(kernels[0]) == 1 and kernels[0] == kernels[1]


def test_reduction_of_channels_last_keeps_values_and_eager_strides():
    x = torch.randn(2, 6, 4, 5).to(memory_format=torch.channels_last)

    def f(x):
        return torch.softmax(x.float(), dim=1), (x * x).sum(dim=(2, 3), keepdim=True)

    got, want = fuser.jit(f)(x), f(x)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)
        assert _dense_strides_of(a) == _dense_strides_of(e), (a.stride(), e.stride())


def test_mixed_layouts_follow_eager():
    """Eager's result of two operands laid out differently follows its own rule (the first
    operand's layout here); fuser's takes the same strides, the values eager's."""
    g = torch.Generator().manual_seed(3)
    a = torch.randn(5, 7, generator=g).t()
    b = torch.randn(7, 5, generator=g)

    def f(a, b):
        return a * b + 1.0

    got, want = fuser.jit(f)(a, b), f(a, b)
    torch.testing.assert_close(got, want)
    assert got.stride() == want.stride()


def test_traced_order():
    from fuser.frontend.lowering import traced_order

    assert traced_order(torch.empty(2, 3, 4, 5)) is None
    assert traced_order(torch.empty(2, 3, 4, 5).to(memory_format=torch.channels_last)) == [0, 2, 3, 1]
    assert traced_order(torch.empty(4, 3).t()) == [1, 0]
    assert traced_order(torch.empty(4, 1).expand(4, 3)) is None  # not dense: keeps row-major
    assert traced_order(torch.empty(4, 6)[:, ::2]) is None


def test_definition_output_allocation_domain_is_honoured():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1, -1], contiguity=True, dtype=DataType.Float)
        y = fd.ops.mul(fd.ops.exp(x), 0.5)
        fd.add_output(y)
        logical = y.get_logical_domain()
        y.set_allocation_domain([logical[2], logical[0], logical[1]], True)
    g = torch.Generator().manual_seed(8)
    x = torch.randn(3, 4, 5, generator=g)
    (out,) = fd.execute([x])
    torch.testing.assert_close(out, torch.exp(x) * 0.5)
    assert out.stride() == (4, 1, 12)  # axis 2 outermost, then 0, then 1
    (again,) = fd.execute([torch.randn(3, 4, 5, generator=g)])  # the prepared launch's layout
    assert again.stride() == (4, 1, 12)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_channels_last_on_the_gpu_through_the_ready_path():
    """Repeat calls take the ready path (its inline allocators read the prepared layouts)."""
    def f(x, b):
        return torch.nn.functional.gelu(x + b, approximate="tanh").to(torch.bfloat16)

    jf = fuser.jit(f)
    b = torch.randn(1, 32, 1, 1, device="cuda")
    for _ in range(4):
        x = torch.randn(4, 32, 16, 8, device="cuda").to(memory_format=torch.channels_last)
        got, want = jf(x, b), f(x, b)
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
        assert got.stride() == want.stride()


def test_pieces_of_one_element_keep_the_layout_of_what_they_split():
    """Every piece of one element along the split axis (a slice squeezed, then unsqueezed)
    left the split value row-major: a channels-last (x * 2).chunk(4, -1) came back with
    row-major pieces, and a view that eager's pieces allow raised."""
    def f(x):
        return (x * 2).chunk(4, -1)

    x = torch.randn(2, 3, 4, 4).to(memory_format=torch.channels_last)
    want, got = f(x), fuser.jit(f)(x)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w)
        assert g.stride()[:3] == w.stride()[:3]  # (the size-1 axis's own stride is ATen's unsqueeze's)
        torch.testing.assert_close(g.squeeze(-1).transpose(1, 2).view(8, 3), w.squeeze(-1).transpose(1, 2).view(8, 3))
