"""Inputs sharing memory, one written in place, in forms AOTAutograd refuses (an AssertionError
of its merge_view_inputs): the first trace raised fuser's InternalError where eager runs; the
graph now runs as Dynamo traced it, in-place ops in order, as eager."""
import copy

import pytest
import torch
import torch._dynamo

import fuser
from tests.helpers import make


def _ways():
    torch._dynamo.reset()
    return [("jit", fuser.jit), ("compile", lambda f: torch.compile(f, backend="fuser"))]


def _sum_bits_and_double(a, b):  # b: a's memory viewed as int32
    s = (b & 0xFFFF).float().sum()
    a.mul_(2)
    return s + a.sum()


def test_a_write_to_an_argument_another_reads_as_another_dtype_as_eager():
    # AOTAutograd: "does not yet handle input mutations on views with different dtypes"
    for name, compile_fn in _ways():
        f = compile_fn(_sum_bits_and_double)
        for call in range(2):
            a = make([96])
            ea = a.clone()
            expected = _sum_bits_and_double(ea, ea.view(torch.int32))
            got = f(a, a.view(torch.int32))
            torch.testing.assert_close(got, expected, msg=f"{name} call {call}")
            assert torch.equal(a, ea), (name, call)
        if name == "jit":
            info = f.cache_info()
            assert (info.calls, info.graphs, info.fusions) == (2, 1, 0)


class _RowCache(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(make([8, 5]))
        self.register_buffer("cache", make([8, 5]))
        self.register_buffer("cache_rows", self.cache[::2])  # a view of cache

    def forward(self, x):
        self.cache_rows.copy_(x[:4] * 3)
        return (x * self.w).sum(0) + self.cache.sum(0)


@pytest.mark.parametrize("way", ["jit", "compile"])
def test_a_module_writing_a_buffer_that_views_another_trains_as_eager(way):
    # a deepcopy keeps the buffers' shared storage but not cache_rows' ._base; AOTAutograd,
    # with w needing grad: "does not yet handle non-differentiable view input mutations"
    compile_fn = dict(_ways())[way]
    torch.manual_seed(0)
    module = copy.deepcopy(_RowCache())
    eager = copy.deepcopy(module)
    compiled = compile_fn(module)
    for call in range(2):
        x = make([8, 5])
        expected = eager(x)
        got = compiled(x)
        torch.testing.assert_close(got, expected, msg=f"{way} call {call}")
        assert torch.equal(module.cache, eager.cache) and torch.equal(module.cache_rows, eager.cache_rows)
        assert module.cache_rows.data_ptr() == module.cache.data_ptr()  # (still a view of it)
        expected.square().sum().backward()
        got.square().sum().backward()
        torch.testing.assert_close(module.w.grad, eager.w.grad, msg=f"{way} call {call}")
    if way == "jit":
        info = compiled.cache_info()
        assert (info.calls, info.graphs, info.fusions) == (2, 1, 0)
