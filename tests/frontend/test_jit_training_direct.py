"""Training graphs after their first backward run through `_Fused` (frontend/training.py)
instead of AOTAutograd's runtime layers; every call must still match eager, forward and
backward."""
import copy

import pytest
import torch
import torch.nn.functional as F

import fuser

from .jit_helpers import assert_close_to_eager


def _grads(fn, args, dys):
    leaves = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    outs = fn(*leaves)
    outs = outs if isinstance(outs, tuple) else (outs,)
    pairs = [(o, d) for o, d in zip(outs, dys) if o.requires_grad]
    grads = torch.autograd.grad([o for o, _ in pairs], [a for a in leaves if a.requires_grad],
                                [d for _, d in pairs], allow_unused=True)
    return outs, grads


def _check(fn, args, calls=3):
    jitted = fuser.jit(fn)
    for k in range(calls):
        fresh = [torch.randn_like(a).requires_grad_(a.requires_grad) if a.is_floating_point() else a
                 for a in args]
        outs = fn(*fresh)
        outs = outs if isinstance(outs, tuple) else (outs,)
        dys = [torch.randn_like(o) if o.is_floating_point() else None for o in outs]
        got, got_grads = _grads(jitted, fresh, dys)
        want, want_grads = _grads(fn, fresh, dys)
        for g, w in zip(got, want):
            assert g.requires_grad == w.requires_grad and g.dtype == w.dtype
            assert_close_to_eager(g.detach(), w.detach())
        for g, w in zip(got_grads, want_grads):
            assert (g is None) == (w is None)
            if g is not None:
                assert_close_to_eager(g, w)
        if k > 0:
            assert type(got[0].grad_fn).__name__ == "_FusedBackward"
    return jitted


def test_softmax_and_layer_norm_take_the_direct_training_path():
    x = torch.randn(6, 40, requires_grad=True)
    w, b = torch.randn(40, requires_grad=True), torch.randn(40, requires_grad=True)
    _check(lambda x: torch.softmax(x, -1), [x])
    _check(lambda x, w, b: F.layer_norm(x, (40,), w, b) * torch.sigmoid(x), [x, w, b])


def test_outputs_without_gradients_and_unused_outputs():
    def two(x, y):
        return torch.tanh(x) * y, (x * 2).detach() + 1, torch.argmax(x, -1)

    x, y = torch.randn(5, 9, requires_grad=True), torch.randn(5, 9)
    _check(two, [x, y])


def test_bf16_and_sizes_that_change():
    def fn(x, w):
        return F.gelu(x * w, approximate="tanh").sum(-1)

    jitted = fuser.jit(fn)
    w = torch.randn(24, dtype=torch.bfloat16, requires_grad=True)
    for rows in (3, 5, 3, 8, 8):
        x = torch.randn(rows, 24, dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn(rows, dtype=torch.bfloat16)
        out = jitted(x, w)
        got = torch.autograd.grad(out, [x, w], dy)
        # eager in fp32, rounded once: fuser keeps fp32 inside its kernels
        xe, we = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
        want = torch.autograd.grad(fn(xe, we), [xe, we], dy.float())
        for g, r in zip(got, want):
            torch.testing.assert_close(g.float(), r, rtol=3e-2, atol=3e-2)
    assert type(out.grad_fn).__name__ == "_FusedBackward"
    assert jitted.cache_info().compiles >= 1


def test_module_training_steps_match_eager():
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.LayerNorm(16), torch.nn.Linear(16, 16), torch.nn.GELU())
    ours = fuser.jit(copy.deepcopy(eager))
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_o = torch.optim.SGD(ours.parameters(), lr=0.1)
    for _ in range(4):
        x = torch.randn(7, 16)
        for model, opt in ((eager, opt_e), (ours, opt_o)):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
    for p, q in zip(eager.parameters(), ours.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def test_retain_graph_and_second_backward():
    jitted = fuser.jit(lambda x: (torch.exp(x) * x).sum())
    for _ in range(2):
        x = torch.randn(4, 6, requires_grad=True)
        out = jitted(x)
        (g1,) = torch.autograd.grad(out, [x], retain_graph=True)
        (g2,) = torch.autograd.grad(out, [x])
        expected = torch.exp(x) * (x + 1)
        assert_close_to_eager(g1, expected.detach())
        assert_close_to_eager(g2, expected.detach())


@pytest.mark.parametrize("form", ["linear", "matmul"])
def test_a_bias_free_3d_linear_output_can_be_written_in_place(form):
    """Without a bias a linear (or `x @ w`) on a 3-D input ends in `_unsafe_view` of its 2-D
    matmul, which AOTAutograd takes for a new tensor; decomposed into `view`, the program
    returned a view of the product and autograd refused `y.mul_(2)` on it (eager allows it):
    on the first call (AOTAutograd's function) and on later ones (`_Fused`)."""
    torch.manual_seed(0)
    w = torch.randn(8, 6, requires_grad=True)

    def project(x, w):
        return F.linear(x, w) if form == "linear" else x @ w.t()

    jitted = fuser.jit(project)
    for k in range(3):
        x = torch.randn(2, 5, 6, requires_grad=True)
        y = jitted(x, w)
        assert k == 0 or type(y.grad_fn).__name__ == "_FusedBackward"
        y.mul_(2)
        got = torch.autograd.grad(y.sum(), [x, w])
        xe = x.detach().clone().requires_grad_()
        ye = project(xe, w)
        ye.mul_(2)
        want = torch.autograd.grad(ye.sum(), [xe, w])
        assert_close_to_eager(y.detach(), ye.detach())
        for g, e in zip(got, want):
            assert_close_to_eager(g, e)


def test_a_bias_free_3d_linear_output_read_by_more_ops_can_be_written_in_place():
    """The projection also feeds a softmax in the same function: the runtime returned a view
    of the 2-D product beside the values saved for the backward, and autograd refused
    `y.mul_(2)` where eager allows it (the softmax saved no y). Where the backward does read y
    (`y.pow(3)`), the write raises autograd's in-place error, as eager's does, rather than
    going unseen."""
    torch.manual_seed(0)
    w = torch.randn(5, 4, requires_grad=True)

    def softmaxed(x, w):
        y = x @ w.t()
        return y, (torch.softmax(y, -1) * torch.arange(5.0)).sum()

    def cubed(x, w):
        y = x @ w.t()
        return y, y.pow(3).sum()

    jitted, jitted_cubed = fuser.jit(softmaxed), fuser.jit(cubed)
    for k in range(3):  # AOTAutograd's function first, then `_Fused`
        x = torch.randn(2, 3, 4, requires_grad=True)
        y, total = jitted(x, w)
        assert y._base is None
        y.mul_(2)
        got = torch.autograd.grad(total, [x, w])
        ye, want_total = softmaxed(x, w)
        ye.mul_(2)
        assert_close_to_eager(y.detach(), ye.detach())
        for g, e in zip(got, torch.autograd.grad(want_total, [x, w])):
            assert_close_to_eager(g, e)
        y, total = jitted_cubed(x, w)
        y.mul_(2)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            torch.autograd.grad(total, [x, w])


def test_create_graph_is_refused_rather_than_silently_wrong():
    """The fused backward runs fuser's kernels, which make no autograd graph: gradients taken
    with create_graph=True would be constants to a second backward (a gradient penalty added
    to the loss gave silently wrong weight gradients), so such a backward raises a clear error.
    Without create_graph the same function's gradients match eager."""
    import pytest

    from fuser.errors import UnsupportedError

    torch.manual_seed(0)
    lin1, lin2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 1)

    def mlp(x):
        return lin2(torch.tanh(lin1(x)))

    jitted = fuser.jit(mlp)
    for _ in range(3):  # the direct form takes over after the first backward
        x = torch.randn(2, 5, 8, requires_grad=True)
        (gx,) = torch.autograd.grad(jitted(x).sum(), x)
        (want,) = torch.autograd.grad(mlp(x).sum(), x)
        assert_close_to_eager(gx, want)
    out = jitted(x)
    assert type(out.grad_fn).__name__ == "_FusedBackward"
    with pytest.raises(UnsupportedError, match="create_graph=True"):
        torch.autograd.grad(out.sum(), x, create_graph=True)


def test_linear_layers_on_3d_inputs_take_the_direct_training_path():
    """A linear layer on a 3-D input returns a view of its 2-D matmul (AOTAutograd's
    unsafe_view_alias output); and its input's 2-D view is saved for the backward, a value
    planning copies (another node name). Both once kept AOTAutograd's layers; now `_Fused`,
    its output a plain tensor as eager's is (an in-place op on it works, as in eager, where the
    output is not also saved for the backward)."""
    torch.manual_seed(0)
    fc1, fc2 = torch.nn.Linear(8, 32), torch.nn.Linear(32, 8)

    def mlp(x, w1, b1, w2, b2):
        return F.linear(F.gelu(F.linear(x, w1, b1), approximate="tanh"), w2, b2)

    params = [fc1.weight, fc1.bias, fc2.weight, fc2.bias]
    jitted = _check(mlp, [torch.randn(2, 5, 8, requires_grad=True), *[p.detach().requires_grad_() for p in params]])
    x = torch.randn(2, 5, 8, requires_grad=True)
    y = jitted(x, *params)
    assert y._base is None and type(y.grad_fn).__name__ == "_FusedBackward"
    y.mul_(2)  # an in-place op on the output, then its backward, as eager allows
    (gx,) = torch.autograd.grad(y.sum(), x)
    xe = x.detach().clone().requires_grad_()
    ye = mlp(xe, *params)
    ye.mul_(2)
    (want,) = torch.autograd.grad(ye.sum(), xe)
    assert_close_to_eager(gx, want)
