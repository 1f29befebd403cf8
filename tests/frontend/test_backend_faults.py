"""Faults of `torch.compile(backend="fuser")` found by probing it as a torch.compile user would
(forty-eighth session), each checked against eager PyTorch."""
import pytest
import torch
import torch._dynamo

import fuser
from tests.helpers import make


def _compiled(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend="fuser")


@pytest.mark.parametrize("fn", [
    lambda x, y: x * y.sum().item() + 1,
    lambda x, y: torch.full_like(x, y.max().item()) * x,
    lambda x, y: x.clamp(max=x.median().item()),
], ids=["mul", "full_like", "clamp"])
def test_a_float_item_captured_as_a_scalar(fn):
    # an unbacked float has no value to specialize to; Dynamo's retrace raised on it
    x, y = make((3, 4)), make((5,))
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        out = _compiled(fn)(x, y)
    torch.testing.assert_close(out, fn(x, y))


def test_a_float_item_in_training():
    fn = lambda x, y: (x * y.sum().item()).tanh().sum()  # noqa: E731
    x, y = make((3, 4)).requires_grad_(), make((5,))
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        _compiled(fn)(x, y).backward()
    got, x.grad = x.grad, None
    fn(x, y).backward()
    torch.testing.assert_close(got, x.grad)


def test_a_meta_tensor_is_named_by_its_argument():
    h = _compiled(lambda inp: inp.exp() * 2)
    with pytest.raises(Exception, match="argument inp: a meta tensor") as caught:
        h(torch.randn(3, device="meta"))
    assert isinstance(getattr(caught.value, "inner_exception", caught.value), fuser.FusionInputError)


def test_create_graph_error_names_both_ways_in():
    f = _compiled(lambda x: (x.sin() * x).sum())
    x = make((5,)).requires_grad_()
    torch.autograd.grad(f(x), x)  # (the first call's backward is AOTAutograd's; later ones fuser's)
    with pytest.raises(fuser.UnsupportedError, match=r"compiled by fuser \(fuser.jit or torch.compile"):
        torch.autograd.grad(f(x), x, create_graph=True)


def test_a_compiled_graph_is_freed_with_its_model():
    """The backend held every graph it compiled (programs, definitions, kernels), so a process
    that compiled models in a loop grew without bound (fifty-fifth session)."""
    import gc
    import weakref

    from fuser.frontend.backend import backend_for

    def one_model():
        m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.GELU())
        c = _compiled(m)
        x = make((4, 8))
        out = c(x)
        torch.testing.assert_close(out, m(x))
        out.sum().backward()
        assert backend_for().records, "the live model's graph is listed"
        return weakref.ref(backend_for().records[-1])

    record = one_model()
    torch._dynamo.reset()
    gc.collect()
    assert record() is None
