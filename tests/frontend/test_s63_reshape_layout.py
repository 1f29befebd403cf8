"""A value that a reshape makes, at a fusion's edge, keeps the layout the trace (or the
allocation domain) gives it: a reshape sunk past an elementwise op to an output reads the op's
result laid out so that it is a view in the output's order, group norm's own final reshape reads
its [N, G, C/G, H, W] result laid out for a channels-last output, and where no layout of the
input gives that view the reshaped value is copied into the output's layout
(passes/move_reshapes.py). The graph's later views and as_strided read that layout: they
raised "view size is not compatible", or read the wrong elements."""
import pytest
import torch
import torch.nn.functional as F

import fuser
from fuser import DataType, FusionDefinition
from fuser.segment import SegmentKind

from .jit_helpers import TOL


def _dense_strides_of(t: torch.Tensor) -> list:
    # strides of the axes longer than 1 (a size-1 axis's stride is arbitrary in both)
    return [(s, n) for s, n in zip(t.stride(), t.shape) if n > 1]


def _check(fn, x: torch.Tensor, compiled=None) -> None:
    want = fn(x)
    got = (compiled or fuser.jit(fn))(x)
    rtol, atol = TOL[x.dtype]
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol)
    assert _dense_strides_of(got) == _dense_strides_of(want), (got.stride(), want.stride())


def _channels_last(dtype=torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(63)
    return torch.randn(2, 6, 4, 5, generator=g).to(dtype).to(memory_format=torch.channels_last)


def _transposable() -> torch.Tensor:
    return torch.randn(6, 5, generator=torch.Generator().manual_seed(64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_group_norm_of_a_channels_last_input_keeps_eager_s_strides(dtype):
    # (fp16: the final cast sinks the reshape; fp32: the reshape is the output's own)
    _check(lambda x: F.group_norm(x, 3), _channels_last(dtype))


def test_group_norm_of_a_channels_last_input_then_token_rows():
    # a diffusion UNet's attention prep: the rows are a view of the channels-last result
    w, b = torch.randn(6), torch.randn(6)
    _check(lambda x: F.group_norm(x, 3, w, b).flatten(2).transpose(1, 2).reshape(-1, 6), _channels_last())


def test_group_norm_of_a_channels_last_input_read_through_as_strided():
    _check(lambda x: F.group_norm(x, 3).as_strided((2, 20, 6), (120, 6, 1)), _channels_last())


def test_group_norm_then_token_rows_under_torch_compile():
    def fn(x):
        return F.group_norm(x, 3).flatten(2).transpose(1, 2).reshape(-1, 6)
    _check(fn, _channels_last(), torch.compile(fn, backend="fuser"))


def test_a_reshape_of_a_transpose_sunk_past_exp_keeps_eager_s_strides():
    _check(lambda x: x.t().reshape(5, 2, 3).exp(), _transposable())


def test_a_reshape_of_a_transpose_sunk_past_exp_then_views():
    _check(lambda x: x.t().reshape(5, 2, 3).exp().reshape(5, 6).t().reshape(-1), _transposable())


def test_a_reshape_of_a_transpose_sunk_past_exp_read_through_as_strided():
    _check(lambda x: x.t().reshape(5, 2, 3).exp().as_strided((5, 6), (1, 5)), _transposable())


@pytest.mark.parametrize("shape", [[6, 5], [-1, -1]])
def test_a_definition_output_follows_its_allocation_domain_across_a_reshape(shape):
    # static sizes: the reshape sinks past the exp, which writes the transpose column-major;
    # symbolic ones: no run of axes is known equal, so it stays before the exp
    x = _transposable()
    with FusionDefinition() as fd:
        xi = fd.define_tensor(shape=shape, contiguity=True, dtype=DataType.Float)
        y = fd.ops.exp(fd.ops.reshape(fd.ops.permute(xi, [1, 0]), [5, 2, 3]))
        y.set_allocation_domain([y.axis(1), y.axis(2), y.axis(0)], True)
        fd.add_output(y)
    (out,) = fd.execute([x])
    torch.testing.assert_close(out, x.t().reshape(5, 2, 3).exp())
    assert out.stride() == (1, 15, 5)
    assert sum(s.kind is SegmentKind.kernel for s in fd.last_segments()) == 1


def test_a_reshape_to_a_laid_out_output_no_input_layout_views_is_copied_into_it():
    # [i1, i0] to [5, 2, 3]: the symbolic extents show no run of axes, so no layout of the exp
    # makes the reshape a view in the output's order
    x = _transposable()
    with FusionDefinition() as fd:
        xi = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        y = fd.ops.reshape(fd.ops.exp(fd.ops.permute(xi, [1, 0])), [5, 2, 3])
        y.set_allocation_domain([y.axis(1), y.axis(2), y.axis(0)], True)
        fd.add_output(y)
    (out,) = fd.execute([x])
    torch.testing.assert_close(out, x.t().exp().reshape(5, 2, 3))
    assert out.stride() == (1, 15, 5)
