"""Softmax's backward reads exp((x - max) - log(sum)) (frontend/softmax_backward.py): it divides by
nothing and its bf16 kernel may flush exp's subnormal results; the gradients stay eager's, rows
masked with -inf or a large finite value and the softmaxes the pass leaves alone included."""
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import fuser
from fuser.frontend.backend import backend_for
from fuser.frontend.softmax_backward import backward_softmax_without_division, softmax_parts

from .jit_helpers import check_forward_backward


def _programs():
    record = backend_for().records[-1]
    return {p.kind: p for p in record.programs}


def _saved(forward) -> list:
    out = next(n for n in forward.plan.graph.graph.nodes if n.op == "output")
    return [a.meta.get("val") for a in out.args[0] if hasattr(a, "meta")]


def _targets(program) -> list:
    return [n.target for n in program.plan.graph.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("dim, shape", [(-1, (12, 40)), (0, (33, 7)), (1, (3, 17, 5))])
def test_the_backward_recomputes_the_probabilities_without_a_division(dim, shape):
    def fn(x):
        return torch.softmax(x.float(), dim=dim).to(x.dtype)

    x = torch.randn(shape, dtype=torch.bfloat16, requires_grad=True)
    check_forward_backward(fn, fuser.jit(fn), (x,), reference_dtype=torch.float64)
    programs = _programs()
    stats = [v for v in _saved(programs["forward"])[1:]
             if isinstance(v, torch.Tensor) and v.shape[dim % len(shape)] == 1]
    assert [v.dtype for v in stats] == [torch.float32] * 2, "the max and the sum (or its log), fp32"
    backward = _targets(programs["backward"])
    assert torch.ops.aten.exp.default in backward and torch.ops.aten.div.Tensor not in backward


@pytest.mark.parametrize("mask", [-1e9, torch.finfo(torch.float32).min, float("-inf")])
def test_a_row_masked_whole_with_a_large_value_gets_eager_gradients(mask):
    """bf16 scores plus an additive fp32 padding mask (-1e9, or the lowest float) over a whole
    row: its probabilities are 1/N. Recomputed as exp(x - (max + log(sum))), log(sum) would be
    lost to the rounding of the large max and each read 1; -inf makes that row NaN, as in eager."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 8, generator=g).to(torch.bfloat16).requires_grad_()
    bias = torch.zeros(4, 8)
    bias[2] = mask

    def fn(x, bias):
        return torch.softmax(x.float() + bias, -1).to(x.dtype)

    dy = torch.randn(4, 8, generator=g).to(torch.bfloat16)
    (got,) = torch.autograd.grad(fuser.jit(fn)(x, bias), x, dy)
    assert torch.ops.aten.div.Tensor not in _targets(_programs()["backward"])
    xe = x.detach().clone().requires_grad_()
    (want,) = torch.autograd.grad(fn(xe, bias), xe, dy)
    torch.testing.assert_close(got, want, rtol=2e-2, atol=1e-2, equal_nan=True)


def test_logits_far_from_zero_get_eager_gradients():
    """bf16 logits around 1e4: exp(x - (max + log(sum))) erred by about 2e-4 there."""
    def fn(x):
        return torch.softmax(x.float(), -1) * 1.0

    x = (torch.randn(6, 50) * 300 + 1e4).to(torch.bfloat16).requires_grad_()
    check_forward_backward(fn, fuser.jit(fn), (x,), reference_dtype=torch.float64)
    assert torch.ops.aten.div.Tensor not in _targets(_programs()["backward"])


@pytest.mark.parametrize("returned", ["p", "a view of p"])
def test_a_softmax_the_forward_returns_keeps_its_probabilities(returned):
    """The forward returns p (or a view of it): the backward reads that saved p as before, with
    no exp (rewritten, the forward saved its input and statistics besides, and returned the
    recomputed form)."""
    def fn(x):
        p = torch.softmax(x.float(), -1)
        return p if returned == "p" else p.t()

    x = (torch.randn(5, 30) * 3 + 1e4).to(torch.bfloat16).requires_grad_()
    check_forward_backward(fn, fuser.jit(fn), (x,))
    programs = _programs()
    assert torch.ops.aten.div.Tensor in _targets(programs["forward"])
    assert torch.ops.aten.exp.default not in _targets(programs["backward"])


def _full_size_fp32_saved(shape) -> int:
    return sum(1 for v in _saved(_programs()["forward"])
               if isinstance(v, torch.Tensor) and v.dtype == torch.float32 and v.numel() >= shape[0] * shape[1])


@pytest.mark.parametrize("kind", ["fp32 softmax", "p read by a matmul", "p read through views"])
def test_a_softmax_whose_probabilities_are_kept_anyway_is_left_as_it_was(kind):
    """Where the backward keeps p (a matmul's gradient reads it) or the gradient is fp32 (no
    flush), the rewrite could only cost: the forward saved the scores and p both, or the
    backward gained an exp. The forward saves what it saved without the pass."""
    from fuser.frontend import backend

    g = torch.Generator().manual_seed(3)
    a = torch.randn(6, 16, generator=g, requires_grad=True)
    b = torch.randn(16, 24, generator=g, requires_grad=True)
    c = torch.randn(24, 8, generator=g, requires_grad=True)
    q = torch.randn(2, 12, 8, generator=g).to(torch.bfloat16).requires_grad_()
    v = torch.randn(2, 12, 8, generator=g, requires_grad=True)
    fns = {"fp32 softmax": (lambda a, b: torch.softmax(a @ b, -1) * 2.0, (a, b), (6, 24)),
           "p read by a matmul": (lambda a, b, c: torch.softmax((a @ b).bfloat16().float(), -1) @ c, (a, b, c), (6, 24)),
           "p read through views": (lambda q, v: torch.softmax((q @ q.transpose(1, 2)).float() * 0.3, -1) @ v,
                                    (q, v), (12, 12))}
    fn, args, shape = fns[kind]
    check_forward_backward(fn, fuser.jit(fn), args)
    with_pass = (_full_size_fp32_saved(shape), _targets(_programs()["backward"]).count(torch.ops.aten.exp.default))
    real = backend.backward_softmax_without_division
    backend.backward_softmax_without_division = lambda graph, n: 0
    try:
        check_forward_backward(fn, fuser.jit(lambda *t: fn(*t)), args)
        without = (_full_size_fp32_saved(shape), _targets(_programs()["backward"]).count(torch.ops.aten.exp.default))
    finally:
        backend.backward_softmax_without_division = real
    assert with_pass == without


def test_masked_and_tiny_probabilities_get_eager_gradients():
    """Rows with -inf entries (a causal mask), probabilities below 2^-126 (flushed to 0 in
    the bf16 kernel, far below a bf16 gradient's last bit) and a row of -inf (NaN, as eager)."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(6, 64, generator=g) * 4
    x[:, 32:] = x[:, 32:] - 120.0  # exp(x - lse) below 2^-126
    x[torch.arange(64)[None, :] > torch.arange(6)[:, None] * 10 + 3] = float("-inf")
    x[5] = float("-inf")
    x = x.to(torch.bfloat16).requires_grad_()

    def fn(x):
        return torch.softmax(x.float(), dim=-1).to(torch.bfloat16)

    dy = torch.randn(6, 64, generator=g).to(torch.bfloat16)
    got_y = fuser.jit(fn)(x)
    (got,) = torch.autograd.grad(got_y, x, dy)
    xe = x.detach().clone().requires_grad_()
    (want,) = torch.autograd.grad(fn(xe), xe, dy)
    assert bool(want[5].isnan().all()) and bool(got[5].isnan().all())
    torch.testing.assert_close(got[:5], want[:5], rtol=2e-2, atol=1e-2)
    assert "_exp_flush_emulated(" in str(fuser.explain(fn, x)).split("backward: ATen graph", 1)[1]


def test_probabilities_used_by_the_forward_and_the_backward():
    """The forward returns p and a weighted sum of it; only the backward's reads move."""
    def fn(x, v):
        p = torch.softmax(x.float(), dim=-1)
        return p.to(x.dtype), (p * v).sum(-1)

    x = torch.randn(9, 50, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(9, 50, requires_grad=True)
    check_forward_backward(fn, fuser.jit(fn), (x, v), reference_dtype=torch.float64)
    assert torch.ops.aten.div.Tensor not in _targets(_programs()["backward"])


def test_a_checkpointed_softmax_is_left_as_it_was():
    """Under activation checkpointing the backward recomputes the whole softmax: rewritten, it
    would compute exp twice an element."""
    from torch.utils.checkpoint import checkpoint

    def inner(x, v):
        return (torch.softmax(x.float(), -1) * v).to(x.dtype)

    def fn(x, v):
        return checkpoint(inner, x, v, use_reentrant=False)

    x = torch.randn(8, 64, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(8, 64, requires_grad=True)
    check_forward_backward(fn, fuser.jit(fn), (x, v), reference_dtype=torch.float64)
    backward = _targets(_programs()["backward"])
    assert backward.count(torch.ops.aten.exp.default) == 1 and torch.ops.aten.log.default not in backward


def test_double_precision_softmax_is_left_as_it_was():
    def fn(x):
        return torch.softmax(x, dim=-1)

    x = torch.randn(5, 30, dtype=torch.float64, requires_grad=True)
    check_forward_backward(fn, fuser.jit(fn), (x,))
    assert torch.ops.aten.log.default not in _targets(_programs()["forward"])


def _joint_like(fn, *args):
    """An ATen graph of `fn` over fake-valued nodes, as the joint graph's nodes carry."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fakes = [mode.from_tensor(a) for a in args]
        gm = make_fx(fn, tracing_mode="fake")(*fakes)
    return gm


def test_only_the_decomposed_softmax_pattern_matches():
    aten = torch.ops.aten

    def softmax(y):
        x = aten._to_copy.default(y, dtype=torch.float32)
        top = aten.amax.default(x, [-1], True)
        e = aten.exp.default(aten.sub.Tensor(x, top))
        return aten.div.Tensor(e, aten.sum.dim_IntList(e, [-1], True)), e

    def other_dims(y):  # the max over another axis than the sum: not a softmax
        x = aten._to_copy.default(y, dtype=torch.float32)
        top = aten.amax.default(x, [0], True)
        e = aten.exp.default(aten.sub.Tensor(x, top))
        return aten.div.Tensor(e, aten.sum.dim_IntList(e, [-1], True)), e

    def of_fp32(x):  # an fp32 softmax: its fp32 gradient gains nothing
        top = aten.amax.default(x, [-1], True)
        e = aten.exp.default(aten.sub.Tensor(x, top))
        return aten.div.Tensor(e, aten.sum.dim_IntList(e, [-1], True)), e

    x = torch.randn(4, 8)
    for fn, matches in ((softmax, True), (other_dims, False), (of_fp32, False)):
        x = x.bfloat16() if fn is not of_fp32 else x.float()
        gm = _joint_like(fn, x)
        divs = [n for n in gm.graph.nodes if n.target is aten.div.Tensor]
        assert (softmax_parts(divs[0]) is not None) is matches, fn.__name__


def test_the_rewrite_moves_only_reads_no_forward_output_needs():
    """In a graph whose first outputs are the forward's, outputs reading p (as a backward
    would) are pointed at exp((x - max) - log(sum)), one for softmaxes alike; forward outputs
    computed from p keep p."""
    aten = torch.ops.aten

    def fn(y):
        x = aten._to_copy.default(y, dtype=torch.float32)
        top = aten.amax.default(x, [-1], True)
        e = aten.exp.default(aten.sub.Tensor(x, top))
        total = aten.sum.dim_IntList(e, [-1], True)
        p, again = aten.div.Tensor(e, total), aten.div.Tensor(e, total)  # (a softmax twice, as CSE may leave it)
        return aten.mul.Tensor(p, 1.0), aten.mul.Tensor(p, 2.0), aten.mul.Tensor(p, 3.0), aten.mul.Tensor(again, 4.0)

    x = (torch.randn(4, 8) * 300 + 1e4).bfloat16()
    gm = _joint_like(fn, x)
    assert backward_softmax_without_division(gm.graph, num_fwd_outputs=2) == 2
    gm.graph.lint()
    gm.recompile()
    p = torch.softmax(x.float(), -1)
    for got, scale in zip(gm(x), (1, 2, 3, 4)):
        torch.testing.assert_close(got, p * scale)
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    assert out[0].args[0].target is aten.div.Tensor and out[1].args[0].target is aten.div.Tensor
    assert out[2].args[0].target is aten.exp.default and out[3].args[0] is out[2].args[0]
    assert backward_softmax_without_division(gm.graph, num_fwd_outputs=4) == 0  # every read is forward's
