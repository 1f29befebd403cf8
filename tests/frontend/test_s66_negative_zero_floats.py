"""A float argument of -0.0 (sixty-sixth session): fuser.jit specializes floats, and Dynamo's guard
for one (`k == -0.0`) passes 0.0 too, so a graph traced at one zero ran for the other: copysign
and division by the zero took the wrong sign. Calls with a -0.0 argument run uncompiled."""
import pytest
import torch

import fuser
from tests.helpers import fresh_jit


@pytest.mark.parametrize("order", [(-0.0, 0.0, -0.0), (0.0, -0.0, 0.0)])
@pytest.mark.parametrize("name, fn", [
    ("copysign", lambda x, k: torch.copysign(x, k)),
    ("divide", lambda x, k: x / k),
    ("floor_divide", lambda x, k: torch.div(x, k, rounding_mode="floor")),
])
def test_each_zero_float_gives_its_own_sign(name, fn, order):
    jitted = fresh_jit(fn)
    x = torch.tensor([1.0, -2.0, 3.5, -0.0])
    for k in order:
        out, expected = jitted(x, k), fn(x, k)
        torch.testing.assert_close(out, expected, equal_nan=True)
        assert torch.equal(torch.signbit(out), torch.signbit(expected))


def test_a_negative_zero_call_is_counted_and_named():
    jitted = fuser.jit(lambda x, k: x * k + 1)
    x = torch.randn(3)
    jitted(x, 0.0)
    jitted(x, -0.0)
    info = jitted.cache_info()
    assert info.graphs == 1 and info.uncompiled == 1
    assert "-0.0" in str(fuser.explain(jitted, x, -0.0))
