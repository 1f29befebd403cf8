"""A forward that updates a buffer and saves a clone of it for the backward
(`self.cnt += 1; return self.l(x) * self.cnt.clone()`): the fusion writing the buffer in place
handed back, at its definition's first call, the buffer itself for the value it wrote, so the
value saved aliased the buffer, and a write to the buffer before the backward (a second
forward, the caller's own) raised autograd's in-place error at the first call where eager,
which saved a clone, runs (frontend/write_backs.py). A write to the buffer saved itself still
raises as eager: tests/frontend/test_s64_saved_versions.py."""
import copy

import pytest
import torch
import torch._dynamo

import fuser
from tests.helpers import assert_eager, make


class _CountedClone(torch.nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.l = torch.nn.Linear(8, 8)
        self.register_buffer("cnt", make(shape, positive=True))

    def forward(self, x):
        self.cnt += 1
        return self.l(x) * self.cnt.clone()


def _eager_and_jitted(shape):
    torch._dynamo.reset()
    eager = _CountedClone(shape)
    model = copy.deepcopy(eager)
    return eager, model, fuser.jit(model)


def _assert_as_eager(model, eager, outs, refs) -> None:
    for out, ref in zip(outs, refs):
        assert_eager(out, ref)
    assert_eager(model.cnt, eager.cnt)
    for p, q in zip(model.parameters(), eager.parameters()):
        assert_eager(p.grad, q.grad)


@pytest.mark.parametrize("shape", [(8,), ()], ids=["vector", "scalar"])
def test_two_forwards_then_one_backward_run_at_every_call_as_eager(shape):
    # (gradient accumulation: the second forward writes the buffer the first one's clone came from)
    eager, model, jitted = _eager_and_jitted(shape)
    for call in range(3):
        xs, grads = [make((4, 8)) for _ in range(2)], [make((4, 8)) for _ in range(2)]
        results = []
        for mod in (eager, model):
            mod.zero_grad(set_to_none=True)
            run = mod if mod is eager else jitted
            outs = [run(x) for x in xs]
            sum((o * g).sum() for o, g in zip(outs, grads)).backward()  # (raised at call 0)
            results.append(outs)
        _assert_as_eager(model, eager, results[1], results[0])


def test_a_caller_s_write_to_the_buffer_before_backward_leaves_the_saved_clone_as_eager():
    eager, model, jitted = _eager_and_jitted((8,))
    for call in range(3):
        x, grad = make((4, 8)), make((4, 8))
        results = []
        for mod in (eager, model):
            mod.zero_grad(set_to_none=True)
            out = (mod if mod is eager else jitted)(x)
            mod.cnt.mul_(3.0)  # (the clone saved keeps the forward's count)
            out.backward(grad)
            results.append([out])
        _assert_as_eager(model, eager, results[1], results[0])


def test_forward_and_backward_in_turn_stay_eager_s():
    eager, model, jitted = _eager_and_jitted((8,))
    for call in range(3):
        x, grad = make((4, 8)), make((4, 8))
        eager.zero_grad(set_to_none=True)
        model.zero_grad(set_to_none=True)
        out, ref = jitted(x), eager(x)
        out.backward(grad)
        ref.backward(grad)
        _assert_as_eager(model, eager, [out], [ref])
