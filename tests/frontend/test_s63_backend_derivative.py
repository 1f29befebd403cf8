"""torch.compile(backend="fuser") on an op torch cannot differentiate, with an input needing
grad: fuser's UnsupportedError saying what to do, as fuser.jit gives, where AOTAutograd's raw
NotImplementedError came through."""
import pytest
import torch

from .jit_helpers import assert_compile_names_the_op_without_derivative


def _zeta(x):
    return torch.special.zeta(x * 2, torch.ones_like(x)).sum()


def test_torch_compile_names_the_op_torch_cannot_differentiate():
    torch._dynamo.reset()
    x = (torch.rand(8) + 1.5).requires_grad_()
    with pytest.raises(NotImplementedError, match="derivative for 'zeta'"):
        _zeta(x).backward()  # (eager's forward runs; its backward raises)
    assert_compile_names_the_op_without_derivative(_zeta, x)
