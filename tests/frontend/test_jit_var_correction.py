"""var, std and var_mean with a correction the IR's var_mean does not take as it is (sixty-second
session): an int argument, which Dynamo passes as a symbol (the rule raised a TypeError on it and
the node ran through ATen), a negative one and a fraction. Each fuses, with eager's values."""
import warnings

import pytest
import torch
import torch._dynamo

import fuser
from tests.helpers import assert_eager, make


def _quiet(fn, *args):
    with warnings.catch_warnings():  # (eager's "degrees of freedom is <= 0", a correction >= n)
        warnings.simplefilter("ignore")
        return fn(*args)


FUNCTIONS = {
    "var": lambda x, c: x.var(-1, correction=c),
    "std_after_math": lambda x, c: (x * 2).std(1, correction=c, keepdim=True) + 1,
    "var_mean": lambda x, c: torch.var_mean(x, (0, 2), correction=c),
    "var_all": lambda x, c: x.var(correction=c),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_correction_given_as_an_int_argument_fuses(name, dtype):
    torch._dynamo.reset()
    fn = FUNCTIONS[name]
    jitted = fuser.jit(fn)
    x = make((4, 5, 6), dtype) * 3 + 1
    # (6 and 7 reach and pass the last dim's count: inf, as eager's)
    for c in (0, 2, 3, 1, 6, 7):
        got, want = _quiet(jitted, x, c), _quiet(fn, x, c)
        for g, w in zip(*((v if isinstance(v, tuple) else (v,)) for v in (got, want))):
            assert_eager(g, w)
    info = jitted.cache_info()
    assert info.fallback_ops == 0, _quiet(fuser.explain, jitted, x, 5)
    assert info.kernels >= 1


@pytest.mark.parametrize("correction", [-1, 0.5, 2.5])
def test_a_negative_or_fractional_correction_fuses(correction):
    torch._dynamo.reset()
    fn = lambda x: x.std(-1, correction=correction, keepdim=True) * x.var(0, correction=correction)  # noqa: E731
    jitted = fuser.jit(fn)
    x = make((7, 6))
    assert_eager(jitted(x), fn(x))
    assert jitted.cache_info().fallback_ops == 0, fuser.explain(jitted, x)


def test_bf16_var_with_an_int_argument_rounds_once():
    # the corrected variance is computed in fp32 and rounded to bf16 once: eager's bits
    torch._dynamo.reset()
    fn = FUNCTIONS["var"]
    jitted = fuser.jit(fn)
    x = make((64, 48), torch.bfloat16) * 5 + 2
    for c in (3, 4):
        want = fn(x, c)
        exact = x.double().var(-1, correction=c)
        got = jitted(x, c)
        assert (got.double() - exact).abs().mean() <= 1.25 * (want.double() - exact).abs().mean()
        assert_eager(got, want)
