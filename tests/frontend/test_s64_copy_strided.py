"""prims.copy_strided (an in-place lerp_ of a transposed tensor traces to it: Adam's exp_avg
under foreach=False) fuses as a copy laid out as traced: the step is one fusion, not two
around two ATen calls."""
import copy

import torch

from tests.helpers import fresh_jit


def test_adam_step_of_a_transposed_parameter_is_one_fusion():
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(8, 16).t())
    twin = copy.deepcopy(p)
    opt = torch.optim.Adam([p], lr=1e-2, foreach=False)
    opt_twin = torch.optim.Adam([twin], lr=1e-2, foreach=False)
    step = fresh_jit(lambda: opt.step())
    for _ in range(3):
        g = torch.randn(16, 8)
        p.grad, twin.grad = g.clone(), g.clone()
        step()
        opt_twin.step()
    torch.testing.assert_close(p, twin)
    for key in ("exp_avg", "exp_avg_sq"):
        got, want = opt.state[p][key], opt_twin.state[twin][key]
        torch.testing.assert_close(got, want)
        assert got.stride() == want.stride()
    info = step.cache_info()
    assert info.fusions == 1 and info.fallback_ops == 0, info
