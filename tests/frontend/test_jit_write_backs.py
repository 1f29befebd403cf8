"""A jitted function's writes into its inputs (`copy_(input, new)` at the end of its functional
graph): folded into the fusion that computes them and written in place by its kernel
(frontend/write_backs.py, runtime/in_place.py), else run after every read of the old value."""
import pytest
import torch

import fuser
from tests.helpers import OptimizerTwins, make


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


def test_an_optimizer_step_writes_its_state_in_place(written_in_place, monkeypatch):
    copies = []  # (each call of torch._foreach_copy_: the step counters' write-backs)
    foreach_copy = torch._foreach_copy_
    monkeypatch.setattr(torch, "_foreach_copy_", lambda dsts, values: copies.append(len(dsts)) or
                        foreach_copy(dsts, values))
    twins = OptimizerTwins(lambda ps: torch.optim.Adam(ps, lr=1e-2, foreach=True), ((16, 8), (8,)))
    for _ in range(3):
        versions = [p._version for p in twins.ours]
        twins.step()
        assert all(p._version > v for p, v in zip(twins.ours, versions))
    twins.assert_same()
    assert twins.jitted.cache_info().fallback_ops == 0  # (no ATen copy_ left)
    # parameters and both moments of each tensor, at every call after the first (its copies),
    # then the two step counters, copied
    assert written_in_place[-8:] == [True] * 6 + [False] * 2, written_in_place
    assert written_in_place.count(True) >= 2 * 6, written_in_place
    # the counters (0-dim, read by every program of their tensor's kernel: copied after the
    # kernels) in one launch a call
    assert copies == [2, 2, 2], copies


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


@pytest.mark.parametrize("view", [torch.diagonal, lambda x: x.t()[1], lambda x: x.as_strided((16,), (17,))],
                         ids=["diagonal", "column", "as_strided"])
def test_a_write_back_waits_for_the_readers_of_a_view_of_its_input(view):
    def read_before(x, w, idx):
        z = torch.scatter_add(w * 2, 0, idx, view(x))  # (an ATen call reading the old values)
        x.add_(1)
        return z

    def read_after_an_eager_op(p, x):
        y = torch.linalg.inv(x.cos()) + view(p).sum()  # (a fusion after an eager op)
        p.mul_(3)
        return y

    def read_in_a_later_kernel(x):
        y = x + 1
        s = (view(x) * 2).sum(-1)
        x.copy_(y)
        return s

    cases = [(read_before, lambda: (make((16, 16)), make((16,)), torch.randint(0, 16, (16,)))),
             (read_after_an_eager_op, lambda: (make((16, 16)), make((16, 16)) + 4 * torch.eye(16))),
             (read_in_a_later_kernel, lambda: (make((16, 16)),))]
    for f, inputs in cases:
        jitted = fuser.jit(f)
        for _ in range(3):
            ours = inputs()
            theirs = [t.clone() for t in ours]
            # (inv amplifies the kernel's cos rounding: a stale read is off by units)
            torch.testing.assert_close(jitted(*ours), f(*theirs), rtol=1e-3, atol=1e-3, msg=f.__name__)
            torch.testing.assert_close(ours[0], theirs[0], msg=f.__name__)


@pytest.mark.parametrize("caller", ["runs_as_traced", "overlapping_arguments"])
def test_a_caller_whose_graph_runs_as_traced_keeps_its_callee_compiled(caller, monkeypatch):
    import torch.nn.functional as F
    import fuser.runtime.cache as cache

    def g(y):
        torch._dynamo.graph_break()
        return (y.sin() * 2).cos()

    def traced(x, t):  # (multilabel_margin_loss's graph runs as traced)
        loss = F.multilabel_margin_loss(x, t, reduction="none")
        return g(x * loss[:, None])

    def overlapping(a, b):  # (arguments sharing memory, one written: the graph runs as traced)
        a.mul_(2)
        return g(a + b)

    if caller == "runs_as_traced":
        f = traced
        inputs = lambda: (make((4, 8)), torch.randint(-1, 8, (4, 8)))  # noqa: E731
    else:
        f = overlapping

        def inputs():
            base = make((40,))
            return base[:32].view(4, 8), base[8:].view(4, 8)
    jitted = fuser.jit(f)
    counts = []
    execute = cache.FusionExecutorCache.execute
    monkeypatch.setattr(cache.FusionExecutorCache, "execute",
                        lambda self, args: counts.append(self) or execute(self, args))
    for _ in range(4):
        ours = inputs()
        theirs = [t.clone() for t in ours] if caller == "runs_as_traced" else None
        if theirs is None:
            base = ours[0].untyped_storage()  # (the two views share it: clone the whole)
            clone = torch.empty(0).set_(base.clone(), 0, (40,))
            theirs = (clone[:32].view(4, 8), clone[8:].view(4, 8))
        before = len(counts)
        torch.testing.assert_close(jitted(*ours), f(*theirs))
        assert len(counts) > before  # (g's fusion ran on every call, not eagerly)


def test_an_input_overwritten_with_a_value_not_read_from_it_keeps_its_old_reads():
    # the kernel stores each output once computed and loads each input where first needed: an
    # output that does not read x, written into x, came before another output's load of x
    def f(x, y):
        old = x.sin()
        x.copy_(y * 2)
        return old + y

    jitted = fuser.jit(f)
    for _ in range(3):
        x, y = make((4, 6)), make((4, 6))
        theirs = x.clone()
        torch.testing.assert_close(jitted(x, y), f(theirs, y))
        torch.testing.assert_close(x, theirs)


@pytest.mark.parametrize("case", ["var_mean", "split", "dropout"])
def test_the_results_of_one_op_stay_together_when_read_after_an_eager_op(case):
    # (a node read only by a later phase's fusion joins it; a tuple's elements cannot one by one)
    def var_mean(x, y):
        v, m = torch.var_mean(x, -1, keepdim=True)
        return torch.logcumsumexp(v * y, -1) + m

    def split(x, y):
        a, b = (x * 2).split(4, -1)
        return torch.logcumsumexp(a, -1) + b.exp()

    def dropout(x, y):
        d = torch.nn.functional.dropout(x, 0.5, training=True)
        return torch.logcumsumexp(y * 2, -1) + d

    f = {"var_mean": var_mean, "split": split, "dropout": dropout}[case]
    jitted = fuser.jit(f)
    for _ in range(2):
        x, y = make((4, 8)), make((4, 8))
        out = jitted(x.requires_grad_() if case == "dropout" else x, y)
        if case != "dropout":
            torch.testing.assert_close(out, f(x, y))
        else:  # (fuser's random numbers are not eager's: each element is kept, doubled, or zero)
            base = torch.logcumsumexp(y * 2, -1)
            kept = (out - base).detach()
            assert torch.all(torch.isclose(kept, 2 * x.detach(), atol=1e-5) | torch.isclose(kept, torch.zeros(()), atol=1e-6))
