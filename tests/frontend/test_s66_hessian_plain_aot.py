"""Second-order autograd through training graphs that run AOTAutograd's runtime with all its
layers, not a TrainingCall (frontend/second_order.py's AotCall): a graph that writes a buffer, one
returning a view of its input, BatchNorm updating its running statistics. Their backward ran
fuser's backward program with no refusal of create_graph=True, so the Hessian came back all
zeros on every call, silently. Each call now raises fuser's UnsupportedError or matches eager;
a plain backward still matches eager."""
import copy
import types

import pytest
import torch
import torch.autograd.functional as AF

import fuser
from tests.helpers import make

from .jit_helpers import assert_close_to_eager

_BUFFER = torch.zeros(4)


def _fresh(fn):
    """`fn` with a code object of its own: Dynamo keeps compiled entries per code object."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def _writes_buffer(x):
    _BUFFER.add_(1)
    return (x.sin() * x.exp()).sum()


def _returns_input_view(x):
    return (x.sin() * x.exp()).sum(), x.view(-1)


def _first_output(fn):
    return lambda x: fn(x)[0]


def _writes_argument(y):
    t = y * 1.0
    y.copy_(t.sin() * t.exp())  # (returns nothing: the node hangs from y's copy_ alone)


def _through_written_copy(fn):
    def run(x):
        y = x * 1.0
        fn(y)
        return y.sum()
    return run


def _batch_norm_fns():
    """An eager and a jitted function through two equal BatchNorm modules in training (each
    updates its own running statistics)."""
    norm = torch.nn.BatchNorm1d(3).train()
    with torch.no_grad():
        norm.weight.copy_(make((3,)))
        norm.bias.copy_(make((3,)))
    twin = copy.deepcopy(norm)
    return (lambda x: torch.tanh(norm(x)).pow(2).sum()), fuser.jit(lambda x: torch.tanh(twin(x)).pow(2).sum())


def _function_pair(kind):
    """(eager, jitted) for a kind of graph that is no TrainingCall, and the input's shape."""
    if kind == "writes_buffer":
        fn = _writes_buffer
        return fn, fuser.jit(_fresh(fn)), (6,)
    if kind == "returns_input_view":
        return _first_output(_returns_input_view), _first_output(fuser.jit(_fresh(_returns_input_view))), (6,)
    if kind == "writes_argument":
        return _through_written_copy(_writes_argument), _through_written_copy(fuser.jit(_fresh(_writes_argument))), (6,)
    if kind == "compile_writes_buffer":
        return _writes_buffer, torch.compile(_fresh(_writes_buffer), backend="fuser"), (6,)
    eager, jitted = _batch_norm_fns()
    return eager, jitted, (4, 3)


_KINDS = ["writes_buffer", "returns_input_view", "writes_argument", "batch_norm_training", "compile_writes_buffer"]
_SECOND_ORDER = {
    "hessian": lambda fn, x, v: AF.hessian(fn, x),
    "vhp": lambda fn, x, v: AF.vhp(fn, x, v)[1],
    "hvp": lambda fn, x, v: AF.hvp(fn, x, v)[1],
}


@pytest.mark.parametrize("helper", list(_SECOND_ORDER))
@pytest.mark.parametrize("kind", _KINDS)
def test_second_order_is_refused_or_eagers_on_every_call(kind, helper):
    eager, jitted, shape = _function_pair(kind)
    run = _SECOND_ORDER[helper]
    for _ in range(3):
        x, v = make(shape), make(shape)
        want = run(eager, x, v)
        assert want.abs().max() > 0  # (a zero result would pass unrefused)
        try:
            got = run(jitted, x, v)
        except fuser.UnsupportedError as e:
            assert "create_graph=True" in str(e)
            continue
        assert_close_to_eager(got, want)


@pytest.mark.parametrize("kind", _KINDS)
def test_plain_backward_matches_eager(kind):
    eager, jitted, shape = _function_pair(kind)
    for _ in range(3):
        x = make(shape).requires_grad_()
        x_eager = x.detach().clone().requires_grad_()
        y, y_eager = jitted(x), eager(x_eager)
        assert_close_to_eager(y, y_eager)
        assert_close_to_eager(torch.autograd.grad(y, x), torch.autograd.grad(y_eager, x_eager))


def _scales_by_weight(x, w):
    _BUFFER.add_(1)
    return (x.sin() * w).sum()


def test_a_backward_reading_no_value_needing_grad_runs_second_order():
    """The backward of `x.sin() * w` for w alone reads x.sin(), which needs no gradient: its
    Hessian in w (zero) is eager's, not refused; in x (it reads w and x) it is refused."""
    jitted = fuser.jit(_fresh(_scales_by_weight))
    for _ in range(2):
        x, w = make((6,)), make((6,))
        assert_close_to_eager(AF.hessian(lambda w: jitted(x, w), w),
                              AF.hessian(lambda w: _scales_by_weight(x, w), w))
        with pytest.raises(fuser.UnsupportedError, match="create_graph=True"):
            AF.hessian(lambda x: jitted(x, w), x)
