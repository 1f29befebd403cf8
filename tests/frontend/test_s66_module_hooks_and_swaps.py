"""A jitted module's parameters after its compile, and global module hooks.

Dynamo's fake modes keep weak references to the real tensors they traced; Dynamo drops them at
the end of a compile for registered backends only, and fuser.jit's backend is an object: each
parameter kept two or three, and `module.half()` under
`torch.__future__.set_swap_module_params_on_conversion(True)` refused to swap it. A global
module hook (`register_module_forward_hook`) was skipped for the submodules inside the
compiled forward and fired for each wrapper of the outer module: jitted calls run the module
uncompiled while one is registered."""
import copy
import weakref

import pytest
import torch
import torch.nn as nn

import fuser

from .jit_helpers import TOL


@pytest.fixture
def swap_on_conversion():
    before = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    yield
    torch.__future__.set_swap_module_params_on_conversion(before)


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))


@pytest.mark.parametrize("mode", ["no_grad", "forward", "forward_backward"])
def test_parameters_swap_after_a_jitted_call(mode, swap_on_conversion):
    m = _mlp()
    eager = copy.deepcopy(m)
    jitted = fuser.jit(m)
    x = torch.randn(4, 8)
    if mode == "no_grad":
        with torch.no_grad():
            y = jitted(x)
        expected = eager(x)
    elif mode == "forward":
        y, expected = jitted(x), eager(x)
    else:
        xj, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
        y, expected = jitted(xj), eager(xe)
        y.sum().backward()
        expected.sum().backward()
        torch.testing.assert_close(xj.grad, xe.grad, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(m[0].weight.grad, eager[0].weight.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(y, expected, rtol=1e-4, atol=1e-4)
    del y, expected
    assert weakref.getweakrefcount(m[0].weight) == 0
    weight = m[0].weight
    m.half()  # (swaps each parameter's contents in place: refused while a weak reference exists)
    eager.half()
    assert weight is m[0].weight and weight.dtype == torch.float16
    x16 = torch.randn(4, 8, dtype=torch.float16)
    rtol, atol = TOL[torch.float16]
    with torch.no_grad():
        torch.testing.assert_close(jitted(x16), eager(x16), rtol=rtol, atol=atol)


class _TwoLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(16, 16)
        self.l2 = nn.Linear(16, 8)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


def _scaling_hook(calls: list):
    def hook(module, inputs, output):
        calls.append(type(module).__name__)
        return output * 1.5 if isinstance(module, nn.Linear) else output
    return hook


@pytest.mark.parametrize("first_call_before_hook", [True, False])
def test_global_forward_hook_runs_as_in_eager(first_call_before_hook):
    m = _TwoLayers()
    eager = copy.deepcopy(m)
    jitted = fuser.jit(m)
    x = torch.randn(4, 16)
    if first_call_before_hook:
        torch.testing.assert_close(jitted(x), eager(x), rtol=1e-4, atol=1e-4)
    calls: list = []
    handle = nn.modules.module.register_module_forward_hook(_scaling_hook(calls))
    try:
        expected = eager(x)
        assert calls == ["Linear", "Linear", "_TwoLayers"]
        calls.clear()
        got = jitted(x)
        # each module's hook once, as in eager
        assert calls == ["Linear", "Linear", "_TwoLayers"]
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    finally:
        handle.remove()
    x2 = torch.randn(4, 16)
    torch.testing.assert_close(jitted(x2), eager(x2), rtol=1e-4, atol=1e-4)
    assert jitted.cache_info().graphs >= 1  # (compiled again once no hook is left)


def test_global_forward_pre_hook_in_a_jitted_function():
    layer = nn.Linear(12, 12)

    def f(x):
        return torch.tanh(layer(x)) * 2

    jitted = fuser.jit(f)
    x = torch.randn(3, 12)
    torch.testing.assert_close(jitted(x), f(x), rtol=1e-4, atol=1e-4)

    def pre_hook(module, inputs):
        return (inputs[0] + 1.0,)

    handle = nn.modules.module.register_module_forward_pre_hook(pre_hook)
    try:
        x = torch.randn(3, 12)
        torch.testing.assert_close(jitted(x), f(x), rtol=1e-4, atol=1e-4)
    finally:
        handle.remove()
