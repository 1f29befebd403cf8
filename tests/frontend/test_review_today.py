"""Review of slice_scatter's zeros (4e474d9): ATen clamps a slice's start into [0, size], so the
backward of a slice whose start lies before the first or past the last element puts its
(shorter or empty) gradient at the clamped start."""
import pytest
import torch

import fuser


@pytest.mark.parametrize("take", [lambda x: x[:, -10:], lambda x: x[:, -10:-1], lambda x: x[:, 5:7],
                                  lambda x: x[:, 6:], lambda x: x[:, -2:100]],
                         ids=["before_start", "before_start_neg_end", "past_end", "past_end_open", "big_end"])
def test_gradient_of_a_slice_with_a_clamped_start(take):
    """x[:, -10:] of 4 columns starts at 0: the zeros before the gradient had size 4 - 10 (a
    FusionInputError for a valid program); x[:, 6:] starts at 4: 6 zeros made a gradient of 6
    columns for 4 (autograd's shape error); x[:, 5:7] had -1 zeros after."""
    def f(x):
        return torch.tanh(take(x)) * 2

    jitted = fuser.jit(f)
    for n in (4, 5, 6):
        x = torch.randn(3, n, requires_grad=True)
        out = jitted(x)
        dy = torch.randn_like(out)
        got, = torch.autograd.grad(out, x, dy)
        want, = torch.autograd.grad(f(x), x, dy)
        torch.testing.assert_close(out, f(x))
        torch.testing.assert_close(got, want)
