"""Jitted functions under torch's function transforms and higher-order autograd (sixty-sixth
session's probe): the second-order helpers of torch.autograd.functional on a training graph's
first call (AOTAutograd's runtime runs it, frontend/training.py), a call under a torch.func
transform (vmap, grad), and a custom autograd.Function whose forward raises while Dynamo
traces it (frontend/jit.py)."""
import copy
import types

import pytest
import torch
import torch.autograd.functional as AF
from torch.func import functional_call, stack_module_state

import fuser
from tests.helpers import make

from .jit_helpers import assert_close_to_eager


def _fresh(fn):
    """`fn` with a code object of its own: Dynamo keeps compiled entries per code object, so a
    second fuser.jit of one function would reuse the first's graph, its first call already made."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def _sin_exp_sum(x):
    return (x.sin() * x.exp()).sum()


def _sin_exp(x):
    return x.sin() * x.exp()


_SECOND_ORDER = {  # (each takes the gradient of a gradient, create_graph=True inside)
    "hessian": (_sin_exp_sum, lambda fn, x, v: AF.hessian(fn, x)),
    "vhp": (_sin_exp_sum, lambda fn, x, v: AF.vhp(fn, x, v)[1]),
    "hvp": (_sin_exp_sum, lambda fn, x, v: AF.hvp(fn, x, v)[1]),
    "jvp": (_sin_exp, lambda fn, x, v: AF.jvp(fn, x, v)[1]),
}


@pytest.mark.parametrize("helper", list(_SECOND_ORDER))
def test_second_order_helpers_are_refused_from_the_first_call(helper):
    """On a training graph's first call AOTAutograd's runtime ran fuser's backward program, which
    records no autograd graph: the Hessian (its input a view needing grad) came back all zeros,
    silently, and vhp, hvp and jvp raised AOTAutograd's RuntimeError; later calls raise fuser's
    UnsupportedError. Every call raises that now."""
    fn, run = _SECOND_ORDER[helper]
    jitted = fuser.jit(_fresh(fn))
    for _ in range(3):
        x, v = make((6,)), make((6,))
        run(fn, x, v)  # (eager runs it)
        with pytest.raises(fuser.UnsupportedError, match="create_graph=True"):
            run(jitted, x, v)


def test_plain_backward_matches_eager_on_first_and_later_calls():
    """The first call's refusal is a pre-hook on AOTAutograd's node: a backward without
    create_graph goes through it, its gradients eager's."""
    jitted = fuser.jit(_fresh(_sin_exp))
    for call in range(3):
        x = make((6,)).requires_grad_()
        x_eager = x.detach().clone().requires_grad_()
        y, dy = jitted(x), make((6,))
        if call == 0:  # (the path the hook is on)
            assert type(y.grad_fn).__name__ == "CompiledFunctionBackward"
        y_eager = _sin_exp(x_eager)
        assert_close_to_eager(y, y_eager)
        assert_close_to_eager(torch.autograd.grad(y, x, dy), torch.autograd.grad(y_eager, x_eager, dy))


def _scaled_softmax(x, w):
    return torch.softmax(x * w, -1)


@pytest.mark.parametrize("transform", ["vmap", "grad"])
def test_a_call_under_a_func_transform_leaves_later_calls_compiled(transform):
    """Dynamo, tracing the function under functorch, marked its code to run uncompiled for
    good: every later plain call ran eagerly (no graph). Under a transform it runs eagerly now,
    as functorch runs it op by op anyway."""
    fn = _fresh(_scaled_softmax)
    jitted = fuser.jit(fn)
    x, w = make((3, 4, 16)), make((16,))
    if transform == "vmap":
        got, want = (torch.vmap(f, in_dims=(0, None))(x, w) for f in (jitted, fn))
    else:
        got, want = (torch.func.grad(lambda t, f=f: f(t, w).pow(2).sum())(x[0]) for f in (jitted, fn))
    assert_close_to_eager(got, want)
    for _ in range(2):
        a = make((4, 16))
        assert_close_to_eager(jitted(a, w), fn(a, w))
    assert jitted.cache_info().graphs == 1


class _Member(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.b(torch.nn.functional.gelu(self.a(x)))


def test_an_ensemble_under_vmap_leaves_the_module_class_compiled():
    """Model ensembling (stack_module_state, then functional_call under vmap) of jitted modules
    left every jitted instance of the class, a new one too, running eagerly for good."""
    members = [fuser.jit(_Member()) for _ in range(3)]
    params, buffers = stack_module_state(members)
    base = copy.deepcopy(members[0]).to("meta")
    x = make((5, 8))
    got = torch.vmap(lambda p, b, x: functional_call(base, (p, b), (x,)), in_dims=(0, 0, None))(params, buffers, x)
    with torch.no_grad():
        assert_close_to_eager(got, torch.stack([m._orig_mod(x) for m in members]))
    fresh = fuser.jit(_Member())
    for _ in range(2):
        assert_close_to_eager(fresh(x), fresh._orig_mod(x))
    assert fresh.cache_info().graphs == 1


class _ScaleInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, s):
        x.mul_(s)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 2, None


def test_mark_dirty_of_a_leaf_requiring_grad_raises_eagers_error():
    """Dynamo runs a custom Function's forward itself, and wraps autograd's refusal of an
    in-place write to a leaf that requires grad in an InternalTorchDynamoError: the function
    now runs eagerly, once, and raises eager's own RuntimeError."""
    def f(x):
        return _ScaleInPlace.apply(x, 2.0) + 1

    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad") as eager:
        f(make((4, 8)).requires_grad_())
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad") as caught:
        fuser.jit(f)(make((4, 8)).requires_grad_())
    assert type(caught.value) is type(eager.value)


def test_mark_dirty_of_an_intermediate_still_compiles():
    def f(x, w):
        return _ScaleInPlace.apply(x * w + 1, 3.0).sin()

    jitted = fuser.jit(f)
    for _ in range(2):
        x, w = make((4, 8)).requires_grad_(), make((8,)).requires_grad_()
        y, y_eager = jitted(x, w), f(x, w)
        assert_close_to_eager(y, y_eager)
        dy = make((4, 8))
        assert_close_to_eager(torch.autograd.grad(y, (x, w), dy), torch.autograd.grad(y_eager, (x, w), dy))
    assert jitted.cache_info().graphs >= 1
