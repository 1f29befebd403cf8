"""The refusal of create_graph=True on graphs that run AOTAutograd's runtime (second_order.py's
AotCall) with torch internals that differ: the autograd node found by its class name
("CompiledFunctionBackward") alone, and its Function reached through `_forward_cls` alone.
A node named otherwise was not found, so a Hessian through it came back all zeros, silently;
a node that leads to no Function now gets the per-node pre-hook on every call."""
import types

import pytest
import torch
import torch.autograd.functional as AF
from torch.autograd.function import FunctionMeta

import fuser
from tests.helpers import make

from .jit_helpers import assert_close_to_eager

_BUFFER = torch.zeros(6)


def _scales_by_weight(x, w):
    _BUFFER.add_(1)  # (a buffer write: the graph runs through AotCall)
    return (x.sin() * w).sum()


def _fresh(fn):
    """`fn` with a code object of its own: Dynamo keeps compiled entries per code object."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def _check_second_order(jitted) -> None:
    """The Hessian in w reads no value needing grad: eager's; in x it is refused (never zeros)."""
    for _ in range(3):
        x, w = make((6,)), make((6,))
        assert_close_to_eager(AF.hessian(lambda w: jitted(x, w), w),
                              AF.hessian(lambda w: _scales_by_weight(x, w), w))
        with pytest.raises(fuser.UnsupportedError, match="create_graph=True"):
            AF.hessian(lambda x: jitted(x, w), x)
        xg = x.clone().requires_grad_()
        x_eager = x.clone().requires_grad_()
        assert_close_to_eager(torch.autograd.grad(jitted(xg, w), xg),
                              torch.autograd.grad(_scales_by_weight(x_eager, w), x_eager))


@pytest.fixture
def aot_node_renamed(monkeypatch):
    """AOTAutograd's autograd node classes named otherwise, as another torch may name them."""
    made = FunctionMeta.__init__

    def renaming(cls, name, bases, attrs):
        made(cls, name, bases, attrs)
        if name == "CompiledFunction":
            cls._backward_cls.__name__ = "AOTDispatchBackward"

    monkeypatch.setattr(FunctionMeta, "__init__", renaming)


def test_a_node_named_otherwise_is_still_found(aot_node_renamed):
    _check_second_order(fuser.jit(_fresh(_scales_by_weight)))


def test_a_node_leading_to_no_function_gets_the_pre_hook(monkeypatch):
    from fuser.frontend import second_order
    monkeypatch.setattr(second_order, "_aot_function", lambda node: None)
    _check_second_order(fuser.jit(_fresh(_scales_by_weight)))
