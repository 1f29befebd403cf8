"""A jitted function's writes into its inputs (`copy_(input, new)` at the end of its functional
graph): folded into the fusion that computes them and written in place by its kernel
(frontend/write_backs.py, runtime/in_place.py), else run after every read of the old value."""
import pytest
import torch

import fuser
import fuser.codegen.inline as inline
import fuser.codegen.launches as launches
from tests.helpers import make


def test_a_write_back_waits_for_a_later_read_of_the_old_value():
    def f(p, x):
        c = p + torch.linalg.inv(x.cos())  # (p read after an eager op: a later phase)
        p.sin_()
        return c

    p, x = make((4, 4)), make((4, 4)) + 4 * torch.eye(4)
    ours, theirs = p.clone(), p.clone()
    got, expected = fuser.jit(f)(ours, x), f(theirs, x)
    torch.testing.assert_close(got, expected)  # (read the sine before)
    torch.testing.assert_close(ours, theirs)


def test_an_optimizer_step_writes_its_state_in_place(monkeypatch):
    answers = []
    check = inline.writable_into

    def spy(t, layout, inputs):
        answers.append(check(t, layout, inputs))
        return answers[-1]
    monkeypatch.setattr(inline, "writable_into", spy)
    monkeypatch.setattr(launches, "writable_into", spy)
    ours = [torch.nn.Parameter(make(s)) for s in ((16, 8), (8,))]
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    opt_ours = torch.optim.Adam(ours, lr=1e-2, foreach=True)
    opt_theirs = torch.optim.Adam(theirs, lr=1e-2, foreach=True)
    step = fuser.jit(lambda: opt_ours.step())
    for _ in range(3):
        for a, b in zip(ours, theirs):
            g = make(a.shape)
            a.grad, b.grad = g.clone(), g.clone()
        versions = [p._version for p in ours]
        step()
        opt_theirs.step()
        assert all(p._version > v for p, v in zip(ours, versions))
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-5, atol=1e-6)
        for key, value in opt_theirs.state[b].items():
            torch.testing.assert_close(opt_ours.state[a][key], value, rtol=1e-5, atol=1e-6)
    assert step.cache_info().fallback_ops == 0  # (no ATen copy_ left)
    # parameters and both moments of each tensor, at every call after the first (its copies)
    assert answers and all(answers) and len(answers) >= 2 * 3 * 2, answers


def test_a_jitted_write_into_a_saved_tensor_is_caught_by_autograd():
    @fuser.jit
    def decay(w):
        with torch.no_grad():
            w.mul_(0.5)

    w = make((4, 4)).requires_grad_()
    loss = (w * w).sum()
    decay(w)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_a_call_ending_in_a_graph_break_keeps_its_frames_compiled(monkeypatch):
    # `return g(x)` with a graph break inside g: Dynamo's code for the caller calls g with no
    # resume function after it; run without Dynamo's callback (the direct path), g ran eagerly
    import fuser.runtime.cache as cache

    def g(x):
        y = x.sin() * 2
        torch._dynamo.graph_break()
        return y.cos() + 1

    def h(x):
        return g(x * 3)

    jitted, x = fuser.jit(h), make((4, 8))
    for _ in range(2):
        torch.testing.assert_close(jitted(x), h(x))
    executes = []
    execute = cache.FusionExecutorCache.execute
    monkeypatch.setattr(cache.FusionExecutorCache, "execute",
                        lambda self, args: executes.append(self) or execute(self, args))
    torch.testing.assert_close(jitted(x), h(x))
    assert len(executes) >= 2, executes  # (g's two graphs, each a fusion)
