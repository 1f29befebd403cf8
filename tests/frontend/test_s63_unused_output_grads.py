"""A compiled training graph whose backward runs from some of its outputs only: an input that
reaches none of them gets no gradient (None), as in eager, where zeros made AdamW's weight decay
and moments move parameters eager leaves untouched (frontend/training.py). The first call runs
through AOTAutograd's runtime wrapper, later ones through `_Fused`: every call is checked."""
import copy

import pytest
import torch
import torch.nn as nn

import fuser

from .jit_helpers import assert_close_to_eager


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 4), nn.Linear(8, 4)

    def forward(self, x):
        return self.a(x).pow(2).mean(), self.b(x).pow(2).mean()


def _compiled(fn, backend):
    return fuser.jit(fn) if backend == "jit" else torch.compile(fn, backend="fuser")


def _grads(fn, args, used):
    """The outputs of `fn(*args)` and the gradients of the outputs `used` (fresh random
    incoming gradients, seeded) with respect to every argument, allow_unused."""
    leaves = [a.detach().clone().requires_grad_() for a in args]
    outs = fn(*leaves)
    torch.manual_seed(1)
    dys = [torch.randn_like(outs[k]) for k in used]
    grads = torch.autograd.grad([outs[k] for k in used], leaves, dys, allow_unused=True)
    return outs, grads


def _check_grads(fn, shapes, used, backend, calls=3):
    compiled = _compiled(fn, backend)
    for _ in range(calls):
        args = [torch.randn(s) for s in shapes]
        got_outs, got = _grads(compiled, args, used)
        want_outs, want = _grads(fn, args, used)
        for g, w in zip(got_outs, want_outs):
            assert_close_to_eager(g.detach(), w.detach())
        for k, (g, w) in enumerate(zip(got, want)):
            assert (g is None) == (w is None), f"argument {k}: {g} where eager gives {w}"
            if w is not None:
                assert_close_to_eager(g, w)
    return compiled, got_outs


@pytest.mark.parametrize("backend", ["jit", "torch.compile"])
def test_adamw_leaves_a_head_without_gradient_untouched(backend):
    torch.manual_seed(0)
    eager = TwoHeads()
    ours = copy.deepcopy(eager)
    run = _compiled(ours, backend)
    opt_e = torch.optim.AdamW(eager.parameters(), lr=0.1)
    opt_o = torch.optim.AdamW(ours.parameters(), lr=0.1)
    head_b = [p.detach().clone() for p in eager.b.parameters()]
    for _ in range(3):
        x = torch.randn(2, 3, 8)
        for fn, model, opt in ((eager, eager, opt_e), (run, ours, opt_o)):
            opt.zero_grad(set_to_none=True)
            la, _ = fn(x)
            la.backward()  # only head a trains
            assert model.b.weight.grad is None and model.b.bias.grad is None
            opt.step()
    for before, p in zip(head_b, ours.b.parameters()):
        assert torch.equal(p, before)
    for p, q in zip(eager.a.parameters(), ours.a.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", ["jit", "torch.compile"])
def test_autograd_grad_allow_unused_gives_none_for_an_input_of_another_output(backend):
    def two(x, w1, w2):
        return torch.sin(x * w1), torch.exp(x) * w2

    compiled, outs = _check_grads(two, [(5, 7), (7,), (7,)], used=[0], backend=backend)
    assert type(outs[0].grad_fn).__name__ == "_FusedBackward"
    _check_grads(two, [(5, 7), (7,), (7,)], used=[1], backend=backend)


def test_an_input_reaching_both_outputs_keeps_its_gradient():
    def shared(x, w1, w2):
        h = torch.tanh(x)
        return (h * w1).sum(-1), (h * w2).sum(-1)

    _check_grads(shared, [(4, 6), (6,), (6,)], used=[1], backend="jit")


def test_an_input_reaching_a_used_output_through_a_zero_gradient_keeps_zeros():
    # sign's gradient is zero but eager's graph connects w1 to the output: a zero tensor, not None
    def zero_path(x, w1, w2):
        return torch.sign(w1) * x + w1.detach(), x * w2

    _check_grads(zero_path, [(3, 5), (5,), (5,)], used=[0], backend="jit")


def test_outputs_without_gradient_alongside_an_unused_one():
    def three(x, w1, w2):
        y = x * w1
        return torch.relu(y), torch.argmax(y, -1), torch.cos(x) * w2

    _check_grads(three, [(4, 9), (9,), (9,)], used=[2], backend="jit")
    _check_grads(three, [(4, 9), (9,), (9,)], used=[0], backend="jit")


def test_every_output_used_is_unchanged():
    def two(x, w1, w2):
        return torch.sin(x * w1), torch.exp(x) * w2

    compiled, outs = _check_grads(two, [(5, 7), (7,), (7,)], used=[0, 1], backend="jit")
    assert type(outs[0].grad_fn).__name__ == "_FusedBackward"


@pytest.mark.parametrize("used", [[0], [1]])
def test_a_3d_linear_output_returned_as_a_plain_tensor(used):
    # (its first call hooks AOTAutograd's node behind the output's `_unsafe_view`)
    def heads(x, w1, w2):
        return torch.nn.functional.linear(x, w1), torch.tanh(torch.nn.functional.linear(x, w2)).sum(-1)

    _check_grads(heads, [(2, 3, 8), (4, 8), (4, 8)], used=used, backend="torch.compile")


def test_an_input_read_only_through_a_detach_gets_no_gradient():
    """AOTAutograd's forward holds `x.detach()` as an alias of x (review: x reached the first
    output through it, and got zeros where eager gives None)."""
    def f(x, w):
        return (w * x.detach()).sum(), (x * w).sum()

    jitted = fuser.jit(f)
    for _ in range(2):  # (AOTAutograd's path, then the direct one)
        x, w = torch.randn(4, 8), torch.randn(8)
        eager = [t.clone().requires_grad_() for t in (x, w)]
        mine = [t.clone().requires_grad_() for t in (x, w)]
        f(*eager)[0].backward()
        jitted(*mine)[0].backward()
        assert eager[0].grad is None and mine[0].grad is None
        torch.testing.assert_close(mine[1].grad, eager[1].grad)
