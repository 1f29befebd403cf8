"""The direct call path (frontend/direct.py) for torch's own modules jitted: each is compiled
through a frame of its own (jit.py `_own_frame`: Dynamo would run them all through its one
shared `wrap_inline` frame), which had *args/**kwargs and so never took the direct path; every
repeat call paid Dynamo's wrapper. The frame now has the forward's parameters, and whatever
DirectCall checks for a module (hooks, a patched forward, the mode, a swapped parameter, a call
Python refuses, torch.jit tracing) still gives eager's result."""
import copy

import pytest
import torch

import fuser
from fuser.frontend.jit import _frame_shared

from .jit_helpers import assert_close_to_eager


def _warm(jitted, module, *args, calls: int = 3, **kwargs):
    """`calls` calls of `jitted` against eager `module`, each matching; returns the direct hits."""
    for _ in range(calls):
        assert_close_to_eager(jitted(*args, **kwargs), module(*args, **kwargs))
    return jitted._jit._direct.hits


@pytest.mark.parametrize("make", [
    lambda: torch.nn.LayerNorm(32),
    lambda: torch.nn.GELU(approximate="tanh"),
    lambda: torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU()),
], ids=["LayerNorm", "GELU", "Sequential"])
def test_torch_modules_take_the_direct_path(make):
    module = make()
    assert _frame_shared(module)  # (Sequential too: its own frame, the case at hand)
    jitted = fuser.jit(module)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(8, 32)
            assert_close_to_eager(jitted(x), module(x))
    assert jitted._jit._direct.hits == 2
    assert jitted.cache_info().graphs == 1


def test_a_training_call_on_the_direct_path_gives_eagers_gradients():
    module = torch.nn.LayerNorm(32)
    jitted = fuser.jit(module)
    for _ in range(3):
        x = torch.randn(8, 32, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_()
        module.zero_grad()
        y = jitted(x)
        dy = torch.randn_like(y)
        y.backward(dy)
        got = (x.grad, module.weight.grad.clone(), module.bias.grad.clone())
        module.zero_grad()
        y_ref = module(x_ref)
        y_ref.backward(dy)
        assert_close_to_eager(y, y_ref)
        for a, b in zip(got, (x_ref.grad, module.weight.grad, module.bias.grad)):
            assert_close_to_eager(a, b)
    assert jitted._jit._direct.hits == 2


def test_keywords_and_defaults_are_the_forwards():
    # GRUCell.forward(input, hx=None): the frame's default is the forward's own object
    module = torch.nn.GRUCell(8, 16)
    jitted = fuser.jit(module)
    frame = jitted._jit._frame
    assert frame.__func__.__defaults__[0] is type(module).forward.__defaults__[0]
    x, h = torch.randn(4, 8), torch.randn(4, 16)
    with torch.no_grad():
        hits = _warm(jitted, module, x, hx=h)
        assert hits == 2
        assert _warm(jitted, module, input=x, hx=h) == hits + 3
        assert_close_to_eager(jitted(x), module(x))  # (hx=None: another entry)
        assert_close_to_eager(jitted(x), module(x))
        assert jitted._jit._direct.hits == hits + 4


@pytest.mark.parametrize("call", [
    lambda f, x: f(x, x),  # one argument too many
    lambda f, x: f(),  # one missing
    lambda f, x: f(inp=x),  # an unknown keyword
    lambda f, x: f(x, input=x),  # a repeated one
], ids=["too-many", "missing", "unknown-keyword", "repeated"])
def test_calls_python_refuses_raise_eagers_type_error(call):
    module = torch.nn.LayerNorm(16)
    jitted = fuser.jit(module)
    x = torch.randn(4, 16)
    with torch.no_grad():
        _warm(jitted, module, x)  # (remembered: the next call tries the direct path first)
        with pytest.raises(TypeError) as ours:
            call(jitted, x)
        with pytest.raises(TypeError) as eager:
            call(module, x)
    assert str(ours.value) == str(eager.value)


def test_a_hook_added_after_warm_calls_runs():
    module = torch.nn.LayerNorm(16)
    jitted = fuser.jit(module)
    x = torch.randn(4, 16)
    with torch.no_grad():
        hits = _warm(jitted, module, x)
        handle = module.register_forward_hook(lambda mod, args, out: out * 2.0 + 1.0)
        assert _warm(jitted, module, x) == hits  # (a module with hooks: Dynamo's path)
        handle.remove()
        _warm(jitted, module, x)
        pre = module.register_forward_pre_hook(lambda mod, args: (args[0] * 3.0,))
        _warm(jitted, module, x)
        pre.remove()
        assert _warm(jitted, module, x) > hits


def test_a_global_forward_hook_runs():
    module = torch.nn.GELU()
    jitted = fuser.jit(module)
    x = torch.randn(4, 16)
    with torch.no_grad():
        _warm(jitted, module, x)
        handle = torch.nn.modules.module.register_module_forward_hook(lambda mod, args, out: out - 5.0)
        try:
            _warm(jitted, module, x)
        finally:
            handle.remove()
        _warm(jitted, module, x)


def test_the_mode_and_swapped_parameters_are_seen():
    # BatchNorm: batch statistics (and running statistics updated) in training, the running
    # ones in eval
    module = torch.nn.BatchNorm1d(16)
    eager = copy.deepcopy(module)
    jitted = fuser.jit(module)
    with torch.no_grad():
        for mode in ("train", "eval", "train", "eval"):
            getattr(module, mode)()
            getattr(eager, mode)()
            for _ in range(3):
                x = torch.randn(8, 16) * 3 + 1
                assert_close_to_eager(jitted(x), eager(x))
                assert_close_to_eager(module.running_mean, eager.running_mean)
                assert_close_to_eager(module.running_var, eager.running_var)
        hits = jitted._jit._direct.hits
        assert hits > 0
        module.weight = torch.nn.Parameter(torch.randn(16))  # a new parameter object
        eager.weight = torch.nn.Parameter(module.weight.detach().clone())
        x = torch.randn(8, 16)
        assert_close_to_eager(jitted(x), eager(x))
        module.bias.add_(2.0)  # the same parameter, new values
        eager.bias.add_(2.0)
        assert_close_to_eager(jitted(x), eager(x))
        assert jitted._jit._direct.hits > hits


def test_a_forward_patched_on_the_instance_runs():
    module = torch.nn.LayerNorm(16)
    jitted = fuser.jit(module)
    x = torch.randn(4, 16)
    with torch.no_grad():
        hits = _warm(jitted, module, x)
        module.forward = lambda t: t * 3.0
        assert _warm(jitted, module, x) == hits
        assert_close_to_eager(jitted(x), x * 3.0)
        del module.forward
        assert _warm(jitted, module, x) > hits


@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated")
def test_torch_jit_trace_is_refused_as_through_dynamo():
    # the direct path would run the entry's graph unseen by the tracer; Dynamo refuses
    module = torch.nn.LayerNorm(16)
    jitted = fuser.jit(module)
    x = torch.randn(4, 16)
    with torch.no_grad():
        hits = _warm(jitted, module, x)
        with pytest.raises(RuntimeError, match="torch.jit.trace a dynamo-optimized function"):
            torch.jit.trace(lambda t: jitted(t) * 2.0, (x,), check_trace=False)
        assert jitted._jit._direct.hits == hits


def test_module_compile_leaves_the_direct_path():
    # module.compile() sets a compiled call on the module, which its call then runs
    module = torch.nn.LayerNorm(16)
    jitted = fuser.jit(module)
    x = torch.randn(4, 16)
    with torch.no_grad():
        hits = _warm(jitted, module, x)
        module.compile(backend="eager")
        assert _warm(jitted, module, x) == hits


def test_bound_methods_of_two_instances_keep_their_own_weights():
    # a method bound to a module is compiled as its function, called with the module as `self`
    class Gate(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(8))

        def gated(self, x, scale=2.0):
            return torch.tanh(x * self.w) * scale

    a, b = Gate(), Gate()
    ja, jb = fuser.jit(a.gated), fuser.jit(b.gated)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(4, 8)
            assert_close_to_eager(ja(x), a.gated(x))
            assert_close_to_eager(jb(x, scale=3.0), b.gated(x, scale=3.0))
            assert_close_to_eager(jb(x, scale=3.0), b.gated(x, scale=3.0))
    assert jb._direct.hits > 0
