"""The fake-quantize ops (QAT's quantizers) stay in Dynamo's graph with symbolic sizes
(sixty-fifth session): torch has no Meta kernel for their ATen ops, so under `fuser.jit`'s
default `dynamic="rows"` (and `torch.compile` once its sizes go dynamic) Dynamo broke the graph
at each and ran it eagerly; fuser/frontend/fake_kernels.py registers them."""
import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from torch._dynamo.utils import counters

import fuser  # (its import registers the Meta kernels)
from tests.frontend.jit_helpers import check_forward_backward
from tests.helpers import COMPILERS, fresh_jit

aten = torch.ops.aten


def _qat_per_tensor(x, w):
    y = F.linear(x, w) * 0.5 + 1
    y = torch.fake_quantize_per_tensor_affine(y, 0.05, 3, -128, 127)
    return torch.relu(y) * 2 - 1


def _qat_per_tensor_tensor_qparams(x, w, scale, zero_point):  # as torch.ao's FakeQuantize calls it
    y = torch.fake_quantize_per_tensor_affine(F.linear(x, w) * 0.5 + 1, scale, zero_point, -128, 127)
    return torch.relu(y) * 2 - 1


def _qat_per_channel(x, w, scale, zero_point):  # the weight quantized per output channel
    wq = torch.fake_quantize_per_channel_affine(w, scale, zero_point, 0, -128, 127)
    return torch.relu(F.linear(x, wq) * 0.5 + 1) * 2 - 1


def _learnable_per_tensor(x, scale, zero_point):
    y = torch._fake_quantize_learnable_per_tensor_affine(x * 1.5, scale, zero_point, -128, 127, 1.0)
    return torch.relu(y) * 2


def _learnable_per_channel(x, scale, zero_point):  # one scale a row
    y = torch._fake_quantize_learnable_per_channel_affine(x * 1.5, scale, zero_point, 0, -128, 127, 1.0)
    return torch.relu(y) * 2


def _arguments(name: str, rows: int, row_length: int) -> list:
    """Fresh random arguments; the weights (and the learnable scale and zero point) train. The
    per-channel scales are small enough that some weights clamp (the mask zeroes their
    gradients)."""
    x = torch.randn(rows, row_length, requires_grad=True)
    w = torch.randn(16, row_length, requires_grad=True)
    if name == "per_tensor":
        return [x, w]
    if name == "per_tensor_tensor_qparams":
        return [x, w, torch.tensor([0.05]), torch.tensor([3], dtype=torch.int32)]
    if name == "per_channel":
        return [x, w, torch.rand(16) * 0.02 + 0.005, torch.randint(-5, 5, (16,), dtype=torch.int32)]
    if name == "learnable_per_tensor":
        return [x, torch.tensor([0.05], requires_grad=True), torch.tensor([2.0], requires_grad=True)]
    return [x, (torch.rand(rows) * 0.05 + 0.02).requires_grad_(), torch.randn(rows).requires_grad_()]


FUNCTIONS = {"per_tensor": _qat_per_tensor, "per_tensor_tensor_qparams": _qat_per_tensor_tensor_qparams,
             "per_channel": _qat_per_channel,
             "learnable_per_tensor": _learnable_per_tensor, "learnable_per_channel": _learnable_per_channel}

# (rows, row length) in turn: a new batch, then a new row length (one retrace, every size
# symbolic), then a third shape that reuses it (docs/jit.md, dynamic shapes)
SHAPES = [(8, 32), (5, 32), (8, 48), (6, 40)]


def test_a_linear_fake_quant_relu_is_one_graph():
    # the probe's repro: 2 graphs with the fake-quant eager between them
    torch._dynamo.reset()
    f = fuser.jit(_qat_per_tensor)
    x, w = torch.randn(8, 32), torch.randn(16, 32)
    torch.testing.assert_close(f(x, w), _qat_per_tensor(x, w), rtol=1e-5, atol=1e-6)
    info = f.cache_info()
    assert (info.graphs, info.fallback_ops) == (1, 1), info


def test_a_per_channel_fake_quant_alone_is_a_graph():
    # it captured no graph at all: the whole call ran eagerly
    f = fresh_jit(lambda x, s, z: torch.fake_quantize_per_channel_affine(x, s, z, 1, -128, 127))
    for rows in (8, 5):
        x, s = torch.randn(rows, 32), torch.rand(32) * 0.02 + 0.005
        z = torch.randint(-5, 5, (32,), dtype=torch.int32)
        torch.testing.assert_close(f(x, s, z), torch.fake_quantize_per_channel_affine(x, s, z, 1, -128, 127))
    assert f.cache_info().graphs == 1, f.cache_info()


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_fake_quant_training_through_new_sizes_as_eager_without_graph_breaks(name):
    fn = FUNCTIONS[name]
    f = fresh_jit(fn)
    counters.clear()
    graphs = []
    for rows, row_length in SHAPES:
        check_forward_backward(fn, f, _arguments(name, rows, row_length))
        graphs.append(f.cache_info().graphs)
    assert not counters["graph_break"], dict(counters["graph_break"])
    # the learnable per-channel scale is a float argument whose last size is the rows: a new
    # batch is a new row length there
    expected = [1, 2, 2, 2] if name == "learnable_per_channel" else [1, 1, 2, 2]
    assert graphs == expected


@pytest.mark.parametrize("name", ["per_tensor", "per_channel"])
def test_fake_quant_under_torch_compile_as_eager_without_graph_breaks(name):
    # Dynamo's automatic dynamic shapes make the second shape's trace symbolic
    fn = FUNCTIONS[name]
    f = COMPILERS["torch.compile"](fn)
    counters.clear()
    for rows, row_length in SHAPES[:3]:
        check_forward_backward(fn, f, _arguments(name, rows, row_length))
    assert not counters["graph_break"], dict(counters["graph_break"])


def _layouts():
    yield "contiguous", torch.randn(4, 6, 3, 5)
    yield "channels-last", torch.randn(4, 6, 3, 5).to(memory_format=torch.channels_last)
    yield "transposed", torch.randn(6, 4).t()
    yield "strided", torch.randn(4, 12)[:, ::2]
    yield "bfloat16", torch.randn(4, 6, dtype=torch.bfloat16)
    yield "empty", torch.randn(0, 6)


def _calls(x):
    """Each op with fresh arguments for input `x`, channels on its axis 1."""
    c = x.shape[1]
    scale, int_zero_point, zero_point = torch.rand(c) + 0.1, torch.randint(-5, 5, (c,), dtype=torch.int32), torch.randn(c)
    one_scale, one_zero_point = torch.tensor([0.1]), torch.tensor([2.0])
    yield aten.fake_quantize_per_tensor_affine_cachemask, (x, 0.1, 3, -128, 127)
    yield aten._fake_quantize_per_tensor_affine_cachemask_tensor_qparams, (
        x, one_scale, torch.tensor([3], dtype=torch.int32), torch.tensor([1]), -128, 127)
    yield aten.fake_quantize_per_channel_affine_cachemask, (x, scale, int_zero_point, 1, -128, 127)
    yield aten._fake_quantize_learnable_per_tensor_affine, (x, one_scale, one_zero_point, -128, 127, 1.0)
    yield aten._fake_quantize_learnable_per_channel_affine, (x, scale, zero_point, 1, -128, 127, 1.0)
    grad = torch.randn(x.shape)
    yield aten._fake_quantize_learnable_per_tensor_affine_backward, (
        grad, x, one_scale, one_zero_point, -128, 127, 1.0)
    yield aten._fake_quantize_learnable_per_channel_affine_backward, (
        grad, x, scale, zero_point, 1, -128, 127, 1.0)


def _layout(result) -> list:
    return [(tuple(t.shape), t.stride(), t.dtype) for t in (result if isinstance(result, tuple) else (result,))]


@pytest.mark.parametrize("layout", [name for name, _ in _layouts()])
def test_the_meta_kernels_give_the_cpu_kernels_sizes_strides_and_dtypes(layout):
    x = dict(_layouts())[layout]
    for op, args in _calls(x):
        on_meta = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]
        assert _layout(op(*on_meta)) == _layout(op(*args)), (op, layout)


def test_the_meta_kernels_refuse_what_the_cpu_kernels_refuse():
    x = torch.randn(4, 6, device="meta")
    with pytest.raises(RuntimeError, match="quant_min"):
        aten.fake_quantize_per_tensor_affine_cachemask(x, 0.1, 0, 127, -128)
    with pytest.raises(RuntimeError, match="not consistent with input"):
        aten.fake_quantize_per_channel_affine_cachemask(
            x, torch.rand(5, device="meta"), torch.zeros(5, dtype=torch.int32, device="meta"), 1, -128, 127)
