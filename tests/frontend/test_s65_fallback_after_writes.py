"""fuser.jit and a call that fails after some of its graphs ran (graph 1 writes x or a buffer, a
graph break, then the next frame fails):

- a frame after a graph break whose trace failed made fuser run the whole function again (with
  fallback="eager" on the caller's tensors, else on copies, to tell eager's error): the writes,
  prints and counters before the break applied twice. That frame now runs as it is, once: the
  user's error is raised as eager raises it, or the call completes with a warning;
- with fallback="eager", fuser failing to compile such a frame ran the function again too: the
  frame now runs uncompiled, and later calls eagerly;
- a call that fails in a program after its graphs wrote (the direct path) is not run again;
- a first call that raised the user's own error (an input check) left Dynamo's "skip" mark on
  the function's code: every later call ran uncompiled, silently."""
import contextlib
import io
import warnings

import pytest
import torch

import fuser
import fuser.frontend.backend as backend
import fuser.frontend.program as program
from tests.helpers import make


@torch.library.custom_op("fuser_tests::s65_twice_no_fake", mutates_args=())
def twice_no_fake(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def write_then_untraceable(x):
    x.add_(1)
    torch._dynamo.graph_break()
    return twice_no_fake(x).relu() + 1


def test_an_untraceable_frame_after_a_write_runs_once_as_it_is():
    x = make((3, 5))
    y = x.clone()
    jitted = fuser.jit(write_then_untraceable, fallback="eager")
    with pytest.warns(UserWarning, match="the part of write_then_untraceable after its graph break at line "
                                         r"\d+ failed .*s65_twice_no_fake.*it runs uncompiled from now on"):
        out = jitted(x)
    torch.testing.assert_close(out, write_then_untraceable(y))
    torch.testing.assert_close(x, y)  # (written once, as eager writes it)
    frames = torch._dynamo.utils.counters["frames"]["total"]
    for _ in range(2):  # (not traced again at each call)
        torch.testing.assert_close(jitted(x), write_then_untraceable(y))
    assert torch._dynamo.utils.counters["frames"]["total"] - frames <= 2
    torch.testing.assert_close(x, y)


def test_without_fallback_an_untraceable_frame_after_a_write_raises_once_it_ran():
    x = make((3, 5))
    y = x.clone()
    with pytest.raises(fuser.UnsupportedError, match="after its graph break at line .* ran uncompiled, once"):
        fuser.jit(write_then_untraceable)(x)
    write_then_untraceable(y)
    torch.testing.assert_close(x, y)  # (its effects made once, as the function's first frame's are not)


class StepThenAdd(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros(()))
        self.calls = 0

    def forward(self, x, y):
        self.steps += 1
        self.calls += 1
        print("step", int(self.steps))  # (a graph break)
        return x * 2 + y


def _failed_call(module, x, y):
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), pytest.raises(RuntimeError) as got:
        module(x, y)
    return str(got.value), printed.getvalue()


def test_a_users_error_after_a_graph_break_is_eagers_and_the_state_before_it_changes_once():
    eager, jitted = StepThenAdd(), fuser.jit(StepThenAdd())
    x, bad = make((4, 8)), make((3, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (Dynamo's note on the graph break)
        theirs, ours = _failed_call(eager, x, bad), _failed_call(jitted, x, bad)
    assert ours == theirs  # (eager's error, printed once)
    assert jitted.steps.item() == 1 and jitted.calls == 1


def test_a_compile_failure_after_a_buffer_write_runs_that_part_uncompiled(monkeypatch):
    real = backend.plan_graph

    def refuse_sigmoid(graph):
        if any("sigmoid" in str(n.target) for n in graph.graph.nodes):
            raise fuser.UnsupportedError("sigmoid refused (this test's stand-in for a fuser failure)")
        return real(graph)

    class CountThenSigmoid(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("seen", torch.zeros(()))

        def forward(self, x):
            self.seen.add_(1)
            torch._dynamo.graph_break()
            return torch.sigmoid(x) * 2

    monkeypatch.setattr(backend, "plan_graph", refuse_sigmoid)
    x = make((4, 6))
    failing = fuser.jit(CountThenSigmoid())
    with pytest.raises(fuser.UnsupportedError, match="sigmoid refused"):
        failing(x)
    assert failing.seen.item() == 1
    module = CountThenSigmoid()
    jitted = fuser.jit(module, fallback="eager")
    with pytest.warns(UserWarning, match="sigmoid refused.*the function runs eagerly from now on"):
        torch.testing.assert_close(jitted(x), torch.sigmoid(x) * 2)
    assert module.seen.item() == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (eager from now on: nothing more to say)
        torch.testing.assert_close(jitted(x), torch.sigmoid(x) * 2)
    assert module.seen.item() == 2


def write_and_scale(x, y):
    x.add_(1)
    return y * 3


def test_a_failure_of_the_direct_path_after_a_write_raises_instead_of_writing_twice(monkeypatch):
    jitted = fuser.jit(write_and_scale, fallback="eager")
    x, y = make((3, 5)), make((3, 5))
    for _ in range(3):  # (the later calls take the direct path)
        jitted(x, y)
    real = program.write_back

    def write_then_fail(*args):
        real(*args)
        raise fuser.FusionInputError("a failure after the write (this test's stand-in)")

    monkeypatch.setattr(program, "write_back", write_then_fail)
    before = x.clone()
    with pytest.raises(fuser.FusionInputError, match="stand-in") as got:
        jitted(x, y)
    assert "did not run write_and_scale again eagerly" in "\n".join(got.value.__notes__)
    torch.testing.assert_close(x, before + 1)
    monkeypatch.setattr(program, "write_back", real)
    torch.testing.assert_close(jitted(x, y), y * 3)  # (eagerly from now on)
    torch.testing.assert_close(x, before + 2)


def check_then_scale(x, y):
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(f"last dims differ: {x.shape[-1]} and {y.shape[-1]}")
    return (x * y).exp().sum(-1)


@pytest.mark.parametrize("good_calls_before", [0, 1])
def test_a_users_error_while_tracing_leaves_later_calls_compiled(good_calls_before):
    jitted = fuser.jit(check_then_scale)
    for _ in range(good_calls_before):
        jitted(make((4, 8)), make((4, 8)))
    with pytest.raises(ValueError, match="last dims differ: 8 and 9"):
        jitted(make((4, 8)), make((4, 9)))
    for cols in (8, 16):  # (a new row length traces again)
        x, y = make((4, cols)), make((4, cols))
        torch.testing.assert_close(jitted(x, y), check_then_scale(x, y))
    assert jitted.cache_info().graphs == 2
