"""Autograd semantics of jitted functions against eager: faults a probe found (fifty-sixth
session), each a test that failed before its fix."""
import pytest
import torch

import fuser
from tests.helpers import make


@pytest.mark.parametrize("call", [0, 1, 2])
def test_create_graph_through_a_backward_that_saves_only_intermediates_is_refused(call):
    """The backward of `exp(x.sum(-1)) * 2` saves only exp's result, which comes back from
    ctx.saved_tensors not requiring grad: the create_graph check let it through and the
    gradient came back a constant (a gradient penalty off by hundreds)."""
    def f(x):
        return x.sum(-1).exp() * 2

    jitted = fuser.jit(f)
    for _ in range(call):  # (the first call runs AOTAutograd's runtime, later ones fuser's node)
        x = (0.1 * make((8, 16))).requires_grad_()
        jitted(x).sum().backward()
    x = (0.1 * make((8, 16))).requires_grad_()
    y = jitted(x)
    with pytest.raises(RuntimeError, match="create_graph|double backward"):
        torch.autograd.grad(y.sum(), x, create_graph=True)


def test_writing_in_place_to_a_result_the_plan_returns_as_a_view():
    """A reshape moved to the fusion's edge made the result a view of the kernel's buffer:
    autograd forbade `y.add_(1)` on it (a custom Function's view), where eager allows it."""
    def f(x, w):
        return (x * w).view(2, 4, 16) * 2

    x, w = make((8, 16)).requires_grad_(), make((16,)).requires_grad_()
    jitted = fuser.jit(f)
    for _ in range(2):
        y = jitted(x, w)
        assert not y._is_view()
        y.add_(1.0)
        (y * y).sum().backward()
    got = (x.grad.clone(), w.grad.clone())
    x.grad = w.grad = None
    for _ in range(2):
        y = f(x, w)
        y.add_(1.0)
        (y * y).sum().backward()
    torch.testing.assert_close(got, (x.grad, w.grad))


def test_a_function_that_turns_grad_on_under_inference_mode_records_nothing():
    """Under inference_mode the call turned grad on (as for no_grad), so its outputs required
    grad and had a grad_fn, where eager's are plain inference tensors."""
    def f(x):
        with torch.enable_grad():
            return (x * 2).sin()

    jitted = fuser.jit(f)
    x = make((4, 6)).requires_grad_()
    jitted(x).sum().backward()  # (a training graph)
    with torch.inference_mode():
        for _ in range(2):
            y, want = jitted(x), f(x)
            assert (y.requires_grad, y.grad_fn, y.is_inference()) == (want.requires_grad, None, True)
            torch.testing.assert_close(y, want)


def test_create_graph_through_values_computed_from_inputs_that_need_no_grad_runs():
    """A saved value computed only from inputs that need no gradient is a constant of the
    backward: its double backward is eager's (a review found the first fix refused it)."""
    def gate(x, m):
        return (x * m.softmax(-1)).sum()

    x, m = make((4, 6)).requires_grad_(), make((4, 6))
    jitted = fuser.jit(gate)
    for _ in range(2):  # (the second call runs fuser's node)
        x.grad = None
        g, = torch.autograd.grad(jitted(x, m) + (x ** 3).sum(), x, create_graph=True)
        g.sum().backward()
        got = x.grad.clone()
        x.grad = None
        want_g, = torch.autograd.grad(gate(x, m) + (x ** 3).sum(), x, create_graph=True)
        want_g.sum().backward()
        torch.testing.assert_close(got, x.grad)
