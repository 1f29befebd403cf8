"""Hooks registered on a jitted module itself while a global module hook is registered.

Eager runs a global hook once per module call. A jitted module whose wrapper had hooks of its
own took nn.Module's call, which ran the global hooks for the wrapper too, and then the wrapped
module's call ran them again (a global `out - 5` under a wrapper hook `o * 10`: off by 50). The
wrapper now runs only its own hooks around the wrapped module's call while global hooks are
registered."""
import copy

import pytest
import torch
import torch.nn as nn

import fuser

from .jit_helpers import TOL

RTOL, ATOL = TOL[torch.float32]


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))


def _global_hook(calls: list):
    def hook(module, inputs, output):
        calls.append(type(module).__name__)
        return output - 5
    return hook


@pytest.mark.parametrize("with_kwargs", [False, True])
def test_a_global_forward_hook_runs_once_beside_the_wrappers_own_hook(with_kwargs):
    m = _mlp()
    eager = copy.deepcopy(m)
    jitted = fuser.jit(m)
    if with_kwargs:
        own = lambda module, args, kwargs, out: out * 10  # noqa: E731
    else:
        own = lambda module, args, out: out * 10  # noqa: E731
    eager.register_forward_hook(own, with_kwargs=with_kwargs)
    jitted.register_forward_hook(own, with_kwargs=with_kwargs)
    x = torch.randn(3, 8)
    calls: list = []
    handle = nn.modules.module.register_module_forward_hook(_global_hook(calls))
    try:
        expected = eager(x)
        eager_calls, calls[:] = list(calls), []
        got = jitted(x)
    finally:
        handle.remove()
    assert calls == eager_calls == ["Linear", "ReLU", "Linear", "Sequential"]
    torch.testing.assert_close(got, expected, rtol=RTOL, atol=ATOL)


def test_the_wrappers_own_pre_hook_and_forward_hook_run_once_each():
    m = _mlp()
    eager = copy.deepcopy(m)
    jitted = fuser.jit(m)
    seen: list = []

    def pre_hook(module, args):
        seen.append(module)
        return (args[0] * 2,)

    eager.register_forward_pre_hook(pre_hook)
    jitted.register_forward_pre_hook(pre_hook)
    eager.register_forward_hook(lambda module, args, out: out + 1)
    jitted.register_forward_hook(lambda module, args, out: out + 1)
    x = torch.randn(5, 8)
    handle = nn.modules.module.register_module_forward_hook(lambda module, args, out: out * 3)
    try:
        expected = eager(x)
        seen.clear()
        got = jitted(x)
    finally:
        handle.remove()
    assert seen == [jitted]  # (the wrapper's hook gets the wrapper, as without global hooks)
    torch.testing.assert_close(got, expected, rtol=RTOL, atol=ATOL)


def test_the_wrappers_full_backward_hook_runs_beside_a_global_one():
    m = _mlp()
    eager = copy.deepcopy(m)
    jitted = fuser.jit(m)

    def own(module, grad_input, grad_output):
        return (grad_input[0] * 2,)

    eager.register_full_backward_hook(own)
    jitted.register_full_backward_hook(own)
    x = torch.randn(4, 8, requires_grad=True)
    x_eager = x.detach().clone().requires_grad_()
    g = torch.randn(4, 4)
    calls: list = []
    handle = nn.modules.module.register_module_full_backward_hook(
        lambda module, grad_input, grad_output: calls.append(type(module).__name__))
    try:
        eager(x_eager).backward(g)
        eager_calls, calls[:] = list(calls), []
        jitted(x).backward(g)
    finally:
        handle.remove()
    assert sorted(calls) == sorted(eager_calls)
    torch.testing.assert_close(x.grad, x_eager.grad, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(m[0].weight.grad, eager[0].weight.grad, rtol=RTOL, atol=ATOL)


def test_an_old_style_backward_hook_on_the_wrapper_is_refused_under_a_global_hook():
    jitted = fuser.jit(_mlp())
    jitted.register_backward_hook(lambda module, grad_input, grad_output: None)
    handle = nn.modules.module.register_module_forward_hook(lambda module, args, out: out)
    try:
        with pytest.raises(fuser.UnsupportedError, match="register_full_backward_hook"):
            jitted(torch.randn(2, 8, requires_grad=True))
    finally:
        handle.remove()


def test_always_called_forward_hook_of_the_wrapper_runs_on_an_error():
    class Fails(nn.Module):
        def forward(self, x):
            raise ValueError("the forward's own error")

    jitted = fuser.jit(Fails())
    ran: list = []
    jitted.register_forward_hook(lambda module, args, out: ran.append(out), always_call=True)
    handle = nn.modules.module.register_module_forward_hook(lambda module, args, out: out)
    try:
        with pytest.raises(ValueError, match="the forward's own error"):
            jitted(torch.randn(2, 3))
    finally:
        handle.remove()
    assert ran == [None]
