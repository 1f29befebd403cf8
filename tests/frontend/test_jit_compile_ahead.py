"""A jitted training function's backward kernels compile before its first backward call
(frontend/ahead.py): when AOTAutograd compiles the forward, fuser plans the backward graph too
and compiles its kernels in background threads, from the layouts the graph traced;
AOTAutograd's backward compile then takes the program planned early, whose fusions find their
kernels compiled. A forward of several fusions compiles them the same way. The interpreter compiles nothing, so its compile jobs are recorded (the `recorded`
fixture, tests/compile_jobs.py, which makes the interpreter a target)."""
import threading

import pytest
import torch
import torch.nn.functional as F

import fuser
from fuser.frontend import ahead, backend

from ..compile_jobs import Gate, launched_were_compiled, passes_in_forked_child
from .jit_helpers import check_forward_backward


def layer_norm(x, w, b):
    return F.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float()).to(x.dtype)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles `layer_norm` anew (Dynamo keeps one cache per code object), and
    leaves no compile of its own under way for the next."""
    torch._dynamo.reset()
    yield
    assert ahead.wait(60)
    torch._dynamo.reset()


def _inputs():
    x = torch.randn(12, 96, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(96, dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(96, dtype=torch.bfloat16, requires_grad=True)
    return x, w, b


class Spy:
    """Records what `ahead.start` was given and the backward programs planned early.
    `ahead.start` returns once what it queued is compiled, so that what each test checks does
    not hang on which thread gets to a runtime first (an execute during the compile waits for
    it: tests/runtime/test_compile_ahead_of_call.py)."""

    def __init__(self, monkeypatch):
        self.kinds, self.queued, self.early = [], 0, []
        start, plan = ahead.start, backend._plan_backward_early

        def spy_start(programs, device):
            self.kinds += [p.kind for p in programs]
            self.queued += start(programs, device)
            assert ahead.wait(60)
            return self.queued

        def spy_plan(graph, record):
            found = plan(graph, record)
            self.early.append(found)
            return found
        monkeypatch.setattr(ahead, "start", spy_start)
        monkeypatch.setattr(backend, "_plan_backward_early", spy_plan)


def _programs(jitted):
    return {p.kind: p for r in jitted._stats.records.values() for p in r.programs}


def test_the_backward_compiles_with_the_forward_and_takes_the_early_program(recorded, monkeypatch):
    spy = Spy(monkeypatch)
    jitted = fuser.jit(layer_norm)
    x, w, b = _inputs()
    y = jitted(x, w, b)
    assert spy.kinds == ["backward"] and spy.queued == 1  # (a forward of one fusion compiles at its first call)
    compiled_ahead = list(recorded)
    assert compiled_ahead and all(e[0] in ("compile", "launch") for e in compiled_ahead)
    recorded.clear()
    dy = torch.randn_like(y)
    grads = torch.autograd.grad(y, (x, w, b), dy)
    programs = _programs(jitted)
    (early,) = spy.early
    # AOTAutograd's backward compile (with the forward where sizes are saved for the
    # backward, else at its first call) took it
    assert programs["backward"] is early[1]
    for step in programs["backward"].fusion_steps:
        assert step.fd.cache.num_runtimes == 1  # the runtime planned ahead
    ahead_jobs = [e for e in compiled_ahead if e[0] == "compile"]
    # every kernel the backward asked for (a launch of two asks at its launch) or launched was
    # compiled ahead, with its arguments
    launched_were_compiled(recorded, ahead_jobs)
    asked = [("launch", fn, args) for kind, fn, args in recorded if kind == "compile"]
    launched_were_compiled(asked, ahead_jobs)
    xe, we, be = (t.detach().requires_grad_() for t in (x, w, b))
    ye = layer_norm(xe, we, be)
    want = torch.autograd.grad(ye, (xe, we, be), dy)
    torch.testing.assert_close(y, ye, rtol=2e-2, atol=2e-2)
    for got, exp in zip(grads, want):
        torch.testing.assert_close(got.float(), exp.float(), rtol=3e-2, atol=3e-2)


def test_a_backward_graph_changed_after_partitioning_is_planned_again(recorded, monkeypatch):
    """AOTAutograd may rewrite the backward graph after the partitioner (saved-tensor hooks,
    effect tokens): a graph whose code differs from the one planned early is planned anew."""
    plan = backend._plan_backward_early
    early = []

    def stale(graph, record):
        found = plan(graph, record)
        early.append(found)
        return ("some other code", found[1])
    monkeypatch.setattr(backend, "_plan_backward_early", stale)
    jitted = fuser.jit(layer_norm)
    check_forward_backward(jitted, layer_norm, _inputs())
    (found,) = early
    assert _programs(jitted)["backward"] is not found[1]


def test_nothing_compiles_ahead_where_it_is_off(recorded, monkeypatch):
    monkeypatch.setenv("FUSER_COMPILE_AHEAD", "0")
    started = []
    monkeypatch.setattr(ahead, "start", lambda *a: started.append(a))
    monkeypatch.setattr(backend, "_plan_backward_early", lambda *a: started.append(a))
    jitted = fuser.jit(layer_norm)
    check_forward_backward(jitted, layer_norm, _inputs())
    assert not started and not any(t.name == "fuser-compile-ahead" for t in threading.enumerate())


def test_a_one_fusion_inference_graph_compiles_at_its_first_call(recorded, monkeypatch):
    spy = Spy(monkeypatch)
    jitted = fuser.jit(layer_norm)
    x, w, b = (t.detach() for t in _inputs())
    y = jitted(x, w, b)
    assert spy.kinds == [] and spy.early == []
    torch.testing.assert_close(y, layer_norm(x, w, b), rtol=2e-2, atol=2e-2)


def two_fusions(x, w):
    h = torch.logcumsumexp(torch.relu(x * 2.0), -1)  # an eager op between two fusions
    return (h * w).sum(-1) + h.amax(-1)


def test_a_forward_of_several_fusions_compiles_them_side_by_side(recorded, monkeypatch):
    spy = Spy(monkeypatch)
    jitted = fuser.jit(two_fusions)
    x = torch.randn(16, 40, requires_grad=True)
    w = torch.randn(40, requires_grad=True)
    y = jitted(x, w)
    assert spy.kinds == ["forward", "backward"] and spy.queued >= 3
    forward = _programs(jitted)["forward"]
    assert len(forward.fusion_steps) == 2
    for step in forward.fusion_steps:  # each fusion's runtime was made ahead, and used
        assert step.fd.cache.num_runtimes == 1
    ahead_jobs = [e for e in recorded if e[0] == "compile"]
    assert len({id(fn) for _, fn, _ in ahead_jobs}) >= 3  # two forward kernels, the backward's
    dy = torch.randn_like(y)
    grads = torch.autograd.grad(y, (x, w), dy)
    launched_were_compiled(recorded, ahead_jobs)
    xe, we = x.detach().requires_grad_(), w.detach().requires_grad_()
    ye = two_fusions(xe, we)
    torch.testing.assert_close(y, ye, rtol=1e-4, atol=1e-4)
    for got, want in zip(grads, torch.autograd.grad(ye, (xe, we), dy)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_a_backward_called_while_its_kernels_compile_waits_for_them(recorded, monkeypatch):
    """The first backward call finds its fusion's runtime being compiled in the background: it
    waits for that compile, then runs that runtime."""
    gate = Gate().hold(monkeypatch)
    jitted = fuser.jit(layer_norm)
    x, w, b = _inputs()
    results, caller = [], None
    try:
        y = jitted(x, w, b)  # (its one fusion compiles at its launch: no pass, no precompile)
        assert gate.inside.wait(30)  # the backward's compile is under way
        dy = torch.randn_like(y)
        caller = threading.Thread(target=lambda: results.append(torch.autograd.grad(y, (x, w, b), dy)))
        caller.start()
        caller.join(0.5)
        assert caller.is_alive()  # waiting for the compile
        backward = _programs(jitted)["backward"]
        assert all(step.fd.cache.num_runtimes == 1 for step in backward.fusion_steps)
    finally:
        gate.open()
        if caller is not None:
            caller.join(30)
    (grads,) = results
    xe, we, be = (t.detach().requires_grad_() for t in (x, w, b))
    want = torch.autograd.grad(layer_norm(xe, we, be), (xe, we, be), dy)
    for got, exp in zip(grads, want):
        torch.testing.assert_close(got.float(), exp.float(), rtol=3e-2, atol=3e-2)
    assert all(step.fd.cache.num_runtimes == 1 for step in backward.fusion_steps)  # (none of its own)


def test_a_forked_child_starts_with_an_empty_compile_ahead_queue():
    """The module's queue forgets the parent's steps and threads in a forked child (its
    registered fork handler): the child waits for nothing of the parent's."""
    class HeldStep:  # (what `ahead._compile` reads of a fusion step)
        class fd:
            @staticmethod
            def compile_ahead(metas, device):
                opened.wait(30)

    opened = threading.Event()
    ahead._queue.put([(HeldStep, [], torch.device("cpu"))])
    try:
        assert not ahead.wait(0.05)
        child_passed = passes_in_forked_child(lambda: ahead.wait(0), 30)
    finally:
        opened.set()
    assert ahead.wait(30) and child_passed
