"""torch.compile(backend="fuser") on an op torch cannot differentiate, with an input needing
grad: fuser's UnsupportedError saying what to do, as fuser.jit gives, where AOTAutograd's raw
NotImplementedError came through."""
import warnings

import pytest
import torch

import fuser


def _zeta(x):
    return torch.special.zeta(x * 2, torch.ones_like(x)).sum()


def test_torch_compile_names_the_op_torch_cannot_differentiate():
    torch._dynamo.reset()
    x = (torch.rand(8) + 1.5).requires_grad_()
    with pytest.raises(NotImplementedError, match="derivative for 'zeta'"):
        _zeta(x).backward()  # (eager's forward runs; its backward raises)
    compiled = torch.compile(_zeta, backend="fuser")
    with warnings.catch_warnings(), pytest.raises(Exception) as caught:
        warnings.simplefilter("ignore")
        compiled(x)
    inner = getattr(caught.value, "inner_exception", caught.value)
    assert isinstance(inner, fuser.UnsupportedError), repr(caught.value)
    assert "op torch cannot differentiate" in str(inner) and "torch.no_grad()" in str(inner)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), _zeta(x))
