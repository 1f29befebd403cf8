"""fuser.jit(fallback="eager") and a call that fails after some of its graphs ran: where one of
them wrote an input in place (graph 1 writes x, a graph break, graph 2 fails to trace or to
compile), running the function again eagerly applied the write twice and returned a result
computed from the doubly-written input. Now such a call raises, saying why, and later calls run
eagerly; a call whose failing graph is the first still runs again eagerly, as before."""
import warnings

import pytest
import torch

import fuser
import fuser.frontend.backend as backend
from tests.helpers import make


@torch.library.custom_op("fuser_tests::s65_twice_no_fake", mutates_args=())
def twice_no_fake(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def write_then_untraceable(x):
    x.add_(1)
    torch._dynamo.graph_break()
    return twice_no_fake(x).relu() + 1


def untraceable_then_write(x):
    y = twice_no_fake(x).relu() + 1
    torch._dynamo.graph_break()
    x.add_(1)
    return y


def test_a_trace_failure_after_a_write_raises_instead_of_writing_twice():
    x = make((3, 5))
    before = x.clone()
    jitted = fuser.jit(write_then_untraceable, fallback="eager")
    with pytest.raises(fuser.UnsupportedError, match="did not run write_then_untraceable again eagerly"):
        jitted(x)
    torch.testing.assert_close(x, before + 1)  # (written once, by the first graph)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (no second warning: eager from now on)
        y = x.clone()
        torch.testing.assert_close(jitted(x), write_then_untraceable(y))
    torch.testing.assert_close(x, y)


def test_a_trace_failure_before_any_write_still_falls_back():
    x = make((3, 5))
    y = x.clone()
    jitted = fuser.jit(untraceable_then_write, fallback="eager")
    with pytest.warns(UserWarning, match="running it eagerly"):
        out = jitted(x)
    torch.testing.assert_close(out, untraceable_then_write(y))
    torch.testing.assert_close(x, y)


def test_without_fallback_the_error_is_fusers_and_the_write_applies_once():
    x = make((3, 5))
    before = x.clone()
    with pytest.raises(fuser.UnsupportedError, match="s65_twice_no_fake") as got:
        fuser.jit(write_then_untraceable)(x)
    assert "did not run" not in str(got.value)
    torch.testing.assert_close(x, before + 1)


class CountingNorm(torch.nn.Module):
    """A module writing its own buffer in place, then (after a graph break) a graph fuser fails
    to compile."""

    def __init__(self):
        super().__init__()
        self.register_buffer("seen", torch.zeros(()))

    def forward(self, x):
        self.seen.add_(1)
        torch._dynamo.graph_break()
        return torch.sigmoid(x) * 2


def test_a_compile_failure_after_a_buffer_write_raises_and_later_calls_run_eagerly(monkeypatch):
    real = backend.plan_graph

    def refuse_sigmoid(graph):
        if any("sigmoid" in str(n.target) for n in graph.graph.nodes):
            raise fuser.UnsupportedError("sigmoid refused (this test's stand-in for a fuser failure)")
        return real(graph)

    monkeypatch.setattr(backend, "plan_graph", refuse_sigmoid)
    module = CountingNorm()
    jitted = fuser.jit(module, fallback="eager")
    x = make((4, 6))
    with pytest.raises(fuser.UnsupportedError, match="sigmoid refused") as got:
        jitted(x)
    assert "did not run" in "\n".join(getattr(got.value, "__notes__", []))
    assert module.seen.item() == 1  # (once: eager's count after one call)
    torch.testing.assert_close(jitted(x), torch.sigmoid(x) * 2)
    assert module.seen.item() == 2
