"""Review regressions of fuser.jit's leaner call path: the direct path for modules
(frontend/direct.py) and the inference call without the grad-mode toggle (backend.py)."""
import types

import pytest
import torch

import fuser

from .jit_helpers import assert_close_to_eager


class _Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8))

    def forward(self, x):
        return torch.relu(x * self.w) + 1.0


def test_a_forward_patched_on_the_instance_is_called():
    # Module.__call__ calls `module.forward`, an instance attribute where one was set (as
    # accelerate's and other libraries' hooks do); the direct path ran the class's forward
    m = _Scaled()
    jitted = fuser.jit(m)
    x = torch.randn(4, 8)
    with torch.no_grad():
        for _ in range(3):
            assert_close_to_eager(jitted(x), m(x))
        assert jitted._jit._direct.hits == 2
        m.forward = types.MethodType(lambda self, x: torch.tanh(x) * 100.0, m)
        for _ in range(2):
            assert_close_to_eager(jitted(x), torch.tanh(x) * 100.0)
        del m.forward
        for _ in range(2):
            assert_close_to_eager(jitted(x), torch.relu(x * m.w) + 1.0)


def test_a_reassigned_class_forward_is_called():
    class Local(_Scaled):
        def forward(self, x):
            return torch.sigmoid(x * self.w)

    m = Local()
    jitted = fuser.jit(m)
    x = torch.randn(4, 8)
    with torch.no_grad():
        for _ in range(3):
            assert_close_to_eager(jitted(x), m(x))
        Local.forward = lambda self, x: torch.cos(x) - self.w
        for _ in range(2):
            assert_close_to_eager(jitted(x), torch.cos(x) - m.w)


@pytest.mark.parametrize("case", ["matmul", "linear"])
def test_outputs_of_an_inference_graph_need_no_grad_when_inputs_do(case):
    # AOTAutograd compiles an inference graph when no output needs a gradient, even where
    # inputs do (x.detach() @ w.detach()); with grad mode left on, the ATen segment of the
    # fusion recorded autograd history on those inputs: outputs needed a gradient, and a loss
    # through them sent gradients into tensors eager had detached
    if case == "matmul":
        def fn(x, w):
            return (x.detach() * 2.0) @ w.detach()
        w = torch.randn(8, 3, requires_grad=True)
    else:
        def fn(x, w):
            return torch.nn.functional.linear(torch.relu(x.detach()), w.detach())
        w = torch.randn(3, 8, requires_grad=True)
    x = torch.randn(4, 8, requires_grad=True)
    jitted = fuser.jit(fn)
    for _ in range(3):
        out = jitted(x, w)
        assert torch.is_grad_enabled()
        assert not out.requires_grad and out.grad_fn is None
        assert_close_to_eager(out, fn(x, w))
        x.grad = w.grad = None
        (out.sum() + x.sum()).backward()
        torch.testing.assert_close(x.grad, torch.ones_like(x))
        assert w.grad is None


def test_a_program_of_fusions_on_inputs_that_need_no_grad_still_skips_the_toggle(monkeypatch):
    from fuser.frontend import backend

    made = []

    class Recorded(backend._InferenceCall):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(backend, "_InferenceCall", Recorded)

    def f(x):
        return x.sin() + 1

    def g(x):
        return x.cos() * 3

    x = torch.randn(5, 3)
    jitted = fuser.jit(f)
    for _ in range(3):
        torch.testing.assert_close(jitted(x), f(x))
    assert len(made) == 1 and not made[0].grad_off
    jitted = fuser.jit(g)  # an input that needs a gradient under no_grad: the inference graph
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(jitted(x.requires_grad_()), g(x))
    assert len(made) == 2 and made[1].grad_off
