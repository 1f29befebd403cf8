"""torch's `_foreach_*` ops under fuser.jit: decomposed one op per tensor (frontend/foreach.py),
so a foreach optimizer's step fuses; each checked against eager on copies of the same state."""
import copy

import pytest
import torch

import fuser
from tests.helpers import OptimizerTwins, make

OPTIMIZERS = {
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2, foreach=True),
    "adamw-amsgrad": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, amsgrad=True, foreach=True),
    "sgd-nesterov": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01,
                                               foreach=True),
    "rmsprop-centered": lambda ps: torch.optim.RMSprop(ps, lr=1e-2, centered=True, momentum=0.5, foreach=True),
    "adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.1, foreach=True),
    "nadam": lambda ps: torch.optim.NAdam(ps, lr=1e-2, foreach=True),
}


SHAPES = ((16, 8), (8,), (3, 5))


def _parameters(dtype=torch.float32):
    return [torch.nn.Parameter(make(s, dtype=dtype)) for s in SHAPES]


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_a_foreach_optimizer_step_fuses_and_matches_eager(name):
    twins = OptimizerTwins(OPTIMIZERS[name], SHAPES)
    for _ in range(3):
        twins.step()
        twins.assert_same(state=False)
    twins.assert_same()
    info = twins.jitted.cache_info()
    assert info.fusions >= 1 and info.kernels >= 1, info


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
def test_clip_grad_norm_through_foreach_norm(norm_type):
    ps = _parameters()
    grads = [make(p.shape) * 3 for p in ps]
    ref = copy.deepcopy(grads)
    for p, g in zip(ps, grads):
        p.grad = g
    clip = fuser.jit(lambda ps: torch.nn.utils.clip_grad_norm_(ps, 0.5, norm_type=norm_type, foreach=True))
    total = clip(ps)
    ref_ps = _parameters()
    for p, g in zip(ref_ps, ref):
        p.grad = g
    expected = torch.nn.utils.clip_grad_norm_(ref_ps, 0.5, norm_type=norm_type, foreach=True)
    torch.testing.assert_close(total, expected)
    for p, q in zip(ps, ref_ps):
        torch.testing.assert_close(p.grad, q.grad)


def test_foreach_ops_of_every_form():
    # the overload forms: List (with alpha), Scalar, ScalarList, Tensor, ScalarAndTensor, unary
    def f(xs, ys, t):
        a = torch._foreach_add(xs, ys, alpha=0.5)
        b = torch._foreach_mul(a, 3.0)
        c = torch._foreach_sub(b, [1.0, 2.0])
        d = torch._foreach_div(c, t)
        e = torch._foreach_pow(2.0, d)
        g = torch._foreach_sqrt(torch._foreach_abs(e))
        h = torch._foreach_lerp(g, xs, 0.25)
        i = torch._foreach_addcdiv(h, xs, torch._foreach_add(ys, 3.0), [0.5, 2.0])
        return list(torch._foreach_clamp_max(torch._foreach_maximum(i, ys), 4.0)) + list(torch._foreach_norm(i))

    xs, ys, t = [make((4, 6)), make((5,))], [make((4, 6)), make((5,))], make(()).abs() + 1
    got, expected = fuser.jit(f)(xs, ys, t), f(xs, ys, t)
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)


def test_bf16_parameters_step_with_fp32_state():
    ours = _parameters(torch.bfloat16)
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    opt_ours = torch.optim.AdamW(ours, lr=1e-2, foreach=True)
    opt_theirs = torch.optim.AdamW(theirs, lr=1e-2, foreach=True)
    step = fuser.jit(lambda: opt_ours.step())
    for _ in range(2):
        for a, b in zip(ours, theirs):
            g = make(a.shape).to(torch.bfloat16)
            a.grad, b.grad = g.clone(), g.clone()
        step()
        opt_theirs.step()
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=1.6e-2, atol=1e-2)


def _example(argument, k: int):
    kind = str(argument.type)
    if kind == "List[Tensor]":
        return [make((3, 4)).abs() + 0.5, make((5,)).abs() + 0.5]
    if kind == "List[number]":
        return [0.5, 1.5]
    if kind == "number":
        return 0.75
    if kind == "Tensor":
        return torch.tensor(0.7)
    if kind == "bool":
        return False
    return None


def test_every_decomposition_matches_its_foreach_op():
    # maximum/minimum with a number had no per-tensor op (aten.maximum takes two tensors)
    from fuser.frontend.foreach import foreach_decompositions

    table = foreach_decompositions()
    assert len(table) > 60
    for op, decomposition in table.items():
        args = []
        for k, argument in enumerate(a for a in op._schema.arguments if not a.kwarg_only):
            value = _example(argument, k)
            if value is None:
                break
            args.append(value)
        try:
            expected = op(*args)
        except (RuntimeError, TypeError):
            continue  # (an op this CPU build lacks, or that refuses these values)
        got = decomposition(*args)
        assert len(got) == len(expected), op
        for a, b in zip(got, expected):
            assert a.dtype == b.dtype, op
            torch.testing.assert_close(a, b, equal_nan=True, msg=str(op))
