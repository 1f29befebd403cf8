"""In-place `torch._foreach_lerp_` (Adam's and AdamW's first moment) rounds as eager's lerp.

Dynamo traces it through a polyfill (a `_foreach_sub`, then a `_foreach_addcmul_` with the weight
as a tensor of the tensors' type), which in half and bf16 rounded the difference and the weight
before the fma: a unit off in 11% of the elements at w = 0.1, in half of them at 0.9 (the weight
itself rounded to bf16). fuser rewrites that expansion back as the lerp (frontend/foreach.py,
`whole_foreach_lerps`). Each result is compared bit for bit.

The CPU interpreter's kernels round a product before adding it, where eager's CPU lerp and
addcmul fuse the multiply-add (a GPU's Triton compile fuses it too): `1 - w` inexact (w = 0.9)
makes a few bf16 elements of `lerp` itself differ by a unit, so those weights are compared
against fuser's own `lerp_` of each tensor, which is what eager's foreach op runs per tensor.
"""
from unittest import mock

import pytest
import torch

from tests.helpers import COMPILERS, TOLERANCES, dtype_name, make

SHAPES = ((40, 25), (300,))


def _lerp_in_place(xs, ys, w):
    torch._foreach_lerp_(xs, ys, w)
    return xs


def _pairs(dtype):
    return [make(s, dtype) for s in SHAPES], [make(s, dtype) for s in SHAPES]


def _copies(ts):
    return [t.clone() for t in ts]


# numbers, and 0-dim fp32 tensors (given as ("tensor", w)); |w| < 0.5 takes lerp's first formula
EXACT_WEIGHTS = [0.1, -0.25, 0.5, 0.75, ("tensor", 0.1), ("tensor", 0.75)]


def _as_weight(w):
    return torch.tensor(w[1]) if isinstance(w, tuple) else w


@pytest.mark.parametrize("compiler", list(COMPILERS))
@pytest.mark.parametrize("w", EXACT_WEIGHTS, ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=dtype_name)
def test_in_place_foreach_lerp_rounds_as_eager(dtype, w, compiler):
    # weights whose products the multiply-add's fusion does not change (0.1 of these inputs, or
    # 1 - w a power of two): eager's result bit for bit
    xs, ys = _pairs(dtype)
    weight = _as_weight(w)
    expected = _lerp_in_place(_copies(xs), ys, weight)
    ours = COMPILERS[compiler](_lerp_in_place)(_copies(xs), ys, weight)
    for a, b in zip(ours, expected):
        assert torch.equal(a, b), f"{int((a != b).sum())} of {a.numel()} elements differ from eager's"


@pytest.mark.parametrize("compiler", list(COMPILERS))
@pytest.mark.parametrize("w", [0.9, ("tensor", 0.9), ("tensor", 0.1)], ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=dtype_name)
def test_in_place_foreach_lerp_is_fusers_lerp_of_each_tensor(dtype, w, compiler):
    # (fp32 included: its results are what they were before the rewrite)
    xs, ys = _pairs(dtype)
    weight = _as_weight(w)
    number = weight.item() if isinstance(weight, torch.Tensor) else weight
    ours = COMPILERS[compiler](_lerp_in_place)(_copies(xs), ys, weight)
    lerp = COMPILERS[compiler](lambda x, y: x.lerp_(y, number))
    eager = _lerp_in_place(_copies(xs), ys, weight)
    for a, x, y, e in zip(ours, xs, ys, eager):
        single = lerp(x.clone(), y)
        assert torch.equal(a, single), f"{int((a != single).sum())} of {a.numel()} elements differ from lerp_'s"
        torch.testing.assert_close(a, e, rtol=TOLERANCES[dtype][0], atol=TOLERANCES[dtype][1])


def test_a_users_own_sub_and_addcmul_keep_their_rounding():
    # the polyfill's ops written out over several lines are the user's: each rounds, as eager's do
    def expanded(xs, ys):
        d = torch._foreach_sub(ys, xs)
        weights = [torch.full_like(t, 0.1) for t in d]
        torch._foreach_addcmul_(xs, weights, d)
        return xs

    xs, ys = _pairs(torch.bfloat16)
    expected = expanded(_copies(xs), ys)
    ours = COMPILERS["jit"](expanded)(_copies(xs), ys)
    lerped = _lerp_in_place(_copies(xs), ys, 0.1)
    for a, b, c in zip(ours, expected, lerped):
        assert torch.equal(a, b)
        assert not torch.equal(a, c)  # (else the test could not tell the two apart)


def test_a_jitted_bf16_adam_step_matches_eager():
    """Three `Adam(foreach=True)` steps on bf16 parameters, jitted and eager: exp_avg bit for bit.
    Dynamo traces an optimizer's step as `capturable=True` (torch's note "torch.compile x
    capturable"): its bias corrections are fp32 tensors where eager's default computes them
    as Python floats, so the parameters are compared, bit for bit, with eager's capturable step
    (allowed on the CPU here). beta2 = 1 - 2**-10 keeps exp_avg_sq's addcmul product exact, so
    that no element depends on the multiply-add's fusion (see the module's note)."""
    import fuser

    torch._dynamo.reset()
    params = [torch.nn.Parameter(make(s, torch.bfloat16)) for s in SHAPES]
    twins = {name: [torch.nn.Parameter(p.detach().clone()) for p in params] for name in ("eager", "capturable")}
    options = dict(lr=1e-2, betas=(0.9, 1 - 2 ** -10), foreach=True)
    with mock.patch("torch.optim.adam._get_capturable_supported_devices", return_value=["cpu"]):
        ours = torch.optim.Adam(params, **options)
        eager = torch.optim.Adam(twins["eager"], **options)
        capturable = torch.optim.Adam(twins["capturable"], capturable=True, **options)
        step = fuser.jit(lambda: ours.step())
        for _ in range(3):
            grads = [make(s, torch.bfloat16) for s in SHAPES]
            for group in (params, *twins.values()):
                for p, g in zip(group, grads):
                    p.grad = g.clone()
            step()
            eager.step()
            capturable.step()
    for p, e, c in zip(params, twins["eager"], twins["capturable"]):
        assert torch.equal(ours.state[p]["exp_avg"], eager.state[e]["exp_avg"])
        assert torch.equal(ours.state[p]["exp_avg_sq"], capturable.state[c]["exp_avg_sq"])
        assert torch.equal(p.detach(), c.detach())
        torch.testing.assert_close(p.detach(), e.detach(), rtol=TOLERANCES[torch.bfloat16][0],
                                   atol=TOLERANCES[torch.bfloat16][1])
