"""Cases found by review that once failed under fuser.jit."""
import torch

import fuser


def test_python_float_assigned_into_a_slice():
    def f(a):
        a[:, 0] = 7.0
        a[1:, 2:4] = torch.tensor(9.0)
        return a.sum()

    x = torch.randn(3, 5)
    y = x.clone()
    got = fuser.jit(f)(x)
    torch.testing.assert_close(got, f(y))
    torch.testing.assert_close(x, y)  # the argument was updated in place, as eager does
