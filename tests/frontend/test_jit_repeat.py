"""x.repeat(...) fuses: each axis broadcast along a new axis before it and the pair merged
(it ran as an ATen call, "no lowering for aten.repeat", and with it InstanceNorm's running
statistics)."""
import pytest
import torch

import fuser
from tests.helpers import make


@pytest.mark.parametrize("shape, reps", [((3, 4), (2, 3)), ((3, 4), (2, 1, 3)), ((5,), (3,)),
                                         ((2, 1, 3), (1, 4, 2)), ((3, 4), (1, 1))])
def test_repeat_fuses_forward_and_backward(shape, reps):
    def f(x):
        return (x * 2).repeat(*reps).sin()

    jitted = fuser.jit(f)
    x = make(shape).requires_grad_()
    out, want = jitted(x), f(x)
    torch.testing.assert_close(out, want)
    dy = torch.randn_like(want)
    torch.testing.assert_close(torch.autograd.grad(out, x, dy)[0], torch.autograd.grad(want, x, dy)[0])
    assert jitted.cache_info().fallback_ops == 0


def test_repeat_keeps_rows_symbolic():
    jitted = fuser.jit(lambda x: x.repeat(3, 2) * 3)
    for rows in (4, 6, 9):
        x = make((rows, 5))
        torch.testing.assert_close(jitted(x), x.repeat(3, 2) * 3)
    info = jitted.cache_info()
    assert info.fallback_ops == 0 and info.graphs <= 2


def test_a_repeat_count_of_zero_runs_through_aten():
    jitted = fuser.jit(lambda x: x.repeat(0, 2) + 1)
    x = make((3, 4))
    torch.testing.assert_close(jitted(x), x.repeat(0, 2) + 1)
