"""An op whose derivative has no kernel for the input's dtype (special.i1 and i1e of bf16: eager's
forward runs, its backward raises NotImplementedError '"i1_backward" not implemented for
'BFloat16''), with an input needing grad: AOTAutograd traces that backward with the forward, and
fuser.jit raised an InternalError ("compiling failed where eager PyTorch runs the function")
where an op without any derivative gets fuser's UnsupportedError saying what to do."""
import warnings

import pytest
import torch

import fuser
from tests.helpers import COMPILERS

from .jit_helpers import assert_compile_names_the_op_without_derivative

OPS = {"i1": torch.special.i1, "i1e": torch.special.i1e}


def _bf16_needing_grad():
    return torch.randn(64, dtype=torch.bfloat16).requires_grad_()


@pytest.mark.parametrize("name", sorted(OPS))
def test_jit_of_a_bf16_op_without_a_backward_kernel_is_unsupported(name):
    fn, x = OPS[name], _bf16_needing_grad()
    with pytest.raises(NotImplementedError, match=f'"{name}_backward" not implemented for'):
        fn(x).sum().backward()  # (eager's forward runs; its backward raises)
    jitted = COMPILERS["jit"](fn)
    with warnings.catch_warnings(), pytest.raises(fuser.FuserError) as caught:
        warnings.simplefilter("ignore")
        jitted(x)
    assert type(caught.value) is fuser.UnsupportedError, repr(caught.value)
    assert "op torch cannot differentiate" in str(caught.value), str(caught.value)
    assert f"{name}_backward" in str(caught.value) and "BFloat16" in str(caught.value), str(caught.value)
    with torch.no_grad():  # (what the error advises runs, as eager's)
        torch.testing.assert_close(jitted(x), fn(x), rtol=1.6e-2, atol=1e-2)


def test_torch_compile_of_bf16_i1_needing_grad_is_unsupported():
    torch._dynamo.reset()
    assert_compile_names_the_op_without_derivative(torch.special.i1, _bf16_needing_grad())
