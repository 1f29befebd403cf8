"""Cases found by the random-program fuzzer (tests/frontend/fuzz_jit.py) that once failed under
fuser.jit, minimized."""
import pytest
import torch

import fuser


@pytest.mark.parametrize("reduce", [
    lambda t: t.sum(-1), lambda t: t.exp().sum(-1, keepdim=True), lambda t: t.amax(0),
    lambda t: t.mean(-1), lambda t: t.softmax(-1), lambda t: t.log_softmax(0), lambda t: t.prod(0),
    lambda t: t.var(0, correction=0), lambda t: torch.logsumexp(t, 0)])
def test_reduction_over_dim_0_of_a_0d_tensor(reduce):
    """`t.sum(-1)` of a 0-d tensor reduces nothing; it was lowered as a reduction over axis 0 of
    a 0-d tensor, and the segmenter failed with an IndexError (fuzz seed 80)."""
    def f(x):
        return reduce(x.sum())

    x = torch.randn(5, 7)
    torch.testing.assert_close(fuser.jit(f)(x), f(x))
